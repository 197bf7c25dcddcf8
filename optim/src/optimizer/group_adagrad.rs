//! GroupAdaGrad: AdaGrad with one accumulator per row, for embedding tables.

use sparrow_core::update::{group_adagrad_update, GroupAdaGradParams};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// GroupAdaGrad (MXNet's `contrib.GroupAdaGrad`, core's `group_adagrad_update`): per row `i`,
/// `g = clip(rescale*grad[i]); history[i] += mean(g^2); w[i] -= lr * g / (sqrt(history[i]) + eps)`.
///
/// One adaptive rate per row, so its state is `(rows, 1)` instead of the weight's size: AdaGrad
/// for embedding tables whose rows are the unit a sparse gradient touches. Lazy by default (a
/// row_sparse gradient changes only its rows; the standard mode gives the same result, since a
/// row without gradient does not move). Weight decay is not supported (as in MXNet): a step
/// with a non-zero `wd` fails. The weight needs at least one dimension.
pub struct GroupAdaGrad {
    /// Shared options (learning rate 0.01 from [`super::create`], MXNet's default).
    pub opts: OptimizerOptions,
    /// Added to the square root of the history (MXNet's `eps`, 1e-5).
    pub eps: f64,
}

impl GroupAdaGrad {
    /// GroupAdaGrad with eps 1e-5.
    pub fn new(learning_rate: f64) -> Self {
        GroupAdaGrad {
            opts: OptimizerOptions::new(learning_rate),
            eps: 1e-5,
        }
    }
}

impl Rule for GroupAdaGrad {
    const NAME: &'static str = "groupadagrad";
    fn state_names(&self) -> &'static [&'static str] {
        &["history"]
    }
    fn state_shape(&self, weight: &[usize]) -> Vec<usize> {
        // A 0-d weight keeps a (1, 1) history; its first step reports that it has no rows.
        vec![weight.first().copied().unwrap_or(1), 1]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [history] = st.arrays_n(Self::NAME)?;
        let hyper = GroupAdaGradParams { epsilon: self.eps };
        group_adagrad_update(w, g, history, &ctx.args(hyper))
    }
}
