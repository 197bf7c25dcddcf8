//! Dense weights get row_sparse gradients where the math allows: through `matmul(csr, w)` and
//! through `dot(csr, f(w))` for row-local `f` (reductions and softmax over axes other than the
//! first, sign) and for `take` of rows. Each `f`'s backward turns a row_sparse head gradient
//! into a row_sparse gradient over the rows it touches (checked on the recorded node, values
//! against the dense head gradient), and the whole chain passes finite differences.

use sparrow_core::autograd;
use sparrow_core::sparse;
use sparrow_core::testing::{check_grad_on_devices, test_array, test_csr};
use sparrow_core::{DType, NDArray, Result, SType};

type F = fn(&NDArray) -> Result<NDArray>;

fn take_rows(w: &NDArray) -> Result<NDArray> {
    w.take(&NDArray::from_vec(vec![5i64, 0, 5, 2, 7, 1], &[6])?, 0)
}

/// (name, f, weight shape): `f(w)` is `[6, 3]` in each case.
fn cases() -> Vec<(&'static str, F, Vec<usize>)> {
    vec![
        ("sum", |w| w.sum(Some(&[2]), false), vec![6, 3, 2]),
        ("mean", |w| w.mean(Some(&[2]), false), vec![6, 3, 2]),
        ("norm", |w| w.norm(2, Some(&[2]), false), vec![6, 3, 2]),
        ("max", |w| w.max(Some(&[2]), false), vec![6, 3, 2]),
        (
            "square_sum",
            |w| sparse::square_sum(w, Some(2), false),
            vec![6, 3, 2],
        ),
        ("log_softmax", |w| w.log_softmax(1), vec![6, 3]),
        ("softmax", |w| w.softmax(-1), vec![6, 3]),
        ("sign", |w| w.sign(), vec![6, 3]),
        ("take", take_rows, vec![8, 3]),
    ]
}

/// A row_sparse `[6, 3]` head gradient storing rows 1 and 4.
fn rsp_head() -> NDArray {
    let v: Vec<f64> = (0..18)
        .map(|k| {
            if k / 3 == 1 || k / 3 == 4 {
                0.5 + k as f64 / 10.0
            } else {
                0.0
            }
        })
        .collect();
    NDArray::from_vec(v, &[6, 3])
        .unwrap()
        .tostype(SType::RowSparse)
        .unwrap()
}

fn node_grad(f: F, w: &NDArray, head: &NDArray) -> NDArray {
    let w = w.detach();
    w.attach_grad();
    let y = autograd::record(|| f(&w)).unwrap();
    y.backward_with_grad(head).unwrap();
    w.grad().unwrap()
}

#[test]
fn row_local_backwards_keep_a_row_sparse_head_gradient_sparse() {
    for (name, f, shape) in cases() {
        let w = test_array(&shape, -1.0, 1.0, 7);
        let head = rsp_head();
        // The node's own backward: row_sparse out for row_sparse in.
        let ws = w.detach();
        ws.attach_grad();
        let y = autograd::record(|| f(&ws)).unwrap();
        let g = y
            .node()
            .unwrap()
            .run_backward(&head)
            .unwrap()
            .remove(0)
            .unwrap();
        // (mean's last node is its scaling; the sum below it is the "sum" case.)
        assert_eq!(
            g.stype(),
            SType::RowSparse,
            "{name}: gradient of the last node"
        );
        // Values: the same as with the densified head gradient.
        let got = node_grad(f, &w, &head);
        let want = node_grad(f, &w, &head.tostype(SType::Dense).unwrap());
        for (a, b) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
            assert!((a - b).abs() < 1e-12, "{name}: {a} vs {b}");
        }
    }
}

#[test]
fn weights_through_csr_products_get_row_sparse_gradients() {
    let x = test_csr(4, 6, 0.3, 3, DType::F64);
    for (name, f, shape) in cases() {
        // The values through the whole chain, against finite differences.
        let w = test_array(&shape, -1.0, 1.0, 11);
        let xc = x.clone();
        check_grad_on_devices(
            move |v| xc.to_device(v[0].device())?.dot(&f(&v[0])?),
            &[w],
            1e-6,
            1e-5,
            1e-8,
        )
        .unwrap_or_else(|e| panic!("dot(csr, {name}(w)): {e}"));
    }
    // matmul(csr, w): the dot kernel, a row_sparse weight gradient over x's columns.
    let w = test_array(&[6, 3], -1.0, 1.0, 12);
    let ws = w.detach();
    ws.attach_grad();
    let y = autograd::record(|| x.matmul(&ws)).unwrap();
    let g = y
        .node()
        .unwrap()
        .run_backward(&y.ones_like())
        .unwrap()
        .remove(1)
        .unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    let xc = x.clone();
    check_grad_on_devices(
        move |v| xc.to_device(v[0].device())?.matmul(&v[0]),
        &[w],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}
