//! Half precision (f16, bf16): conversions round to nearest even, layout ops move half
//! elements unchanged, and every compute kernel's half result is bit for bit the f32 kernel on
//! the widened inputs, rounded once (the contract of `cpu/half.rs`). Gradients of half arrays
//! are half and close to the f32 gradients; files store half arrays as they are.

use sparrow_core::testing::{test_array, test_csr};
use sparrow_core::{autograd, device_test, io, DType, NDArray, Result, SType};
use sparrow_core::{bf16, f16};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// The f32 bits of an array's values (any float dtype, converted exactly to f32).
fn bits(a: &NDArray) -> Vec<u32> {
    a.astype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// `f` on half inputs equals `f` on their f32 widening, rounded to the half dtype, bit for
/// bit, with the same dtype and storage type.
fn same_as_f32(name: &str, f: impl Fn(&[NDArray]) -> Result<NDArray>, inputs: &[NDArray]) {
    for h in HALVES {
        let xh: Vec<NDArray> = inputs.iter().map(|x| x.astype(h).unwrap()).collect();
        let x32: Vec<NDArray> = xh.iter().map(|x| x.astype(DType::F32).unwrap()).collect();
        let got = f(&xh).unwrap_or_else(|e| panic!("{name} on {h:?}: {e}"));
        let want = f(&x32).unwrap().astype(h).unwrap();
        assert_eq!(got.dtype(), h, "{name}: dtype");
        assert_eq!(got.stype(), want.stype(), "{name}: stype");
        assert_eq!(got.shape(), want.shape(), "{name}: shape");
        assert_eq!(bits(&got), bits(&want), "{name} on {h:?}");
    }
}

/// The value of a half type nearest to `x`, ties to the even bit pattern, by exhaustive search
/// over the finite values of `x`'s sign: the reference the conversions are checked against.
fn nearest<H: Copy>(x: f64, from_bits: fn(u16) -> H, to_f64: fn(H) -> f64) -> H {
    let sign = if x.is_sign_negative() { 0x8000u16 } else { 0 };
    let finite: Vec<u16> = (0..0x7fffu16)
        .filter(|&b| to_f64(from_bits(b)).is_finite())
        .collect();
    let (max, below) = (finite[finite.len() - 1], finite[finite.len() - 2]);
    let (vmax, vbelow) = (to_f64(from_bits(max)), to_f64(from_bits(below)));
    // Half an ulp past the largest finite value or more (a tie included: the even neighbour
    // is the infinity): infinity, the pattern after `max`.
    if x.abs() >= vmax + (vmax - vbelow) / 2.0 {
        return from_bits((max + 1) | sign);
    }
    let mut best: Option<(f64, u16)> = None;
    for &b in &finite {
        // Both within the finite range: the difference is exact (Sterbenz) or far from best.
        let d = (to_f64(from_bits(b)) - x.abs()).abs();
        best = match best {
            Some((bd, bb)) if bd < d || (bd == d && bb & 1 == 0) => Some((bd, bb)),
            _ => Some((d, b)),
        };
    }
    from_bits(best.unwrap().1 | sign)
}

#[test]
fn astype_rounds_to_nearest_even_once() {
    // Values around every rounding case: ties, subnormals, overflow, integers past 2^11.
    let mut v: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        1.0 + 2f64.powi(-11),                  // f16 tie: rounds to 1.0 (even)
        1.0 + 3.0 * 2f64.powi(-11),            // f16 tie: rounds up (to even)
        1.0 + 2f64.powi(-11) + 2f64.powi(-30), // just above a tie: up (no double rounding)
        65504.0,
        65520.0, // rounds to inf in f16
        1e-7,    // f16 subnormal
        2049.0,
        3.0e38,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    // bf16 ties: 1 + 2^-8 is a tie (to 1), with 2^-40 more it rounds up.
    v.push(1.0 + 2f64.powi(-8));
    v.push(1.0 + 2f64.powi(-8) + 2f64.powi(-40));
    let mut s = 7u64;
    for _ in 0..2000 {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let m = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        let e = ((s >> 3) % 40) as i32 - 20;
        v.push(m * 2f64.powi(e));
    }
    let a64 = NDArray::from_vec(v.clone(), &[v.len()]).unwrap();
    let a32 = a64.astype(DType::F32).unwrap();
    let f = a64.astype(DType::F16).unwrap().to_vec::<f16>().unwrap();
    let b = a64.astype(DType::BF16).unwrap().to_vec::<bf16>().unwrap();
    let f_from32 = a32.astype(DType::F16).unwrap().to_vec::<f16>().unwrap();
    for (i, &x) in v.iter().enumerate() {
        assert_eq!(
            f[i].to_bits(),
            nearest(x, f16::from_bits, f16::to_f64).to_bits(),
            "f16 of {x}"
        );
        assert_eq!(
            b[i].to_bits(),
            nearest(x, bf16::from_bits, bf16::to_f64).to_bits(),
            "bf16 of {x}"
        );
        // From f32: rounded once from the f32 value.
        assert_eq!(
            f_from32[i].to_bits(),
            f16::from_f32(x as f32).to_bits(),
            "f16 of f32 {x}"
        );
    }
    // The just-above-a-tie value: f64 -> f16 directly rounds up, unlike f64 -> f32 -> f16.
    assert_eq!(f[5].to_f64(), 1.0 + 2f64.powi(-10));
    assert_eq!(f[3].to_f64(), 1.0);
    assert!(f[7].is_infinite());
    assert_eq!(b[13].to_f64(), 1.0);
    assert_eq!(b[14].to_f64(), 1.0 + 2f64.powi(-7));
    // Every dtype pair: half -> x -> half keeps the value where x holds it.
    let small = NDArray::from_vec(vec![0.0f32, 1.0, -2.0, 3.0, 100.0, 7.0], &[6]).unwrap();
    for h in HALVES {
        let hh = small.astype(h).unwrap();
        for d in [
            DType::F32,
            DType::F64,
            DType::I64,
            DType::I32,
            DType::F16,
            DType::BF16,
        ] {
            let back = hh.astype(d).unwrap().astype(h).unwrap();
            assert_eq!(bits(&back), bits(&hh), "{h:?} -> {d:?} -> {h:?}");
        }
        let u = hh.abs().unwrap().astype(DType::U8).unwrap();
        assert_eq!(u.to_vec::<u8>().unwrap(), vec![0, 1, 2, 3, 100, 7]);
    }
}

#[test]
fn constructors_and_elements() {
    let z = NDArray::zeros(&[2, 3], DType::F16).unwrap();
    assert_eq!(z.dtype(), DType::F16);
    assert_eq!(z.to_vec::<f16>().unwrap(), vec![f16::ZERO; 6]);
    let o = NDArray::full(&[2], 0.1, DType::BF16).unwrap();
    assert_eq!(o.to_vec::<bf16>().unwrap(), vec![bf16::from_f64(0.1); 2]);
    let r = NDArray::arange(0.0, 3.0, 0.5, DType::F16).unwrap();
    assert_eq!(
        r.to_f64_vec(),
        vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
        "arange in f16"
    );
    let v = NDArray::from_vec(vec![f16::from_f32(1.5), f16::from_f32(-2.0)], &[2]).unwrap();
    assert_eq!(v.dtype(), DType::F16);
    assert_eq!(v.to_f64_vec(), vec![1.5, -2.0]);
    assert_eq!(DType::F16.size_of(), 2);
    assert_eq!(DType::BF16.name(), "bfloat16");
    assert!(DType::BF16.is_float() && DType::F16.is_half() && !DType::F32.is_half());
}

device_test! {
    fn layout_ops_move_half_elements() {
        let a = test_array(&[4, 6], -3.0, 3.0, 1);
        for h in HALVES {
            let x = a.astype(h).unwrap();
            let x32 = x.astype(DType::F32).unwrap();
            let check = |name: &str, got: Result<NDArray>, want: Result<NDArray>| {
                let (got, want) = (got.unwrap(), want.unwrap());
                assert_eq!(got.dtype(), h, "{name}");
                assert_eq!(got.shape(), want.shape(), "{name}");
                assert_eq!(bits(&got), bits(&want), "{name} on {h:?}");
            };
            check("reshape", x.reshape(&[6, 4]), x32.reshape(&[6, 4]));
            check("transpose", x.transpose(None), x32.transpose(None));
            check("slice_axis", x.slice_axis(1, Some(1), Some(5), 1), x32.slice_axis(1, Some(1), Some(5), 1));
            let idx = NDArray::from_vec(vec![3i64, 0, 2], &[3]).unwrap();
            check("take", x.take(&idx, 0), x32.take(&idx, 0));
            check("concat", NDArray::concat(&[&x, &x], 1), NDArray::concat(&[&x32, &x32], 1));
            check("sort", x.sort(1, true), x32.sort(1, true));
            check("copy", Ok(x.copy()), Ok(x32.clone()));
            let am = x.argmax(Some(1), false).unwrap();
            assert_eq!(am.to_f64_vec(), x32.argmax(Some(1), false).unwrap().to_f64_vec());
        }
    }
}

device_test! {
    fn elementwise_and_reductions_round_once() {
        let a = test_array(&[5, 7], -2.0, 2.0, 2);
        let b = test_array(&[5, 7], 0.5, 3.0, 3);
        let row = test_array(&[1, 7], -1.0, 1.0, 4);
        type F = fn(&[NDArray]) -> Result<NDArray>;
        let binary: [(&str, F); 6] = [
            ("add", |x| x[0].add(&x[1])),
            ("sub", |x| x[0].sub(&x[1])),
            ("mul", |x| x[0].mul(&x[1])),
            ("div", |x| x[0].div(&x[1])),
            ("maximum", |x| x[0].maximum(&x[1])),
            ("broadcast add", |x| x[0].add(&x[1].slice_axis(0, Some(0), Some(1), 1)?)),
        ];
        for (name, f) in binary {
            same_as_f32(name, f, &[a.clone(), b.clone()]);
        }
        same_as_f32("broadcast mul", |x| x[0].mul(&x[1]), &[a.clone(), row.clone()]);
        let unary: [(&str, F); 14] = [
            ("exp", |x| x[0].exp()),
            ("tanh", |x| x[0].tanh()),
            ("sigmoid", |x| x[0].sigmoid()),
            ("relu", |x| x[0].relu()),
            ("abs", |x| x[0].abs()),
            ("square", |x| x[0].square()),
            ("mul_scalar", |x| x[0].mul_scalar(0.3)),
            ("sum all", |x| x[0].sum(None, false)),
            ("sum axis 1", |x| x[0].sum(Some(&[1]), false)),
            ("sum axis 0", |x| x[0].sum(Some(&[0]), true)),
            ("max", |x| x[0].max(Some(&[1]), false)),
            ("norm", |x| x[0].norm(2, Some(&[1]), false)),
            ("softmax", |x| x[0].softmax(-1)),
            ("log_softmax", |x| x[0].log_softmax(1)),
        ];
        for (name, f) in unary {
            same_as_f32(name, f, std::slice::from_ref(&a));
        }
        // A long reduction accumulates in f32: the half sum of 4096 values is the f32 sum
        // rounded, not a running half sum (which would stall once the sum passes 2048).
        let ones = NDArray::full(&[4096], 1.0, DType::F16).unwrap();
        assert_eq!(ones.sum(None, false).unwrap().to_f64_vec(), vec![4096.0]);
        // mean is a sum and a scale: two roundings, within one half ulp of the f32 mean.
        for h in HALVES {
            let m = a.astype(h).unwrap().mean(Some(&[1]), false).unwrap();
            let m32 = a.astype(h).unwrap().astype(DType::F32).unwrap().mean(Some(&[1]), false).unwrap();
            let tol = if h == DType::F16 { 2e-3 } else { 1.6e-2 };
            for (x, y) in m.to_f64_vec().iter().zip(m32.to_f64_vec()) {
                assert!((x - y).abs() <= tol * y.abs().max(1.0), "mean {h:?}: {x} vs {y}");
            }
        }
    }
}

device_test! {
    fn products_round_once() {
        let a = test_array(&[6, 9], -1.0, 1.0, 5);
        let w = test_array(&[9, 4], -1.0, 1.0, 6);
        same_as_f32("dot", |x| x[0].dot(&x[1]), &[a.clone(), w.clone()]);
        same_as_f32("matmul", |x| x[0].matmul(&x[1]), &[a.clone(), w.clone()]);
        let wt = test_array(&[4, 9], -1.0, 1.0, 7);
        same_as_f32("dot_t", |x| x[0].dot_t(&x[1], false, true), &[a.clone(), wt]);
        let bat = test_array(&[3, 4, 5], -1.0, 1.0, 8);
        let bbt = test_array(&[3, 5, 2], -1.0, 1.0, 9);
        same_as_f32("batched matmul", |x| x[0].matmul(&x[1]), &[bat, bbt]);
        let big = test_array(&[64, 300], -1.0, 1.0, 10);
        let bw = test_array(&[300, 48], -1.0, 1.0, 11);
        same_as_f32("large dot", |x| x[0].dot(&x[1]), &[big, bw]);
    }
}

device_test! {
    fn sparse_ops_round_once() {
        let w = test_array(&[30, 5], -1.0, 1.0, 12);
        for h in HALVES {
            // csr x dense, csr^T x dense (row_sparse), sparse + sparse, sparse reductions.
            let c = test_csr(8, 30, 0.2, 13, h);
            let c32 = c.astype(DType::F32).unwrap();
            assert_eq!((c.stype(), c.dtype()), (SType::Csr, h));
            let wh = w.astype(h).unwrap();
            let w32 = wh.astype(DType::F32).unwrap();
            let pairs: Vec<(&str, NDArray, NDArray)> = vec![
                ("csr . dense", c.dot(&wh).unwrap(), c32.dot(&w32).unwrap()),
                (
                    "csr^T . dense",
                    c.dot_t(&wh.slice_axis(0, Some(0), Some(8), 1).unwrap(), true, false).unwrap(),
                    c32.dot_t(&w32.slice_axis(0, Some(0), Some(8), 1).unwrap(), true, false).unwrap(),
                ),
                ("csr + csr", c.add(&c).unwrap(), c32.add(&c32).unwrap()),
                ("csr * csr", c.mul(&c).unwrap(), c32.mul(&c32).unwrap()),
                (
                    "sum(csr, 1)",
                    c.sum(Some(&[1]), false).unwrap(),
                    c32.sum(Some(&[1]), false).unwrap(),
                ),
                ("tanh(csr)", c.tanh().unwrap(), c32.tanh().unwrap()),
                ("csr rows", c.slice_rows(2, 6).unwrap(), c32.slice_rows(2, 6).unwrap()),
                (
                    "csr -> dense",
                    c.tostype(SType::Dense).unwrap(),
                    c32.tostype(SType::Dense).unwrap(),
                ),
            ];
            for (name, got, want) in pairs {
                let want = want.astype(h).unwrap();
                assert_eq!((got.stype(), got.dtype()), (want.stype(), h), "{name}");
                assert_eq!(bits(&got), bits(&want), "{name} on {h:?}");
                assert_eq!(
                    bits(&got.tostype(SType::Dense).unwrap()),
                    bits(&want.tostype(SType::Dense).unwrap()),
                    "{name} on {h:?} (dense)"
                );
            }
            let r = wh.tostype(SType::RowSparse).unwrap();
            let r = sparrow_core::sparse::retain_rows(&r, &[1, 4, 9, 20]).unwrap();
            let r32 = r.astype(DType::F32).unwrap();
            for (name, got, want) in [
                ("rsp + rsp", r.add(&r).unwrap(), r32.add(&r32).unwrap()),
                ("rsp * 2", r.mul_scalar(2.5).unwrap(), r32.mul_scalar(2.5).unwrap()),
                (
                    "square_sum(rsp)",
                    sparrow_core::sparse::square_sum(&r, Some(1), false).unwrap(),
                    sparrow_core::sparse::square_sum(&r32, Some(1), false).unwrap(),
                ),
                ("rsp + dense", r.add(&wh).unwrap(), r32.add(&w32).unwrap()),
            ] {
                let want = want.astype(h).unwrap();
                assert_eq!((got.stype(), got.dtype()), (want.stype(), h), "{name}");
                assert_eq!(bits(&got), bits(&want), "{name} on {h:?}");
            }
        }
    }
}

/// The gradient of `loss` at half inputs against the f32 gradient at their widening: half
/// forward values are rounded at each op, so the two differ by a few half ulps of each
/// intermediate; the tolerance is 8 ulps of the result's scale (f16: 2^-8, bf16: 2^-5).
fn half_grad_close(name: &str, loss: impl Fn(&[NDArray]) -> Result<NDArray>, inputs: &[NDArray]) {
    let grads = |xs: &[NDArray]| -> Vec<NDArray> {
        xs.iter().for_each(|x| x.attach_grad());
        let y = autograd::record(|| loss(xs)).unwrap();
        y.backward().unwrap();
        xs.iter().map(|x| x.grad().unwrap()).collect()
    };
    for h in HALVES {
        let xh: Vec<NDArray> = inputs.iter().map(|x| x.astype(h).unwrap()).collect();
        let x32: Vec<NDArray> = xh.iter().map(|x| x.astype(DType::F32).unwrap()).collect();
        let (gh, g32) = (grads(&xh), grads(&x32));
        let tol = if h == DType::F16 {
            2f64.powi(-8)
        } else {
            2f64.powi(-5)
        };
        for (k, (a, b)) in gh.iter().zip(&g32).enumerate() {
            assert_eq!(a.dtype(), h, "{name}: gradient {k} dtype");
            let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
            let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-3);
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= tol * scale,
                    "{name} on {h:?}, input {k}: {x} vs f32 {y} (scale {scale})"
                );
            }
        }
    }
}

#[test]
fn autograd_on_half_arrays() {
    let x = test_array(&[4, 6], -1.0, 1.0, 20);
    let w = test_array(&[6, 3], -1.0, 1.0, 21);
    half_grad_close(
        "tanh(x) . w",
        |v| v[0].tanh()?.dot(&v[1])?.sum(None, false),
        &[x.clone(), w.clone()],
    );
    half_grad_close(
        "softmax cross terms",
        |v| v[0].dot(&v[1])?.log_softmax(1)?.sum(None, false),
        &[x.clone(), w.clone()],
    );
    half_grad_close(
        "x * x + sigmoid",
        |v| v[0].mul(&v[0])?.add(&v[0].sigmoid()?)?.sum(None, false),
        &[x],
    );
    // A single op's gradient: exactly the f32 gradient rounded (one kernel each way).
    for h in HALVES {
        let a = test_array(&[3, 4], -1.0, 1.0, 22).astype(h).unwrap();
        a.attach_grad();
        let y = autograd::record(|| a.square()?.sum(None, false)).unwrap();
        y.backward().unwrap();
        let want = a
            .astype(DType::F32)
            .unwrap()
            .mul_scalar(2.0)
            .unwrap()
            .astype(h)
            .unwrap();
        assert_eq!(
            bits(&a.grad().unwrap()),
            bits(&want),
            "d square / dx on {h:?}"
        );
    }
    // csr x half dense weight: the weight's gradient is row_sparse and half.
    let c = test_csr(5, 6, 0.4, 23, DType::F16);
    let wh = w.astype(DType::F16).unwrap();
    wh.attach_grad_with(autograd::GradReq::Write, SType::RowSparse);
    let y = autograd::record(|| c.dot(&wh)?.sum(None, false)).unwrap();
    y.backward().unwrap();
    let g = wh.grad().unwrap();
    assert_eq!((g.stype(), g.dtype()), (SType::RowSparse, DType::F16));
}

#[test]
fn files_hold_half_arrays() {
    let dir = std::env::temp_dir().join(format!("sparrow-half-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = test_array(&[3, 5], -4.0, 4.0, 30);
    for h in HALVES {
        let d = a.astype(h).unwrap();
        let c = test_csr(4, 7, 0.3, 31, h);
        let r = d.tostype(SType::RowSparse).unwrap();
        let st = dir.join(format!("{}.safetensors", h.name()));
        io::save(&st, &[("d", &d), ("c", &c), ("r", &r)]).unwrap();
        let back = io::load(&st).unwrap();
        for ((name, got), want) in back.iter().zip([&d, &c, &r]) {
            assert_eq!((got.dtype(), got.stype()), (h, want.stype()), "{name}");
            assert_eq!(bits(got), bits(want), "{name} on {h:?}");
        }
        let npz = dir.join(format!("{}.npz", h.name()));
        let saved = io::save(&npz, &[("d", &d), ("c", &c)]);
        if h == DType::F16 {
            saved.unwrap();
            let back = io::load(&npz).unwrap();
            assert_eq!(bits(&back[0].1), bits(&d));
            assert_eq!(bits(&back[1].1), bits(&c));
            assert_eq!(back[1].1.dtype(), DType::F16);
            // And the .npy of a file-backed array.
            let npy = dir.join("f16.npy");
            let m = NDArray::create_npy(&npy, &[2, 2], DType::F16).unwrap();
            assert_eq!(m.dtype(), DType::F16);
            drop(m);
            let o = NDArray::open_npy(&npy, sparrow_core::MapMode::ReadOnly).unwrap();
            assert_eq!((o.dtype(), o.to_f64_vec()), (DType::F16, vec![0.0; 4]));
        } else {
            let e = saved.unwrap_err().to_string();
            assert!(e.contains("bfloat16") && e.contains("safetensors"), "{e}");
            assert!(!npz.exists(), "a refused save leaves no file");
            let e = NDArray::create_npy(dir.join("bf16.npy"), &[2], h).unwrap_err();
            assert!(e.to_string().contains("bfloat16"), "{e}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
