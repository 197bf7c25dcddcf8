//! The test cases of SGD, momentum, NAG, signSGD and Signum.

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, elementwise, p, sgn, with, Case};

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case(
            "sgd_update",
            0,
            false,
            |w, g, _, a, _, _| sgd_update(w, g, a),
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, _| {
                    *w = (1.0 - LR * WD) * *w - LR * clipf(RESCALE * g, c)
                })
            },
        ),
        case(
            "sgd_mom_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = MomentumParams {
                    momentum: p(0.9, x),
                };
                sgd_mom_update(w, g, &s[0], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    st[0] = 0.9 * st[0] - LR * WD * *w - LR * clipf(RESCALE * g, c);
                    *w += st[0];
                })
            },
        ),
        case(
            "nag_mom_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = MomentumParams {
                    momentum: p(0.9, x),
                };
                nag_mom_update(w, g, &s[0], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    let gr = clipf(RESCALE * g, c);
                    st[0] *= 0.9;
                    *w = *w - st[0] + 1.9 * (st[0] - LR * (gr + WD * *w));
                    st[0] -= LR * (gr + WD * *w);
                })
            },
        ),
        case(
            "signsgd_update",
            0,
            false,
            |w, g, _, a, _, _| signsgd_update(w, g, a),
            |_, _, w, g, s| elementwise(w, g, s, |w, g, _| *w = (1.0 - LR * WD) * *w - LR * sgn(g)),
        ),
        case(
            "signum_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = SignumParams {
                    momentum: p(0.9, x),
                    wd_lh: 0.02,
                };
                signum_update(w, g, &s[0], &with(a, h))
            },
            |_, c, w, g, s| {
                elementwise(w, g, s, |w, g, st| {
                    st[0] = 0.9 * st[0] - 0.1 * WD * *w - 0.1 * clipf(RESCALE * g, c);
                    *w = (1.0 - LR * 0.02) * *w + LR * sgn(st[0]);
                })
            },
        ),
    ]
}
