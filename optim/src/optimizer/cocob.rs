//! COCOB, the parameter-free coin-betting update.

use sparrow_core::update::{cocob_update, CocobParams};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// COCOB-Backprop (core's `cocob_update`; Orabona and Tommasi, 2017): per coordinate, bet a
/// fraction of the wealth won so far in the direction of the summed negative gradients,
/// `w <- w0 - lr * theta / (l * max(s + l, alpha*l)) * (l + r)` with `l` the largest |gradient|,
/// `s` their sum, `theta` the sum of the gradients and `r` the reward.
///
/// No learning rate to tune: the learning rate (1 by default) only scales the bet. Not in
/// MXNet; the parameter-free kind of update Vowpal Wabbit's `--coin` uses for sparse linear
/// models. Lazy by default as sparrow's other optimizers: a row_sparse gradient changes only
/// its rows and their states.
pub struct Cocob {
    /// Shared options (learning rate 1: the paper's algorithm).
    pub opts: OptimizerOptions,
    /// Caps the bet while few gradients have been seen: the step is at most `1/alpha` of
    /// the way until the summed |gradients| reach `alpha` times the largest. 20 by default;
    /// the paper's 100 (for deep networks) is a slow start on sparse linear models, whose rare
    /// features see few gradients: on the learnable 1M x 40 LibSVM data (one pass, batch 256)
    /// alpha 100 / 40 / 20 / 10 / 4 gave held-out AUC 0.766 / 0.773 / 0.776 / 0.775 / 0.764.
    pub alpha: f64,
}

impl Cocob {
    /// COCOB with alpha 20 and learning rate 1.
    pub fn new() -> Self {
        Cocob {
            opts: OptimizerOptions::new(1.0),
            alpha: 20.0,
        }
    }
}

impl Default for Cocob {
    fn default() -> Self {
        Cocob::new()
    }
}

impl Rule for Cocob {
    const NAME: &'static str = "cocob";
    fn state_names(&self) -> &'static [&'static str] {
        &["l", "s", "r", "theta", "w0"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [l, s, r, theta, w0] = st.arrays_n(Self::NAME)?;
        let hyper = CocobParams { alpha: self.alpha };
        cocob_update(w, g, l, s, r, theta, w0, &ctx.args(hyper))
    }
}
