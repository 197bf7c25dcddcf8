//! The test case of COCOB.

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, elementwise, p, with, Case};

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![case(
        "cocob_update",
        5,
        true,
        |w, g, s, a, _, x| {
            let h = CocobParams { alpha: p(100.0, x) };
            cocob_update(w, g, &s[0], &s[1], &s[2], &s[3], &s[4], &with(a, h))
        },
        |_, c, w, g, s| {
            elementwise(w, g, s, |w, g, st| {
                let h = clipf(g * RESCALE, c) + WD * *w;
                if st[0] == 0.0 {
                    st[4] = *w;
                }
                st[0] = st[0].max(h.abs());
                if st[0] == 0.0 {
                    return;
                }
                st[1] += h.abs();
                st[2] = (st[2] - h * (*w - st[4])).max(0.0);
                st[3] += h;
                let scale = (st[1] + st[0]).max(100.0 * st[0]);
                *w = st[4] - LR * st[3] / (st[0] * scale) * (st[0] + st[2]);
            })
        },
    )]
}
