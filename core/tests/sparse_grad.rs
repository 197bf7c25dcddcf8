//! Autograd across storage types: row_sparse gradients of dot(csr, W) and embedding, checked
//! against finite differences on the densified equivalents.

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::sparse;
use sparrow_core::testing::{check_grad_on_devices, test_array, test_csr};
use sparrow_core::{device_test, DType, NDArray, SType};

fn csr_f64(rows: usize, cols: usize, density: f64, seed: u64) -> NDArray {
    test_csr(rows, cols, density, seed, DType::F64)
}

device_test! {
fn dot_csr_dense_weight_grad_is_row_sparse_over_batch_columns() {
    let x = csr_f64(4, 50, 0.06, 1);
    let w = test_array(&[50, 3], -1.0, 1.0, 2);
    w.attach_grad_with(GradReq::Write, SType::RowSparse);
    let y = autograd::record(|| x.dot(&w)).unwrap();
    assert_eq!(y.stype(), SType::Dense);
    y.backward().unwrap();
    let g = w.grad().unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    let mut cols: Vec<i64> = x
        .to_device(sparrow_core::Device::Cpu)
        .unwrap()
        .with_csr::<f64, _>(|c| c.indices.to_vec())
        .unwrap();
    cols.sort_unstable();
    cols.dedup();
    assert_eq!(g.row_ids().unwrap(), cols);
    // Dense reference: x^T . ones.
    let xd = x.tostype(SType::Dense).unwrap();
    let ones = NDArray::ones(&[4, 3], DType::F64).unwrap();
    let want = xd.dot_t(&ones, true, false).unwrap().to_f64_vec();
    let got = g.to_f64_vec();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
}
}

#[test]
fn dot_csr_dense_finite_differences() {
    let x = csr_f64(5, 12, 0.25, 3);
    let w = test_array(&[12, 4], -1.0, 1.0, 4);
    let xc = x.clone();
    check_grad_on_devices(
        move |v| xc.to_device(v[0].device())?.dot(&v[0]),
        &[w],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

#[test]
fn dot_csr_t_dense_finite_differences() {
    let x = csr_f64(6, 9, 0.3, 5);
    let g = test_array(&[6, 3], -1.0, 1.0, 6);
    let xc = x.clone();
    check_grad_on_devices(
        move |v| xc.to_device(v[0].device())?.dot_t(&v[0], true, false),
        &[g],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

#[test]
fn dot_dense_csr_finite_differences() {
    let x = csr_f64(7, 5, 0.3, 7);
    let a = test_array(&[3, 7], -1.0, 1.0, 8);
    let xc = x.clone();
    check_grad_on_devices(
        move |v| v[0].dot(&xc.to_device(v[0].device())?),
        std::slice::from_ref(&a),
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
    let xt = csr_f64(5, 7, 0.3, 9);
    check_grad_on_devices(
        move |v| v[0].dot_t(&xt.to_device(v[0].device())?, false, true),
        &[a],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

#[test]
fn dot_dense_csr_to_csr_finite_differences_in_both_operands() {
    // dot(dense, csr) = csr: the gradients of a and of x (through its dense equivalent, made
    // csr inside the function) against central differences.
    let x = csr_f64(6, 8, 0.3, 12).tostype(SType::Dense).unwrap();
    let a = test_array(&[4, 6], -1.0, 1.0, 13);
    check_grad_on_devices(
        |v| {
            let y = v[0].dot(&v[1].tostype(SType::Csr)?)?;
            assert_eq!(y.stype(), SType::Csr);
            Ok(y)
        },
        &[a, x],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

device_test! {
fn dot_dense_csr_to_csr_with_a_csr_head_gradient_gives_a_csr_gradient_to_x() {
    // A csr head gradient (the output's own structure) flows back sparse: x gets a^T . dy as
    // csr over dy's columns, a the dense dy . x^T; both equal the dense products.
    let x = csr_f64(5, 9, 0.25, 14);
    let a = test_array(&[3, 5], -1.0, 1.0, 15);
    a.attach_grad();
    x.attach_grad_with(GradReq::Write, SType::Csr);
    let y = match autograd::record(|| a.dot(&x)) {
        Ok(y) => y,
        Err(e) if sparrow_core::testing::is_not_ported(&e.to_string()) => return Ok(()),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(y.stype(), SType::Csr);
    let head = y.detach().mul_scalar(0.5).unwrap();
    assert_eq!(head.stype(), SType::Csr);
    y.backward_with_grad(&head).unwrap();
    let (gx, ga) = (x.grad().unwrap(), a.grad().unwrap());
    assert_eq!(gx.stype(), SType::Csr);
    let hd = head.tostype(SType::Dense).unwrap();
    let xd = x.tostype(SType::Dense).unwrap();
    let want_x = a.dot_t(&hd, true, false).unwrap().to_f64_vec();
    let want_a = hd.dot_t(&xd, false, true).unwrap().to_f64_vec();
    for (g, w) in gx.to_f64_vec().iter().zip(&want_x).chain(ga.to_f64_vec().iter().zip(&want_a)) {
        assert!((g - w).abs() < 1e-12, "{g} vs {w}");
    }
}
}

#[test]
fn dot_csr_rsp_finite_differences() {
    let x = csr_f64(4, 10, 0.3, 10);
    let w = test_array(&[10, 3], -1.0, 1.0, 11);
    let xc = x.clone();
    check_grad_on_devices(
        move |v| {
            xc.to_device(v[0].device())?
                .dot(&v[0].tostype(SType::RowSparse)?)
        },
        &[w],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

#[test]
fn embedding_grad_sums_duplicates_into_row_sparse() {
    let table = test_array(&[6, 2], -1.0, 1.0, 12);
    table.attach_grad_with(GradReq::Write, SType::RowSparse);
    let ids = NDArray::from_vec(vec![4i64, 1, 4, 4], &[2, 2]).unwrap();
    let y = autograd::record(|| sparse::embedding(&table, &ids)).unwrap();
    assert_eq!(y.shape(), vec![2, 2, 2]);
    y.backward().unwrap();
    let g = table.grad().unwrap();
    assert_eq!(g.row_ids().unwrap(), vec![1, 4]);
    assert_eq!(
        g.to_f64_vec(),
        vec![0., 0., 1., 1., 0., 0., 0., 0., 3., 3., 0., 0.]
    );
    let idc = ids.clone();
    check_grad_on_devices(
        move |v| sparse::embedding(&v[0], &idc.to_device(v[0].device())?),
        &[test_array(&[6, 2], -1.0, 1.0, 13)],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
    let bad = NDArray::from_vec(vec![6i64], &[1]).unwrap();
    assert!(sparse::embedding(&table, &bad).is_err());
}

device_test! {
fn accumulating_two_row_sparse_grads_coalesces() {
    let x1 = csr_f64(3, 20, 0.1, 14);
    let x2 = csr_f64(3, 20, 0.1, 15);
    let w = test_array(&[20, 2], -1.0, 1.0, 16);
    w.attach_grad_with(GradReq::Write, SType::RowSparse);
    let y = autograd::record(|| x1.dot(&w)?.add(&x2.dot(&w)?)).unwrap();
    y.backward().unwrap();
    let g = w.grad().unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    g.check_format(true).unwrap();
    let ones = NDArray::ones(&[3, 2], DType::F64).unwrap();
    let want = x1
        .tostype(SType::Dense)
        .unwrap()
        .add(&x2.tostype(SType::Dense).unwrap())
        .unwrap()
        .dot_t(&ones, true, false)
        .unwrap()
        .to_f64_vec();
    for (a, b) in g.to_f64_vec().iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
    // A dense grad_stype densifies once at delivery.
    w.attach_grad();
    let y = autograd::record(|| x1.dot(&w)).unwrap();
    y.backward().unwrap();
    assert_eq!(w.grad().unwrap().stype(), SType::Dense);
}
}

/// Values in [-1, -0.2] or [0.2, 1]: away from the kinks of abs / relu / sign at zero.
fn away_from_zero(shape: &[usize], seed: u64) -> NDArray {
    let v: Vec<f64> = test_array(shape, 0.2, 1.0, seed)
        .to_f64_vec()
        .into_iter()
        .enumerate()
        .map(|(k, x)| if k % 3 == 1 { -x } else { x })
        .collect();
    NDArray::from_vec(v, shape).unwrap()
}

#[test]
fn sparse_unary_ops_finite_differences() {
    type F = fn(&NDArray) -> sparrow_core::Result<NDArray>;
    let ops: Vec<(&str, F)> = vec![
        ("neg", |a| a.neg()),
        ("abs", |a| a.abs()),
        ("relu", |a| a.relu()),
        ("square", |a| a.square()),
        ("sqrt", |a| a.abs()?.sqrt()),
        ("clip", |a| a.clip(-0.5, 0.6)),
        ("mul_scalar", |a| a.mul_scalar(-1.5)),
        ("div_scalar", |a| a.div_scalar(3.0)),
    ];
    for st in [SType::RowSparse, SType::Csr] {
        for (name, op) in &ops {
            let x = away_from_zero(&[4, 3], 20);
            let op = *op;
            check_grad_on_devices(move |v| op(&v[0].tostype(st)?), &[x], 1e-6, 1e-5, 1e-8)
                .unwrap_or_else(|e| panic!("{name} on {st:?}: {e}"));
        }
    }
}

#[test]
fn sparse_binary_ops_finite_differences() {
    let mask = |x: NDArray| x.mul(&x.greater_scalar(0.0).unwrap()).unwrap();
    let a = test_array(&[4, 3], -1.0, 1.0, 21);
    let b = test_array(&[4, 3], -1.0, 1.0, 22);
    // rs (op) rs and rs (op) dense, gradients with respect to both operands.
    for (k, st) in [SType::RowSparse, SType::Csr].into_iter().enumerate() {
        let name = ["rs", "csr"][k];
        check_grad_on_devices(
            move |v| v[0].tostype(st)?.add(&v[1].tostype(st)?),
            &[a.clone(), b.clone()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap_or_else(|e| panic!("{name}+{name}: {e}"));
        check_grad_on_devices(
            move |v| v[0].tostype(st)?.sub(&v[1].tostype(st)?),
            &[a.clone(), b.clone()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap_or_else(|e| panic!("{name}-{name}: {e}"));
        check_grad_on_devices(
            move |v| v[0].tostype(st)?.sub(&v[1]),
            &[a.clone(), b.clone()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap_or_else(|e| panic!("{name}-dense: {e}"));
        check_grad_on_devices(
            move |v| v[0].tostype(st)?.mul(&v[1]),
            &[a.clone(), b.clone()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap_or_else(|e| panic!("{name}*dense: {e}"));
    }
    let am = mask(a.clone());
    check_grad_on_devices(
        move |v| {
            v[0].tostype(SType::RowSparse)?
                .mul(&v[1].tostype(SType::RowSparse)?)
        },
        &[am, b.clone()],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
    // csr times / divided by a row or a column vector: gradient with respect to the vector.
    let x = mask(a.clone()).tostype(SType::Csr).unwrap();
    for shape in [vec![3usize], vec![1, 3], vec![4, 1]] {
        let vec = test_array(&shape, 0.5, 2.0, 23);
        let (x1, x2) = (x.clone(), x.clone());
        check_grad_on_devices(
            move |v| x1.to_device(v[0].device())?.mul(&v[0]),
            std::slice::from_ref(&vec),
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
        check_grad_on_devices(
            move |v| x2.to_device(v[0].device())?.div(&v[0]),
            &[vec],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
    }
}

#[test]
fn sparse_reductions_finite_differences() {
    let x = test_array(&[4, 3], -1.0, 1.0, 24);
    for axes in [Some(vec![0i64]), Some(vec![1]), None] {
        let ax = axes.clone();
        check_grad_on_devices(
            move |v| v[0].tostype(SType::Csr)?.sum(ax.as_deref(), false),
            std::slice::from_ref(&x),
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
        let ax = axes.map(|a| a[0]);
        for keep in [false, true] {
            check_grad_on_devices(
                move |v| sparse::square_sum(&v[0].tostype(SType::RowSparse)?, ax, keep),
                std::slice::from_ref(&x),
                1e-6,
                1e-6,
                1e-8,
            )
            .unwrap();
        }
    }
    check_grad_on_devices(
        |v| sparse::norm(&v[0].tostype(SType::RowSparse)?),
        &[x],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

device_test! {
fn dot_csr_dense_rejects_bad_operands_with_errors() {
    let x = csr_f64(3, 4, 0.5, 21);
    let w = test_array(&[4, 2], -1.0, 1.0, 22);
    // The same array as both operands (it cannot be csr and dense at once).
    let e = sparse::dot_csr_dense(&x, &x).unwrap_err().to_string();
    assert!(e.contains("one array twice"), "{e}");
    // A dense left operand, a dtype mismatch, a weight that is not 2-D.
    let e = sparse::dot_csr_dense(&w, &w.transpose(None).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs a csr operand"), "{e}");
    let w32 = w.astype(DType::F32).unwrap();
    let e = sparse::dot_csr_dense(&x, &w32).unwrap_err().to_string();
    assert!(e.contains("F64 and F32"), "{e}");
    let w1 = test_array(&[4], -1.0, 1.0, 23);
    let e = sparse::dot_csr_dense(&x, &w1).unwrap_err().to_string();
    assert!(e.contains("2-D"), "{e}");
}
}

/// `zero_grad` of a row_sparse gradient hands back the empty table it made last time while
/// only the array holds it (a trainer clears every consumed sparse gradient, each step), and
/// makes a new one when the caller kept the last one or it gained rows.
#[test]
fn zero_grad_of_a_row_sparse_gradient_reuses_its_empty_table() {
    let x = csr_f64(3, 20, 0.2, 17);
    let w = test_array(&[20, 2], -1.0, 1.0, 18);
    w.attach_grad_with(GradReq::Write, SType::RowSparse);
    let backward = || {
        autograd::record(|| x.dot(&w)).unwrap().backward().unwrap();
        let g = w.grad().unwrap();
        assert!(
            g.to_f64_vec().iter().any(|v| *v != 0.0),
            "the batch has rows"
        );
    };
    let empty = |g: &NDArray| {
        assert_eq!(g.stype(), SType::RowSparse);
        assert_eq!(g.shape(), [20, 2]);
        assert!(g.to_f64_vec().iter().all(|v| *v == 0.0));
    };
    backward();
    w.zero_grad();
    let first = w.grad().unwrap().id();
    w.zero_grad();
    assert_eq!(
        w.grad().unwrap().id(),
        first,
        "cleared twice: the same table"
    );
    backward();
    w.zero_grad();
    assert_eq!(
        w.grad().unwrap().id(),
        first,
        "after a backward: the same table"
    );
    // Kept by the caller: a new one, the kept one untouched.
    let kept = w.grad().unwrap();
    backward();
    w.zero_grad();
    let second = w.grad().unwrap();
    assert_ne!(second.id(), first);
    empty(&kept);
    empty(&second);
    drop((kept, second));
    // Rows written into the empty table (an in-place replacement): not handed out again.
    w.zero_grad();
    let g = w.grad().unwrap();
    let third = g.id();
    let mut one_row = vec![0.0f64; 40];
    one_row[6] = 1.0;
    let rows = NDArray::from_vec(one_row, &[20, 2])
        .unwrap()
        .tostype(SType::RowSparse)
        .unwrap();
    g.assign(&rows);
    assert!(g.nnz() > 0);
    drop(g);
    w.zero_grad();
    let fresh = w.grad().unwrap();
    assert_ne!(fresh.id(), third, "a table with rows is not reused");
    empty(&fresh);
}
