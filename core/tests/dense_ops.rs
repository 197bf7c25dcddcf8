//! Values of the dense operators (against hand-computed NumPy results), integer dtypes, and
//! error cases that must return `Err` rather than panic.

use sparrow_core::testing::test_device;
use sparrow_core::{device_test, DType, Error, NDArray};

fn f32s(v: &[f32], shape: &[usize]) -> NDArray {
    NDArray::from_vec(v.to_vec(), shape)
        .and_then(|x| x.to_device(test_device()))
        .unwrap()
}
fn i64s(v: &[i64], shape: &[usize]) -> NDArray {
    NDArray::from_vec(v.to_vec(), shape)
        .and_then(|x| x.to_device(test_device()))
        .unwrap()
}
/// erf by its Maclaurin series (|x| <= 2: terms fall below 1e-17 well before 60).
fn erf_series(x: f64) -> f64 {
    let (mut term, mut sum) = (x, x);
    for n in 1..60 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn close(a: &NDArray, b: &[f64]) {
    let v = a.to_f64_vec();
    assert_eq!(v.len(), b.len(), "{v:?} vs {b:?}");
    for (x, y) in v.iter().zip(b) {
        assert!((x - y).abs() < 1e-5, "{v:?} vs {b:?}");
    }
}

device_test! {
fn activation_values_f32_and_f64_and_their_extremes() {
    use sparrow_core::ops::{ActFn, SELU_ALPHA, SELU_LAMBDA};
    // References in f64 from the definitions (erf(1/sqrt 2) = 0.6826894921370859).
    let phi = |x: f64| 0.5 * (1.0 + erf_series(x / std::f64::consts::SQRT_2));
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let sp = |x: f64| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
    let xs = [-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5];
    type Reference = Box<dyn Fn(f64) -> f64>;
    let refs: Vec<(ActFn, Reference)> = vec![
        (ActFn::Elu(0.7), Box::new(|x: f64| if x > 0.0 { x } else { 0.7 * x.exp_m1() })),
        (ActFn::Selu, Box::new(|x: f64| {
            SELU_LAMBDA * if x > 0.0 { x } else { SELU_ALPHA * x.exp_m1() }
        })),
        (ActFn::Gelu, Box::new(move |x: f64| x * phi(x))),
        (ActFn::GeluTanh, Box::new(|x: f64| {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + u.tanh())
        })),
        (ActFn::Swish(1.5), Box::new(move |x: f64| x * sig(1.5 * x))),
        (ActFn::Softsign, Box::new(|x: f64| x / (1.0 + x.abs()))),
        (ActFn::LogSigmoid, Box::new(move |x: f64| -sp(-x))),
        (ActFn::Mish, Box::new(move |x: f64| x * sp(x).tanh())),
    ];
    let x32 = f32s(&xs.map(|v| v as f32), &[7]);
    let x64 = x32.astype(DType::F64).unwrap();
    for (f, r) in &refs {
        let want: Vec<f64> = xs.iter().map(|&x| r(x)).collect();
        let y64 = x64.activation(*f).unwrap().to_f64_vec();
        for (a, b) in y64.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{f:?} f64: {y64:?} vs {want:?}");
        }
        close(&x32.activation(*f).unwrap(), &want);
    }
    // Known values.
    close(&f32s(&[1.0], &[1]).gelu().unwrap(), &[0.8413447460685429]);
    close(&f32s(&[1.0], &[1]).mish().unwrap(), &[0.8650983882673103]);
    // Far tails stay finite and exact: no overflow in exp, no cancellation.
    let big = f32s(&[-100.0, 100.0], &[2]);
    close(&big.log_sigmoid().unwrap(), &[-100.0, 0.0]);
    close(&big.gelu().unwrap(), &[0.0, 100.0]);
    close(&big.gelu_tanh().unwrap(), &[0.0, 100.0]);
    close(&big.mish().unwrap(), &[0.0, 100.0]);
    close(&big.silu().unwrap(), &[0.0, 100.0]);
    close(&big.elu(1.0).unwrap(), &[-1.0, 100.0]);
    // A non-finite parameter is an error naming it.
    let e = big.elu(f64::NAN).unwrap_err().to_string();
    assert!(e.contains("alpha"), "{e}");
    let e = big.swish(f64::INFINITY).unwrap_err().to_string();
    assert!(e.contains("beta"), "{e}");
}
}

device_test! {
fn softmax_values_and_stability() {
    let x = f32s(&[1.0, 2.0, 3.0, 1000.0, 1000.0, -1000.0], &[2, 3]);
    let s = x.softmax(-1).unwrap();
    let e = [1f64.exp(), 2f64.exp(), 3f64.exp()];
    let z: f64 = e.iter().sum();
    close(&s, &[e[0] / z, e[1] / z, e[2] / z, 0.5, 0.5, 0.0]);
    let l = x.log_softmax(-1).unwrap();
    let v = l.to_f64_vec();
    assert!(v.iter().all(|x| x.is_finite()), "{v:?}");
    assert!((v[0] - (1.0 - z.ln())).abs() < 1e-5);
    assert!((v[5] + 2000.0 + 2f64.ln()).abs() < 1e-2);
    // Along axis 0: columns sum to 1.
    let s0 = x.softmax(0).unwrap().sum(Some(&[0]), false).unwrap();
    close(&s0, &[1.0, 1.0, 1.0]);
}
}

device_test! {
fn reductions() {
    let x = f32s(&[1.0, 5.0, -2.0, 4.0, 0.5, 3.0], &[2, 3]);
    close(&x.max(None, false).unwrap(), &[5.0]);
    close(&x.max(Some(&[0]), false).unwrap(), &[4.0, 5.0, 3.0]);
    close(&x.min(Some(&[1]), true).unwrap(), &[-2.0, 0.5]);
    assert_eq!(x.min(Some(&[1]), true).unwrap().shape(), vec![2, 1]);
    close(&x.prod(Some(&[1]), false).unwrap(), &[-10.0, 6.0]);
    close(&x.norm(1, None, false).unwrap(), &[15.5]);
    close(
        &x.norm(2, Some(&[0]), false).unwrap(),
        &[17f64.sqrt(), 25.25f64.sqrt(), 13f64.sqrt()],
    );
    assert_eq!(
        x.argmax(Some(1), false).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 0]
    );
    assert_eq!(
        x.argmin(Some(0), false).unwrap().to_vec::<i64>().unwrap(),
        vec![0, 1, 0]
    );
    assert_eq!(
        x.argmax(None, false).unwrap().to_vec::<i64>().unwrap(),
        vec![1]
    );
    assert_eq!(x.argmax(None, true).unwrap().shape(), vec![1, 1]);
    // Ties: first occurrence.
    let t = f32s(&[2.0, 7.0, 7.0, 1.0], &[4]);
    assert_eq!(
        t.argmax(Some(0), false).unwrap().to_vec::<i64>().unwrap(),
        vec![1]
    );
    // Three axes, middle one reduced, on a parallel-sized array.
    let big = NDArray::arange(0.0, 40000.0, 1.0, DType::F64)
        .unwrap()
        .reshape(&[100, 4, 100])
        .unwrap();
    let m = big.max(Some(&[1]), false).unwrap();
    assert_eq!(m.shape(), vec![100, 100]);
    assert_eq!(m.to_f64_vec()[0], 300.0);
    assert_eq!(m.to_f64_vec()[10001 % 10000], 301.0);
}
}

device_test! {
fn sort_argsort_topk() {
    let x = f32s(&[3.0, 1.0, 2.0, 0.0, 5.0, 4.0], &[2, 3]);
    close(&x.sort(-1, true).unwrap(), &[1.0, 2.0, 3.0, 0.0, 4.0, 5.0]);
    close(&x.sort(0, false).unwrap(), &[3.0, 5.0, 4.0, 0.0, 1.0, 2.0]);
    assert_eq!(
        x.argsort(-1, true).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 2, 0, 0, 2, 1]
    );
    assert_eq!(x.argsort(-1, true).unwrap().dtype(), DType::I64);
    let (v, i) = x.topk(2, 1, false).unwrap();
    close(&v, &[3.0, 2.0, 5.0, 4.0]);
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![0, 2, 1, 2]);
    let (v, i) = x.topk(1, 0, true).unwrap();
    close(&v, &[0.0, 1.0, 2.0]);
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 0, 0]);
    assert!(x.topk(4, 1, false).is_err());
    // Integer sort.
    let n = i64s(&[5, -3, 9, 0], &[4]);
    assert_eq!(
        n.sort(0, true).unwrap().to_vec::<i64>().unwrap(),
        vec![-3, 0, 5, 9]
    );
}
}

device_test! {
fn shape_ops_values() {
    let a = NDArray::arange(0.0, 6.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap();
    close(&a.transpose(None).unwrap(), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(a.expand_dims(-1).unwrap().shape(), vec![2, 3, 1]);
    assert_eq!(
        a.expand_dims(0)
            .unwrap()
            .squeeze(Some(&[0]))
            .unwrap()
            .shape(),
        vec![2, 3]
    );
    close(&a.flip(1).unwrap(), &[2.0, 1.0, 0.0, 5.0, 4.0, 3.0]);
    close(
        &a.slice_axis(1, Some(-2), None, 1).unwrap(),
        &[1.0, 2.0, 4.0, 5.0],
    );
    close(
        &a.slice_axis(1, None, None, 2).unwrap(),
        &[0.0, 2.0, 3.0, 5.0],
    );
    close(&a.slice_axis(1, Some(5), Some(7), 1).unwrap(), &[]);
    close(
        &NDArray::concat(&[&a, &a], 1).unwrap(),
        &[0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.],
    );
    let s = NDArray::stack(&[&a, &a], 0).unwrap();
    assert_eq!(s.shape(), vec![2, 2, 3]);
    let parts = a.split(3, 1).unwrap();
    close(&parts[2], &[2.0, 5.0]);
    close(
        &a.tile(&[1, 2]).unwrap(),
        &[0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.],
    );
    close(
        &a.repeat(2, Some(0)).unwrap(),
        &[0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.],
    );
    close(
        &a.repeat(2, None)
            .unwrap()
            .slice_axis(0, None, Some(4), 1)
            .unwrap(),
        &[0., 0., 1., 1.],
    );
    close(&a.swapaxes(0, 1).unwrap(), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    // 3-D transpose matches the NumPy result of arange(24).reshape(2,3,4).transpose(1,2,0).
    let b = NDArray::arange(0.0, 24.0, 1.0, DType::F64)
        .unwrap()
        .reshape(&[2, 3, 4])
        .unwrap();
    let t = b.transpose(Some(&[1, 2, 0])).unwrap();
    assert_eq!(t.shape(), vec![3, 4, 2]);
    assert_eq!(&t.to_f64_vec()[..6], &[0.0, 12.0, 1.0, 13.0, 2.0, 14.0]);
}
}

device_test! {
fn index_ops_values() {
    let a = f32s(&[0., 1., 2., 3., 4., 5.], &[3, 2]);
    let t = a.take(&i64s(&[2, 0, -1], &[3]), 0).unwrap();
    close(&t, &[4., 5., 0., 1., 4., 5.]);
    let ic = a
        .index_copy(&i64s(&[1], &[1]), &f32s(&[9., 8.], &[1, 2]))
        .unwrap();
    close(&ic, &[0., 1., 9., 8., 4., 5.]);
    let oh = i64s(&[1, 0, 3, 5], &[4])
        .one_hot(4, 1.0, 0.0, DType::F32)
        .unwrap();
    assert_eq!(oh.shape(), vec![4, 4]);
    close(
        &oh,
        &[
            0., 1., 0., 0., 1., 0., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0.,
        ],
    );
    let ohf = f32s(&[2.0], &[1])
        .one_hot(3, 5.0, -1.0, DType::F64)
        .unwrap();
    close(&ohf, &[-1.0, -1.0, 5.0]);
    let c = f32s(&[1., 0., 0.5], &[3]);
    let w = NDArray::where_(&c, &f32s(&[1., 2., 3.], &[3]), &f32s(&[-1.], &[1])).unwrap();
    close(&w, &[1., -1., 3.]);
}
}

device_test! {
fn batched_matmul_values() {
    // [2,2,3] @ [3,2], compared with per-batch dot.
    let a = NDArray::arange(0.0, 12.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[2, 2, 3])
        .unwrap();
    let b = NDArray::arange(0.0, 6.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[3, 2])
        .unwrap();
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.shape(), vec![2, 2, 2]);
    for i in 0..2 {
        let ai = a.take(&i64s(&[i], &[]), 0).unwrap();
        let expect = ai.dot(&b).unwrap().to_f64_vec();
        assert_eq!(
            c.to_f64_vec()[i as usize * 4..(i as usize + 1) * 4],
            expect[..]
        );
    }
    let v = f32s(&[1., 1., 1.], &[3]);
    assert_eq!(a.matmul(&v).unwrap().to_f64_vec(), vec![3., 12., 21., 30.]);
    assert_eq!(v.matmul(&v).unwrap().shape(), Vec::<usize>::new());
    // Many small matrices go parallel over the batch.
    let x = NDArray::ones(&[64, 8, 8], DType::F64).unwrap();
    let y = x.matmul(&x).unwrap();
    assert!(y.to_f64_vec().iter().all(|&z| z == 8.0));
}
}

device_test! {
fn integer_dtypes() {
    for dt in [DType::I64, DType::I32, DType::U8] {
        let a = NDArray::arange(0.0, 12.0, 1.0, DType::F64)
            .unwrap()
            .astype(dt)
            .unwrap()
            .reshape(&[3, 4])
            .unwrap();
        assert_eq!(a.dtype(), dt);
        let s = a.sum(Some(&[0]), false).unwrap();
        assert_eq!(s.dtype(), DType::I64);
        assert_eq!(s.to_vec::<i64>().unwrap(), vec![12, 15, 18, 21]);
        assert_eq!(
            a.sum(None, false).unwrap().to_vec::<i64>().unwrap(),
            vec![66]
        );
        assert_eq!(
            a.argmax(Some(1), false).unwrap().to_vec::<i64>().unwrap(),
            vec![3, 3, 3]
        );
        assert_eq!(a.max(None, false).unwrap().to_f64_vec(), vec![11.0]);
        let g = a.greater_scalar(5.0).unwrap();
        assert_eq!(g.dtype(), dt);
        assert_eq!(
            g.sum(None, false).unwrap().to_vec::<i64>().unwrap(),
            vec![6]
        );
        let t = a.take(&i64s(&[2], &[1]), 0).unwrap().to_f64_vec();
        assert_eq!(t, vec![8., 9., 10., 11.]);
        assert_eq!(
            a.slice_axis(1, Some(1), Some(3), 1).unwrap().to_f64_vec(),
            vec![1., 2., 5., 6., 9., 10.]
        );
        assert_eq!(a.transpose(None).unwrap().to_f64_vec()[..3], [0., 4., 8.]);
        assert_eq!(NDArray::concat(&[&a, &a], 0).unwrap().shape(), vec![6, 4]);
        assert_eq!(a.tile(&[2]).unwrap().shape(), vec![3, 8]);
        assert_eq!(a.flip(0).unwrap().to_f64_vec()[0], 8.0);
        // Math on integers is a clear dtype error.
        assert!(matches!(a.exp(), Err(Error::DType { .. })));
        assert!(matches!(a.softmax(-1), Err(Error::DType { .. })));
        assert!(matches!(
            a.matmul(&a),
            Err(Error::Shape { .. }) | Err(Error::DType { .. })
        ));
        assert!(matches!(a.prod(None, false), Err(Error::DType { .. })));
    }
    // i64 beyond 2^53 sums exactly.
    let big = i64s(&[(1 << 60) + 1, 1], &[2]);
    assert_eq!(
        big.sum(None, false).unwrap().to_vec::<i64>().unwrap(),
        vec![(1 << 60) + 2]
    );
}
}

device_test! {
fn errors_are_err_not_panic() {
    let a = f32s(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    assert!(matches!(a.softmax(2), Err(Error::Index { .. })));
    assert!(matches!(
        a.max(Some(&[0, 0]), false),
        Err(Error::Arg { .. })
    ));
    assert!(matches!(a.norm(3, None, false), Err(Error::Arg { .. })));
    assert!(matches!(
        a.argmax(Some(-3), false),
        Err(Error::Index { .. })
    ));
    assert!(matches!(a.transpose(Some(&[0, 0])), Err(Error::Arg { .. })));
    assert!(matches!(a.transpose(Some(&[0])), Err(Error::Arg { .. })));
    assert!(matches!(a.squeeze(Some(&[1])), Err(Error::Shape { .. })));
    assert!(matches!(a.expand_dims(4), Err(Error::Index { .. })));
    assert!(matches!(
        a.slice_axis(0, None, None, 0),
        Err(Error::Arg { .. })
    ));
    assert!(matches!(
        a.take(&i64s(&[2], &[1]), 0),
        Err(Error::Index { .. })
    ));
    assert!(matches!(
        a.take(&i64s(&[-4], &[1]), 1),
        Err(Error::Index { .. })
    ));
    assert!(matches!(
        a.index_copy(&i64s(&[0], &[1]), &f32s(&[1.], &[1, 1])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        NDArray::concat(&[&a, &a.transpose(None).unwrap()], 0),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(NDArray::concat(&[], 0), Err(Error::Arg { .. })));
    assert!(matches!(
        NDArray::stack(&[&a, &f32s(&[1.], &[1])], 0),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(a.split(4, 1), Err(Error::Arg { .. })));
    assert!(matches!(a.matmul(&a), Err(Error::Shape { .. })));
    assert!(matches!(
        a.matmul(&NDArray::scalar(1.0f32)),
        Err(Error::Shape { .. })
    ));
    let a64 = a.astype(DType::F64).unwrap();
    assert!(matches!(
        a.matmul(&a64.transpose(None).unwrap()),
        Err(Error::DType { .. })
    ));
    let e = NDArray::zeros(&[0, 3], DType::F32).unwrap();
    assert!(matches!(e.max(Some(&[0]), false), Err(Error::Shape { .. })));
    assert!(matches!(e.argmax(Some(0), false), Err(Error::Shape { .. })));
    let c = f32s(&[1., 0.], &[2]);
    assert!(matches!(
        NDArray::where_(&c, &a, &a),
        Err(Error::Shape { .. })
    ));
    // The message names the op and the shapes.
    let msg = a.matmul(&f32s(&[1., 2.], &[2, 1])).unwrap_err().to_string();
    assert!(msg.contains("matmul") && msg.contains("[2, 3]"), "{msg}");
}
}

device_test! {
fn same_shape_and_has_shape_compare_without_surprises() {
    let a = NDArray::zeros(&[2, 3], DType::F32).unwrap();
    let b = NDArray::ones(&[2, 3], DType::F64).unwrap();
    let c = NDArray::zeros(&[3, 2], DType::F32).unwrap();
    assert!(a.same_shape(&b) && b.same_shape(&a));
    assert!(a.same_shape(&a));
    assert!(!a.same_shape(&c));
    assert!(a.has_shape(&[2, 3]) && !a.has_shape(&[6]));
    // Rank > 8 takes the allocating path; ranks that differ never match.
    let nine = vec![1usize; 9];
    let d = NDArray::zeros(&nine, DType::F32).unwrap();
    let e = NDArray::ones(&nine, DType::F32).unwrap();
    assert!(d.same_shape(&e) && !d.same_shape(&a));
    let scalar = NDArray::zeros(&[], DType::F32).unwrap();
    assert!(scalar.same_shape(&NDArray::ones(&[], DType::F32).unwrap()) && !scalar.same_shape(&a));
}
}

device_test! {
fn dims_is_the_shape_without_allocating_for_small_ranks() {
    for shape in [
        vec![],
        vec![3],
        vec![2, 3],
        vec![2, 1, 3, 1],
        vec![1, 2, 1, 2, 1],
    ] {
        let x = NDArray::zeros(&shape, DType::F32).unwrap();
        let d = x.dims();
        assert_eq!(&d[..], &x.shape()[..]);
        // Inline up to 4 dimensions (sparrow_core::Shape), on the heap beyond.
        assert_eq!(d.spilled(), shape.len() > 4, "{shape:?}");
    }
    let csr = sparrow_core::testing::test_csr(4, 7, 0.3, 1, DType::F32);
    assert_eq!(&csr.dims()[..], &[4, 7]);
}
}
