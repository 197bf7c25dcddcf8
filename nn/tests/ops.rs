//! Core's fused operators (as nn layers use them) against core's general ones, and their gradients.

use sparrow_core::ops::fused::bias_add;
use sparrow_core::{
    autograd, device_test, testing::check_grad_on_devices, testing::test_array, DType, NDArray,
    SType,
};

device_test! {
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
            check_grad_on_devices(
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
}

/// Gradients of fresh copies of `y` and `b` after `out = f(y, b)` and a backward with head
/// gradient `head` (ones when `None`).
fn grads_of(
    y: &NDArray,
    b: &NDArray,
    head: Option<&NDArray>,
    f: impl Fn(&NDArray, &NDArray) -> sparrow_core::Result<NDArray>,
) -> (Vec<f64>, Vec<f64>) {
    let (y, b) = (y.copy(), b.copy());
    y.attach_grad();
    b.attach_grad();
    let out = autograd::record(|| f(&y, &b)).unwrap();
    match head {
        Some(h) => out.backward_with_grad(h).unwrap(),
        None => out.backward().unwrap(),
    }
    (
        y.grad().unwrap().to_f64_vec(),
        b.grad().unwrap().to_f64_vec(),
    )
}

device_test! {
fn bias_add_gradients_equal_the_broadcast_adds() {
    let y = test_array(&[6, 4], -2.0, 2.0, 7);
    let b = test_array(&[4], -1.0, 1.0, 8);
    let fused = grads_of(&y, &b, None, |y, b| {
        let s = bias_add(y, b)?.unwrap();
        s.mul(&s)
    });
    let composed = grads_of(&y, &b, None, |y, b| {
        let s = y.add(b)?;
        s.mul(&s)
    });
    assert_eq!(fused, composed);
}
}

device_test! {
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
}

device_test! {
fn bias_act_matches_the_composed_ops_and_its_gradient_checks() {
    use sparrow_core::ops::fused::{bias_act, FusedAct};
    let acts = [
        (FusedAct::Sigmoid, "sigmoid"),
        (FusedAct::Tanh, "tanh"),
        (FusedAct::Relu, "relu"),
    ];
    for (act, name) in acts {
        // Rows of >= 32 units take the one-pass bias + activation path, narrower ones add the
        // bias first; both must equal the composed ops exactly, in f64 and in f32.
        for (rows, units, seed) in [
            (4, 3, 11),
            (1, 7, 12),
            (9, 1, 13),
            (0, 5, 14),
            (10, 16, 15),
            (3, 40, 16),
            (2, 128, 17),
        ] {
            let y = test_array(&[rows, units], -2.0, 2.0, seed);
            let b = test_array(&[units], -1.0, 1.0, seed + 100);
            let fused = bias_act(&y, &b, Some(act)).unwrap().expect("fused case");
            let composed = sparrow_nn::layers::apply_activation(name, &y.add(&b).unwrap()).unwrap();
            assert_eq!(fused.shape(), vec![rows, units]);
            // Same scalar functions on the same sums: identical values.
            assert_eq!(fused.to_f64_vec(), composed.to_f64_vec(), "{name}");
            let (y32, b32) = (y.astype(DType::F32).unwrap(), b.astype(DType::F32).unwrap());
            let fused32 = bias_act(&y32, &b32, Some(act))
                .unwrap()
                .expect("fused case");
            let composed32 =
                sparrow_nn::layers::apply_activation(name, &y32.add(&b32).unwrap()).unwrap();
            assert_eq!(
                fused32.to_f64_vec(),
                composed32.to_f64_vec(),
                "{name} f32 {units}"
            );
            if rows > 0 {
                check_grad_on_devices(
                    |xs| Ok(bias_act(&xs[0], &xs[1], Some(act))?.unwrap()),
                    &[y.clone(), b.clone()],
                    1e-6,
                    1e-6,
                    1e-9,
                )
                .unwrap_or_else(|e| panic!("{name} {rows}x{units}: {e}"));
            }
        }
    }
}
}

/// `g * (y (1 - y))` in the fused backward against `(g y)(1 - y)` in the composed one: equal
/// to rounding.
fn assert_close_grads(f: (Vec<f64>, Vec<f64>), c: (Vec<f64>, Vec<f64>)) {
    for (f, c) in f.0.iter().chain(&f.1).zip(c.0.iter().chain(&c.1)) {
        assert!((f - c).abs() <= 1e-14 * (1.0 + c.abs()), "{f} vs {c}");
    }
}

device_test! {
fn bias_act_gradients_equal_the_composed_ops() {
    use sparrow_core::ops::fused::{bias_act, FusedAct};
    let y = test_array(&[6, 4], -2.0, 2.0, 17);
    let b = test_array(&[4], -1.0, 1.0, 18);
    let fused = grads_of(&y, &b, None, |y, b| {
        let s = bias_act(y, b, Some(FusedAct::Sigmoid))?.unwrap();
        s.mul(&s)
    });
    let composed = grads_of(&y, &b, None, |y, b| {
        let s = y.add(b)?.sigmoid()?;
        s.mul(&s)
    });
    assert_close_grads(fused, composed);
}
}

device_test! {
fn bias_act_takes_a_row_sparse_head_gradient() {
    use sparrow_core::ops::fused::{bias_act, FusedAct};
    let y = test_array(&[6, 4], -2.0, 2.0, 19);
    let b = test_array(&[4], -1.0, 1.0, 20);
    // Rows 1 and 4 only: the backward takes the general multiply, not the fused pass.
    let mut h = vec![0.0f64; 24];
    for (i, v) in h.iter_mut().enumerate() {
        if i / 4 == 1 || i / 4 == 4 {
            *v = 0.25 * i as f64 - 2.0;
        }
    }
    let head = NDArray::from_vec(h, &[6, 4])
        .unwrap()
        .tostype(SType::RowSparse)
        .unwrap();
    for (act, name) in [
        (FusedAct::Sigmoid, "sigmoid"),
        (FusedAct::Tanh, "tanh"),
        (FusedAct::Relu, "relu"),
    ] {
        let fused = grads_of(&y, &b, Some(&head), |y, b| {
            Ok(bias_act(y, b, Some(act))?.unwrap())
        });
        let composed = grads_of(&y, &b, Some(&head), |y, b| {
            sparrow_nn::layers::apply_activation(name, &y.add(b)?)
        });
        assert_close_grads(fused, composed);
    }
}
}

device_test! {
fn dense_with_activation_equals_dense_then_activation() {
    use sparrow_nn::layers::{Activation, Dense};
    use sparrow_nn::{Block, Initializer, Sequential};
    for act in ["sigmoid", "tanh", "relu", "softrelu"] {
        let fused = Dense::new(5).in_units(6).activation(act);
        fused
            .initialize(
                &Initializer::Uniform { scale: 0.5 },
                sparrow_core::Device::current(),
            )
            .unwrap();
        let plain = Dense::new(5).in_units(6);
        plain
            .initialize(
                &Initializer::Uniform { scale: 0.5 },
                sparrow_core::Device::current(),
            )
            .unwrap();
        // Same weights and a non-zero bias in both.
        plain
            .weight()
            .set_data(&fused.weight().data().unwrap())
            .unwrap();
        let bias = test_array(&[5], -0.5, 0.5, 21)
            .astype(sparrow_core::DType::F32)
            .unwrap();
        fused.bias().unwrap().set_data(&bias).unwrap();
        plain.bias().unwrap().set_data(&bias).unwrap();
        let mut seq = Sequential::new();
        seq.add(plain);
        seq.add(Activation::new(act).unwrap());
        let x = test_array(&[3, 6], -1.0, 1.0, 22)
            .astype(sparrow_core::DType::F32)
            .unwrap();
        let a = fused.forward(&x).unwrap().to_f64_vec();
        let c = seq.forward(&x).unwrap().to_f64_vec();
        for (p, q) in a.iter().zip(&c) {
            assert!((p - q).abs() <= 1e-6, "{act}: {p} vs {q}");
        }
    }
}
}

device_test! {
fn bias_act_on_a_large_batch_matches_the_composed_ops() {
    use sparrow_core::ops::fused::{bias_act, FusedAct};
    // 300 x 256 = 76,800 elements: above core's parallel threshold, so the activation runs
    // in parallel chunks.
    let y = test_array(&[300, 256], -3.0, 3.0, 31);
    let b = test_array(&[256], -1.0, 1.0, 32);
    let fused = bias_act(&y, &b, Some(FusedAct::Sigmoid)).unwrap().unwrap();
    let composed = y.add(&b).unwrap().sigmoid().unwrap();
    assert_eq!(fused.to_f64_vec(), composed.to_f64_vec());
}
}

device_test! {
fn dense_records_one_node_per_layer() {
    use sparrow_nn::layers::Dense;
    use sparrow_nn::{Block, Initializer};
    // The bias/activation op takes over the product's node: the layer's output node has the
    // product's inputs (x, weight) and the bias, and nothing else is recorded in between.
    let layer = Dense::new(4).in_units(3).activation("sigmoid");
    layer
        .initialize(
            &Initializer::Uniform { scale: 0.5 },
            sparrow_core::Device::current(),
        )
        .unwrap();
    let x = test_array(&[2, 3], -1.0, 1.0, 41)
        .astype(sparrow_core::DType::F32)
        .unwrap();
    let y = autograd::record(|| layer.forward(&x)).unwrap();
    let node = y.node().expect("recorded");
    assert_eq!(node.op, "dense_bias_act");
    assert_eq!(node.inputs.len(), 3);
    assert!(node.inputs[1].same_array(&layer.weight().data().unwrap()));
    assert!(node.inputs[2].same_array(&layer.bias().unwrap().data().unwrap()));
    assert!(
        node.inputs.iter().all(|i| i.node().is_none()),
        "no inner node left"
    );
    // Without recording nothing is attached.
    let z = autograd::pause(|| layer.forward(&x)).unwrap();
    assert!(z.node().is_none());
}
}
