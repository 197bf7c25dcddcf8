//! Every optimizer against an independent f64 transcription of its formula: dense gradients,
//! row_sparse gradients in lazy and standard mode, several steps with weight decay, gradient
//! clipping, rescaling and momentum on. Lazy mode must leave absent rows of the weight and of
//! every state array bit-identical.

use sparrow_core::{device_test, testing::test_device, NDArray};
use sparrow_optim::*;

const ROWS: usize = 12;
const COLS: usize = 5;
const LR: f64 = 0.05;
const WD: f64 = 0.01;
const RESCALE: f64 = 0.5;
const CLIP: f64 = 0.8;
const STEPS: usize = 4;
/// Rows some step's gradient holds; the others are never touched in lazy mode.
const ROW_SETS: [&[usize]; STEPS] = [&[1, 4, 5], &[4, 7, 9, 10], &[1, 10], &[5, 7, 9]];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Sgd,
    SgdMom,
    Nag,
    Adam,
    AdamW,
    AdaGrad,
    RmsProp,
    RmsPropCentered,
    AdaDelta,
    Ftrl,
    Signum,
    SignSgd,
    Adamax,
    Nadam,
    Ftml,
    Lamb,
}

const ALL: [Kind; 16] = [
    Kind::Sgd,
    Kind::SgdMom,
    Kind::Nag,
    Kind::Adam,
    Kind::AdamW,
    Kind::AdaGrad,
    Kind::RmsProp,
    Kind::RmsPropCentered,
    Kind::AdaDelta,
    Kind::Ftrl,
    Kind::Signum,
    Kind::SignSgd,
    Kind::Adamax,
    Kind::Nadam,
    Kind::Ftml,
    Kind::Lamb,
];

fn make(kind: Kind) -> Box<dyn Optimizer> {
    match kind {
        Kind::Sgd => Box::new(Sgd::new(LR)),
        Kind::SgdMom => Box::new(Sgd::with_momentum(LR, 0.9)),
        Kind::Nag => Box::new(Nag::new(LR, 0.9)),
        Kind::Adam => Box::new(Adam::new(LR)),
        Kind::AdamW => Box::new(AdamW::new(LR)),
        Kind::AdaGrad => Box::new(AdaGrad::new(LR)),
        Kind::RmsProp => Box::new(RMSProp {
            clip_weights: Some(0.9),
            ..RMSProp::new(LR)
        }),
        Kind::RmsPropCentered => Box::new(RMSProp::centered(LR)),
        Kind::AdaDelta => Box::new(AdaDelta::new()),
        Kind::Ftrl => Box::new(Ftrl::new(LR)),
        Kind::Signum => Box::new(Signum {
            wd_lh: 0.02,
            ..Signum::new(LR)
        }),
        Kind::SignSgd => Box::new(Signum {
            momentum: 0.0,
            ..Signum::new(LR)
        }),
        Kind::Adamax => Box::new(Adamax::new(LR)),
        Kind::Nadam => Box::new(Nadam::new(LR)),
        Kind::Ftml => Box::new(Ftml::new(LR)),
        Kind::Lamb => Box::new(Lamb::new(LR)),
    }
}

fn clipf(x: f64) -> f64 {
    x.clamp(-CLIP, CLIP)
}
fn sgn(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// Reference state of one parameter: up to three arrays and one scalar.
struct RefState {
    s: [Vec<f64>; 3],
    scalar: f64,
}

/// One reference step on the elements where `mask` is true (`g` is 0 elsewhere).
fn ref_step(kind: Kind, t: u64, w: &mut [f64], g: &[f64], mask: &[bool], st: &mut RefState) {
    let tt = t as f64;
    let n = w.len();
    let [s0, s1, s2] = &mut st.s;
    if kind == Kind::Lamb {
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-6);
        let mut u = vec![0.0; n];
        let (mut nw, mut nu) = (0.0, 0.0);
        for i in (0..n).filter(|&i| mask[i]) {
            let h = clipf(g[i] * RESCALE);
            s0[i] = b1 * s0[i] + (1.0 - b1) * h;
            s1[i] = b2 * s1[i] + (1.0 - b2) * h * h;
            let mh = s0[i] / (1.0 - b1.powf(tt));
            let vh = s1[i] / (1.0 - b2.powf(tt));
            u[i] = mh / (vh.sqrt() + eps) + WD * w[i];
            nw += w[i] * w[i];
            nu += u[i] * u[i];
        }
        let ratio = if nw == 0.0 || nu == 0.0 {
            1.0
        } else {
            nw.sqrt() / nu.sqrt()
        };
        for i in (0..n).filter(|&i| mask[i]) {
            w[i] -= LR * ratio * u[i];
        }
        return;
    }
    if kind == Kind::Nadam {
        let (b1, b2, eps, sd) = (0.9f64, 0.999f64, 1e-8, 0.004);
        let mu_t = b1 * (1.0 - 0.5 * 0.96f64.powf(tt * sd));
        let mu_next = b1 * (1.0 - 0.5 * 0.96f64.powf((tt + 1.0) * sd));
        st.scalar *= mu_t;
        let m_sched_next = st.scalar * mu_next;
        for i in (0..n).filter(|&i| mask[i]) {
            let h = clipf(g[i] * RESCALE + WD * w[i]);
            s0[i] = b1 * s0[i] + (1.0 - b1) * h;
            s1[i] = b2 * s1[i] + (1.0 - b2) * h * h;
            let gp = h / (1.0 - st.scalar);
            let mp = s0[i] / (1.0 - m_sched_next);
            let vp = s1[i] / (1.0 - b2.powf(tt));
            let mbar = (1.0 - mu_t) * gp + mu_next * mp;
            w[i] -= LR * mbar / (vp.sqrt() + eps);
        }
        return;
    }
    for i in (0..n).filter(|&i| mask[i]) {
        let (x, gi) = (w[i], g[i]);
        let (m, v, d) = (&mut s0[i], &mut s1[i], &mut s2[i]);
        w[i] = match kind {
            Kind::Sgd => (1.0 - LR * WD) * x - LR * clipf(RESCALE * gi),
            Kind::SgdMom => {
                *m = 0.9 * *m - LR * WD * x - LR * clipf(RESCALE * gi);
                x + *m
            }
            Kind::Nag => {
                let gr = clipf(RESCALE * gi);
                *m *= 0.9;
                let nw = x - *m + 1.9 * (*m - LR * (gr + WD * x));
                *m -= LR * (gr + WD * nw);
                nw
            }
            Kind::Adam => {
                let h = clipf(gi * RESCALE + WD * x);
                *m = 0.9 * *m + 0.1 * h;
                *v = 0.999 * *v + 0.001 * h * h;
                let lrt = LR * (1.0 - 0.999f64.powf(tt)).sqrt() / (1.0 - 0.9f64.powf(tt));
                x - lrt * *m / (v.sqrt() + 1e-8)
            }
            Kind::AdamW => {
                let h = clipf(gi * RESCALE);
                *m = 0.9 * *m + 0.1 * h;
                *v = 0.999 * *v + 0.001 * h * h;
                let lrt = LR * (1.0 - 0.999f64.powf(tt)).sqrt() / (1.0 - 0.9f64.powf(tt));
                x - lrt * (*m / (v.sqrt() + 1e-6) + WD * x)
            }
            Kind::AdaGrad => {
                let h = clipf(gi * RESCALE);
                *m += h * h;
                x - LR * (h / (*m + 1e-7).sqrt() + WD * x)
            }
            Kind::RmsProp => {
                let h = clipf(RESCALE * gi + WD * x);
                *m = 0.1 * h * h + 0.9 * *m;
                (x - LR * h / (*m + 1e-8).sqrt()).clamp(-0.9, 0.9)
            }
            Kind::RmsPropCentered => {
                let h = clipf(RESCALE * gi + WD * x);
                *m = 0.1 * h * h + 0.9 * *m;
                *v = 0.1 * h + 0.9 * *v;
                *d = 0.9 * *d - LR * h / (*m - *v * *v + 1e-8).sqrt();
                x + *d
            }
            Kind::AdaDelta => {
                let h = clipf(gi * RESCALE);
                *m = 0.9 * *m + 0.1 * h * h;
                let delta = (*v + 1e-5).sqrt() / (*m + 1e-5).sqrt() * h;
                *v = 0.9 * *v + 0.1 * delta * delta;
                x - (delta + WD * x)
            }
            Kind::Ftrl => {
                let h = clipf(gi * RESCALE);
                *m += h - ((*v + h * h).sqrt() - v.sqrt()) * x / LR;
                *v += h * h;
                if m.abs() > 0.01 {
                    (sgn(*m) * 0.01 - *m) / ((1.0 + v.sqrt()) / LR + WD)
                } else {
                    0.0
                }
            }
            Kind::Signum => {
                *m = 0.9 * *m - 0.1 * WD * x - 0.1 * clipf(RESCALE * gi);
                (1.0 - LR * 0.02) * x + LR * sgn(*m)
            }
            Kind::SignSgd => (1.0 - LR * WD) * x - LR * sgn(gi),
            Kind::Adamax => {
                let h = clipf(gi * RESCALE + WD * x);
                *m = 0.9 * *m + 0.1 * h;
                *v = (0.999 * *v).max(h.abs());
                if *v == 0.0 {
                    x
                } else {
                    x - LR / (1.0 - 0.9f64.powf(tt)) * *m / *v
                }
            }
            Kind::Ftml => {
                let (b1, b2) = (0.6f64, 0.999f64);
                let h = clipf(RESCALE * gi + WD * x);
                *v = b2 * *v + (1.0 - b2) * h * h;
                let dt = (1.0 - b1.powf(tt)) / LR * ((*v / (1.0 - b2.powf(tt))).sqrt() + 1e-8);
                // state order in sparrow: d, v, z -> here d = s2, v = s1, z = s0
                *m = b1 * *m + (1.0 - b1) * h - (dt - b1 * *d) * x;
                *d = dt;
                -*m / dt
            }
            Kind::Lamb | Kind::Nadam => unreachable!(),
        };
    }
}

/// Deterministic pseudo-random values in [-a, a] (no RNG crate needed).
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

fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Dense,
    Lazy,
    Standard,
}

fn run_case(kind: Kind, mode: Mode) {
    let w0 = to_f32(&values(1, ROWS * COLS, 0.8));
    let weight = NDArray::from_vec(w0.clone(), &[ROWS, COLS]).unwrap();
    let mut opt = make(kind);
    {
        let o = opt.options_mut();
        o.wd = WD;
        o.rescale_grad = RESCALE;
        o.clip_gradient = Some(CLIP);
        o.lazy_update = mode != Mode::Standard;
    }
    let mut state = opt.create_state(0, &weight).unwrap();
    let mut rw: Vec<f64> = w0.iter().map(|&x| x as f64).collect();
    let mut rs = RefState {
        s: [
            vec![0.0; ROWS * COLS],
            vec![0.0; ROWS * COLS],
            vec![0.0; ROWS * COLS],
        ],
        scalar: 1.0,
    };
    for (step, rows) in ROW_SETS.iter().enumerate() {
        let gfull = to_f32(&values(100 + step as u64, ROWS * COLS, 2.5));
        let (grad, g_ref, mask) = match mode {
            Mode::Dense => (
                NDArray::from_vec(gfull.clone(), &[ROWS, COLS]).unwrap(),
                gfull.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                vec![true; ROWS * COLS],
            ),
            Mode::Lazy | Mode::Standard => {
                let mut data = Vec::new();
                let mut g_ref = vec![0.0; ROWS * COLS];
                let mut mask = vec![mode == Mode::Standard; ROWS * COLS];
                for &r in rows.iter() {
                    for c in 0..COLS {
                        data.push(gfull[r * COLS + c]);
                        g_ref[r * COLS + c] = gfull[r * COLS + c] as f64;
                        mask[r * COLS + c] = true;
                    }
                }
                let ids = rows.iter().map(|&r| r as i64).collect();
                // Sparse constructors do not follow the default-device scope: move by hand.
                let g = NDArray::row_sparse_from_parts(data, ids, &[ROWS, COLS])
                    .and_then(|g| g.to_device(test_device()))
                    .unwrap();
                (g, g_ref, mask)
            }
        };
        opt.update(0, &weight, &grad, &mut state).unwrap();
        ref_step(kind, step as u64 + 1, &mut rw, &g_ref, &mask, &mut rs);
    }
    let got = weight.to_vec::<f32>().unwrap();
    for (i, (&g, &r)) in got.iter().zip(&rw).enumerate() {
        let tol = 2e-4 * r.abs().max(1.0);
        assert!(
            (g as f64 - r).abs() <= tol,
            "{kind:?} {mode:?}: element {i} (row {}) got {g}, reference {r}",
            i / COLS
        );
    }
    assert_eq!(state.t, STEPS as u64);
    if mode == Mode::Lazy {
        let touched: Vec<usize> = ROW_SETS.iter().flat_map(|r| r.iter().copied()).collect();
        for r in (0..ROWS).filter(|r| !touched.contains(r)) {
            for c in 0..COLS {
                let i = r * COLS + c;
                assert_eq!(
                    got[i].to_bits(),
                    w0[i].to_bits(),
                    "{kind:?}: weight row {r} changed"
                );
                for (name, a) in &state.arrays {
                    let v = a.to_vec::<f32>().unwrap()[i];
                    assert_eq!(
                        v.to_bits(),
                        0f32.to_bits(),
                        "{kind:?}: state {name} row {r} changed"
                    );
                }
            }
        }
    }
}

device_test! {
fn dense_gradients_match_reference() {
    for k in ALL {
        run_case(k, Mode::Dense);
    }
}
}

device_test! {
fn row_sparse_lazy_matches_reference_and_keeps_absent_rows() {
    for k in ALL {
        run_case(k, Mode::Lazy);
    }
}
}

device_test! {
fn row_sparse_standard_matches_reference() {
    for k in ALL {
        run_case(k, Mode::Standard);
    }
}
}
