//! The test case of COCOB.

use crate::update::*;

use super::super::{LR, RESCALE, WD};
use super::{case, clipf, elementwise, p, with, Case};

/// One COCOB step of one element of the f64 reference, `st = [l, s, r, theta, w0]`.
fn step(c: Option<f64>, w: &mut f64, g: f64, st: &mut [f64]) {
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
}

/// The weight's shape with a last axis of 5: the packed operator's state.
fn packed_shape(shape: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.push(COCOB_STATES);
    s
}

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    let five = case(
        "cocob_update",
        5,
        true,
        |w, g, s, a, _, x| {
            let h = CocobParams { alpha: p(100.0, x) };
            cocob_update(w, g, &s[0], &s[1], &s[2], &s[3], &s[4], &with(a, h))
        },
        |_, c, w, g, s| elementwise(w, g, s, |w, g, st| step(c, w, g, st)),
    );
    let packed = Case {
        state_shape: packed_shape,
        ..case(
            "cocob_packed_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = CocobParams { alpha: p(100.0, x) };
                cocob_packed_update(w, g, &s[0], &with(a, h))
            },
            // The same reference, on each element's five values side by side.
            |_, c, w, g, s| {
                let st = s[0].chunks_exact_mut(COCOB_STATES);
                for ((w, &g), st) in w.iter_mut().zip(g).zip(st) {
                    step(c, w, g, st);
                }
            },
        )
    };
    vec![five, packed]
}
