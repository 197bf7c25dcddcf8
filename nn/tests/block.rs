//! Block, Sequential, parameter names, initialization and summary.

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::{device_test, DType, Device, NDArray, SType};
use sparrow_nn::{
    init, Activation, Block, Dense, Dropout, Flatten, Identity, Initializer, Lambda, Sequential,
};

fn mlp() -> Sequential {
    let mut inner = Sequential::new();
    inner.add(Dense::new(6).activation("tanh"));
    inner.add(Activation::new("relu").unwrap());
    let mut net = Sequential::new();
    net.add(Dense::new(8).activation("relu"));
    net.add(inner);
    net.add(Flatten);
    net.add(Dense::new(3).in_units(6));
    net
}

#[test]
fn hierarchical_names_and_filters() {
    let net = mlp();
    let p = net.collect_params().unwrap();
    assert_eq!(
        p.names(),
        vec![
            "dense0.weight",
            "dense0.bias",
            "sequential0.dense0.weight",
            "sequential0.dense0.bias",
            "dense1.weight",
            "dense1.bias"
        ]
    );
    assert_eq!(net.collect_params_matching("*.bias").unwrap().len(), 3);
    assert_eq!(
        net.collect_params_matching("sequential0.*").unwrap().len(),
        2
    );
    assert_eq!(
        net.collect_params_matching("dense0.*|dense1.weight")
            .unwrap()
            .names(),
        vec!["dense0.weight", "dense0.bias", "dense1.weight"]
    );
}

device_test! {
fn deferred_shapes_are_inferred_and_bias_starts_at_zero() {
    let net = mlp();
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let p = net.collect_params().unwrap();
    assert!(p.get("dense0.weight").unwrap().data().is_err());
    // dense1 knows its input size: initialized right away, (in_units, units).
    assert_eq!(
        p.get("dense1.weight").unwrap().data().unwrap().shape(),
        vec![6, 3]
    );
    let x = NDArray::ones(&[2, 5], DType::F32).unwrap();
    let y = net.forward(&x).unwrap();
    assert_eq!(y.shape(), vec![2, 3]);
    assert_eq!(
        p.get("dense0.weight").unwrap().data().unwrap().shape(),
        vec![5, 8]
    );
    let b = p
        .get("dense0.bias")
        .unwrap()
        .data()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(b.iter().all(|&v| v == 0.0));
}
}

device_test! {
fn same_seed_same_weights_and_overrides() {
    let build = || {
        init::seed(123);
        let net = mlp();
        net.collect_params()
            .unwrap()
            .get("dense1.weight")
            .unwrap()
            .set_init(Some(Initializer::Constant(0.25)));
        net.initialize(&Initializer::Normal { sigma: 1.0 }, Device::current())
            .unwrap();
        net.forward(&NDArray::ones(&[1, 5], DType::F32).unwrap())
            .unwrap();
        net
    };
    let (a, b) = (build(), build());
    let pa = a.collect_params().unwrap();
    let pb = b.collect_params().unwrap();
    for (n, p) in pa.iter() {
        let q = pb.get(n).unwrap();
        assert_eq!(
            p.data().unwrap().to_vec::<f32>().unwrap(),
            q.data().unwrap().to_vec::<f32>().unwrap(),
            "{n}"
        );
    }
    let w = pa
        .get("dense1.weight")
        .unwrap()
        .data()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(w.iter().all(|&v| v == 0.25));
}
}

device_test! {
fn backward_through_sequential_fills_grads() {
    let net = mlp();
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let x = NDArray::from_vec((0..10).map(|i| i as f32 / 10.0).collect(), &[2, 5]).unwrap();
    let loss = autograd::record(|| net.forward(&x)?.sum_all()).unwrap();
    loss.backward().unwrap();
    for (n, p) in net.collect_params().unwrap().iter() {
        let g = p.grad().unwrap();
        assert_eq!(g.shape(), p.shape(), "{n}");
    }
    let p = net.collect_params().unwrap();
    p.set_grad_req(GradReq::Null);
    assert!(p.get("dense0.weight").unwrap().grad().is_none());
}
}

device_test! {
fn summary_lists_layers_shapes_and_counts() {
    let net = mlp();
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let s = net
        .summary(&NDArray::ones(&[4, 5], DType::F32).unwrap())
        .unwrap();
    assert!(s.contains("sequential.dense0 Dense(5 -> 8, relu)"), "{s}");
    assert!(
        s.contains("sequential.sequential0.dense0 Dense(8 -> 6, tanh)"),
        "{s}"
    );
    assert!(s.contains("[4, 3]"), "{s}");
    // 5*8+8 + 8*6+6 + 6*3+3 = 123 params, 492 bytes.
    assert!(s.contains("Total params: 123 (492 bytes)"), "{s}");
}
}

device_test! {
fn dropout_train_vs_predict_and_lambda_identity() {
    let d = Dropout::new(0.5).unwrap();
    let x = NDArray::ones(&[1000], DType::F32).unwrap();
    let y = autograd::predict_mode(|| d.forward(&x)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0; 1000]);
    let y = autograd::train_mode(|| d.forward(&x))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let zeros = y.iter().filter(|&&v| v == 0.0).count();
    assert!((400..600).contains(&zeros), "{zeros}");
    assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    assert!(Dropout::new(1.0).is_err());
    let l = Lambda::new(|x| x.mul_scalar(3.0));
    assert_eq!(l.forward(&x).unwrap().to_vec::<f32>().unwrap()[0], 3.0);
    assert_eq!(
        Identity.forward(&x).unwrap().to_vec::<f32>().unwrap()[0],
        1.0
    );
    assert!(Activation::new("nope").is_err());
}
}

#[test]
fn add_named_rejects_duplicates_and_dots() {
    let mut s = Sequential::new();
    s.add_named("enc", Dense::new(2)).unwrap();
    assert!(s.add_named("enc", Dense::new(2)).is_err());
    assert!(s.add_named("a.b", Dense::new(2)).is_err());
    assert_eq!(SType::default(), SType::Dense);
}

device_test! {
fn data_for_shape_infers_a_deferred_parameter_once_and_rejects_other_shapes() {
    use sparrow_nn::Parameter;
    let p = Parameter::new("w", &[0, 3]);
    p.initialize(&Initializer::Constant(0.5), None)
        .unwrap();
    // Deferred: the first call infers the shape and creates the weight.
    let a = p.data_for_shape(&[2, 3]).unwrap();
    assert_eq!(a.shape(), vec![2, 3]);
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![0.5; 6]);
    // Later calls hand out the same array.
    assert!(p.data_for_shape(&[2, 3]).unwrap().same_array(&a));
    let err = p.data_for_shape(&[4, 3]).unwrap_err().to_string();
    assert!(err.contains("'w'") && err.contains("[4, 3]"), "{err}");
    // An uninitialized parameter says so.
    let q = Parameter::new("q", &[2]);
    let err = q.data_for_shape(&[2]).unwrap_err().to_string();
    assert!(err.contains("'q'") && err.contains("initialize"), "{err}");

    let view = p.update_view();
    assert!(view.data.unwrap().same_array(&a));
    assert_eq!(view.grad_req, GradReq::Write);
    assert_eq!((view.lr_mult, view.wd_mult), (1.0, 1.0));
    assert!(q.update_view().data.is_none());
}
}
