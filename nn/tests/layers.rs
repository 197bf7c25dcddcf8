//! Layers: gradient checks through each layer, the sparse Dense paths, embeddings, norms.

mod util;

use sparrow_core::{
    autograd, device_test, sparse, testing::test_array, DType, Device, NDArray, SType,
};
use sparrow_nn::{BatchNorm, Block, Dense, Embedding, Initializer, LayerNorm, SparseEmbedding};
use util::{check_input_grad, check_param_grads};

fn init(b: &dyn Block) {
    b.initialize(&Initializer::Normal { sigma: 0.5 }, Device::current())
        .unwrap();
}

/// A small csr batch (f64) and its dense equivalent.
fn csr_batch() -> (NDArray, NDArray) {
    let mut dense = vec![0.0f64; 3 * 7];
    for (r, c, v) in [
        (0, 1, 0.5),
        (0, 4, -1.0),
        (1, 4, 2.0),
        (2, 0, 1.5),
        (2, 6, -0.5),
    ] {
        dense[r * 7 + c] = v;
    }
    let d = NDArray::from_vec(dense, &[3, 7]).unwrap();
    // cast_storage is an operator: the csr batch is made where `d` is, the device under test.
    (sparse::cast_storage(&d, SType::Csr).unwrap(), d)
}

device_test! {
fn dense_gradients_dense_input() {
    let x = test_array(&[3, 2, 2], -1.0, 1.0, 11);
    for layer in [
        Dense::new(5).dtype(DType::F64).activation("tanh"),
        Dense::new(5).dtype(DType::F64).use_bias(false),
        Dense::new(5)
            .dtype(DType::F64)
            .grad_stype(SType::RowSparse)
            .activation("sigmoid"),
    ] {
        init(&layer);
        check_param_grads(&layer, &x, 1e-6, 1e-6);
        check_input_grad(&layer, &x);
    }
    // flatten = false applies to the last axis.
    let nf = Dense::new(3).dtype(DType::F64).flatten(false);
    init(&nf);
    assert_eq!(
        autograd::pause(|| nf.forward(&x)).unwrap().shape(),
        vec![3, 2, 3]
    );
    check_param_grads(&nf, &x, 1e-6, 1e-6);
}
}

device_test! {
fn dense_csr_input_matches_dense_and_grads_are_row_sparse() {
    let (xc, xd) = csr_batch();
    // Gluon layout: dense gradient computed from the non-zeros.
    let std = Dense::new(4).dtype(DType::F64);
    init(&std);
    let yc = autograd::pause(|| std.forward(&xc)).unwrap().to_f64_vec();
    let yd = autograd::pause(|| std.forward(&xd)).unwrap().to_f64_vec();
    for (a, b) in yc.iter().zip(&yd) {
        assert!((a - b).abs() < 1e-12);
    }
    check_param_grads(&std, &xc, 1e-6, 1e-6);
    assert_eq!(std.weight().grad().unwrap().stype(), SType::Dense);

    // row_sparse layout: weight (in, out); the gradient holds only the used features 0, 1, 4, 6.
    let rs = Dense::new(4).dtype(DType::F64).grad_stype(SType::RowSparse);
    init(&rs);
    let yc = autograd::pause(|| rs.forward(&xc)).unwrap().to_f64_vec();
    assert_eq!(rs.weight().shape(), vec![7, 4]);
    let yd = autograd::pause(|| rs.forward(&xd)).unwrap().to_f64_vec();
    for (a, b) in yc.iter().zip(&yd) {
        assert!((a - b).abs() < 1e-12);
    }
    check_param_grads(&rs, &xc, 1e-6, 1e-6);
    let g = rs.weight().grad().unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    assert_eq!(g.row_ids().unwrap(), vec![0, 1, 4, 6]);
}
}

device_test! {
fn embedding_gradients() {
    let ids = NDArray::from_vec(vec![3.0f64, 0.0, 3.0, 5.0], &[2, 2]).unwrap();
    let e = Embedding::with_options(6, 3, false, DType::F64);
    init(&e);
    assert_eq!(
        autograd::pause(|| e.forward(&ids)).unwrap().shape(),
        vec![2, 2, 3]
    );
    check_param_grads(&e, &ids, 1e-6, 1e-6);
    assert_eq!(e.weight().grad().unwrap().stype(), SType::Dense);
    let se = Embedding::with_options(6, 3, true, DType::F64);
    init(&se);
    check_param_grads(&se, &ids, 1e-6, 1e-6);
    let g = se.weight().grad().unwrap();
    assert_eq!(g.row_ids().unwrap(), vec![0, 3, 5]);
    let sp = SparseEmbedding::new(10, 2);
    init(&sp);
    assert_eq!(sp.weight().stype(), SType::RowSparse);
    assert_eq!(sp.weight().grad_stype(), SType::RowSparse);
    let bad = NDArray::from_vec(vec![10.0f32], &[1]).unwrap();
    assert!(sp.forward(&bad).is_err());
}
}

device_test! {
fn norm_layers_gradients_and_modes() {
    let x = test_array(&[4, 3, 2], -1.0, 2.0, 21);
    let bn = BatchNorm::with_options(1, 0.9, 1e-5, 0, DType::F64);
    init(&bn);
    check_param_grads(&bn, &x, 1e-6, 1e-5);
    check_input_grad(&bn, &x);
    // Training normalizes each channel to mean 0 / variance ~1 and moves the running stats.
    let y = autograd::train_mode(|| bn.forward(&x)).unwrap();
    let m = y.mean(Some(&[0, 2]), false).unwrap().to_f64_vec();
    assert!(m.iter().all(|v| v.abs() < 1e-12), "{m:?}");
    let p = bn.collect_params().unwrap();
    let rm = p.get("running_mean").unwrap().data().unwrap().to_f64_vec();
    assert!(rm.iter().any(|v| v.abs() > 1e-3));
    assert!(p.get("running_mean").unwrap().grad().is_none());
    // Predict mode uses the running statistics: output differs from the training output.
    let yp = autograd::pause(|| bn.forward(&x)).unwrap().to_f64_vec();
    assert!(yp
        .iter()
        .zip(y.to_f64_vec())
        .any(|(a, b)| (a - b).abs() > 1e-3));

    // One training step from fresh statistics (mean 0, var 1) with momentum 0.9: running =
    // 0.9 * running + 0.1 * batch statistic, per channel.
    let bn = BatchNorm::with_options(1, 0.9, 1e-5, 0, DType::F64);
    init(&bn);
    autograd::train_mode(|| bn.forward(&x)).unwrap();
    let p = bn.collect_params().unwrap();
    let bm = x.mean(Some(&[0, 2]), false).unwrap();
    let bv = x
        .sub(&x.mean(Some(&[0, 2]), true).unwrap())
        .unwrap()
        .square()
        .unwrap()
        .mean(Some(&[0, 2]), false)
        .unwrap();
    let rm = p.get("running_mean").unwrap().data().unwrap().to_f64_vec();
    let rv = p.get("running_var").unwrap().data().unwrap().to_f64_vec();
    for ((r, b), (s, v)) in rm.iter().zip(bm.to_f64_vec()).zip(rv.iter().zip(bv.to_f64_vec())) {
        assert!((r - 0.1 * b).abs() < 1e-12, "running mean {r} vs batch mean {b}");
        assert!((s - (0.9 + 0.1 * v)).abs() < 1e-12, "running var {s} vs batch var {v}");
    }

    let ln = LayerNorm::with_options(-1, 1e-5, 0, DType::F64);
    init(&ln);
    check_param_grads(&ln, &x, 1e-6, 1e-5);
    check_input_grad(&ln, &x);
}
}

device_test! {
fn prelu_learns_its_slopes_per_channel_or_shared() {
    use sparrow_nn::PReLU;
    // Values: x where positive, alpha x elsewhere (alpha 0.25 by default).
    let p = PReLU::new().dtype(DType::F64);
    p.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let x = NDArray::from_vec(vec![-2.0f64, 3.0, 0.0, -0.5], &[2, 2])
        .and_then(|x| x.to_device(Device::current()))
        .unwrap();
    assert_eq!(p.forward(&x).unwrap().to_f64_vec(), [-0.5, 3.0, 0.0, -0.125]);
    // Gradients of the input and of the slopes, shared and one per channel of axis 1.
    let x = test_array(&[3, 4, 2], -1.5, 1.5, 32);
    for prelu in [PReLU::new(), PReLU::with_channels(4)] {
        let prelu = prelu
            .dtype(DType::F64)
            .alpha_initializer(Initializer::Uniform { scale: 0.5 });
        init(&prelu);
        check_param_grads(&prelu, &x, 1e-6, 1e-6);
        check_input_grad(&prelu, &x);
    }
    // An input without the channels on axis 1 is an error naming the shapes.
    let p4 = PReLU::with_channels(4).dtype(DType::F64);
    init(&p4);
    let e = p4.forward(&test_array(&[4, 3], -1.0, 1.0, 33)).unwrap_err().to_string();
    assert!(e.contains("[4, 3]") && e.contains("4 channels"), "{e}");
}
}

#[test]
fn activation_layers_refuse_bad_parameters() {
    use sparrow_nn::{Activation, Swish, ELU, GELU};
    for e in [
        ELU::new(f64::NAN).unwrap_err().to_string(),
        Swish::new(f64::INFINITY).unwrap_err().to_string(),
        GELU::with_approximation("sigmoid").unwrap_err().to_string(),
        Activation::new("gelu_erf").unwrap_err().to_string(),
    ] {
        assert!(
            e.contains("alpha")
                || e.contains("beta")
                || e.contains("sigmoid")
                || e.contains("gelu_erf"),
            "{e}"
        );
    }
}

device_test! {
fn parameter_free_layers_gradients() {
    use sparrow_nn::{Activation, Dropout, Flatten, Identity, Lambda, LeakyReLU};
    let x = test_array(&[3, 2, 2], -1.5, 1.5, 31);
    for a in ["relu", "sigmoid", "tanh", "softrelu", "softsign"] {
        check_input_grad(&Activation::new(a).unwrap(), &x);
    }
    check_input_grad(&LeakyReLU::new(0.1), &x);
    for a in ["elu", "selu", "gelu", "gelu_tanh", "silu", "swish", "log_sigmoid", "mish"] {
        check_input_grad(&Activation::new(a).unwrap(), &x);
    }
    check_input_grad(&sparrow_nn::ELU::new(0.6).unwrap(), &x);
    check_input_grad(&sparrow_nn::Swish::new(0.8).unwrap(), &x);
    check_input_grad(&sparrow_nn::GELU::with_approximation("tanh").unwrap(), &x);
    check_input_grad(&Flatten, &x);
    check_input_grad(&Identity, &x);
    check_input_grad(&Lambda::new(|x| x.square()?.mul_scalar(0.5)), &x);
    // Dropout in training: the gradient of sum(dropout(x)) is the mask the forward used.
    let d = Dropout::new(0.3).unwrap();
    let ones = NDArray::ones(&[200], DType::F64).unwrap();
    ones.attach_grad();
    let y = autograd::record(|| d.forward(&ones)).unwrap();
    let yv = y.to_f64_vec();
    autograd::record(|| y.sum_all())
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(ones.grad().unwrap().to_f64_vec(), yv);
    assert!(yv.contains(&0.0) && yv.iter().any(|&v| (v - 1.0 / 0.7).abs() < 1e-12));
}
}
