//! A csr array's column grouping prepared ahead (`NDArray::prepare_csr_transpose`, done by
//! LibSVMIter's producer thread) must give exactly the gradients computed without it, and must
//! never be used once the array's structure changed.

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::testing::{test_array, test_csr as csr};
use sparrow_core::{device_test, DType, NDArray, SType};

/// Row ids and values of the row_sparse gradient of `w` in `sum(dot(x, w) * head)`.
/// The column ids of a csr array's non-zeros.
fn csr_cols(x: &NDArray) -> Vec<i64> {
    let x = x.to_device(sparrow_core::Device::Cpu).unwrap();
    match x.dtype() {
        DType::F32 => x.with_csr::<f32, _>(|c| c.indices.to_vec()),
        _ => x.with_csr::<f64, _>(|c| c.indices.to_vec()),
    }
    .unwrap()
}

fn weight_grad(x: &NDArray, w0: &NDArray, head: &NDArray) -> (Vec<i64>, Vec<f64>) {
    let w = w0.copy();
    w.attach_grad_with(GradReq::Write, SType::RowSparse);
    let y = autograd::record(|| x.dot(&w)?.mul(head)?.sum_all()).unwrap();
    y.backward().unwrap();
    let g = w.grad().unwrap();
    (g.row_ids().unwrap(), g.to_f64_vec())
}

device_test! {
fn prepared_groups_give_the_same_gradient_bit_for_bit() {
    for (seed, dtype) in [(1, DType::F32), (2, DType::F64), (3, DType::F32)] {
        // 10-row batches over many columns (the tutorial's shape, scaled) and a denser one
        // whose columns repeat across rows.
        for (rows, cols, density) in [(10, 5000, 0.002), (16, 40, 0.3)] {
            let x = csr(rows, cols, density, seed, dtype);
            let w = test_array(&[cols, 16], -1.0, 1.0, seed + 10)
                .astype(dtype)
                .unwrap();
            let head = test_array(&[rows, 16], -1.0, 1.0, seed + 20)
                .astype(dtype)
                .unwrap();
            let plain = weight_grad(&x, &w, &head);
            assert!(x.csr_column_groups().is_none());
            assert!(x.prepare_csr_transpose());
            let g = x.csr_column_groups().expect("prepared");
            // The grouping itself: sorted unique columns with their non-zero counts.
            let idx = csr_cols(&x);
            let mut cols_want = idx.clone();
            cols_want.sort_unstable();
            cols_want.dedup();
            assert_eq!(g.columns(), &cols_want[..]);
            let counts: Vec<usize> = g.counts().collect();
            let want: Vec<usize> = cols_want
                .iter()
                .map(|c| idx.iter().filter(|&&i| i == *c).count())
                .collect();
            assert_eq!(counts, want);
            let prepared = weight_grad(&x, &w, &head);
            assert_eq!(plain.0, prepared.0);
            assert_eq!(plain.1, prepared.1, "seed {seed} {dtype:?} {rows}x{cols}");
        }
    }
}
}

device_test! {
fn a_row_slice_does_not_use_its_parents_grouping() {
    let x = csr(12, 300, 0.05, 4, DType::F64);
    assert!(x.prepare_csr_transpose());
    // A slice shares the index arrays at an offset: its own grouping differs.
    let part = x.slice_rows(3, 9).unwrap();
    assert!(part.csr_column_groups().is_none());
    let w = test_array(&[300, 4], -1.0, 1.0, 5);
    let head = test_array(&[6, 4], -1.0, 1.0, 6);
    let (rows, vals) = weight_grad(&part, &w, &head);
    // Reference: the dense x^T . head over the slice.
    let want = part
        .tostype(SType::Dense)
        .unwrap()
        .dot_t(&head, true, false)
        .unwrap()
        .to_f64_vec();
    for (a, b) in vals.iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
    let mut cols = csr_cols(&part);
    cols.sort_unstable();
    cols.dedup();
    assert_eq!(rows, cols);
}
}

device_test! {
fn replaced_data_invalidates_the_grouping() {
    let x = csr(8, 100, 0.1, 7, DType::F64);
    let other = csr(8, 100, 0.1, 8, DType::F64);
    assert!(x.prepare_csr_transpose());
    x.assign(&other);
    assert!(
        x.csr_column_groups().is_none(),
        "stale grouping still offered"
    );
    let w = test_array(&[100, 3], -1.0, 1.0, 9);
    let head = test_array(&[8, 3], -1.0, 1.0, 10);
    assert_eq!(weight_grad(&x, &w, &head), weight_grad(&other, &w, &head));
}
}

device_test! {
fn dense_and_row_sparse_arrays_have_no_grouping() {
    let d = test_array(&[3, 4], -1.0, 1.0, 11);
    assert!(!d.prepare_csr_transpose());
    assert!(d.csr_column_groups().is_none());
    let r = d.tostype(SType::RowSparse).unwrap();
    assert!(!r.prepare_csr_transpose());
}
}

device_test! {
fn a_grouping_order_set_from_elsewhere_is_checked_and_used() {
    for (seed, dtype) in [(12, DType::F32), (13, DType::F64)] {
        let x = csr(16, 40, 0.3, seed, dtype);
        let y = csr(16, 40, 0.3, seed, dtype);
        let w = test_array(&[40, 5], -1.0, 1.0, seed + 1)
            .astype(dtype)
            .unwrap();
        let head = test_array(&[16, 5], -1.0, 1.0, seed + 2)
            .astype(dtype)
            .unwrap();
        let plain = weight_grad(&y, &w, &head);
        assert!(x.prepare_csr_transpose());
        let order = x.csr_column_groups().unwrap().order().to_vec();
        // The same order kept on a second array of the same structure: the same grouping,
        // the same gradient bit for bit.
        y.set_csr_column_order(order.clone()).unwrap();
        let g = y.csr_column_groups().expect("kept");
        assert_eq!(g.columns(), x.csr_column_groups().unwrap().columns());
        assert_eq!(g.order(), &order[..]);
        assert_eq!(weight_grad(&y, &w, &head), plain);

        // Anything that is not exactly the grouping is an error and leaves nothing behind.
        let z = csr(16, 40, 0.3, seed, dtype);
        let cols = csr_cols(&z);
        let mut bad: Vec<(Vec<usize>, &str)> = vec![
            (order[1..].to_vec(), "positions"),
            ([&order[..], &[0]].concat(), "positions"),
        ];
        let mut past = order.clone();
        past[0] = cols.len();
        bad.push((past, "past"));
        // Two groups swapped: columns descend.
        let first = order.iter().take_while(|&&p| cols[p] == cols[order[0]]).count();
        bad.push(([&order[first..], &order[..first]].concat(), "not a column grouping"));
        // A column's positions descending (the first column with two non-zeros).
        let at = (1..order.len())
            .find(|&i| cols[order[i]] == cols[order[i - 1]])
            .expect("a repeated column at this density");
        let mut desc = order.clone();
        desc.swap(at - 1, at);
        bad.push((desc, "not a column grouping"));
        // One position twice, another missing.
        let mut twice = order.clone();
        twice[at] = twice[at - 1];
        bad.push((twice, "not a column grouping"));
        for (o, want) in bad {
            let e = z.set_csr_column_order(o).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(z.csr_column_groups().is_none());
        }
    }
    let d = test_array(&[3, 4], -1.0, 1.0, 14);
    assert!(d.set_csr_column_order(vec![]).is_err());
}
}
