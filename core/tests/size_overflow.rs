//! Sizes computed from user input are checked: a product past usize is an error naming the
//! operator, never a wrapped size (a broken array) or a panic.

use sparrow_core::{DType, NDArray};

#[test]
fn reshape_to_a_shape_past_usize_is_an_error() {
    let empty = NDArray::zeros(&[0], DType::F32).unwrap();
    let e = empty.reshape(&[1 << 32, 1 << 32, 0]).map(|_| ());
    // 2^64 * 0: the product wraps only if computed unchecked; an empty target is fine.
    assert!(e.is_ok());
    let e = empty.reshape(&[1 << 32, 1 << 32]).unwrap_err().to_string();
    assert!(e.contains("reshape"), "{e}");
    let e = empty
        .reshape_i(&[1 << 32, 1 << 32])
        .unwrap_err()
        .to_string();
    assert!(e.contains("reshape"), "{e}");
}

#[test]
fn repeat_past_usize_is_an_error() {
    let a = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let e = a.repeat(usize::MAX / 2, None).unwrap_err().to_string();
    assert!(e.contains("repeat"), "{e}");
}

#[test]
fn csr_from_coo_with_usize_max_rows_is_an_error() {
    for rows in [usize::MAX, usize::MAX - 1, usize::MAX / 4] {
        let e = NDArray::csr_from_coo::<f32>(&[], &[], &[], [rows, 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("csr_from_coo"), "{e}");
    }
}

#[test]
fn row_sparse_shape_past_usize_is_an_error() {
    let e = NDArray::row_sparse_from_parts::<f32>(vec![], vec![], &[1, 1 << 32, 1 << 32]);
    assert!(e.is_err());
}
