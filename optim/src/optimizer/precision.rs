//! `multi_precision` (MXNet's option of the same name): an f32 master copy of each f16 / bf16
//! weight, kept as the state array [`MASTER_SLOT`].
//!
//! With the option on, a half weight's state holds the master (the weight widened when the
//! state is made) and f32 states. Each step runs the optimizer's update rule on the master,
//! with the gradient widened to f32 (exactly: every half value is an f32 value), so the master
//! follows the same trajectory as an f32 weight given the same gradients, bit for bit; the half
//! weight is then the master rounded to nearest even. Small updates therefore accumulate in
//! the master instead of being rounded away at every step. Without the option a half weight is
//! updated in f32 arithmetic and stored rounded, states in half (what MXNet does then too).
//! f32 and f64 weights are updated in their own precision either way (MXNet ignores the option
//! for them as well).

use sparrow_core::{DType, Error, NDArray, Result};

use super::{OptimizerOptions, State};

/// The name of the master copy among a state's arrays (MXNet's `weight32`).
pub const MASTER_SLOT: &str = "weight32";

/// Whether `opts` keep an f32 master copy for a weight of `dtype`.
pub fn uses_master(opts: &OptimizerOptions, dtype: DType) -> bool {
    opts.multi_precision && dtype.is_half()
}

/// The array a new state is shaped and typed after: the f32 master copy of a half weight when
/// `multi_precision` is on, the weight itself otherwise.
pub(super) fn state_template(opts: &OptimizerOptions, weight: &NDArray) -> Result<Option<NDArray>> {
    if !uses_master(opts, weight.dtype()) {
        return Ok(None);
    }
    // A fresh dense f32 array (not sharing the weight's buffer).
    Ok(Some(weight.astype(DType::F32)?))
}

/// Run `apply` (one update of the optimizer's rule) on the master copy when the state has one,
/// and write the half weight as the master rounded; on the weight itself otherwise.
pub(super) fn step_with_master(
    weight: &NDArray,
    grad: &NDArray,
    state: &mut State,
    apply: impl FnOnce(&NDArray, &NDArray, &mut State) -> Result<()>,
) -> Result<()> {
    let Some(pos) = state.arrays.iter().position(|(n, _)| n == MASTER_SLOT) else {
        return apply(weight, grad, state);
    };
    let master = state.arrays[pos].1.clone();
    if master.dtype() != DType::F32 || master.shape() != weight.shape() {
        return Err(Error::arg(
            "update",
            format!(
                "the master copy '{MASTER_SLOT}' is {:?} {}, the weight is {:?}: it must be \
                 float32 of the weight's shape",
                master.shape(),
                master.dtype().name(),
                weight.shape()
            ),
        ));
    }
    // The rule sees the states it declares, in order, without the master.
    let slot = state.arrays.remove(pos);
    let done = grad
        .astype(DType::F32)
        .and_then(|g32| apply(&master, &g32, state));
    state.arrays.insert(pos, slot);
    done?;
    weight.assign(&master.astype(weight.dtype())?);
    Ok(())
}
