//! Property tests: every sparse operator equals its dense reference on random shapes and
//! densities, including empty rows, arrays with no non-zeros and a single non-zero.

use proptest::prelude::*;
use sparrow_core::sparse::{self, concat_rows, square_sum};
use sparrow_core::{device_test, testing::test_device, DType, NDArray, SType};

fn close(got: &NDArray, want: &NDArray) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * (1.0 + b.abs());
        prop_assert!(ok, "element {} differs: {} vs {}", k, a, b);
    }
    Ok(())
}

/// A dense f64 array on the running test's device.
fn dense(v: Vec<f64>, shape: &[usize]) -> NDArray {
    NDArray::from_vec(v, shape)
        .and_then(|x| x.to_device(sparrow_core::testing::test_device()))
        .unwrap()
}

/// A (rows x cols) matrix with many zeros: whole empty rows and all-zero matrices are common.
fn matrix(max_r: usize, max_c: usize) -> impl Strategy<Value = (usize, usize, Vec<f64>)> {
    (0..=max_r, 1..=max_c).prop_flat_map(|(r, c)| {
        let cell =
            prop_oneof![3 => Just(0.0), 2 => (-2.0..2.0f64).prop_filter("nonzero", |x| *x != 0.0)];
        (Just(r), Just(c), prop::collection::vec(cell, r * c))
    })
}

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 40,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn cast_roundtrip_and_format((r, c, v) in matrix(5, 6)) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let d = dense(v.clone(), &[r, c]);
            for st in [SType::Csr, SType::RowSparse] {
                let s = d.tostype(st).unwrap();
                prop_assert_eq!(s.stype(), st);
                s.check_format(true).unwrap();
                close(&s.tostype(SType::Dense).unwrap(), &d)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn dot_products((r, c, v) in matrix(5, 6), n in 1usize..4) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let d = dense(v.clone(), &[r, c]);
            let x = d.tostype(SType::Csr).unwrap();
            let wd = sparrow_core::testing::test_array(&[c, n], -1.0, 1.0, (r * 7 + c) as u64);
            close(&x.dot(&wd).unwrap(), &d.dot(&wd).unwrap())?;
            let ws = wd.mul(&wd.greater_scalar(0.0).unwrap()).unwrap().tostype(SType::RowSparse).unwrap();
            close(&x.dot(&ws).unwrap(), &d.dot(&ws.tostype(SType::Dense).unwrap()).unwrap())?;
            let g = sparrow_core::testing::test_array(&[r, n], -1.0, 1.0, 3);
            let t = x.dot_t(&g, true, false).unwrap();
            prop_assert_eq!(t.stype(), SType::RowSparse);
            t.check_format(true).unwrap();
            close(&t, &d.dot_t(&g, true, false).unwrap())?;
            close(&sparse::dot_csr_t_dense(&x, &g, SType::Dense).unwrap(), &d.dot_t(&g, true, false).unwrap())?;
            let a = sparrow_core::testing::test_array(&[n, r], -1.0, 1.0, 4);
            close(&a.dot(&x).unwrap(), &a.dot(&d).unwrap())?;
            let a2 = sparrow_core::testing::test_array(&[n, c], -1.0, 1.0, 5);
            close(&a2.dot_t(&x, false, true).unwrap(), &a2.dot_t(&d, false, true).unwrap())?;
            Ok(())
        })?;
    }

    #[test]
    fn dense_times_csr_is_csr_over_the_csr_columns((r, c, v) in matrix(6, 7), m in 0usize..5, seed in 0u64..1000) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            // MXNet's dot(default, csr) = csr: every row stores the columns present in x.
            let d = dense(v.clone(), &[r, c]);
            let x = d.tostype(SType::Csr).unwrap();
            let a = sparrow_core::testing::test_array(&[m, r], -1.0, 1.0, seed);
            let y = match a.dot(&x) {
                Ok(y) => y,
                // The CUDA backend has no kernel for it (nor has MXNet's GPU).
                Err(e) if sparrow_core::testing::is_not_ported(&e.to_string()) => return Ok(()),
                Err(e) => panic!("{e}"),
            };
            prop_assert_eq!(y.stype(), SType::Csr);
            y.check_format(true).unwrap();
            close(&y, &a.dot(&d).unwrap())?;
            let mut cols: Vec<i64> = (0..c as i64)
                .filter(|&j| (0..r).any(|i| v[i * c + j as usize] != 0.0))
                .collect();
            cols.sort_unstable();
            let want: Vec<i64> = (0..m).flat_map(|_| cols.clone()).collect();
            let got = y.to_device(sparrow_core::Device::Cpu).unwrap()
                .with_csr::<f64, _>(|p| p.indices.to_vec()).unwrap();
            prop_assert_eq!(got, want);
            // The dense-result form agrees, and so does f32 against the f64 product.
            close(&sparse::dot_dense_csr(&a, &x, false).unwrap(), &a.dot(&d).unwrap())?;
            let (a32, x32) = (a.astype(DType::F32).unwrap(), x.astype(DType::F32).unwrap());
            let y32 = a32.dot(&x32).unwrap();
            prop_assert_eq!(y32.stype(), SType::Csr);
            let (g, w) = (y32.to_f64_vec(), a.dot(&d).unwrap().to_f64_vec());
            for (p, q) in g.iter().zip(&w) {
                prop_assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{} vs {}", p, q);
            }
            // csr^T keeps the dense result, as in MXNet.
            let b = sparrow_core::testing::test_array(&[m, c], -1.0, 1.0, seed + 1);
            let t = b.dot_t(&x, false, true).unwrap();
            prop_assert_eq!(t.stype(), SType::Dense);
            close(&t, &b.dot_t(&d, false, true).unwrap())?;
            Ok(())
        })?;
    }

    #[test]
    fn elementwise((r, c, v) in matrix(5, 6), seed in 0u64..1000) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let d = dense(v.clone(), &[r, c]);
            let other = sparrow_core::testing::test_array(&[r, c], -1.0, 1.0, seed);
            let e = other.mul(&other.greater_scalar(0.3).unwrap()).unwrap();
            for st in [SType::Csr, SType::RowSparse] {
                let (a, b) = (d.tostype(st).unwrap(), e.tostype(st).unwrap());
                let sum = a.add(&b).unwrap();
                prop_assert_eq!(sum.stype(), st);
                close(&sum, &d.add(&e).unwrap())?;
                let diff = a.sub(&b).unwrap();
                prop_assert_eq!(diff.stype(), st);
                close(&diff, &d.sub(&e).unwrap())?;
                let sd = a.add(&other).unwrap();
                prop_assert_eq!(sd.stype(), SType::Dense);
                close(&sd, &d.add(&other).unwrap())?;
                close(&other.sub(&a).unwrap(), &other.sub(&d).unwrap())?;
                let m = a.mul(&other).unwrap();
                prop_assert_eq!(m.stype(), st);
                close(&m, &d.mul(&other).unwrap())?;
                close(&sparse::add_grads(&a, &other).unwrap(), &d.add(&other).unwrap())?;
            }
            let (ra, rb) = (d.tostype(SType::RowSparse).unwrap(), e.tostype(SType::RowSparse).unwrap());
            let m = ra.mul(&rb).unwrap();
            prop_assert_eq!(m.stype(), SType::RowSparse);
            close(&m, &d.mul(&e).unwrap())?;
            let g = sparse::add_grads(&ra, &rb).unwrap();
            prop_assert_eq!(g.stype(), SType::RowSparse);
            g.check_format(true).unwrap();
            close(&g, &d.add(&e).unwrap())?;
            // Broadcast by a row vector and a column vector (non-zero, so division is defined).
            let x = d.tostype(SType::Csr).unwrap();
            let row = sparrow_core::testing::test_array(&[c], 0.5, 2.0, seed + 1);
            let col = sparrow_core::testing::test_array(&[r, 1], 0.5, 2.0, seed + 2);
            for (vec, out) in [(&row, x.mul(&row).unwrap()), (&col, x.mul(&col).unwrap())] {
                prop_assert_eq!(out.stype(), SType::Csr);
                close(&out, &d.mul(vec).unwrap())?;
                let q = x.div(vec).unwrap();
                prop_assert_eq!(q.stype(), SType::Csr);
                close(&q, &d.div(vec).unwrap())?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn unary_and_scalar((r, c, v) in matrix(5, 6)) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let d = dense(v.clone(), &[r, c]);
            for st in [SType::Csr, SType::RowSparse] {
                let a = d.tostype(st).unwrap();
                let pairs: Vec<(NDArray, NDArray)> = vec![
                    (a.neg().unwrap(), d.neg().unwrap()),
                    (a.abs().unwrap(), d.abs().unwrap()),
                    (a.sign().unwrap(), d.sign().unwrap()),
                    (a.relu().unwrap(), d.relu().unwrap()),
                    (a.square().unwrap(), d.square().unwrap()),
                    (a.abs().unwrap().sqrt().unwrap(), d.abs().unwrap().sqrt().unwrap()),
                    (a.clip(-0.5, 0.7).unwrap(), d.clip(-0.5, 0.7).unwrap()),
                    (a.mul_scalar(-3.0).unwrap(), d.mul_scalar(-3.0).unwrap()),
                    (a.div_scalar(4.0).unwrap(), d.div_scalar(4.0).unwrap()),
                ];
                for (got, want) in pairs {
                    prop_assert_eq!(got.stype(), st);
                    close(&got, &want)?;
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn reductions((r, c, v) in matrix(5, 6)) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let d = dense(v.clone(), &[r, c]);
            let x = d.tostype(SType::Csr).unwrap();
            for keep in [false, true] {
                close(&x.sum(Some(&[0]), keep).unwrap(), &d.sum(Some(&[0]), keep).unwrap())?;
                close(&x.sum(Some(&[1]), keep).unwrap(), &d.sum(Some(&[1]), keep).unwrap())?;
                close(&x.mean(Some(&[-1]), keep).unwrap(), &d.mean(Some(&[-1]), keep).unwrap())?;
            }
            close(&x.sum(None, false).unwrap(), &d.sum(None, false).unwrap())?;
            let rs = d.tostype(SType::RowSparse).unwrap();
            let sq = d.square().unwrap();
            let k1 = square_sum(&rs, Some(1), true).unwrap();
            prop_assert_eq!(k1.stype(), SType::RowSparse);
            close(&k1, &sq.sum(Some(&[1]), true).unwrap())?;
            close(&square_sum(&rs, Some(1), false).unwrap(), &sq.sum(Some(&[1]), false).unwrap())?;
            close(&square_sum(&rs, Some(0), false).unwrap(), &sq.sum(Some(&[0]), false).unwrap())?;
            close(&square_sum(&rs, None, false).unwrap(), &sq.sum(None, false).unwrap())?;
            let nrm = sq.sum(None, false).unwrap().sqrt().unwrap();
            close(&sparse::norm(&rs).unwrap(), &nrm)?;
            close(&sparse::norm(&x).unwrap(), &nrm)?;
            Ok(())
        })?;
    }

    #[test]
    fn slicing_and_joining((r, c, v) in matrix(6, 6), i in 0usize..7, j in 0usize..7) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let d = dense(v.clone(), &[r, c]);
            let x = d.tostype(SType::Csr).unwrap();
            let (lo, hi) = (i.min(j).min(r), i.max(j).min(r));
            let s = x.slice_rows(lo, hi).unwrap();
            s.check_format(true).unwrap();
            close(&s, &dense(v[lo * c..hi * c].to_vec(), &[hi - lo, c]))?;
            if lo < r {
                close(&x.row(lo).unwrap(), &dense(v[lo * c..(lo + 1) * c].to_vec(), &[1, c]))?;
            }
            let (c0, c1) = (i.min(j).min(c), i.max(j).min(c));
            let sc = x.slice_cols(c0, c1).unwrap();
            sc.check_format(true).unwrap();
            let want: Vec<f64> = (0..r).flat_map(|rr| v[rr * c + c0..rr * c + c1].to_vec()).collect();
            close(&sc, &dense(want, &[r, c1 - c0]))?;
            // Concat of two row slices (sharing buffers, with offsets) rebuilds the array.
            let mid = r / 2;
            let cat = concat_rows(&[x.slice_rows(0, mid).unwrap(), x.slice_rows(mid, r).unwrap()]).unwrap();
            cat.check_format(true).unwrap();
            close(&cat, &d)?;
            // Ops on a slice (non-zero offset) agree with the dense slice.
            close(&s.relu().unwrap(), &dense(v[lo * c..hi * c].to_vec(), &[hi - lo, c]).relu().unwrap())?;
            let ids: Vec<i64> = (0..r as i64).rev().chain((0..r as i64).step_by(2)).collect();
            let taken = x.take_rows(&ids).unwrap();
            taken.check_format(true).unwrap();
            let want: Vec<f64> = ids.iter().flat_map(|&k| v[k as usize * c..(k as usize + 1) * c].to_vec()).collect();
            close(&taken, &dense(want, &[ids.len(), c]))?;
            let rs = d.tostype(SType::RowSparse).unwrap();
            let keep: Vec<i64> = (0..r as i64).filter(|k| (k + i as i64) % 2 == 0).collect();
            let kept = rs.retain(&keep).unwrap();
            kept.check_format(true).unwrap();
            let want: Vec<f64> = (0..r).flat_map(|k| if keep.contains(&(k as i64)) { v[k * c..(k + 1) * c].to_vec() } else { vec![0.0; c] }).collect();
            close(&kept, &dense(want, &[r, c]))?;
            Ok(())
        })?;
    }

    #[test]
    fn embedding_matches_gather((r, c, v) in matrix(5, 4).prop_filter("rows", |m| m.0 > 0), n in 0usize..6) {
        sparrow_core::testing::for_each_test_device(|_| -> Result<(), TestCaseError> {
            let table = dense(v.clone(), &[r, c]);
            let ids: Vec<i64> = (0..n).map(|k| ((k * 7 + 3) % r) as i64).collect();
            let out = sparse::embedding(&table, &NDArray::from_vec(ids.clone(), &[n]).unwrap()).unwrap();
            let want: Vec<f64> = ids.iter().flat_map(|&k| v[k as usize * c..(k as usize + 1) * c].to_vec()).collect();
            close(&out, &dense(want, &[n, c]))?;
            Ok(())
        })?;
    }
}

device_test! {
fn single_nonzero_and_empty() {
    // Sparse constructors do not follow the default-device scope: move by hand.
    let x = NDArray::csr_from_parts(vec![2.5f64], vec![3], vec![0, 0, 1, 1], [3, 5])
        .and_then(|x| x.to_device(test_device()))
        .unwrap();
    let w = sparrow_core::testing::test_array(&[5, 2], -1.0, 1.0, 1);
    let d = x.tostype(SType::Dense).unwrap();
    assert_eq!(
        x.dot(&w).unwrap().to_f64_vec(),
        d.dot(&w).unwrap().to_f64_vec()
    );
    let g = sparrow_core::testing::test_array(&[3, 2], -1.0, 1.0, 2);
    let t = x.dot_t(&g, true, false).unwrap();
    assert_eq!(t.row_ids().unwrap(), vec![3]);
    let z = NDArray::zeros_stype(&[4, 6], DType::F64, SType::Csr)
        .and_then(|z| z.to_device(test_device()))
        .unwrap();
    assert_eq!(z.nnz(), 0);
    let zt = z
        .dot_t(
            &sparrow_core::testing::test_array(&[4, 2], -1.0, 1.0, 3),
            true,
            false,
        )
        .unwrap();
    assert_eq!(zt.nnz(), 0);
    assert_eq!(zt.shape(), vec![6, 2]);
    assert_eq!(z.sum(None, false).unwrap().item().unwrap(), 0.0);
}
}

device_test! {
fn f32_csr_products_match_dense_at_simd_widths() {
    // csr^T G -> row_sparse and csr W -> dense in f32 at row lengths where the AVX2 loops run
    // (multiples of 8: single-entry groups, multi-entry groups, 64-column blocks and their
    // tail, an empty csr row) and at one where they do not (5), against the dense products
    // in f64.
    let rows = 12;
    let cols = 40;
    for (n, seed) in [
        (8usize, 1u64),
        (16, 2),
        (64, 3),
        (72, 4),
        (128, 5),
        (136, 7),
        (5, 6),
    ] {
        let dense_x = sparrow_core::testing::test_array(&[rows, cols], -1.0, 1.0, seed);
        // About a sixth of the cells kept, scattered by a multiplicative hash of the cell
        // index: several rows share columns (multi-entry groups), others stay alone
        // (single-entry groups: the scaled copies), some columns are absent.
        let v: Vec<f64> = dense_x
            .to_f64_vec()
            .iter()
            .enumerate()
            .map(|(k, &x)| {
                // splitmix64's finaliser: neighbouring cells get unrelated bits.
                let mut h = (k as u64 + seed * 1000).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                // Row 3 stays empty.
                if (h ^ (h >> 31)).is_multiple_of(6) && k / cols != 3 {
                    x
                } else {
                    0.0
                }
            })
            .collect();
        let col_counts = (0..cols)
            .map(|c| (0..rows).filter(|&r| v[r * cols + c] != 0.0).count())
            .collect::<Vec<_>>();
        assert!(
            col_counts.contains(&1) && col_counts.iter().any(|&c| c > 1),
            "n={n}: the pattern must give single- and multi-entry groups: {col_counts:?}"
        );
        let xd = NDArray::from_vec(v, &[rows, cols]).unwrap();
        let g = sparrow_core::testing::test_array(&[rows, n], -1.0, 1.0, seed + 10);
        let want = xd.dot_t(&g, true, false).unwrap().to_f64_vec();
        let x32 = xd.astype(DType::F32).unwrap().tostype(SType::Csr).unwrap();
        let g32 = g.astype(DType::F32).unwrap();
        let got = sparse::dot_csr_t_dense(&x32, &g32, SType::RowSparse).unwrap();
        assert_eq!(got.stype(), SType::RowSparse);
        let got = got.tostype(SType::Dense).unwrap().to_f64_vec();
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "n={n} element {k}: {a} vs {b}"
            );
        }
        // The forward product csr (rows x cols) . W (cols x n).
        let wt = sparrow_core::testing::test_array(&[cols, n], -1.0, 1.0, seed + 20);
        let want = xd.dot(&wt).unwrap().to_f64_vec();
        let got = x32.dot(&wt.astype(DType::F32).unwrap()).unwrap();
        assert_eq!(got.shape(), vec![rows, n]);
        for (k, (a, b)) in got.to_f64_vec().iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "csr . W, n={n} element {k}: {a} vs {b}"
            );
        }
    }
}
}
