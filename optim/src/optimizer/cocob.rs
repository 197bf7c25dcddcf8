//! COCOB, the parameter-free coin-betting update.

use sparrow_core::update::{cocob_packed_update, CocobParams, COCOB_STATES};
use sparrow_core::{Error, NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// COCOB-Backprop (core's `cocob_update`; Orabona and Tommasi, 2017): per coordinate, bet a
/// fraction of the wealth won so far in the direction of the summed negative gradients,
/// `w <- w0 - lr * theta / (l * max(s + l, alpha*l)) * (l + r)` with `l` the largest |gradient|,
/// `s` their sum, `theta` the sum of the gradients and `r` the reward.
///
/// No learning rate to tune: the learning rate only scales the bet (1 is the paper's
/// algorithm; sparrow's default is 0.6, see below). Not in MXNet; the parameter-free kind of update Vowpal Wabbit's `--coin` uses for sparse linear
/// models. Lazy by default as sparrow's other optimizers: a row_sparse gradient changes only
/// its rows and their states.
///
/// The five states of a weight element are kept side by side in one array, `"packed"`, of the
/// weight's shape plus a last axis of 5 (`l, s, r, theta, w0`): one memory access per touched
/// row instead of five. State files written before this layout (five arrays `l`, `s`, `r`,
/// `theta`, `w0`) are packed when they load.
///
/// Defaults (learning rate 0.6, alpha 10) were chosen on the learnable 1M x 40 LibSVM data of
/// the Vowpal Wabbit anchor (a logistic `Dense(1)`, one pass, held-out AUC; VW `--coin` 0.7763):
///
/// | batch | lr 1, alpha 20 | lr 1, alpha 14 | lr 0.7, alpha 10 | **lr 0.6, alpha 10** | lr 0.5, alpha 10 | lr 0.5, alpha 20 |
/// |---|---|---|---|---|---|---|
/// | 1024 | 0.7755 | 0.7757 | 0.7774 | **0.7776** | 0.7773 | 0.7743 |
/// | 256 | 0.7757 | | | **0.7777** | | |
///
/// A bet of the paper's full size overshoots on mini-batches of a sparse model (lr 1.5: 0.7727,
/// lr 2 with alpha 30: 0.7705); a smaller one with a lower cap starts the rare features sooner
/// and keeps the frequent ones steady.
pub struct Cocob {
    /// Shared options (learning rate 0.6; 1 is the paper's algorithm).
    pub opts: OptimizerOptions,
    /// Caps the bet while few gradients have been seen: the step is at most `1/alpha` of
    /// the way until the summed |gradients| reach `alpha` times the largest. 10 by default;
    /// the paper's 100 (for deep networks) is a slow start on sparse linear models, whose rare
    /// features see few gradients: on the learnable 1M x 40 LibSVM data (one pass, batch 256,
    /// lr 1) alpha 100 / 40 / 20 / 10 / 4 gave held-out AUC 0.766 / 0.773 / 0.776 / 0.775 /
    /// 0.764; with lr 0.6, alpha 10 gives 0.7777 (the table above).
    pub alpha: f64,
}

impl Cocob {
    /// COCOB with alpha 10 and learning rate 0.6 (see the type's documentation).
    pub fn new() -> Self {
        Cocob {
            opts: OptimizerOptions::new(0.6),
            alpha: 10.0,
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
        &[PACKED]
    }
    fn state_shape(&self, weight: &[usize]) -> Vec<usize> {
        let mut s = weight.to_vec();
        s.push(COCOB_STATES);
        s
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [packed] = st.arrays_n(Self::NAME)?;
        let hyper = CocobParams { alpha: self.alpha };
        cocob_packed_update(w, g, packed, &ctx.args(hyper))
    }
}

/// The name of COCOB's one state array.
pub(crate) const PACKED: &str = "packed";
/// The state arrays of the earlier layout, in the order they are packed.
pub(crate) const LEGACY_SLOTS: [&str; COCOB_STATES] = ["l", "s", "r", "theta", "w0"];

/// COCOB states in the five-array layout of earlier state files (`l`, `s`, `r`, `theta`,
/// `w0`, each shaped like the weight) packed into the one array [`Cocob`] keeps: element `j`'s
/// five values side by side. States already packed are returned as they are; any other set
/// of arrays is an error naming what was found.
pub(crate) fn pack_states(state: State) -> Result<State> {
    const OP: &str = "cocob states";
    let names: Vec<&str> = state.arrays.iter().map(|(n, _)| n.as_str()).collect();
    // Packed already, with or without a multi_precision master (which is never legacy).
    if names == [PACKED] || names == [PACKED, super::MASTER_SLOT] {
        return Ok(state);
    }
    if names != LEGACY_SLOTS {
        return Err(Error::arg(
            OP,
            format!(
                "expected the array '{PACKED}' or the five arrays {LEGACY_SLOTS:?}, got {names:?}"
            ),
        ));
    }
    let first = &state.arrays[0].1;
    let (shape, dtype) = (first.shape().to_vec(), first.dtype());
    if let Some((n, a)) = state
        .arrays
        .iter()
        .find(|(_, a)| a.shape()[..] != shape[..] || a.dtype() != dtype)
    {
        return Err(Error::shape(
            OP,
            format!(
                "state '{n}' is {:?} {}, state 'l' is {shape:?} {}",
                a.shape(),
                a.dtype().name(),
                dtype.name()
            ),
        ));
    }
    let mut packed_shape = shape.clone();
    packed_shape.push(COCOB_STATES);
    let packed = match dtype {
        sparrow_core::DType::F32 => interleave::<f32>(&state, &packed_shape)?,
        sparrow_core::DType::F64 => interleave::<f64>(&state, &packed_shape)?,
        other => {
            return Err(Error::dtype(
                OP,
                format!("states must be float32 or float64, got {}", other.name()),
            ))
        }
    };
    Ok(State {
        t: state.t,
        arrays: vec![(PACKED.to_string(), packed)],
        scalars: state.scalars,
    })
}

/// The five arrays of `state` as one, element `j`'s values at `5j..5j + 5`.
fn interleave<T: sparrow_core::Element>(state: &State, shape: &[usize]) -> Result<NDArray> {
    let parts = state
        .arrays
        .iter()
        .map(|(_, a)| a.to_vec::<T>())
        .collect::<Result<Vec<_>>>()?;
    let n = parts[0].len();
    let mut out = Vec::with_capacity(COCOB_STATES * n);
    for j in 0..n {
        out.extend(parts.iter().map(|p| p[j]));
    }
    NDArray::from_vec(out, shape)
}
