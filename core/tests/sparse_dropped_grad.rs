//! No gradient is dropped: a csr operand of a product that is computed by a recorded operator
//! (not a leaf) gets its gradient, as a leaf does. Checked against finite differences through
//! the dense leaf the csr operand is made from.

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::sparse;
use sparrow_core::testing::{check_grad_on_devices, test_array};
use sparrow_core::{NDArray, SType};

/// A `[rows, cols]` array with values in [-1, 1] and zeros at about a third of the entries.
fn with_zeros(rows: usize, cols: usize, seed: u64) -> NDArray {
    let v: Vec<f64> = test_array(&[rows, cols], -1.0, 1.0, seed)
        .to_f64_vec()
        .into_iter()
        .enumerate()
        .map(|(k, x)| if k % 3 == 0 { 0.0 } else { x })
        .collect();
    NDArray::from_vec(v, &[rows, cols]).unwrap()
}

fn check(
    f: impl Fn(&[NDArray]) -> sparrow_core::Result<NDArray> + Clone + 'static,
    inputs: &[NDArray],
    what: &str,
) {
    check_grad_on_devices(f, inputs, 1e-6, 1e-6, 1e-8).unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn relu_of_csr_then_dot_passes_the_gradient_upstream() {
    // Away from relu's kink at 0 (a finite difference there is half the slope).
    let x = with_zeros(4, 6, 1).abs().unwrap().add_scalar(0.1).unwrap();
    let w = test_array(&[6, 3], -1.0, 1.0, 2);
    check(
        |v| v[0].tostype(SType::Csr)?.relu()?.dot(&v[1]),
        &[x, w],
        "relu(csr).dot(w)",
    );
}

#[test]
fn csr_products_pass_gradients_to_computed_csr_operands() {
    let x = with_zeros(4, 6, 3);
    // csr . dense
    check(
        |v| v[0].tostype(SType::Csr)?.mul_scalar(2.0)?.dot(&v[1]),
        &[x.clone(), test_array(&[6, 3], -1.0, 1.0, 4)],
        "dot(csr, dense)",
    );
    // csr^T . dense -> row_sparse
    check(
        |v| {
            sparse::dot_csr_t_dense(
                &v[0].tostype(SType::Csr)?.mul_scalar(2.0)?,
                &v[1],
                SType::RowSparse,
            )
        },
        &[x.clone(), test_array(&[4, 3], -1.0, 1.0, 5)],
        "dot(csr^T, dense)",
    );
    // csr . row_sparse
    check(
        |v| {
            v[0].tostype(SType::Csr)?
                .mul_scalar(2.0)?
                .dot(&v[1].tostype(SType::RowSparse)?)
        },
        &[x.clone(), with_zeros(6, 3, 6)],
        "dot(csr, row_sparse)",
    );
    // dense . csr and dense . csr^T
    check(
        |v| v[0].dot(&v[1].tostype(SType::Csr)?.mul_scalar(2.0)?),
        &[test_array(&[3, 4], -1.0, 1.0, 7), x.clone()],
        "dot(dense, csr)",
    );
    check(
        |v| v[0].dot_t(&v[1].tostype(SType::Csr)?.mul_scalar(2.0)?, false, true),
        &[test_array(&[3, 6], -1.0, 1.0, 8), x.clone()],
        "dot(dense, csr^T)",
    );
    // csr . W^T (Gluon layout)
    check(
        |v| sparse::dot_csr_dense_t(&v[0].tostype(SType::Csr)?.mul_scalar(2.0)?, &v[1]),
        &[x, test_array(&[3, 6], -1.0, 1.0, 9)],
        "dot_csr_dense_t",
    );
}

#[test]
fn a_csr_leaf_gets_its_gradient_in_its_storage_type() {
    let x = with_zeros(4, 6, 10).tostype(SType::Csr).unwrap();
    let w = test_array(&[6, 3], -1.0, 1.0, 11);
    x.attach_grad_with(GradReq::Write, SType::Csr);
    let y = autograd::record(|| x.dot(&w)).unwrap();
    y.backward().unwrap();
    let g = x.grad().unwrap();
    assert_eq!(g.stype(), SType::Csr);
    let ones = NDArray::ones(&[4, 3], sparrow_core::DType::F64).unwrap();
    let want = ones.dot_t(&w, false, true).unwrap().to_f64_vec();
    for (a, b) in g.to_f64_vec().iter().zip(&want) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
}
