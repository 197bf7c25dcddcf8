//! Every update operator on random inputs, f32 and f64: dense against an f64 transcription of
//! its formula, standard row_sparse against the same operator with the densified gradient, and
//! lazy row_sparse against the operator applied to just the gradient's rows (absent rows of the
//! weight and of every state must stay bit-identical); plus bad arguments. Each test runs once
//! per test device (`device_test!`), its arrays made there by the helpers below.

mod cases;
mod cocob_layouts;
mod errors;
mod norm;

use crate::testing::test_device;
use crate::update::{RowSparseMode, UpdateArgs};
use crate::{device_test, DType, Element, Float, NDArray};

use cases::{cases, Case};

const LR: f64 = 0.05;
const WD: f64 = 0.01;
const RESCALE: f64 = 0.5;
const CLIP: f64 = 0.8;
const STEPS: u64 = 3;

/// Deterministic pseudo-random values in `[-a, a]`.
fn values(seed: u64, n: usize, a: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * a
        })
        .collect()
}

/// Sorted distinct row ids: about `frac` of `rows`, chosen by `seed`.
fn row_set(seed: u64, rows: usize, frac: f64) -> Vec<usize> {
    let v = values(seed, rows, 1.0);
    let ids: Vec<usize> = (0..rows).filter(|&r| (v[r] + 1.0) / 2.0 < frac).collect();
    if ids.is_empty() {
        vec![rows / 2]
    } else {
        ids
    }
}

/// The shared arguments of the tests, clipping on or off.
fn base(clip: bool, mode: RowSparseMode) -> UpdateArgs {
    UpdateArgs::new(LR, ())
        .with_wd(WD)
        .with_rescale_grad(RESCALE)
        .with_clip_gradient(clip.then_some(CLIP))
        .with_row_sparse(mode)
}

/// `a` on the test device.
fn on_device(a: NDArray) -> NDArray {
    a.to_device(test_device()).unwrap()
}

/// A dense array of `T` on the test device.
fn arr<T: Element>(v: &[f64], shape: &[usize]) -> NDArray {
    on_device(NDArray::from_vec(v.iter().map(|&x| T::from_f64(x)).collect(), shape).unwrap())
}

/// Zeros on the test device.
fn zeros(shape: &[usize], dtype: DType) -> NDArray {
    on_device(NDArray::zeros(shape, dtype).unwrap())
}

fn f64s(a: &NDArray) -> Vec<f64> {
    a.to_f64_vec()
}

/// Bit patterns, so that NaN and the sign of zero count.
fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `got` against `want` within `tol` relative (to `max(1, |want|)`); `tol == 0` asks for the
/// same bits.
fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if tol == 0.0 {
        if bits(got) != bits(want) {
            let i = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits());
            let i = i.unwrap_or(0);
            panic!("{what}: element {i}: {} vs {}", got[i], want[i]);
        }
        return;
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

/// The rows `ids` (of `row_len` values each) of `v`.
fn gather(v: &[f64], ids: &[usize], row_len: usize) -> Vec<f64> {
    ids.iter()
        .flat_map(|&r| v[r * row_len..(r + 1) * row_len].iter().copied())
        .collect()
}

/// A row_sparse gradient holding rows `ids` of the dense values `full`.
fn rsp<T: Element>(full: &[f64], ids: &[usize], shape: &[usize]) -> NDArray {
    let rl: usize = shape[1..].iter().product();
    let data = gather(full, ids, rl)
        .iter()
        .map(|&x| T::from_f64(x))
        .collect();
    let ids = ids.iter().map(|&r| r as i64).collect();
    on_device(NDArray::row_sparse_from_parts(data, ids, shape).unwrap())
}

/// Weight and zero states of one case.
fn setup<T: Element>(case: &Case, shape: &[usize]) -> (NDArray, Vec<NDArray>) {
    let n: usize = shape.iter().product();
    let w = arr::<T>(&values(1, n, 0.8), shape);
    let st_shape = (case.state_shape)(shape);
    let states = (0..case.states)
        .map(|_| zeros(&st_shape, T::DTYPE))
        .collect();
    (w, states)
}

/// Dense gradients against the f64 reference, several steps.
fn check_dense<T: Float>(case: &Case, shape: &[usize], clip: bool, tol: f64) {
    let n: usize = shape.iter().product();
    let (w, st) = setup::<T>(case, shape);
    let mut rw = f64s(&w);
    let sn: usize = (case.state_shape)(shape).iter().product();
    let mut rs = vec![vec![0.0; sn]; case.states];
    for t in 1..=STEPS {
        let g = arr::<T>(&values(100 + t, n, 2.5), shape);
        (case.run)(&w, &g, &st, &case.args(clip, RowSparseMode::Lazy), t, false).unwrap();
        // The reference reads the gradient as the kernel does, rounded to T.
        (case.reference)(t, clip.then_some(CLIP), &mut rw, &f64s(&g), &mut rs);
    }
    let what = format!("{} dense {shape:?} {:?} clip {clip}", case.name, T::DTYPE);
    assert_close(&what, &f64s(&w), &rw, tol);
    for (k, s) in st.iter().enumerate() {
        assert_close(&format!("{what} state {k}"), &f64s(s), &rs[k], tol);
    }
}

/// Standard row_sparse against the same operator with the densified gradient.
fn check_standard<T: Float>(case: &Case, shape: &[usize], clip: bool) {
    let n: usize = shape.iter().product();
    let (w, st) = setup::<T>(case, shape);
    let (dw, dst) = setup::<T>(case, shape);
    let args = case.args(clip, RowSparseMode::Standard);
    for t in 1..=STEPS {
        let full = values(100 + t, n, 2.5);
        let g = rsp::<T>(&full, &row_set(t, shape[0], 0.4), shape);
        (case.run)(&w, &g, &st, &args, t, false).unwrap();
        let dg = g.tostype(crate::SType::Dense).unwrap();
        (case.run)(&dw, &dg, &dst, &args, t, false).unwrap();
    }
    let what = format!(
        "{} standard {shape:?} {:?} clip {clip}",
        case.name,
        T::DTYPE
    );
    assert_close(&what, &f64s(&w), &f64s(&dw), case.sum_tol);
    for (k, (s, d)) in st.iter().zip(&dst).enumerate() {
        assert_close(
            &format!("{what} state {k}"),
            &f64s(s),
            &f64s(d),
            case.sum_tol,
        );
    }
}

/// Lazy row_sparse against the operator applied densely to the gradient's rows only.
fn check_lazy<T: Float>(case: &Case, shape: &[usize], clip: bool, frac: f64) {
    let n: usize = shape.iter().product();
    let rl = n / shape[0];
    // Elements per row of the states (the weight's, or GroupAdaGrad's one).
    let srl = (case.state_shape)(shape).iter().product::<usize>() / shape[0];
    let (w, st) = setup::<T>(case, shape);
    let args = case.args(clip, RowSparseMode::Lazy);
    let what = format!("{} lazy {shape:?} {:?} clip {clip}", case.name, T::DTYPE);
    for t in 1..=STEPS {
        let full = values(100 + t, n, 2.5);
        let ids = row_set(t, shape[0], frac);
        let g = rsp::<T>(&full, &ids, shape);
        let (w0, s0) = (f64s(&w), st.iter().map(f64s).collect::<Vec<_>>());
        // The reference: the gradient's rows of weight and states as dense arrays.
        let mut sub_shape = shape.to_vec();
        sub_shape[0] = ids.len();
        let sw = arr::<T>(&gather(&w0, &ids, rl), &sub_shape);
        let ss: Vec<NDArray> = s0
            .iter()
            .map(|s| arr::<T>(&gather(s, &ids, srl), &(case.state_shape)(&sub_shape)))
            .collect();
        let sg = arr::<T>(&gather(&full, &ids, rl), &sub_shape);
        (case.run)(&sw, &sg, &ss, &args, t, false).unwrap();
        (case.run)(&w, &g, &st, &args, t, false).unwrap();
        // Present rows as the reference computed them, absent rows untouched.
        let expect = |before: &[f64], sub: &[f64], rl: usize| {
            let mut e = before.to_vec();
            for (i, &r) in ids.iter().enumerate() {
                e[r * rl..(r + 1) * rl].copy_from_slice(&sub[i * rl..(i + 1) * rl]);
            }
            e
        };
        let tol = case.sum_tol;
        let (w1, s1) = (f64s(&w), st.iter().map(f64s).collect::<Vec<_>>());
        assert_close(&what, &w1, &expect(&w0, &f64s(&sw), rl), tol);
        for k in 0..case.states {
            let want = expect(&s0[k], &f64s(&ss[k]), srl);
            assert_close(&format!("{what} state {k}"), &s1[k], &want, tol);
        }
        // Absent rows exactly as they were, whatever the tolerance.
        for r in (0..shape[0]).filter(|r| ids.binary_search(r).is_err()) {
            let span = r * rl..(r + 1) * rl;
            assert_eq!(bits(&w1[span.clone()]), bits(&w0[span.clone()]), "{what}");
            let sspan = r * srl..(r + 1) * srl;
            for k in 0..case.states {
                let (got, was) = (&s1[k][sspan.clone()], &s0[k][sspan.clone()]);
                assert_eq!(bits(got), bits(was), "{what} state {k}");
            }
        }
    }
}

/// The shapes every case runs on: 2-D, 1-D, 3-D, and one large enough for the parallel paths.
const SHAPES: [&[usize]; 3] = [&[12, 5], &[9], &[6, 3, 2]];
const LARGE: &[usize] = &[1100, 128];

device_test! {
    fn dense_updates_match_the_f64_formulas() {
        for case in &cases() {
            for clip in [false, true] {
                for shape in SHAPES.iter().chain([&LARGE]) {
                    check_dense::<f32>(case, shape, clip, 2e-4);
                    check_dense::<f64>(case, shape, clip, 1e-9);
                }
            }
        }
    }
}

device_test! {
    fn standard_row_sparse_updates_equal_the_densified_gradient() {
        for case in &cases() {
            for clip in [false, true] {
                for shape in SHAPES.iter().chain([&LARGE]) {
                    check_standard::<f32>(case, shape, clip);
                    check_standard::<f64>(case, shape, clip);
                }
            }
        }
    }
}

device_test! {
    fn lazy_row_sparse_updates_touch_only_the_gradient_rows() {
        for case in &cases() {
            for clip in [false, true] {
                for shape in SHAPES {
                    check_lazy::<f32>(case, shape, clip, 0.4);
                    check_lazy::<f64>(case, shape, clip, 0.4);
                }
                // Few rows (the small-update paths) and most rows (the parallel span loop).
                for frac in [0.05, 0.97] {
                    check_lazy::<f32>(case, LARGE, clip, frac);
                    check_lazy::<f64>(case, LARGE, clip, frac);
                }
            }
        }
    }
}

device_test! {
    fn f64_weights_are_updated_in_f64() {
        // 0.1 is not an f32: an f64 update must not round through f32.
        let w = arr::<f64>(&[1.0], &[1]);
        let g = arr::<f64>(&[1.0], &[1]);
        crate::update::sgd_update(&w, &g, &UpdateArgs::new(0.1, ())).unwrap();
        assert_eq!(w.to_vec::<f64>().unwrap(), vec![1.0 - 0.1]);
        assert_eq!(w.dtype(), DType::F64);
    }
}

#[test]
fn every_update_operator_has_a_case() {
    let names: Vec<&str> = cases().iter().map(|c| c.name).collect();
    assert_eq!(names.len(), 19, "{names:?}");
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
}
