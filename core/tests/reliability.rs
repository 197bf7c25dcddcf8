//! Bad input through safe public functions: an error, never undefined behaviour or a silently
//! wrong result (issue #27).

use std::sync::Arc;

use sparrow_core::{DType, Error, NDArray};

fn is_format_error(r: sparrow_core::Result<NDArray>, needle: &str) {
    match r {
        Err(Error::Format { msg, .. }) => assert!(msg.contains(needle), "{msg}"),
        other => panic!("expected a format error containing {needle:?}, got {other:?}"),
    }
}

/// `csr_unchecked` with an empty indptr, then `dot` with a dense matrix of 8 columns: this
/// segfaulted (the kernel took `indptr.len() - 1` rows). Now the constructor refuses it, and
/// every other part a kernel indexes by.
#[test]
fn csr_unchecked_refuses_parts_kernels_cannot_index() {
    let w = NDArray::from_vec(vec![1f32; 3 * 8], &[3, 8]).unwrap();
    is_format_error(
        NDArray::csr_unchecked(Vec::<f32>::new(), vec![], vec![], [0, 3]),
        "indptr has 0 entries",
    );
    is_format_error(
        NDArray::csr_unchecked(vec![1f32], vec![0], vec![], [2, 3]),
        "indptr has 0 entries",
    );
    is_format_error(
        NDArray::csr_unchecked(vec![1f32, 2.], vec![0, 1], vec![0, 2, 1], [2, 3]),
        "non-decreasing",
    );
    is_format_error(
        NDArray::csr_unchecked(vec![1f32], vec![3], vec![0, 1, 1], [2, 3]),
        "out of range",
    );
    is_format_error(
        NDArray::csr_unchecked(vec![1f32], vec![-7], vec![0, 0, 1], [2, 3]),
        "row 1: column index -7",
    );
    is_format_error(
        NDArray::csr_unchecked(vec![1f32], vec![0, 1], vec![0, 2, 2], [2, 3]),
        "1 values but indices has 2",
    );
    is_format_error(
        NDArray::csr_unchecked(vec![1f32], vec![0], vec![0, 1], [usize::MAX, 3]),
        "indptr has 2 entries",
    );
    // Unsorted columns are still accepted (the one check `unchecked` skips), and the product
    // is computed within bounds.
    let x = NDArray::csr_unchecked(vec![1f32, 2.], vec![2, 0], vec![0, 2], [1, 3]).unwrap();
    assert_eq!(x.dot(&w).unwrap().to_vec::<f32>().unwrap(), vec![3.0; 8]);
    // A valid empty batch multiplies to an empty result.
    let e = NDArray::csr_unchecked(Vec::<f32>::new(), vec![], vec![0], [0, 3]).unwrap();
    assert_eq!(e.dot(&w).unwrap().shape(), vec![0, 8]);
}

/// `csr_from_shared` without the full check used to check lengths and end points only: a
/// column id past the matrix reached the products' gathers.
#[test]
fn csr_from_shared_checks_columns_and_indptr_order_even_without_full() {
    let r = NDArray::csr_from_shared(
        Arc::new(vec![1f32, 2.]),
        Arc::new(vec![0, 9]),
        Arc::new(vec![0, 1, 2]),
        [2, 3],
        false,
    );
    is_format_error(r, "row 1: column index 9 out of range");
    let r = NDArray::csr_from_shared(
        Arc::new(vec![1f32, 2.]),
        Arc::new(vec![0, 1]),
        Arc::new(vec![0, 2, 1, 2]),
        [3, 3],
        false,
    );
    is_format_error(r, "non-decreasing");
}

/// row_sparse shapes whose element count does not fit a usize are refused (the product
/// wrapped to a row length of 0 in release builds).
#[test]
fn row_sparse_shapes_that_overflow_are_refused() {
    is_format_error(
        NDArray::row_sparse_from_parts(Vec::<f32>::new(), vec![], &[1, 1 << 32, 1 << 32]),
        "more elements than memory",
    );
    is_format_error(
        NDArray::row_sparse_from_parts(Vec::<f32>::new(), vec![], &[1 << 40, 1 << 30]),
        "more elements than memory",
    );
}

/// Float indices that are not integers: 2.9 took row 2 and NaN row 0, silently.
#[test]
fn take_refuses_float_indices_that_are_not_integers() {
    let a = NDArray::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[3, 2]).unwrap();
    for bad in [2.9f32, f32::NAN, f32::INFINITY, -0.5, 1e30] {
        let i = NDArray::from_vec(vec![0f32, bad], &[2]).unwrap();
        match a.take(&i, 0) {
            Err(Error::Index { msg, .. }) => {
                assert!(
                    msg.contains("not an integer") || msg.contains("out of range"),
                    "{msg}"
                )
            }
            other => panic!("take with index {bad}: expected an index error, got {other:?}"),
        }
    }
    let i = NDArray::from_vec(vec![2.9f64], &[1]).unwrap();
    assert!(a.take(&i, 0).is_err());
    assert!(a
        .index_copy(
            &NDArray::from_vec(vec![0.5f32], &[1]).unwrap(),
            &NDArray::zeros(&[1, 2], DType::F32).unwrap()
        )
        .is_err());
    assert!(NDArray::from_vec(vec![f32::NAN], &[1])
        .unwrap()
        .one_hot(3, 1.0, 0.0, DType::F32)
        .is_err());
    // Integral floats (and negative ones, counted from the end) still work.
    let i = NDArray::from_vec(vec![2f32, -3.0], &[2]).unwrap();
    assert_eq!(
        a.take(&i, 0).unwrap().to_vec::<f32>().unwrap(),
        vec![5., 6., 1., 2.]
    );
}
