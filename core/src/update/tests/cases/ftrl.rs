//! The test cases of FTRL and FTML.

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, elementwise, p, sgn, with, Case};

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case(
            "ftrl_update",
            2,
            true,
            |w, g, s, a, _, x| {
                let h = FtrlParams {
                    lambda1: p(0.01, x),
                    beta: 1.0,
                };
                ftrl_update(w, g, &s[0], &s[1], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(g * RESCALE, c);
                    st[0] += h - ((st[1] + h * h).sqrt() - st[1].sqrt()) * *w / LR;
                    st[1] += h * h;
                    *w = if st[0].abs() > 0.01 {
                        (sgn(st[0]) * 0.01 - st[0]) / ((1.0 + st[1].sqrt()) / LR + WD)
                    } else {
                        0.0
                    };
                })
            },
        ),
        case(
            "ftml_update",
            3,
            true,
            |w, g, s, a, t, x| {
                let h = FtmlParams {
                    beta1: p(0.6, x),
                    beta2: 0.999,
                    epsilon: 1e-8,
                    t,
                };
                ftml_update(w, g, &s[0], &s[1], &s[2], &with(a, h))
            },
            |t, c, w, g, s| {
                let (c1, c2) = (1.0 - 0.6f64.powf(t as f64), 1.0 - 0.999f64.powf(t as f64));
                elementwise(w, g, s, |w, g, st| {
                    let h = clipf(RESCALE * g + WD * *w, c);
                    st[1] = 0.999 * st[1] + 0.001 * h * h;
                    let dt = c1 / LR * ((st[1] / c2).sqrt() + 1e-8);
                    st[2] = 0.6 * st[2] + 0.4 * h - (dt - 0.6 * st[0]) * *w;
                    st[0] = dt;
                    *w = -st[2] / dt;
                })
            },
        ),
    ]
}
