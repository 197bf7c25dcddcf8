//! Convolution and pooling layers: gradient checks through each layer (parameters and input),
//! deferred in_channels, output shapes, names in a Sequential, and rank / channel errors.

mod util;

use sparrow_core::ops::ConvParams;
use sparrow_core::{autograd, device_test, testing::test_array, DType, Device, NDArray};
use sparrow_nn::{
    AvgPool1D, AvgPool2D, AvgPool3D, Block, Conv1D, Conv1DTranspose, Conv2D, Conv2DTranspose,
    Conv3D, Conv3DTranspose, Dense, Flatten, GlobalAvgPool1D, GlobalAvgPool2D, GlobalAvgPool3D,
    GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPool3D, Initializer, MaxPool1D, MaxPool2D,
    MaxPool3D, Sequential,
};
use util::{check_input_grad, check_param_grads};

fn init(b: &dyn Block) {
    b.initialize(&Initializer::Normal { sigma: 0.5 }, Device::current())
        .unwrap();
}

device_test! {
fn conv_layers_gradients_and_shapes() {
    let x1 = test_array(&[2, 4, 9], -1.0, 1.0, 1);
    let x2 = test_array(&[2, 4, 6, 5], -1.0, 1.0, 2);
    let x3 = test_array(&[1, 2, 4, 3, 4], -1.0, 1.0, 3);
    let cases: Vec<(Box<dyn Block>, &NDArray, Vec<usize>)> = vec![
        (Box::new(Conv1D::new(3, &[3]).strides(&[2]).padding(&[1]).dtype(DType::F64)), &x1, vec![2, 3, 5]),
        (Box::new(Conv2D::new(6, &[3, 2]).padding(&[1, 0]).dilation(&[2, 1]).groups(2)
            .activation("tanh").dtype(DType::F64)), &x2, vec![2, 6, 4, 4]),
        (Box::new(Conv2D::new(4, &[3]).padding(&[1]).groups(4).use_bias(false).dtype(DType::F64)),
            &x2, vec![2, 4, 6, 5]),
        (Box::new(Conv3D::new(2, &[2]).padding(&[1]).dtype(DType::F64)), &x3, vec![1, 2, 5, 4, 5]),
        (Box::new(Conv1DTranspose::new(2, &[3]).strides(&[2]).dtype(DType::F64)), &x1, vec![2, 2, 19]),
        (Box::new(Conv2DTranspose::new(3, &[3]).strides(&[2]).padding(&[1]).output_padding(&[1])
            .dtype(DType::F64)), &x2, vec![2, 3, 12, 10]),
        (Box::new(Conv2DTranspose::new(4, &[2]).groups(2).dtype(DType::F64)), &x2, vec![2, 4, 7, 6]),
        (Box::new(Conv3DTranspose::new(2, &[2]).strides(&[1, 2, 1]).dtype(DType::F64)), &x3,
            vec![1, 2, 5, 6, 5]),
    ];
    for (layer, x, shape) in &cases {
        init(layer.as_ref());
        let y = autograd::pause(|| layer.forward(x)).unwrap();
        assert_eq!(y.shape(), *shape, "{}", layer.describe());
        check_param_grads(layer.as_ref(), x, 1e-6, 1e-6);
        check_input_grad(layer.as_ref(), x);
    }
}
}

device_test! {
fn pool_layers_gradients_and_shapes() {
    let x1 = test_array(&[2, 3, 9], -1.0, 1.0, 4);
    let x2 = test_array(&[2, 3, 7, 6], -1.0, 1.0, 5);
    let x3 = test_array(&[1, 2, 4, 5, 4], -1.0, 1.0, 6);
    let cases: Vec<(Box<dyn Block>, &NDArray, Vec<usize>)> = vec![
        (Box::new(MaxPool1D::new(&[2])), &x1, vec![2, 3, 4]),
        (Box::new(MaxPool2D::new(&[3]).strides(&[2]).padding(&[1]).ceil_mode(true)), &x2, vec![2, 3, 4, 4]),
        (Box::new(MaxPool3D::new(&[2, 2, 1])), &x3, vec![1, 2, 2, 2, 4]),
        (Box::new(AvgPool1D::new(&[3]).strides(&[2]).padding(&[1]).count_include_pad(false)), &x1, vec![2, 3, 5]),
        (Box::new(AvgPool2D::new(&[2]).ceil_mode(true)), &x2, vec![2, 3, 4, 3]),
        (Box::new(AvgPool3D::new(&[2]).padding(&[1])), &x3, vec![1, 2, 3, 3, 3]),
        (Box::new(GlobalMaxPool1D::new()), &x1, vec![2, 3, 1]),
        (Box::new(GlobalMaxPool2D::new()), &x2, vec![2, 3, 1, 1]),
        (Box::new(GlobalMaxPool3D::new()), &x3, vec![1, 2, 1, 1, 1]),
        (Box::new(GlobalAvgPool1D::new()), &x1, vec![2, 3, 1]),
        (Box::new(GlobalAvgPool2D::new()), &x2, vec![2, 3, 1, 1]),
        (Box::new(GlobalAvgPool3D::new()), &x3, vec![1, 2, 1, 1, 1]),
    ];
    for (layer, x, shape) in &cases {
        let y = layer.forward(x).unwrap();
        assert_eq!(y.shape(), *shape, "{}", layer.describe());
        assert!(layer.params().is_empty());
        check_input_grad(layer.as_ref(), x);
    }
    // A 2-D pooling refuses 1-D data instead of pooling it.
    assert!(MaxPool2D::new(&[2]).forward(&x1).is_err());
    assert!(GlobalAvgPool1D::new().forward(&x2).is_err());
}
}

device_test! {
fn conv_layer_defers_in_channels_and_matches_the_operator() {
    let conv = Conv2D::new(5, &[3]).strides(&[2]).dtype(DType::F64);
    init(&conv);
    assert_eq!(conv.weight().shape(), vec![5, 0, 3, 3]);
    let x = test_array(&[2, 3, 7, 7], -1.0, 1.0, 7);
    let y = conv.forward(&x).unwrap();
    assert_eq!(conv.weight().shape(), vec![5, 3, 3, 3]);
    let want = x
        .convolution(
            &conv.weight().data().unwrap(),
            Some(&conv.bias().unwrap().data().unwrap()),
            &ConvParams::new().stride(&[2]),
        )
        .unwrap();
    assert_eq!(y.to_f64_vec(), want.to_f64_vec());
    // Once inferred, other channel counts are errors, not panics.
    assert!(conv.forward(&test_array(&[2, 4, 7, 7], -1.0, 1.0, 8)).is_err());
    // Transposed: the weight is (in_channels, channels / groups, k...).
    let up = Conv2DTranspose::new(4, &[2]).groups(2).in_channels(6);
    assert_eq!(up.weight().shape(), vec![6, 2, 2, 2]);
    // Wrong rank and a kernel list of the wrong length are errors at forward.
    let c1 = Conv1D::new(2, &[3]).dtype(DType::F64);
    init(&c1);
    assert!(c1.forward(&x).is_err());
    let bad = Conv2D::new(2, &[3, 3, 3]).dtype(DType::F64);
    init(&bad);
    assert!(bad.forward(&x).is_err());
    let bad_groups = Conv2D::new(3, &[3]).groups(2).dtype(DType::F64);
    init(&bad_groups);
    assert!(bad_groups.forward(&test_array(&[1, 4, 5, 5], -1.0, 1.0, 9)).is_err());
}
}

device_test! {
fn lenet_style_sequential_names_and_trains_a_step() {
    let mut net = Sequential::new();
    net.add(Conv2D::new(4, &[3]).padding(&[1]).activation("relu"))
        .add(MaxPool2D::new(&[2]))
        .add(Conv2D::new(6, &[3]).activation("relu"))
        .add(GlobalAvgPool2D::new())
        .add(Flatten)
        .add(Dense::new(3));
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let x = NDArray::ones(&[2, 1, 8, 8], DType::F32).unwrap();
    let loss = autograd::record(|| net.forward(&x)?.square()?.sum_all()).unwrap();
    loss.backward().unwrap();
    let params = net.collect_params().unwrap();
    let names = params.names();
    for n in ["conv0.weight", "conv0.bias", "conv1.weight", "dense0.weight"] {
        assert!(names.contains(&n.to_string()), "{n} missing from {names:?}");
    }
    let g = params.get("conv0.weight").unwrap().grad().unwrap();
    assert_eq!(g.shape(), vec![4, 1, 3, 3]);
    assert!(g.to_f64_vec().iter().any(|v| *v != 0.0));
    let summary = net.summary(&x).unwrap();
    assert!(summary.contains("Conv2D(1 -> 4"), "{summary}");
    assert!(summary.contains("MaxPool2D(size=[2]"), "{summary}");
}
}
