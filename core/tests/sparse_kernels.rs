//! The sparse kernels that replaced dense fallbacks: csr x csr -> csr, elementwise mul /
//! maximum / minimum of csr by csr -> csr, concat of csr along rows and consecutive row slices
//! -> csr, and per-row nnz. Each is checked against the dense operator on random inputs and,
//! where differentiable, by finite differences.

use sparrow_core::testing::{check_grad_on_devices, test_array, test_csr};
use sparrow_core::{DType, NDArray, SType};

fn close(a: &NDArray, b: &NDArray, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    for (k, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: element {k}: {x} vs {y}"
        );
    }
}

/// Dense `[rows, cols]` values in [-1, 1] with zeros at about half of the entries.
fn with_zeros(rows: usize, cols: usize, seed: u64) -> NDArray {
    let v: Vec<f64> = test_array(&[rows, cols], -1.0, 1.0, seed)
        .to_f64_vec()
        .into_iter()
        .enumerate()
        .map(|(k, x)| {
            if (k * 7 + seed as usize).is_multiple_of(2) {
                0.0
            } else {
                x
            }
        })
        .collect();
    NDArray::from_vec(v, &[rows, cols]).unwrap()
}

#[test]
fn csr_times_csr_is_csr_and_matches_dense() {
    for (m, k, n, d) in [
        (5, 7, 4, 0.4),
        (30, 50, 20, 0.1),
        (3, 4, 6, 0.0),
        (8, 1, 8, 1.0),
    ] {
        let a = test_csr(m, k, d, 1, DType::F64);
        let b = test_csr(k, n, d, 2, DType::F64);
        let c = a.dot(&b).unwrap();
        assert_eq!(c.stype(), SType::Csr);
        c.check_format(true).unwrap();
        let want = a
            .tostype(SType::Dense)
            .unwrap()
            .dot(&b.tostype(SType::Dense).unwrap())
            .unwrap();
        close(&c, &want, &format!("{m}x{k} . {k}x{n}"));
        // A row slice (a non-zero offset into the parent's values) as the left operand.
        if m > 3 {
            let s = a.slice_rows(1, 3).unwrap();
            let want = s
                .tostype(SType::Dense)
                .unwrap()
                .dot(&b.tostype(SType::Dense).unwrap())
                .unwrap();
            close(&s.dot(&b).unwrap(), &want, "row slice . csr");
        }
    }
    // f32 too, and a shape mismatch is an error naming dot.
    let a = test_csr(6, 5, 0.5, 3, DType::F32);
    let b = test_csr(5, 4, 0.5, 4, DType::F32);
    assert_eq!(a.dot(&b).unwrap().stype(), SType::Csr);
    let e = a.dot(&a).unwrap_err().to_string();
    assert!(e.contains("dot") && e.contains("inner dimensions"), "{e}");
}

#[test]
fn csr_times_csr_finite_differences() {
    check_grad_on_devices(
        |v| v[0].tostype(SType::Csr)?.dot(&v[1].tostype(SType::Csr)?),
        &[with_zeros(4, 5, 5), with_zeros(5, 3, 6)],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

#[test]
fn csr_by_csr_elementwise_stays_csr() {
    type B = fn(&NDArray, &NDArray) -> sparrow_core::Result<NDArray>;
    let ops: [(&str, B); 3] = [
        ("mul", |a, b| a.mul(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
    ];
    let (ad, bd) = (with_zeros(5, 6, 7), with_zeros(5, 6, 8));
    for (name, f) in ops {
        let (a, b) = (
            ad.tostype(SType::Csr).unwrap(),
            bd.tostype(SType::Csr).unwrap(),
        );
        let c = f(&a, &b).unwrap();
        assert_eq!(c.stype(), SType::Csr, "{name}");
        c.check_format(true).unwrap();
        close(&c, &f(&ad, &bd).unwrap(), name);
        if name == "mul" {
            assert!(
                c.nnz() <= a.nnz().min(b.nnz()),
                "mul keeps the intersection"
            );
        }
        for st in [SType::Csr, SType::RowSparse] {
            check_grad_on_devices(
                move |v| f(&v[0].tostype(st)?, &v[1].tostype(st)?),
                &[ad.clone(), bd.clone()],
                1e-6,
                1e-6,
                1e-8,
            )
            .unwrap_or_else(|e| panic!("{name} on {st:?}: {e}"));
        }
    }
}

#[test]
fn csr_concat_rows_and_row_slices_stay_csr() {
    let (ad, bd) = (with_zeros(3, 4, 9), with_zeros(2, 4, 10));
    let (a, b) = (
        ad.tostype(SType::Csr).unwrap(),
        bd.tostype(SType::Csr).unwrap(),
    );
    let c = NDArray::concat(&[&a, &b], 0).unwrap();
    assert_eq!(c.stype(), SType::Csr);
    close(&c, &NDArray::concat(&[&ad, &bd], 0).unwrap(), "concat");
    check_grad_on_devices(
        |v| NDArray::concat(&[&v[0].tostype(SType::Csr)?, &v[1].tostype(SType::Csr)?], 0),
        &[ad.clone(), bd],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
    let s = a.slice_axis(0, Some(1), Some(3), 1).unwrap();
    assert_eq!(s.stype(), SType::Csr);
    close(
        &s,
        &ad.slice_axis(0, Some(1), Some(3), 1).unwrap(),
        "slice_axis",
    );
    // Through a csr head gradient too (the slice's square keeps csr).
    check_grad_on_devices(
        |v| {
            v[0].tostype(SType::Csr)?
                .slice_axis(0, Some(1), None, 1)?
                .square()
        },
        &[ad],
        1e-6,
        1e-6,
        1e-8,
    )
    .unwrap();
}

#[test]
fn row_nnz_counts_stored_values_per_row() {
    let d = NDArray::from_vec(vec![1.0f64, 0., 2., 0., 0., 0., 0., 3., 0.], &[3, 3]).unwrap();
    let want = vec![2i64, 0, 1];
    assert_eq!(d.row_nnz().unwrap().to_vec::<i64>().unwrap(), want);
    let c = d.tostype(SType::Csr).unwrap();
    assert_eq!(c.row_nnz().unwrap().to_vec::<i64>().unwrap(), want);
    let r = d.tostype(SType::RowSparse).unwrap();
    assert_eq!(r.row_nnz().unwrap().to_vec::<i64>().unwrap(), vec![3, 0, 3]);
    assert!(NDArray::scalar(1.0f64).row_nnz().is_err());
}

/// `x` as a dense f64 matrix from its csr parts, repeated columns of a row added up (what
/// `csr_unchecked` accepts).
fn dense_of_csr(x: &NDArray) -> Vec<Vec<f64>> {
    let [rows, cols] = [x.shape()[0], x.shape()[1]];
    x.with_csr::<f64, _>(|v| {
        let mut d = vec![vec![0.0; cols]; rows];
        for (r, row) in d.iter_mut().enumerate() {
            for p in v.indptr[r] as usize..v.indptr[r + 1] as usize {
                row[v.indices[p] as usize] += v.values[p];
            }
        }
        d
    })
    .unwrap()
}

#[test]
fn csr_times_csr_matches_dense_on_unsorted_repeated_and_empty_operands() {
    // Unsorted column ids, a column repeated within a row (its values add up), empty rows,
    // and operands with no rows, no inner dimension or no columns.
    let a = NDArray::csr_unchecked(
        vec![1.0f64, 2.0, -3.0, 0.5, 4.0, 1.5],
        vec![3, 0, 3, 2, 1, 1],
        vec![0, 3, 3, 4, 6],
        [4, 4],
    )
    .unwrap();
    let b = NDArray::csr_unchecked(
        vec![2.0f64, -1.0, 1.0, 3.0, 0.25, 7.0],
        vec![4, 0, 4, 1, 2, 0],
        vec![0, 2, 3, 3, 6],
        [4, 5],
    )
    .unwrap();
    let c = a.dot(&b).unwrap();
    c.check_format(true).unwrap();
    let (da, db) = (dense_of_csr(&a), dense_of_csr(&b));
    let got = c.to_f64_vec();
    for i in 0..4 {
        for j in 0..5 {
            let want: f64 = (0..4).map(|p| da[i][p] * db[p][j]).sum();
            assert!((got[i * 5 + j] - want).abs() < 1e-12, "({i}, {j})");
        }
    }
    for (m, k, n) in [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)] {
        let a = test_csr(m, k, 0.5, 1, DType::F32);
        let b = test_csr(k, n, 0.5, 2, DType::F32);
        let c = a.dot(&b).unwrap();
        assert_eq!(c.shape(), vec![m, n]);
        assert_eq!(c.nnz(), 0);
        c.check_format(true).unwrap();
    }
}

#[test]
fn csr_times_csr_past_u32_columns_is_an_error() {
    // 2^32 columns: the accumulators keep column ids as u32, so the product refuses them
    // (an error naming the limit, not a panic), whatever the entries.
    let a = NDArray::csr_from_parts(vec![1.0f32], vec![0], vec![0, 1], [1, 1]).unwrap();
    let b = NDArray::csr_from_parts(vec![1.0f32], vec![5], vec![0, 1], [1, 1 << 32]).unwrap();
    let e = a.dot(&b).unwrap_err().to_string();
    assert!(e.contains("dot") && e.contains("2^32"), "{e}");
}

#[test]
fn dense_times_wide_csr_with_dense_results_matches_dense() {
    // x wide enough (20,000 columns) for the column panels of the dense-result kernels, in
    // both forms: a . x (m x 20,000) and a . x^T (a m x 20,000); f32 and f64.
    for dtype in [DType::F32, DType::F64] {
        let x = test_csr(9, 20_000, 0.01, 3, dtype);
        let xd = x.tostype(SType::Dense).unwrap();
        let a = test_array(&[5, 9], -1.0, 1.0, 4).astype(dtype).unwrap();
        let got = sparrow_core::sparse::dot_dense_csr(&a, &x, false).unwrap();
        let want = a.dot(&xd).unwrap();
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        for (k, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "a . x {k}: {g} vs {w}"
            );
        }
        let at = test_array(&[6, 20_000], -1.0, 1.0, 5)
            .astype(dtype)
            .unwrap();
        let got = at.dot_t(&x, false, true).unwrap();
        assert_eq!(got.shape(), vec![6, 9]);
        let want = at.dot_t(&xd, false, true).unwrap();
        for (k, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "a . x^T {k}: {g} vs {w}"
            );
        }
    }
}
