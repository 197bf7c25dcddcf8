//! `Parameter::row_sparse_data` inside autograd: a batch's rows of a weight, differentiable,
//! with a row_sparse gradient over those rows only (the factorization-machine pattern).

use sparrow_core::{autograd, device_test, sparse, SType};
use sparrow_nn::{Initializer, Parameter};

device_test! {
fn row_sparse_data_is_differentiable_with_a_row_sparse_gradient() {
    let (rows, vocab, k) = (6, 40, 3);
    let x = sparse::rand_sparse_seeded(
        &[rows, vocab],
        0.1,
        SType::Csr,
        sparse::SparseDist::Uniform,
        5,
    )
    .unwrap()
    .to_device(sparrow_core::testing::test_device())
    .unwrap();
    let cols: Vec<i64> = x
        .to_device(sparrow_core::Device::Cpu)
        .unwrap()
        .with_csr::<f32, _>(|c| c.indices.to_vec())
        .unwrap();
    let v = Parameter::new("v", &[vocab, k]).with_grad_stype(SType::RowSparse);
    v.initialize(&Initializer::Uniform { scale: 0.5 }, None).unwrap();
    // sum((x . V_batch)^2): only the batch's rows of V are read.
    let loss = autograd::record(|| {
        let vb = v.row_sparse_data(&cols)?;
        x.dot(&vb)?.square()?.sum_all()
    })
    .unwrap();
    loss.backward().unwrap();
    let g = v.grad().unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    let mut want_rows = cols.clone();
    want_rows.sort_unstable();
    want_rows.dedup();
    assert_eq!(g.row_ids().unwrap(), want_rows);
    // Dense reference: d/dV sum((xV)^2) = x^T (2 x V).
    let xd = x.tostype(SType::Dense).unwrap();
    let w = v.data().unwrap().detach();
    let reference = xd
        .dot_t(&xd.dot(&w).unwrap().mul_scalar(2.0).unwrap(), true, false)
        .unwrap()
        .to_f64_vec();
    for (a, b) in g.to_f64_vec().iter().zip(&reference) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}
}
