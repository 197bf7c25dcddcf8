//! The sparse product kernels on inputs large enough to take their fast paths: the parallel
//! split (work >= 2^16), the radix sort of column ids (>= 512 entries, keys of up to 3 digit
//! passes), the AVX2 f32 gather in 64- and 8-column blocks plus its scalar tail (row widths
//! 1..130), and the portable path for f64, each against a reference computed here in f64 from
//! the COO triplets (no sparrow kernel involved).

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::testing::test_device;
use sparrow_core::{device_test, sparse, NDArray, SType};

/// Deterministic xorshift stream in [-1, 1).
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// COO triplets with `per_row` columns per row drawn from `0..cols` (duplicates are summed by
/// the constructor and by the reference alike), one row left empty.
fn triplets(rows: usize, cols: usize, per_row: usize, seed: u64) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let mut s = Stream(seed | 1);
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rows {
        if i == rows / 2 {
            continue;
        }
        for _ in 0..per_row {
            r.push(i as i64);
            c.push((s.next() % cols as u64) as i64);
            v.push(s.unit());
        }
    }
    (r, c, v)
}

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = Stream(seed | 1);
    (0..n).map(|_| s.unit()).collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: [{i}] {a} vs {b}"
        );
    }
}

/// dot(X, W) and dot(X^T, G) -> row_sparse (and dense) for one shape, in f32 or f64.
fn check(rows: usize, cols: usize, per_row: usize, n: usize, f32: bool, seed: u64) {
    let (r, c, v) = triplets(rows, cols, per_row, seed);
    let w = values(cols * n, seed + 1);
    let g = values(rows * n, seed + 2);
    // Reference, in f64 from the triplets (duplicates add up, as in the csr).
    let mut want_y = vec![0f64; rows * n];
    let mut want_t = std::collections::BTreeMap::<i64, Vec<f64>>::new();
    for ((&i, &j), &a) in r.iter().zip(&c).zip(&v) {
        let (i, ju) = (i as usize, j as usize);
        for k in 0..n {
            want_y[i * n + k] += a * w[ju * n + k];
        }
        let row = want_t.entry(j).or_insert_with(|| vec![0.0; n]);
        for k in 0..n {
            row[k] += a * g[i * n + k];
        }
    }
    let want_ids: Vec<i64> = want_t.keys().copied().collect();
    let want_rows: Vec<f64> = want_t.values().flatten().copied().collect();
    let mut want_dense_t = vec![0f64; cols * n];
    for (&j, row) in &want_t {
        want_dense_t[j as usize * n..(j as usize + 1) * n].copy_from_slice(row);
    }

    let (x, wa, ga, tol) = if f32 {
        let cast = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
        (
            NDArray::csr_from_coo(&r, &c, &cast(&v), [rows, cols])
                .and_then(|a| a.to_device(test_device()))
                .unwrap(),
            NDArray::from_vec(cast(&w), &[cols, n])
                .and_then(|a| a.to_device(test_device()))
                .unwrap(),
            NDArray::from_vec(cast(&g), &[rows, n])
                .and_then(|a| a.to_device(test_device()))
                .unwrap(),
            1e-4,
        )
    } else {
        (
            NDArray::csr_from_coo(&r, &c, &v, [rows, cols])
                .and_then(|a| a.to_device(test_device()))
                .unwrap(),
            NDArray::from_vec(w.clone(), &[cols, n])
                .and_then(|a| a.to_device(test_device()))
                .unwrap(),
            NDArray::from_vec(g.clone(), &[rows, n])
                .and_then(|a| a.to_device(test_device()))
                .unwrap(),
            1e-12,
        )
    };
    let what = format!("{rows}x{cols} {per_row}/row n {n} f32 {f32}");
    assert_close(
        &x.dot(&wa).unwrap().to_f64_vec(),
        &want_y,
        tol,
        &format!("dot {what}"),
    );
    let t = x.dot_t(&ga, true, false).unwrap();
    assert_eq!(t.stype(), SType::RowSparse);
    assert_eq!(t.row_ids().unwrap(), want_ids, "{what}");
    let got_rows: Vec<f64> = t.row_sparse_parts().unwrap().1.to_f64_vec();
    assert_close(&got_rows, &want_rows, tol, &format!("dot_t {what}"));
    if cols * n <= 1 << 20 {
        let td = sparse::dot_csr_t_dense(&x, &ga, SType::Dense).unwrap();
        assert_close(
            &td.to_f64_vec(),
            &want_dense_t,
            tol,
            &format!("dot_t dense {what}"),
        );
    }
}

device_test! {
fn f32_fast_paths_match_the_reference() {
    // Widths around the 8- and 64-column blocks of the AVX2 kernel.
    for (k, &n) in [1usize, 7, 8, 9, 63, 64, 65, 128, 130].iter().enumerate() {
        // 600 rows x 30 = 18,000 entries: parallel (work >= 65,536 from n = 4) and radix-sorted
        // (keys below 100,000: 2 passes of 11 bits).
        check(600, 100_000, 30, n, true, 10 + k as u64);
    }
    // Many entries per column (groups of ~18 entries) and a single-digit radix pass.
    check(600, 1000, 30, 128, true, 31);
    // Keys above 2^22: three radix passes (one column, the scalar tail only).
    check(300, 5_000_000, 20, 1, true, 32);
    // Small: the sequential branch and the comparison sort (< 512 entries).
    check(10, 1000, 5, 128, true, 33);
}
}

device_test! {
fn f64_portable_path_matches_the_reference() {
    for (k, &n) in [1usize, 5, 128].iter().enumerate() {
        check(600, 100_000, 30, n, false, 40 + k as u64);
    }
    check(10, 1000, 5, 16, false, 43);
}
}

device_test! {
fn embedding_backward_sums_duplicates_on_the_fast_path() {
    // 20,000 ids over a 3,000-row table: radix-sorted, parallel segment sum, f32 AVX2 gather.
    let (vocab, dim, n) = (3000usize, 128usize, 20_000usize);
    let table = NDArray::from_vec(vec![0.5f32; vocab * dim], &[vocab, dim]).and_then(|a| a.to_device(test_device())).unwrap();
    table.attach_grad_with(GradReq::Write, SType::RowSparse);
    let mut s = Stream(7);
    let ids: Vec<i64> = (0..n).map(|_| (s.next() % vocab as u64) as i64).collect();
    let idarr = NDArray::from_vec(ids.clone(), &[n]).and_then(|a| a.to_device(test_device())).unwrap();
    let y = autograd::record(|| sparse::embedding(&table, &idarr)).unwrap();
    y.backward().unwrap();
    let g = table.grad().unwrap();
    let mut count = std::collections::BTreeMap::<i64, f64>::new();
    for &i in &ids {
        *count.entry(i).or_default() += 1.0;
    }
    let (rows, values) = g.row_sparse_parts().unwrap();
    assert_eq!(rows, count.keys().copied().collect::<Vec<_>>());
    let want: Vec<f64> = count.values().flat_map(|&c| vec![c; dim]).collect();
    let got = values.to_f64_vec();
    assert_close(&got, &want, 0.0, "embedding grad");
}
}
