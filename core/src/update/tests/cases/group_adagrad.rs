//! The test case of GroupAdaGrad: a history of one value per row, no weight decay.

use crate::update::*;

use super::super::{LR, RESCALE};
use super::{case, clipf, p, with, Case};

const EPS: f64 = 1e-5;

/// One case per operator.
pub(super) fn cases() -> Vec<Case> {
    vec![Case {
        state_shape: |shape| vec![shape.first().copied().unwrap_or(1), 1],
        takes_wd: false,
        ..case(
            "group_adagrad_update",
            1,
            true,
            |w, g, s, a, _, x| {
                let h = GroupAdaGradParams { epsilon: p(EPS, x) };
                group_adagrad_update(w, g, &s[0], &with(a, h))
            },
            reference,
        )
    }]
}

/// MXNet's kernel in f64: per row, the history grows by the mean of the squared clipped
/// gradient, and the row moves by `lr * g / (sqrt(history) + eps)`.
fn reference(_: u64, c: Option<f64>, w: &mut [f64], g: &[f64], s: &mut [Vec<f64>]) {
    let rows = s[0].len();
    if rows == 0 || w.is_empty() {
        return;
    }
    let rl = w.len() / rows;
    for (r, h) in s[0].iter_mut().enumerate() {
        let span = r * rl..(r + 1) * rl;
        let gr: Vec<f64> = g[span.clone()]
            .iter()
            .map(|&x| clipf(x * RESCALE, c))
            .collect();
        *h += gr.iter().map(|x| x * x).sum::<f64>() / rl as f64;
        let denom = h.sqrt() + EPS;
        for (wj, gj) in w[span].iter_mut().zip(&gr) {
            *wj -= LR * gj / denom;
        }
    }
}
