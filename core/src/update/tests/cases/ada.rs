//! The test cases of AdaGrad, AdaDelta and RMSProp (plain and centered).

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, elementwise, p, with, Case};

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case(
            "adagrad_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = AdaGradParams {
                    epsilon: p(1e-7, x),
                };
                adagrad_update(w, g, &s[0], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE, c);
                    st[0] += h * h;
                    *w -= LR * (h / (st[0] + 1e-7).sqrt() + WD * *w);
                })
            },
        ),
        case(
            "adadelta_update",
            2,
            true,
            |w, g, s, a, _, x| {
                let h = AdaDeltaParams {
                    rho: p(0.9, x),
                    epsilon: 1e-5,
                };
                adadelta_update(w, g, &s[0], &s[1], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE, c);
                    st[0] = 0.9 * st[0] + 0.1 * h * h;
                    let d = (st[1] + 1e-5).sqrt() / (st[0] + 1e-5).sqrt() * h;
                    st[1] = 0.9 * st[1] + 0.1 * d * d;
                    *w -= d + WD * *w;
                })
            },
        ),
        case(
            "rmsprop_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = RmsPropParams {
                    gamma1: p(0.9, x),
                    epsilon: 1e-8,
                    clip_weights: Some(0.75),
                };
                rmsprop_update(w, g, &s[0], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(RESCALE * g + WD * *w, c);
                    st[0] = 0.1 * h * h + 0.9 * st[0];
                    *w = (*w - LR * h / (st[0] + 1e-8).sqrt()).clamp(-0.75, 0.75);
                })
            },
        ),
        case(
            "rmspropalex_update",
            3,
            true,
            |w, g, s, a, _, x| {
                let h = RmsPropAlexParams {
                    gamma1: p(0.9, x),
                    gamma2: 0.9,
                    epsilon: 1e-8,
                    clip_weights: None,
                };
                rmspropalex_update(w, g, &s[0], &s[1], &s[2], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(RESCALE * g + WD * *w, c);
                    st[0] = 0.1 * h * h + 0.9 * st[0];
                    st[1] = 0.1 * h + 0.9 * st[1];
                    st[2] = 0.9 * st[2] - LR * h / (st[0] - st[1] * st[1] + 1e-8).sqrt();
                    *w += st[2];
                })
            },
        ),
    ]
}
