//! Graph backward rules of the operators beyond the Dense layers and the losses: `exp`, `log`,
//! `sqrt`, `softmax`, broadcasting `add`/`sub`/`mul`/`div`, `where`, `embedding` (row_sparse
//! table gradient), `astype` (the gradient cast back to the input's dtype), `clip`,
//! `leaky_relu`, broadcasting `pow` / `maximum` / `minimum` and the scalar `rdiv`, `pow`,
//! `maximum` and `minimum`. Each model trains through `HybridTrainStep`'s joint graph (no eager
//! fallback) and its loss and gradients are compared with eager training (1 ulp of f32 scaled
//! by the array's largest magnitude, as `hybrid_train.rs`); the graph gradients are also
//! checked against central finite differences of the loss.

use sparrow_core::{autograd, DType, Device, NDArray, SType};
use sparrow_nn::loss::{L2Loss, Loss};
use sparrow_nn::{Block, Dense, Embedding, HybridTrainStep, Initializer, Lambda, Sequential};

mod hybrid_util;
use hybrid_util::{arr, copy_params, eager_step, grads, ulp_close};

/// The summed loss of `net` at its current weights (no recording), in f64.
fn total_loss(net: &dyn Block, loss: &dyn Loss, x: &NDArray, y: &NDArray) -> f64 {
    let l = autograd::pause(|| loss.forward(&net.forward(x)?, y)).unwrap();
    l.to_f64_vec().iter().sum()
}

/// Central differences of the summed loss against the graph gradient, for a few elements of
/// every parameter that has a gradient. Two step sizes: near a kink of `clip` or
/// `leaky_relu` (or the jump of `where`) the larger step can straddle it, so an element passes
/// when either step's difference agrees.
fn finite_differences(net: &dyn Block, loss: &dyn Loss, x: &NDArray, y: &NDArray, what: &str) {
    for (name, p) in net.collect_params().unwrap().iter() {
        let Some(g) = p.grad() else { continue };
        let g = g.tostype(SType::Dense).unwrap().to_f64_vec();
        let w0 = p.data().unwrap().copy();
        let w = w0.to_f64_vec();
        let shape = w0.shape();
        let step = (w.len() / 5).max(1);
        for i in (0..w.len()).step_by(step) {
            let at = |d: f64| {
                let mut v: Vec<f32> = w.iter().map(|&t| t as f32).collect();
                v[i] += d as f32;
                p.set_data(&NDArray::from_vec(v, &shape).unwrap()).unwrap();
                total_loss(net, loss, x, y)
            };
            let fd: Vec<f64> = [1e-3, 2.5e-4]
                .iter()
                .map(|&eps| (at(eps) - at(-eps)) / (2.0 * eps))
                .collect();
            p.set_data(&w0).unwrap();
            let close = |f: f64| (f - g[i]).abs() <= 2e-2 * (1.0 + f.abs().max(g[i].abs()));
            assert!(
                fd.iter().any(|&f| close(f)),
                "{what}: d loss / d {name}[{i}]: finite differences {fd:?}, graph {}",
                g[i]
            );
        }
    }
}

/// Eager against the joint graph for three steps at the same weights (the first one traces),
/// then finite differences of the graph's gradients.
fn check(make: &dyn Fn() -> Sequential, x: &NDArray, y: &NDArray, what: &str) {
    check_with(make, x, y, what, true)
}

/// [`check`], with the finite differences optional (a cast cuts the gradient on purpose).
fn check_with(make: &dyn Fn() -> Sequential, x: &NDArray, y: &NDArray, what: &str, fd: bool) {
    let loss = L2Loss::new();
    let (eager, hyb) = (make(), make());
    for n in [&eager, &hyb] {
        n.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
        autograd::pause(|| n.forward(x)).unwrap();
    }
    copy_params(&eager, &hyb);
    let mut step = HybridTrainStep::new(&hyb, &loss);
    for call in 0..3 {
        let le = eager_step(&eager, &loss, x, y);
        let lh = step.step(x, y).unwrap();
        ulp_close(&le, &lh, &format!("{what}: loss, call {call}"));
        for ((n, ge), (_, gh)) in grads(&eager).iter().zip(grads(&hyb)) {
            match (ge, gh) {
                (Some(ge), Some(gh)) => ulp_close(ge, &gh, &format!("{what}: {n}, call {call}")),
                (None, None) => {}
                (a, b) => panic!("{what}: {n}: eager {a:?}, hybridized {b:?}"),
            }
        }
    }
    assert!(
        step.fallback_reasons().is_empty(),
        "{what}: {:?}",
        step.fallback_reasons()
    );
    assert!(step.train_step().is_some(), "{what}: no joint graph");
    if fd {
        finite_differences(&hyb, &loss, x, y, what);
    }
}

/// Dense(8) -> `f` -> Dense(3).
fn with(
    f: impl Fn(&NDArray) -> sparrow_core::Result<NDArray> + Send + Sync + 'static,
) -> Sequential {
    let mut s = Sequential::new();
    s.add(Dense::new(8));
    s.add(Lambda::new(f));
    s.add(Dense::new(3));
    s
}

#[test]
fn unary_maps_train_through_the_graph() {
    let x = arr(&[6, 5], -1.0, 1.0, 1);
    let y = arr(&[6, 3], -1.0, 1.0, 2);
    check(&|| with(|h| h.exp()), &x, &y, "exp");
    check(
        &|| with(|h| h.square()?.add_scalar(1.0)?.log()),
        &x,
        &y,
        "log",
    );
    check(
        &|| with(|h| h.square()?.add_scalar(0.5)?.sqrt()),
        &x,
        &y,
        "sqrt",
    );
    check(&|| with(|h| h.clip(-0.3, 0.3)), &x, &y, "clip");
    check(&|| with(|h| h.leaky_relu(0.1)), &x, &y, "leaky_relu");
}

#[test]
fn softmax_trains_through_the_graph() {
    let x = arr(&[6, 5], -1.0, 1.0, 3);
    let y = arr(&[6, 3], 0.0, 1.0, 4);
    check(&|| with(|h| h.softmax(-1)), &x, &y, "softmax");
}

#[test]
fn broadcasting_arithmetic_trains_through_the_graph() {
    let x = arr(&[6, 5], -1.0, 1.0, 5);
    let y = arr(&[6, 3], -1.0, 1.0, 6);
    // A (6, 8) operand against a (6, 1) one and a (1, 8) one, both depending on the weights.
    let col = |h: &NDArray| h.sum(Some(&[1]), true);
    let row = |h: &NDArray| h.mean(Some(&[0]), true);
    check(&|| with(move |h| h.add(&col(h)?)), &x, &y, "add");
    check(&|| with(move |h| h.sub(&row(h)?)), &x, &y, "sub");
    check(&|| with(move |h| col(h)?.mul(h)), &x, &y, "mul");
    check(
        &|| with(move |h| h.div(&row(h)?.square()?.add_scalar(1.0)?)),
        &x,
        &y,
        "div",
    );
}

#[test]
fn pow_maximum_minimum_train_through_the_graph() {
    let x = arr(&[6, 5], -1.0, 1.0, 11);
    let y = arr(&[6, 3], -1.0, 1.0, 12);
    // Both operands depend on the weights; a (6, 8) base against a (1, 8) exponent.
    let base = |h: &NDArray| h.square()?.add_scalar(0.5);
    let expo = |h: &NDArray| h.mean(Some(&[0]), true)?.mul_scalar(0.5)?.add_scalar(1.5);
    check(&|| with(move |h| base(h)?.pow(&expo(h)?)), &x, &y, "pow");
    let col = |h: &NDArray| h.mean(Some(&[1]), true);
    check(&|| with(move |h| h.maximum(&col(h)?)), &x, &y, "maximum");
    check(&|| with(move |h| col(h)?.minimum(h)), &x, &y, "minimum");
    // Ties go to the first operand (the second, detached, passes nothing back).
    check(
        &|| with(|h| h.maximum(&h.detach())),
        &x,
        &y,
        "maximum, ties",
    );
    check(
        &|| with(|h| h.minimum(&h.detach())),
        &x,
        &y,
        "minimum, ties",
    );
}

#[test]
fn scalar_rdiv_pow_maximum_minimum_train_through_the_graph() {
    let x = arr(&[6, 5], -1.0, 1.0, 13);
    let y = arr(&[6, 3], -1.0, 1.0, 14);
    check(
        &|| with(|h| h.square()?.add_scalar(1.0)?.rdiv_scalar(2.0)),
        &x,
        &y,
        "rdiv_scalar",
    );
    check(
        &|| with(|h| h.square()?.add_scalar(0.5)?.pow_scalar(1.5)),
        &x,
        &y,
        "pow_scalar",
    );
    check(
        &|| with(|h| h.maximum_scalar(0.1)),
        &x,
        &y,
        "maximum_scalar",
    );
    check(
        &|| with(|h| h.minimum_scalar(-0.1)),
        &x,
        &y,
        "minimum_scalar",
    );
}

#[test]
fn where_trains_both_branches_through_the_graph() {
    let x = arr(&[6, 5], -1.0, 1.0, 7);
    let y = arr(&[6, 3], -1.0, 1.0, 8);
    check(
        &|| {
            with(|h| {
                let big = h.greater_scalar(0.1)?;
                NDArray::where_(&big, h, &h.mul_scalar(0.2)?)
            })
        },
        &x,
        &y,
        "where",
    );
}

#[test]
fn astype_passes_the_gradient_back_cast() {
    let x = arr(&[6, 5], -1.0, 1.0, 9);
    let y = arr(&[6, 3], -1.0, 1.0, 10);
    // Both factors carry a gradient: the cast one through f64 and back.
    let cast = || with(|h| h.mul(&h.astype(DType::F64)?.astype(DType::F32)?));
    check_with(&cast, &x, &y, "astype", true);
}

#[test]
fn embedding_gives_a_row_sparse_table_gradient() {
    // Ids as float32, some repeated (their rows' gradients are summed).
    let ids = NDArray::from_vec(vec![3.0f32, 1.0, 3.0, 7.0, 0.0, 1.0], &[6]).unwrap();
    let y = arr(&[6, 3], -1.0, 1.0, 11);
    let make = || {
        let mut s = Sequential::new();
        s.add(Embedding::with_options(10, 4, true, DType::F32));
        s.add(Dense::new(3));
        s
    };
    check(&make, &ids, &y, "embedding");
    let net = make();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    autograd::pause(|| net.forward(&ids)).unwrap();
    let loss = L2Loss::new();
    let mut step = HybridTrainStep::new(&net, &loss);
    step.step(&ids, &y).unwrap();
    step.step(&ids, &y).unwrap();
    let tables: Vec<_> = net
        .collect_params()
        .unwrap()
        .iter()
        .filter(|(_, p)| p.data().unwrap().shape() == [10, 4])
        .map(|(_, p)| p.grad().expect("the table has a gradient"))
        .collect();
    assert_eq!(tables.len(), 1);
    assert_eq!(tables[0].stype(), SType::RowSparse);
}
