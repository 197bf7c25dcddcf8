//! The zero-preserving unary operators on csr and row_sparse arrays: the storage type is kept
//! forward and backward, the values match the dense operator on random inputs, and the
//! gradients pass finite-difference checks.

use sparrow_core::autograd;
use sparrow_core::testing::{check_grad_on_devices, test_array};
use sparrow_core::{NDArray, Result, SType};

type U = fn(&NDArray) -> Result<NDArray>;

/// Whether `f'(0) = 0`: then the gradient is sparse whatever the head gradient is.
struct Op {
    name: &'static str,
    f: U,
    flat_at_zero: bool,
    /// Smooth at 0 (a zero input can be probed by finite differences).
    smooth_at_zero: bool,
}

fn ops() -> Vec<Op> {
    let op = |name, f: U, flat_at_zero, smooth_at_zero| Op {
        name,
        f,
        flat_at_zero,
        smooth_at_zero,
    };
    vec![
        op("abs", |a| a.abs(), true, false),
        op("sign", |a| a.sign(), true, false),
        op("round", |a| a.round(), true, true),
        op("rint", |a| a.rint(), true, true),
        op("ceil", |a| a.ceil(), true, false),
        op("floor", |a| a.floor(), true, false),
        op("trunc", |a| a.trunc(), true, true),
        op("fix", |a| a.fix(), true, true),
        op("square", |a| a.square(), true, true),
        op("sqrt", |a| a.sqrt(), true, false),
        op("cbrt", |a| a.cbrt(), true, false),
        op("sin", |a| a.sin(), false, true),
        op("tan", |a| a.tan(), false, true),
        op("arcsin", |a| a.arcsin(), false, true),
        op("arctan", |a| a.arctan(), false, true),
        op("sinh", |a| a.sinh(), false, true),
        op("tanh", |a| a.tanh(), false, true),
        op("arcsinh", |a| a.arcsinh(), false, true),
        op("arctanh", |a| a.arctanh(), false, true),
        op("expm1", |a| a.expm1(), false, true),
        op("log1p", |a| a.log1p(), false, true),
        op("degrees", |a| a.degrees(), false, true),
        op("radians", |a| a.radians(), false, true),
        op("relu", |a| a.relu(), true, false),
        op("negative", |a| a.neg(), false, true),
        op("mul_scalar", |a| a.mul_scalar(-1.5), false, true),
        op("div_scalar", |a| a.div_scalar(4.0), false, true),
        op("clip", |a| a.clip(-0.5, 0.6), false, true),
    ]
}

/// A `[5, 4]` array with values in [-0.9, -0.2] or [0.2, 0.9] (inside every op's domain and
/// away from the kinks and rounding ties), zero at about a third of the entries and in row 2
/// (`zeros`); non-negative for sqrt (its domain); within [-0.36, 0.36] for the roundings that
/// jump at +-0.5.
fn input(name: &str, zeros: bool, seed: u64) -> NDArray {
    let scale = if matches!(name, "round" | "rint" | "trunc" | "fix") {
        0.4
    } else {
        1.0
    };
    let v: Vec<f64> = test_array(&[5, 4], 0.2, 0.9, seed)
        .to_f64_vec()
        .into_iter()
        .enumerate()
        .map(|(k, x)| {
            if zeros && (k % 3 == 0 || k / 4 == 2) {
                0.0
            } else if k % 2 == 1 && name != "sqrt" {
                -x * scale
            } else {
                x * scale
            }
        })
        .collect();
    NDArray::from_vec(v, &[5, 4]).unwrap()
}

/// `a` and `b` agree, except where `skip` is set.
fn close_where(a: &[f64], b: &[f64], skip: &[bool], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        if skip[k] {
            continue;
        }
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: element {k}: {x} vs {y}"
        );
    }
}

/// The gradient the operator's node gives its input for head gradient `head`.
fn grad_of(f: U, x: &NDArray, head: &NDArray) -> NDArray {
    let xs = x.detach();
    xs.attach_grad();
    let y = autograd::record(|| f(&xs)).unwrap();
    let node = y.node().expect("recorded");
    node.run_backward(head)
        .unwrap()
        .remove(0)
        .expect("a gradient")
}

fn close(a: &[f64], b: &[f64], what: &str) {
    close_where(a, b, &vec![false; a.len()], what)
}

#[test]
fn zero_preserving_unary_ops_keep_storage_types_forward_and_backward() {
    for (k, op) in ops().into_iter().enumerate() {
        for st in [SType::Csr, SType::RowSparse] {
            let what = format!("{} on {st:?}", op.name);
            let dense = input(op.name, true, 100 + k as u64);
            let x = dense.tostype(st).unwrap();
            // Forward: same storage type and structure, the dense operator's values.
            let y = (op.f)(&x).unwrap();
            assert_eq!(y.stype(), st, "{what}");
            assert_eq!(y.nnz(), x.nnz(), "{what}");
            let want = (op.f)(&dense).unwrap();
            close(&y.to_f64_vec(), &want.to_f64_vec(), &what);
            // Backward with a sparse head gradient (the output's own storage type): sparse.
            let head = y
                .detach()
                .mul_scalar(0.5)
                .unwrap()
                .add(&y.detach())
                .unwrap();
            let g = grad_of(op.f, &x, &head);
            assert_eq!(g.stype(), st, "{what}: gradient for a sparse head gradient");
            // sqrt and cbrt take their unbounded derivative at an unstored 0 as 0; the dense
            // operator gives 0 * inf there: compared where the input is not 0.
            let unbounded = matches!(op.name, "sqrt" | "cbrt");
            let skip: Vec<bool> = dense
                .to_f64_vec()
                .iter()
                .map(|&v| unbounded && v == 0.0)
                .collect();
            let gd = grad_of(op.f, &dense, &head.tostype(SType::Dense).unwrap());
            close_where(
                &g.to_f64_vec(),
                &gd.to_f64_vec(),
                &skip,
                &format!("{what} gradient"),
            );
            // Backward with a dense head gradient: sparse where f'(0) = 0, else the exact
            // gradient, which is dense.
            let ones = y.ones_like();
            let g = grad_of(op.f, &x, &ones);
            let want_st = if op.flat_at_zero { st } else { SType::Dense };
            assert_eq!(
                g.stype(),
                want_st,
                "{what}: gradient for a dense head gradient"
            );
            let gd = grad_of(op.f, &dense, &ones.tostype(SType::Dense).unwrap());
            close_where(
                &g.to_f64_vec(),
                &gd.to_f64_vec(),
                &skip,
                &format!("{what} dense-head gradient"),
            );
        }
    }
}

#[test]
fn zero_preserving_unary_ops_finite_differences() {
    for (k, op) in ops().into_iter().enumerate() {
        for st in [SType::Csr, SType::RowSparse] {
            // Zeros in the input where the op is smooth at 0, so the unstored entries are
            // probed too.
            let x = input(op.name, op.smooth_at_zero, 200 + k as u64);
            let f = op.f;
            check_grad_on_devices(move |v| f(&v[0].tostype(st)?), &[x], 1e-6, 1e-5, 1e-8)
                .unwrap_or_else(|e| panic!("{} on {st:?}: {e}", op.name));
        }
    }
}
