//! Memory: a Dense(1,000,000 -> 128) with a row_sparse gradient holds its 512 MB weight and,
//! after a backward on a 10-row CSR batch with 10 non-zeros per row, a gradient of at most 100
//! rows. (Allocates 512 MB.)

use sparrow_core::{autograd, device_test, testing, Device, NDArray, SType};
use sparrow_nn::{Block, Dense, Initializer};

device_test! {
fn dense_1m_x_128_row_sparse_grad_stays_small() {
    let (features, units) = (1_000_000usize, 128usize);
    let layer = Dense::new(units)
        .in_units(features)
        .grad_stype(SType::RowSparse);
    layer
        .initialize(&Initializer::xavier(), Device::current())
        .unwrap();
    let w = layer.weight();
    assert_eq!(w.nbytes(), features * units * 4); // 512 MB
    assert_eq!(w.grad().unwrap().nbytes(), 0);

    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    for r in 0..10u64 {
        for k in 0..10u64 {
            indices.push(((r * 7919 + k * 104_729) % features as u64) as i64);
        }
        let row = &mut indices[(r * 10) as usize..];
        row.sort_unstable();
        indptr.push(indices.len() as i64);
    }
    // Sparse constructors do not follow the default-device scope: move the batch by hand.
    let x = NDArray::csr_from_parts(vec![1.0f32; 100], indices, indptr, [10, features])
        .and_then(|x| x.to_device(testing::test_device()))
        .unwrap();
    let loss = autograd::record(|| layer.forward(&x)?.sum_all()).unwrap();
    loss.backward().unwrap();
    let g = w.grad().unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    let rows = g.stored_rows();
    assert!(rows <= 100, "{rows} rows");
    // values + indices of at most 100 rows: <= 100 * (128 * 4 + 8) bytes.
    assert!(g.nbytes() <= 100 * (units * 4 + 8), "{} bytes", g.nbytes());
    assert_eq!(w.nbytes(), features * units * 4);
}
}
