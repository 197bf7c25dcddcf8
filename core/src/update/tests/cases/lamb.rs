//! The test cases of LAMB.

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, p, with, Case};

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![Case {
        sum_tol: 1e-5,
        ..case(
            "lamb_update",
            2,
            true,
            |w, g, s, a, t, x| {
                let h = LambParams {
                    beta1: p(0.9, x),
                    beta2: 0.999,
                    epsilon: 1e-6,
                    t,
                    bias_correction: true,
                    lower_bound: Some(0.5),
                    upper_bound: Some(50.0),
                };
                lamb_update(w, g, &s[0], &s[1], &with(a, h))
            },
            lamb_reference,
        )
    }]
}

fn lamb_reference(t: u64, c: Option<f64>, w: &mut [f64], g: &[f64], s: &mut [Vec<f64>]) {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-6);
    let (d1, d2) = (1.0 - b1.powi(t as i32), 1.0 - b2.powi(t as i32));
    let mut u = vec![0.0; w.len()];
    let (mut nw, mut nu) = (0.0, 0.0);
    for i in 0..w.len() {
        let h = clipf(g[i] * RESCALE, c);
        s[0][i] = b1 * s[0][i] + (1.0 - b1) * h;
        s[1][i] = b2 * s[1][i] + (1.0 - b2) * h * h;
        u[i] = (s[0][i] / d1) / ((s[1][i] / d2).sqrt() + eps) + WD * w[i];
        nw += w[i] * w[i];
        nu += u[i] * u[i];
    }
    let r1 = nw.sqrt().clamp(0.5, 50.0);
    let r2 = nu.sqrt();
    let lr = if r1 == 0.0 || r2 == 0.0 {
        LR
    } else {
        LR * r1 / r2
    };
    for i in 0..w.len() {
        w[i] -= lr * u[i];
    }
}
