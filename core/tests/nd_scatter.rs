//! gather_nd, scatter_nd (dense and row_sparse results) and scatter_set_nd (dense and
//! row_sparse left operands): against element-by-element references on random inputs,
//! finite-difference gradients, and the errors of bad indices.

use proptest::prelude::*;
use sparrow_core::testing::{check_grad_on_devices, for_each_test_device, test_array};
use sparrow_core::{DType, NDArray, SType};

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// Random in-range indices of shape `(m, count)` into `shape` (repeats likely), as values and
/// as an i64 array.
fn indices(shape: &[usize], m: usize, count: usize, seed: u64) -> (Vec<i64>, NDArray) {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = vec![0i64; m * count];
    for k in 0..m {
        for y in 0..count {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v[k * count + y] = (s % shape[k] as u64) as i64;
        }
    }
    let a = NDArray::from_vec(v.clone(), &[m, count]).unwrap();
    (v, a)
}

/// The flat offset of the block position `y` names.
fn block(shape: &[usize], idx: &[i64], m: usize, count: usize, y: usize) -> usize {
    let st = strides(shape);
    (0..m).map(|k| idx[k * count + y] as usize * st[k]).sum()
}

fn close(got: &[f64], want: &[f64], what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len(), "{}: lengths", what);
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        prop_assert!(
            (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
            "{}: element {}: {} vs {}",
            what,
            k,
            a,
            b
        );
    }
    Ok(())
}

/// A shape of 2 or 3 axes and how many of them the indices name.
fn case() -> impl Strategy<Value = (Vec<usize>, usize, usize, u64)> {
    (
        prop::collection::vec(1usize..5, 2..=3),
        0usize..7,
        0u64..1000,
    )
        .prop_flat_map(|(shape, count, seed)| {
            let n = shape.len();
            (Just(shape), 1..=n, Just(count), Just(seed))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn gather_and_scatter_match_element_references((shape, m, count, seed) in case()) {
        for_each_test_device(|_| -> Result<(), TestCaseError> {
            let data = test_array(&shape, -1.0, 1.0, seed);
            let dv = data.to_f64_vec();
            let (iv, ix) = indices(&shape, m, count, seed + 1);
            let bl: usize = shape[m..].iter().product();
            // gather_nd: block y of the result is the block position y names.
            let g = data.gather_nd(&ix).unwrap();
            let mut want_shape = vec![count];
            want_shape.extend_from_slice(&shape[m..]);
            prop_assert_eq!(g.shape(), want_shape.clone());
            let want: Vec<f64> = (0..count)
                .flat_map(|y| {
                    let o = block(&shape, &iv, m, count, y);
                    dv[o..o + bl].to_vec()
                })
                .collect();
            close(&g.to_f64_vec(), &want, "gather_nd")?;
            // scatter_nd: blocks of `vals` summed into zeros where the positions name.
            let vals = test_array(&want_shape, -1.0, 1.0, seed + 2);
            let vv = vals.to_f64_vec();
            let mut sum = vec![0.0; dv.len()];
            let mut set = dv.clone();
            for y in 0..count {
                let o = block(&shape, &iv, m, count, y);
                for t in 0..bl {
                    sum[o + t] += vv[y * bl + t];
                    set[o + t] = vv[y * bl + t];
                }
            }
            let s = NDArray::scatter_nd(&vals, &ix, &shape).unwrap();
            prop_assert_eq!(s.stype(), SType::Dense);
            close(&s.to_f64_vec(), &sum, "scatter_nd")?;
            // The row_sparse result: the rows named, sorted, the same values.
            let r = NDArray::scatter_nd_stype(&vals, &ix, &shape, SType::RowSparse).unwrap();
            prop_assert_eq!(r.stype(), SType::RowSparse);
            r.check_format(true).unwrap();
            let mut rows: Vec<i64> = iv[..count].to_vec();
            rows.sort_unstable();
            rows.dedup();
            prop_assert_eq!(r.row_ids().unwrap(), rows.clone());
            close(&r.to_f64_vec(), &sum, "scatter_nd row_sparse")?;
            // scatter_set_nd: the last write of a position wins, dense and row_sparse lhs.
            let out = data.scatter_set_nd(&vals, &ix).unwrap();
            close(&out.to_f64_vec(), &set, "scatter_set_nd")?;
            let lhs = data.mul(&data.greater_scalar(0.3).unwrap()).unwrap();
            let lv = lhs.to_f64_vec();
            let mut lset = lv.clone();
            for y in 0..count {
                let o = block(&shape, &iv, m, count, y);
                lset[o..o + bl].copy_from_slice(&vv[y * bl..(y + 1) * bl]);
            }
            let lr = lhs.tostype(SType::RowSparse).unwrap();
            let lr_rows = lr.row_ids().unwrap();
            let o = lr.scatter_set_nd(&vals, &ix).unwrap();
            prop_assert_eq!(o.stype(), SType::RowSparse);
            o.check_format(true).unwrap();
            let mut union = lr_rows.clone();
            union.extend_from_slice(&rows);
            union.sort_unstable();
            union.dedup();
            prop_assert_eq!(o.row_ids().unwrap(), union);
            close(&o.to_f64_vec(), &lset, "scatter_set_nd row_sparse")?;
            Ok(())
        })?;
    }
}

#[test]
fn gradients_match_finite_differences() {
    let shape = [4usize, 3, 2];
    for m in 1..=3 {
        // Repeated positions on purpose: scatter_nd sums them, scatter_set_nd keeps the last.
        let (_, ix) = indices(&shape, m, 6, 7 + m as u64);
        let mut vshape = vec![6];
        vshape.extend_from_slice(&shape[m..]);
        let data = test_array(&shape, -1.0, 1.0, 1);
        let vals = test_array(&vshape, -1.0, 1.0, 2);
        let i1 = ix.clone();
        check_grad_on_devices(
            move |v| v[0].gather_nd(&i1.to_device(v[0].device())?),
            std::slice::from_ref(&data),
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
        for stype in [SType::Dense, SType::RowSparse] {
            let i2 = ix.clone();
            check_grad_on_devices(
                move |v| {
                    NDArray::scatter_nd_stype(&v[0], &i2.to_device(v[0].device())?, &shape, stype)
                },
                std::slice::from_ref(&vals),
                1e-6,
                1e-6,
                1e-8,
            )
            .unwrap();
        }
        let i3 = ix.clone();
        check_grad_on_devices(
            move |v| v[0].scatter_set_nd(&v[1], &i3.to_device(v[0].device())?),
            &[data.clone(), vals.clone()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
        // A row_sparse lhs (made from the perturbed dense one inside the function).
        let i4 = ix.clone();
        check_grad_on_devices(
            move |v| {
                v[0].tostype(SType::RowSparse)?
                    .scatter_set_nd(&v[1], &i4.to_device(v[0].device())?)
            },
            &[data.clone(), vals.clone()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
    }
}

#[test]
fn a_row_sparse_head_gradient_stays_sparse_through_scatter_set_nd() {
    // lhs row_sparse, the head gradient the output's own row_sparse array: lhs's gradient is
    // row_sparse over those rows, zero where rhs was written.
    let lhs =
        NDArray::row_sparse_from_parts(vec![1.0f64, 2.0, 3.0, 4.0], vec![0, 3], &[5, 2]).unwrap();
    let rhs = NDArray::from_vec(vec![7.0f64, 8.0], &[1, 2]).unwrap();
    let ix = NDArray::from_vec(vec![3i64], &[1, 1]).unwrap();
    lhs.attach_grad_with(sparrow_core::autograd::GradReq::Write, SType::RowSparse);
    rhs.attach_grad();
    let y = sparrow_core::autograd::record(|| lhs.scatter_set_nd(&rhs, &ix)).unwrap();
    assert_eq!(y.row_ids().unwrap(), vec![0, 3]);
    y.backward_with_grad(&y.detach()).unwrap();
    let gl = lhs.grad().unwrap();
    assert_eq!(gl.stype(), SType::RowSparse);
    assert_eq!(
        gl.to_f64_vec(),
        vec![1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(rhs.grad().unwrap().to_f64_vec(), vec![7.0, 8.0]);
}

#[test]
fn bad_indices_and_shapes_are_errors_naming_the_operator() {
    let data = test_array(&[3, 4], -1.0, 1.0, 1);
    let err = |r: sparrow_core::Result<NDArray>| r.unwrap_err().to_string();
    let ix = |v: Vec<i64>, s: &[usize]| NDArray::from_vec(v, s).unwrap();
    // Out of range, on either axis, and a non-integer float index.
    let e = err(data.gather_nd(&ix(vec![3, 0], &[2, 1])));
    assert!(
        e.contains("gather_nd") && e.contains("index 3 at indices[0, 0]"),
        "{e}"
    );
    let e = err(data.gather_nd(&ix(vec![0, 1, 9, 2], &[2, 2])));
    assert!(e.contains("out of range for axis 1 of length 4"), "{e}");
    let f = NDArray::from_vec(vec![0.5f64], &[1, 1]).unwrap();
    assert!(err(data.gather_nd(&f)).contains("not an integer"));
    // Indices naming more axes than the array has, a 0-d index array, an empty first axis.
    let e = err(data.gather_nd(&ix(vec![0, 0, 0], &[3, 1])));
    assert!(e.contains("needs 1 to 2"), "{e}");
    let e = err(data.gather_nd(&ix(vec![0], &[])));
    assert!(e.contains("at least one dimension"), "{e}");
    assert!(err(data.gather_nd(&ix(vec![], &[0, 2]))).contains("needs 1 to 2"));
    // scatter_nd: data of the wrong shape, out-of-range, csr output, integer data.
    let vals = test_array(&[2, 4], -1.0, 1.0, 2);
    let e = err(NDArray::scatter_nd(
        &vals,
        &ix(vec![0, 1, 2], &[1, 3]),
        &[3, 4],
    ));
    assert!(
        e.contains("scatter_nd") && e.contains("expected [3, 4]"),
        "{e}"
    );
    let e = err(NDArray::scatter_nd(
        &vals,
        &ix(vec![0, 5], &[1, 2]),
        &[3, 4],
    ));
    assert!(e.contains("scatter_nd") && e.contains("index 5"), "{e}");
    let e = err(NDArray::scatter_nd_stype(
        &vals,
        &ix(vec![0, 1], &[1, 2]),
        &[3, 4],
        SType::Csr,
    ));
    assert!(e.contains("not csr"), "{e}");
    let ints = NDArray::from_vec(vec![1i64; 8], &[2, 4]).unwrap();
    let e = err(NDArray::scatter_nd(
        &ints,
        &ix(vec![0, 1], &[1, 2]),
        &[3, 4],
    ));
    assert!(e.contains("scatter_nd"), "{e}");
    // scatter_set_nd: rhs of the wrong shape or dtype, for dense and row_sparse lhs.
    for lhs in [data.clone(), data.tostype(SType::RowSparse).unwrap()] {
        let e = err(lhs.scatter_set_nd(&vals, &ix(vec![0], &[1, 1])));
        assert!(
            e.contains("scatter_set_nd") && e.contains("expected [1, 4]"),
            "{e}"
        );
        let e =
            err(lhs.scatter_set_nd(&vals.astype(DType::F32).unwrap(), &ix(vec![0, 1], &[1, 2])));
        assert!(e.contains("scatter_set_nd"), "{e}");
        let e = err(lhs.scatter_set_nd(&vals, &ix(vec![0, -4], &[1, 2])));
        assert!(e.contains("index -4"), "{e}");
    }
    // Negative indices count from the end, as take does.
    let g = data.gather_nd(&ix(vec![-1, -1], &[2, 1])).unwrap();
    assert_eq!(g.to_f64_vec(), vec![data.to_f64_vec()[11]]);
}

#[test]
fn empty_blocks_and_no_positions() {
    // Blocks of no elements ([3, 0] indexed by its rows) and no positions at all.
    let data = NDArray::zeros(&[2, 0], DType::F64).unwrap();
    let ix = NDArray::from_vec(vec![0i64, 2], &[1, 2]).unwrap();
    for stype in [SType::Dense, SType::RowSparse] {
        let s = NDArray::scatter_nd_stype(&data, &ix, &[3, 0], stype).unwrap();
        assert_eq!((s.shape(), s.stype()), (vec![3, 0], stype));
    }
    let r = NDArray::scatter_nd_stype(&data, &ix, &[3, 0], SType::RowSparse).unwrap();
    assert_eq!(r.row_ids().unwrap(), vec![0, 2]);
    let table = NDArray::zeros(&[3, 0], DType::F64).unwrap();
    assert_eq!(table.gather_nd(&ix).unwrap().shape(), vec![2, 0]);
    let none = NDArray::from_vec(Vec::<i64>::new(), &[1, 0]).unwrap();
    let a = test_array(&[3, 2], -1.0, 1.0, 3);
    assert_eq!(a.gather_nd(&none).unwrap().shape(), vec![0, 2]);
    let vals = NDArray::zeros(&[0, 2], DType::F64).unwrap();
    let s = NDArray::scatter_nd_stype(&vals, &none, &[3, 2], SType::RowSparse).unwrap();
    assert_eq!((s.nnz(), s.shape()), (0, vec![3, 2]));
    assert_eq!(
        a.scatter_set_nd(&vals, &none).unwrap().to_f64_vec(),
        a.to_f64_vec()
    );
    // Gradients through a row_sparse result with its own row_sparse head gradient.
    let d = test_array(&[2, 2], -1.0, 1.0, 4);
    d.attach_grad();
    let y = sparrow_core::autograd::record(|| {
        NDArray::scatter_nd_stype(&d, &ix, &[4, 2], SType::RowSparse)
    })
    .unwrap();
    y.backward_with_grad(&y.detach()).unwrap();
    assert_eq!(d.grad().unwrap().to_f64_vec(), d.to_f64_vec());
}
