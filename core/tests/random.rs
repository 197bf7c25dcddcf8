//! Reproducibility and rough distribution checks of `sparrow_core::random`.

use sparrow_core::random::{self, Rng};
use sparrow_core::{device_test, testing::test_device, with_device, DType, NDArray};

fn mean_var(a: &NDArray) -> (f64, f64) {
    let v = a.to_f64_vec();
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n)
}

device_test! {
fn explicit_rng_is_reproducible_and_independent_of_threads() {
    // 300k elements: several parallel chunks.
    let shape = [300, 1000];
    let a = Rng::new(7).uniform(-1.0, 1.0, &shape, DType::F32).unwrap();
    let b = Rng::new(7).uniform(-1.0, 1.0, &shape, DType::F32).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    // `install` runs the closure on the pool's thread, and the default device is per thread:
    // that thread enters the device under test's scope itself.
    let device = test_device();
    let c = single.install(|| {
        with_device(device, || Rng::new(7).uniform(-1.0, 1.0, &shape, DType::F32))
            .unwrap()
            .unwrap()
    });
    assert_eq!((a.device(), c.device()), (device, device));
    assert_eq!(a.to_vec::<f32>().unwrap(), c.to_vec::<f32>().unwrap());
    let d = Rng::new(8).uniform(-1.0, 1.0, &shape, DType::F32).unwrap();
    assert_ne!(a.to_vec::<f32>().unwrap(), d.to_vec::<f32>().unwrap());
    // Chunks differ from each other (not the same stream repeated).
    let v = a.to_vec::<f32>().unwrap();
    assert_ne!(v[..100], v[1 << 16..(1 << 16) + 100]);
    let (m, var) = mean_var(&a);
    assert!(
        m.abs() < 0.01 && (var - 1.0 / 3.0).abs() < 0.01,
        "{m} {var}"
    );
    assert!(v.iter().all(|&x| (-1.0..1.0).contains(&x)));
}
}

device_test! {
fn global_seed_reproduces() {
    random::seed(123);
    let a = random::normal(2.0, 3.0, &[1000], DType::F64).unwrap();
    let p = random::poisson(4.0, &[10], DType::I64).unwrap();
    random::seed(123);
    let b = random::normal(2.0, 3.0, &[1000], DType::F64).unwrap();
    let q = random::poisson(4.0, &[10], DType::I64).unwrap();
    assert_eq!(a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
    assert_eq!(p.to_vec::<i64>().unwrap(), q.to_vec::<i64>().unwrap());
}
}

device_test! {
fn distributions_have_the_right_moments() {
    let mut r = Rng::new(1);
    let n = [200_000];
    let (m, v) = mean_var(&r.normal(2.0, 3.0, &n, DType::F32).unwrap());
    assert!(
        (m - 2.0).abs() < 0.05 && (v - 9.0).abs() < 0.2,
        "normal {m} {v}"
    );
    let (m, v) = mean_var(&r.randn(&n, DType::F64).unwrap());
    assert!(m.abs() < 0.02 && (v - 1.0).abs() < 0.03, "randn {m} {v}");
    let (m, v) = mean_var(&r.exponential(2.0, &n, DType::F64).unwrap());
    assert!(
        (m - 2.0).abs() < 0.05 && (v - 4.0).abs() < 0.2,
        "exponential {m} {v}"
    );
    let (m, v) = mean_var(&r.gamma(3.0, 0.5, &n, DType::F32).unwrap());
    assert!(
        (m - 1.5).abs() < 0.03 && (v - 0.75).abs() < 0.05,
        "gamma {m} {v}"
    );
    let p = r.poisson(4.0, &n, DType::I32).unwrap();
    assert_eq!(p.dtype(), DType::I32);
    let (m, v) = mean_var(&p);
    assert!(
        (m - 4.0).abs() < 0.05 && (v - 4.0).abs() < 0.15,
        "poisson {m} {v}"
    );
    let (m, _) = mean_var(&r.bernoulli(0.3, &n, DType::U8).unwrap());
    assert!((m - 0.3).abs() < 0.01, "bernoulli {m}");
}
}

device_test! {
fn randint_with_wide_bounds() {
    let mut r = Rng::new(5);
    let lo = 1i64 << 40;
    let a = r.randint(lo, lo + 10, &[1000], DType::I64).unwrap();
    let v = a.to_vec::<i64>().unwrap();
    assert!(v.iter().all(|&x| (lo..lo + 10).contains(&x)));
    assert!((lo..lo + 10).all(|k| v.contains(&k)), "every value appears");
    let b = r.randint(-3, 3, &[100], DType::I32).unwrap();
    assert!(b.to_f64_vec().iter().all(|&x| (-3.0..3.0).contains(&x)));
    assert!(r.randint(0, 300, &[3], DType::U8).is_err());
    assert!(r.randint(5, 5, &[3], DType::I64).is_err());
}
}

device_test! {
fn shuffle_permutes_rows() {
    let mut r = Rng::new(9);
    let a = NDArray::arange(0.0, 20.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[10, 2])
        .unwrap();
    let s = r.shuffle(&a).unwrap();
    assert_eq!(s.device(), a.device());
    let v = s.to_vec::<f32>().unwrap();
    assert_ne!(v, a.to_vec::<f32>().unwrap());
    let mut firsts: Vec<i64> = v
        .chunks(2)
        .map(|p| {
            assert_eq!(p[1], p[0] + 1.0, "rows stay intact");
            p[0] as i64
        })
        .collect();
    firsts.sort();
    assert_eq!(firsts, (0..20).step_by(2).collect::<Vec<_>>());
    let p = r.permutation(5).unwrap().to_vec::<i64>().unwrap();
    let mut q = p.clone();
    q.sort();
    assert_eq!(q, vec![0, 1, 2, 3, 4]);
}
}

device_test! {
fn bad_parameters_are_errors() {
    let mut r = Rng::new(0);
    assert!(r.uniform(1.0, 1.0, &[2], DType::F32).is_err());
    assert!(r.uniform(0.0, 1.0, &[2], DType::I64).is_err());
    assert!(r.normal(0.0, -1.0, &[2], DType::F32).is_err());
    assert!(r.exponential(0.0, &[2], DType::F32).is_err());
    assert!(r.gamma(-1.0, 1.0, &[2], DType::F32).is_err());
    assert!(r.poisson(-1.0, &[2], DType::F32).is_err());
    assert!(r.bernoulli(1.5, &[2], DType::F32).is_err());
    assert!(r.shuffle(&NDArray::scalar(1.0f32)).is_err());
}
}
