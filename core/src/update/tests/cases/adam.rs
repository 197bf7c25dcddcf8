//! The test cases of Adam, AdamW, Adamax and Nadam.

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, elementwise, p, with, Case};

const ADAM: AdamParams = AdamParams {
    beta1: 0.9,
    beta2: 0.999,
    epsilon: 1e-8,
};

/// Nadam's `mu_t` and the schedule product `M_{t-1}` the caller passes at update `t`.
fn nadam_mu(t: u64) -> f64 {
    0.9 * (1.0 - 0.5 * 0.96f64.powf(t as f64 * 0.004))
}
fn nadam_prev_schedule(t: u64) -> f64 {
    (1..t).map(nadam_mu).product()
}

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case(
            "adam_update",
            2,
            true,
            |w, g, s, a, _, x| {
                let h = AdamParams {
                    beta1: p(0.9, x),
                    ..ADAM
                };
                adam_update(w, g, &s[0], &s[1], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE + WD * *w, c);
                    st[0] = 0.9 * st[0] + 0.1 * h;
                    st[1] = 0.999 * st[1] + 0.001 * h * h;
                    *w -= LR * st[0] / (st[1].sqrt() + 1e-8);
                })
            },
        ),
        case(
            "adamw_update",
            2,
            true,
            |w, g, s, a, _, x| {
                let h = AdamParams {
                    beta1: p(0.9, x),
                    epsilon: 1e-6,
                    ..ADAM
                };
                adamw_update(w, g, &s[0], &s[1], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE, c);
                    st[0] = 0.9 * st[0] + 0.1 * h;
                    st[1] = 0.999 * st[1] + 0.001 * h * h;
                    *w -= LR * (st[0] / (st[1].sqrt() + 1e-6) + WD * *w);
                })
            },
        ),
        case(
            "adamax_update",
            2,
            true,
            |w, g, s, a, _, x| {
                let h = AdamaxParams {
                    beta1: p(0.9, x),
                    beta2: 0.999,
                };
                adamax_update(w, g, &s[0], &s[1], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE + WD * *w, c);
                    st[0] = 0.9 * st[0] + 0.1 * h;
                    st[1] = (0.999 * st[1]).max(h.abs());
                    if st[1] != 0.0 {
                        *w -= LR * st[0] / st[1];
                    }
                })
            },
        ),
        case(
            "nadam_update",
            2,
            true,
            |w, g, s, a, t, x| {
                let h = NadamParams {
                    beta1: p(0.9, x),
                    beta2: 0.999,
                    epsilon: 1e-8,
                    schedule_decay: 0.004,
                    t,
                    m_schedule: nadam_prev_schedule(t),
                };
                let m = nadam_update(w, g, &s[0], &s[1], &with(a, h))?;
                assert_eq!(
                    m,
                    nadam_prev_schedule(t + 1),
                    "nadam_update's returned schedule"
                );
                Ok(())
            },
            |t, c, w, g, s| {
                let (mu_t, mu_next) = (nadam_mu(t), nadam_mu(t + 1));
                let sched = nadam_prev_schedule(t) * mu_t;
                let sched_next = sched * mu_next;
                let dv = 1.0 - 0.999f64.powi(t as i32);
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE + WD * *w, c);
                    st[0] = 0.9 * st[0] + 0.1 * h;
                    st[1] = 0.999 * st[1] + 0.001 * h * h;
                    let mbar =
                        (1.0 - mu_t) * h / (1.0 - sched) + mu_next * st[0] / (1.0 - sched_next);
                    *w -= LR * mbar / ((st[1] / dv).sqrt() + 1e-8);
                })
            },
        ),
    ]
}
