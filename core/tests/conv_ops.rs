//! Convolution and pooling operators: finite-difference gradient checks (f64) for every case
//! family (stride, padding, dilation, groups, depthwise, 1x1, 1-D / 2-D / 3-D, transposed,
//! 3x3 stride-1 (the Winograd path), max / average / global pooling, ceil_mode,
//! count_include_pad), a direct-loop reference for the forward on both batch paths (threaded
//! over the batch, and batch 1), and shape errors.

use sparrow_core::ops::{ConvParams, PoolParams, PoolType};
use sparrow_core::testing::{check_grad_on_devices, test_array};
use sparrow_core::{device_test, DType, Error, NDArray, Result};

fn gc(name: &str, f: impl Fn(&[NDArray]) -> Result<NDArray>, inputs: &[NDArray]) {
    if let Err(e) = check_grad_on_devices(f, inputs, 1e-6, 1e-5, 1e-7) {
        panic!("{name}: {e}");
    }
}

fn conv_case(name: &str, x: &[usize], w: &[usize], bias: bool, p: ConvParams) {
    let mut inputs = vec![test_array(x, -1.0, 1.0, 1), test_array(w, -1.0, 1.0, 2)];
    if bias {
        inputs.push(test_array(&[w[0]], -1.0, 1.0, 3));
    }
    gc(
        name,
        move |a| a[0].convolution(&a[1], a.get(2), &p),
        &inputs,
    );
}

fn conv_t_case(name: &str, x: &[usize], w: &[usize], bias: Option<usize>, p: ConvParams) {
    let mut inputs = vec![test_array(x, -1.0, 1.0, 4), test_array(w, -1.0, 1.0, 5)];
    if let Some(c) = bias {
        inputs.push(test_array(&[c], -1.0, 1.0, 6));
    }
    gc(
        name,
        move |a| a[0].conv_transpose(&a[1], a.get(2), &p),
        &inputs,
    );
}

#[test]
fn conv_grads() {
    conv_case(
        "conv2d stride/pad/dilation/groups",
        &[2, 4, 6, 5],
        &[6, 2, 3, 2],
        true,
        ConvParams::new()
            .stride(&[2, 1])
            .padding(&[1, 0])
            .dilation(&[1, 2])
            .groups(2),
    );
    conv_case(
        "conv1d",
        &[3, 3, 9],
        &[4, 3, 3],
        true,
        ConvParams::new().stride(&[2]).padding(&[2]).dilation(&[2]),
    );
    conv_case(
        "conv3d",
        &[2, 2, 3, 4, 3],
        &[3, 2, 2, 3, 2],
        true,
        ConvParams::new().stride(&[1, 2, 1]).padding(&[1]),
    );
    conv_case(
        "depthwise",
        &[2, 3, 5, 5],
        &[6, 1, 3, 3],
        false,
        ConvParams::new().padding(&[1]).groups(3),
    );
    conv_case(
        "pointwise batch 1",
        &[1, 4, 3, 3],
        &[5, 4, 1, 1],
        true,
        ConvParams::new(),
    );
    // 3x3, stride 1, one group: the Winograd path (forward and data gradient).
    conv_case(
        "winograd 3x3 pad 1, odd sizes",
        &[2, 3, 5, 7],
        &[4, 3, 3, 3],
        true,
        ConvParams::new().padding(&[1]),
    );
    conv_case(
        "winograd 3x3 pad 0, batch 1",
        &[1, 5, 6, 5],
        &[3, 5, 3, 3],
        false,
        ConvParams::new(),
    );
    conv_case(
        "winograd 3x3 pad (2, 1)",
        &[2, 2, 4, 3],
        &[3, 2, 3, 3],
        true,
        ConvParams::new().padding(&[2, 1]),
    );
    conv_case(
        "strided 1x1 (not pointwise)",
        &[2, 2, 5, 4],
        &[3, 2, 1, 1],
        false,
        ConvParams::new().stride(&[2]),
    );
}

#[test]
fn conv_transpose_grads() {
    conv_t_case(
        "conv_transpose2d",
        &[2, 3, 3, 4],
        &[3, 2, 3, 3],
        Some(2),
        ConvParams::new()
            .stride(&[2])
            .padding(&[1])
            .output_padding(&[1]),
    );
    conv_t_case(
        "conv_transpose2d groups/dilation",
        &[2, 4, 3, 3],
        &[4, 1, 2, 2],
        None,
        ConvParams::new().dilation(&[2, 1]).groups(2),
    );
    conv_t_case(
        "conv_transpose2d 3x3 stride 1 (winograd)",
        &[2, 3, 5, 4],
        &[3, 2, 3, 3],
        Some(2),
        ConvParams::new().padding(&[1]),
    );
    conv_t_case(
        "conv_transpose1d",
        &[2, 2, 4],
        &[2, 3, 3],
        Some(3),
        ConvParams::new()
            .stride(&[3])
            .padding(&[1])
            .output_padding(&[2]),
    );
    conv_t_case(
        "conv_transpose3d",
        &[1, 2, 2, 3, 2],
        &[2, 2, 2, 2, 2],
        None,
        ConvParams::new().stride(&[2, 1, 1]),
    );
}

fn pool_case(name: &str, shape: &[usize], p: PoolParams) {
    gc(
        name,
        move |a| a[0].pool(&p),
        &[test_array(shape, -1.0, 1.0, 7)],
    );
}

#[test]
fn pool_grads() {
    pool_case(
        "max2d ceil pad",
        &[2, 2, 7, 6],
        PoolParams::new(PoolType::Max, &[3])
            .stride(&[2])
            .padding(&[1])
            .ceil_mode(true),
    );
    pool_case(
        "max1d overlapping",
        &[2, 3, 8],
        PoolParams::new(PoolType::Max, &[3]).stride(&[1]),
    );
    pool_case(
        "max3d",
        &[1, 2, 4, 3, 4],
        PoolParams::new(PoolType::Max, &[2]),
    );
    pool_case(
        "avg2d include pad ceil",
        &[2, 2, 7, 6],
        PoolParams::new(PoolType::Avg, &[3])
            .stride(&[2])
            .padding(&[1])
            .ceil_mode(true),
    );
    pool_case(
        "avg2d exclude pad",
        &[2, 2, 5, 6],
        PoolParams::new(PoolType::Avg, &[3, 2])
            .stride(&[2, 1])
            .padding(&[1])
            .count_include_pad(false),
    );
    pool_case(
        "avg3d",
        &[1, 2, 3, 4, 4],
        PoolParams::new(PoolType::Avg, &[2]).padding(&[1]),
    );
    pool_case(
        "global max",
        &[2, 3, 4, 5],
        PoolParams::global(PoolType::Max),
    );
    pool_case(
        "global avg 1d",
        &[2, 3, 7],
        PoolParams::global(PoolType::Avg),
    );
}

/// Direct-loop convolution (f64), the definition the kernels must agree with.
#[allow(clippy::too_many_arguments)]
fn naive_conv2d(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    stride: usize,
    pad: usize,
    dil: usize,
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, wd] = xs;
    let [co, cig, kh, kw] = ws;
    let oh = (h + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
    let ow = (wd + 2 * pad - dil * (kw - 1) - 1) / stride + 1;
    let cog = co / groups;
    let mut y = vec![0.0; n * co * oh * ow];
    for b in 0..n {
        for o in 0..co {
            let g = o / cog;
            for yy in 0..oh {
                for xx in 0..ow {
                    let mut s = 0.0;
                    for ci in 0..cig {
                        let cin = g * cig + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (yy * stride + i * dil) as isize - pad as isize;
                                let ix = (xx * stride + j * dil) as isize - pad as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xv = x[((b * c + cin) * h + iy as usize) * wd + ix as usize];
                                s += xv * w[((o * cig + ci) * kh + i) * kw + j];
                            }
                        }
                    }
                    y[((b * co + o) * oh + yy) * ow + xx] = s;
                }
            }
        }
    }
    let _ = c;
    (y, [n, co, oh, ow])
}

device_test! {
    fn conv_forward_matches_direct_loops() {
        // Batch 5 runs the batch-threaded path (with 2+ threads), batch 1 the threaded-GEMM one.
        for &(n, c, h, w, co, k, stride, pad, dil, groups) in &[
            (5usize, 4usize, 9usize, 8usize, 6usize, 3usize, 1usize, 1usize, 1usize, 1usize),
            (1, 4, 9, 8, 6, 3, 2, 2, 2, 2),
            (3, 6, 7, 7, 6, 3, 1, 1, 1, 6),
            (2, 3, 11, 5, 2, 2, 3, 0, 1, 1),
            (1, 8, 4, 4, 4, 1, 1, 0, 1, 2),
            // 3x3 stride 1 (Winograd): padding 0 and 2, odd sizes, 17 output channels.
            (1, 5, 7, 10, 9, 3, 1, 0, 1, 1),
            (4, 3, 5, 6, 17, 3, 1, 2, 1, 1),
        ] {
            let cig = c / groups;
            let x = test_array(&[n, c, h, w], -1.0, 1.0, 21);
            let wt = test_array(&[co, cig, k, k], -1.0, 1.0, 22);
            let (want, shape) = naive_conv2d(
                &x.to_f64_vec(), [n, c, h, w], &wt.to_f64_vec(), [co, cig, k, k],
                stride, pad, dil, groups,
            );
            let p = ConvParams::new().stride(&[stride]).padding(&[pad]).dilation(&[dil]).groups(groups);
            for dtype in [DType::F64, DType::F32] {
                let y = x.astype(dtype).unwrap()
                    .convolution(&wt.astype(dtype).unwrap(), None, &p).unwrap();
                assert_eq!(y.shape(), shape.to_vec());
                let tol = if dtype == DType::F32 { 1e-4 } else { 1e-12 };
                for (a, b) in y.to_f64_vec().iter().zip(&want) {
                    assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{a} vs {b} ({dtype:?}, n={n}, groups={groups})");
                }
            }
        }
    }
}

device_test! {
    fn pool_values_by_hand() {
        // 1 x 1 x 5: windows of 2, stride 2, padding 1, ceil: [-1,1) [1,3) [3,5) -> 3 outputs.
        let x = NDArray::from_vec(vec![1.0f32, 5.0, 2.0, 4.0, 3.0], &[1, 1, 5]).unwrap();
        let p = PoolParams::new(PoolType::Max, &[2]).stride(&[2]).padding(&[1]).ceil_mode(true);
        assert_eq!(x.pool(&p).unwrap().to_f64_vec(), vec![1.0, 5.0, 4.0]);
        let avg = PoolParams::new(PoolType::Avg, &[2]).stride(&[2]).padding(&[1]);
        // Padding counted: (0 + 1) / 2, (5 + 2) / 2; floor mode gives 3 outputs too.
        assert_eq!(x.pool(&avg).unwrap().to_f64_vec(), vec![0.5, 3.5, 3.5]);
        let excl = avg.clone().count_include_pad(false);
        assert_eq!(x.pool(&excl).unwrap().to_f64_vec(), vec![1.0, 3.5, 3.5]);
        let g = x.pool(&PoolParams::global(PoolType::Avg)).unwrap();
        assert_eq!((g.shape(), g.to_f64_vec()), (vec![1, 1, 1], vec![3.0]));
    }
}

fn shape_err(r: Result<NDArray>, what: &str) {
    match r {
        Err(Error::Shape { .. }) | Err(Error::Arg { .. }) | Err(Error::DType { .. }) => {}
        other => panic!("{what}: expected an error, got {other:?}"),
    }
}

device_test! {
    fn conv_and_pool_reject_bad_arguments() {
        let x = NDArray::ones(&[2, 4, 6, 6], DType::F32).unwrap();
        let w = NDArray::ones(&[8, 4, 3, 3], DType::F32).unwrap();
        let p = ConvParams::new();
        shape_err(NDArray::ones(&[4, 6], DType::F32).unwrap().convolution(&w, None, &p), "2-D data");
        shape_err(NDArray::ones(&[1, 1, 2, 2, 2, 2], DType::F32).unwrap().pool(&PoolParams::new(PoolType::Max, &[1])), "4 spatial dims");
        shape_err(x.convolution(&NDArray::ones(&[8, 3, 3, 3], DType::F32).unwrap(), None, &p), "channels");
        shape_err(x.convolution(&NDArray::ones(&[8, 4, 3], DType::F32).unwrap(), None, &p), "weight rank");
        shape_err(x.convolution(&NDArray::ones(&[6, 1, 3, 3], DType::F32).unwrap(), None, &p.clone().groups(3)), "groups");
        shape_err(x.convolution(&w, None, &p.clone().groups(0)), "zero groups");
        shape_err(x.convolution(&NDArray::ones(&[8, 4, 9, 9], DType::F32).unwrap(), None, &p), "kernel too large");
        shape_err(x.convolution(&w, Some(&NDArray::ones(&[7], DType::F32).unwrap()), &p), "bias");
        shape_err(x.convolution(&w, None, &p.clone().stride(&[0])), "stride 0");
        shape_err(x.convolution(&w, None, &p.clone().stride(&[1, 1, 1])), "stride list");
        shape_err(x.convolution(&w, None, &p.clone().dilation(&[usize::MAX])), "dilation overflow");
        shape_err(x.convolution(&w, None, &p.clone().output_padding(&[1])), "output_padding on conv");
        shape_err(x.convolution(&w.astype(DType::F64).unwrap(), None, &p), "dtype mismatch");
        shape_err(x.astype(DType::I32).unwrap().convolution(&w.astype(DType::I32).unwrap(), None, &p), "integer");
        let wt = NDArray::ones(&[4, 2, 3, 3], DType::F32).unwrap();
        shape_err(x.conv_transpose(&wt, None, &p.clone().stride(&[2]).output_padding(&[2])), "output_padding >= stride");
        shape_err(x.conv_transpose(&NDArray::ones(&[3, 2, 3, 3], DType::F32).unwrap(), None, &p), "transposed channels");
        shape_err(x.conv_transpose(&wt, None, &p.clone().padding(&[5])), "empty transposed output");
        shape_err(x.conv_transpose(&wt, Some(&NDArray::ones(&[4], DType::F32).unwrap()), &p), "transposed bias");
        shape_err(x.pool(&PoolParams::new(PoolType::Max, &[2]).padding(&[2])), "padding >= kernel");
        shape_err(x.pool(&PoolParams::new(PoolType::Max, &[7])), "window larger than data");
        shape_err(x.pool(&PoolParams::new(PoolType::Avg, &[])), "no kernel");
        shape_err(x.pool(&PoolParams::new(PoolType::Avg, &[2]).stride(&[0])), "pool stride 0");
        shape_err(x.pool(&PoolParams::new(PoolType::Avg, &[2]).padding(&[1, usize::MAX])), "pool padding overflow");
        shape_err(x.astype(DType::I64).unwrap().pool(&PoolParams::new(PoolType::Max, &[2])), "integer pool");
    }
}

device_test! {
    fn empty_batches_and_channels_give_empty_or_bias_outputs() {
        let p = ConvParams::new().padding(&[1]);
        // No batch entries: empty output and empty / zero gradients, no panic.
        let x = NDArray::zeros(&[0, 3, 4, 4], DType::F32).unwrap();
        let w = NDArray::ones(&[2, 3, 3, 3], DType::F32).unwrap();
        x.attach_grad();
        w.attach_grad();
        let y = sparrow_core::autograd::record(|| x.convolution(&w, None, &p)).unwrap();
        assert_eq!(y.shape(), vec![0, 2, 4, 4]);
        y.backward_with_grad(&NDArray::zeros(&[0, 2, 4, 4], DType::F32).unwrap()).unwrap();
        assert_eq!(w.grad().unwrap().to_f64_vec(), vec![0.0; 54]);
        // No input channels: the output is the bias alone.
        let x0 = NDArray::zeros(&[2, 0, 4, 4], DType::F32).unwrap();
        let w0 = NDArray::zeros(&[2, 0, 3, 3], DType::F32).unwrap();
        let b = NDArray::from_vec(vec![1.5f32, -2.0], &[2]).unwrap();
        let y0 = x0.convolution(&w0, Some(&b), &p).unwrap();
        assert_eq!(y0.shape(), vec![2, 2, 4, 4]);
        let v = y0.to_f64_vec();
        assert!(v[..16].iter().all(|&a| a == 1.5) && v[16..32].iter().all(|&a| a == -2.0));
        // An empty plane cannot be pooled.
        let e = NDArray::zeros(&[1, 1, 0, 3], DType::F32).unwrap();
        assert!(e.pool(&PoolParams::new(PoolType::Max, &[1])).is_err());
    }
}
