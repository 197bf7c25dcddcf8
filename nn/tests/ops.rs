//! nn's fused operators against core's general ones, and their gradients.

use sparrow_core::{autograd, testing::check_grad, testing::test_array, NDArray, SType};
use sparrow_nn::ops::bias_add;

#[test]
fn bias_add_matches_broadcast_add_and_its_gradient_checks() {
    for (rows, units, seed) in [(4, 3, 1), (1, 7, 2), (9, 1, 3), (0, 5, 4), (10, 128, 5)] {
        let y = test_array(&[rows, units], -2.0, 2.0, seed);
        let b = test_array(&[units], -1.0, 1.0, seed + 100);
        let fused = bias_add(&y, &b)
            .unwrap()
            .expect("dense 2-D + 1-D is the fused case");
        assert_eq!(fused.shape(), vec![rows, units]);
        assert_eq!(fused.to_f64_vec(), y.add(&b).unwrap().to_f64_vec());
        if rows > 0 {
            check_grad(
                |xs| Ok(bias_add(&xs[0], &xs[1])?.unwrap()),
                &[y.clone(), b.clone()],
                1e-6,
                1e-6,
                1e-9,
            )
            .unwrap();
        }
    }
}

#[test]
fn bias_add_gradients_equal_the_broadcast_adds() {
    let y = test_array(&[6, 4], -2.0, 2.0, 7);
    let b = test_array(&[4], -1.0, 1.0, 8);
    let grads = |fused: bool| {
        let (y, b) = (y.copy(), b.copy());
        y.attach_grad();
        b.attach_grad();
        let out = autograd::record(|| {
            let s = if fused {
                bias_add(&y, &b)?.unwrap()
            } else {
                y.add(&b)?
            };
            s.mul(&s)
        })
        .unwrap();
        out.backward().unwrap();
        (
            y.grad().unwrap().to_f64_vec(),
            b.grad().unwrap().to_f64_vec(),
        )
    };
    assert_eq!(grads(true), grads(false));
}

#[test]
fn bias_add_declines_other_layouts() {
    let y = test_array(&[3, 4], -1.0, 1.0, 9);
    // Wrong bias length, 2-D bias, 1-D input, sparse input, dtype mismatch: the caller falls
    // back to the general broadcast add.
    assert!(bias_add(&y, &test_array(&[3], -1.0, 1.0, 1))
        .unwrap()
        .is_none());
    assert!(bias_add(&y, &test_array(&[1, 4], -1.0, 1.0, 1))
        .unwrap()
        .is_none());
    assert!(bias_add(
        &test_array(&[4], -1.0, 1.0, 1),
        &test_array(&[4], -1.0, 1.0, 2)
    )
    .unwrap()
    .is_none());
    let csr = y.tostype(SType::Csr).unwrap();
    assert!(bias_add(&csr, &test_array(&[4], -1.0, 1.0, 1))
        .unwrap()
        .is_none());
    let b32 = NDArray::from_vec(vec![1.0f32; 4], &[4]).unwrap();
    assert!(bias_add(&y, &b32).unwrap().is_none());
}
