//! Strict storage-type mode (its own test binary: the switch is process-global).

use sparrow_core::sparse;
use sparrow_core::{device_test, testing::test_device, NDArray};

device_test! {
fn strict_mode_rejects_fallback() {
    // Sparse constructors do not follow the default-device scope: move by hand.
    let x = NDArray::csr_from_parts(vec![1.0f64], vec![0], vec![0, 1], [1, 2])
        .and_then(|x| x.to_device(test_device()))
        .unwrap();
    let prev = sparse::set_strict_stype(true);
    let e = x.exp();
    let p = x.pow(&x);
    sparse::set_strict_stype(prev);
    // exp does not preserve zeros and pow on two csr arrays has no kernel: both would
    // densify, which strict mode refuses.
    assert!(e.is_err());
    assert!(p.is_err());
}
}
