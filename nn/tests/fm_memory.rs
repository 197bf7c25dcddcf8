//! Memory: a factorization machine's pairwise term over a batch's rows of a 2,000,000 x 16
//! factor table (128 MB), `(x.V)^2 - x^2.V^2` with `V = Parameter::row_sparse_data(cols)`,
//! backward included, stays within a few MB of the table: the gradient of `V^2` is row_sparse
//! over the batch's rows (it densified the whole table twice before). Its own test binary:
//! the peak RSS is the process's.

use sparrow_core::{autograd, sys, NDArray, SType};
use sparrow_nn::{Initializer, Parameter};

#[test]
fn fm_pairwise_term_backward_never_densifies_the_table() {
    let (features, k) = (2_000_000usize, 16usize);
    let v = Parameter::new("v", &[features, k]).with_grad_stype(SType::RowSparse);
    v.initialize(
        &Initializer::Uniform { scale: 0.1 },
        sparrow_core::Device::Cpu,
    )
    .unwrap();
    let (rows, per_row) = (64usize, 40usize);
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    for r in 0..rows as u64 {
        let mut row: Vec<i64> = (0..per_row as u64)
            .map(|j| ((r * 7919 + j * 104_729 + j * j * 31) % features as u64) as i64)
            .collect();
        row.sort_unstable();
        row.dedup();
        indices.extend(row);
        indptr.push(indices.len() as i64);
    }
    let nnz = indices.len();
    let cols = indices.clone();
    let x = NDArray::csr_from_parts(vec![0.5f32; nnz], indices, indptr, [rows, features]).unwrap();
    let Some(before) = sys::peak_rss_bytes() else {
        eprintln!("SKIPPED: no peak RSS on this platform");
        return;
    };
    for _ in 0..3 {
        let loss = autograd::record(|| {
            let vb = v.row_sparse_data(&cols)?;
            let pairs = x
                .dot(&vb)?
                .square()?
                .sub(&x.square()?.dot(&vb.square()?)?)?;
            pairs.sum_all()
        })
        .unwrap();
        loss.backward().unwrap();
        let g = v.grad().unwrap();
        assert_eq!(g.stype(), SType::RowSparse);
        let mut want = cols.clone();
        want.sort_unstable();
        want.dedup();
        assert_eq!(g.row_ids().unwrap(), want);
    }
    let grown = sys::peak_rss_bytes().unwrap().saturating_sub(before);
    // The table is 128 MB; one dense copy of it would show here.
    assert!(grown < 32 << 20, "peak RSS grew by {} MB", grown >> 20);
}
