//! Optimizer updates as operators: MXNet's `sgd_update`, `sgd_mom_update`, `adam_update`,
//! `ftrl_update`, `group_adagrad_update`, ... each updating a dense weight and its dense state arrays in place from a
//! dense or row_sparse gradient.
//!
//! Every operator takes the weight, the gradient, its state arrays (handles, updated in place)
//! and an [`UpdateArgs`] holding what MXNet passes to its kernels: the learning rate, the
//! weight decay, the gradient's rescale factor, the clip threshold, the row_sparse mode and the
//! operator's own hyper-parameters. The formulas follow MXNet 1.9.1's kernels element for
//! element (rescale, then clip, then weight decay where MXNet puts it), in the weight's dtype
//! (f32 or f64); the bookkeeping MXNet's Python `Optimizer` does (update counts, schedules,
//! Adam's bias-corrected rate) stays with the caller.
//!
//! A row_sparse gradient is applied in one of two ways ([`RowSparseMode`]):
//! - lazy: only the gradient's rows of the weight *and* of every state change; nothing else is
//!   read or written, so a step costs time proportional to the gradient's rows;
//! - standard: every row, rows absent from the gradient with a zero gradient (what a dense
//!   gradient holding the same values would do).
//!
//! ```
//! use sparrow_core::update::{sgd_mom_update, MomentumParams, UpdateArgs};
//! use sparrow_core::{DType, NDArray};
//! let w = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let mom = NDArray::zeros(&[2, 2], DType::F32).unwrap();
//! // Only row 1 has a gradient: lazily, row 0 and its momentum stay as they are.
//! let g = NDArray::row_sparse_from_parts(vec![1.0f32, -1.0], vec![1], &[2, 2]).unwrap();
//! let args = UpdateArgs::new(0.5, MomentumParams { momentum: 0.9 });
//! sgd_mom_update(&w, &g, &mom, &args).unwrap();
//! assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 2.5, 4.5]);
//! assert_eq!(mom.to_vec::<f32>().unwrap(), vec![0.0, 0.0, -0.5, 0.5]);
//! ```
//!
//! The operators validate here and name their formula with an `UpdateRule`; the weight's
//! storage runs it on whichever backend holds it (`crate::storage::update`). On the CPU one
//! shared span loop (`crate::cpu::update`) walks the weight and states in parallel spans lined
//! up with the gradient.

mod ada;
mod adam;
mod args;
mod check;
mod cocob;
mod ftrl;
mod group_adagrad;
mod lamb;
mod norm;
mod sgd;

#[cfg(test)]
mod tests;

pub use ada::{
    adadelta_update, adagrad_update, rmsprop_update, rmspropalex_update, AdaDeltaParams,
    AdaGradParams, RmsPropAlexParams, RmsPropParams,
};
pub use adam::{
    adam_update, adamax_update, adamw_update, nadam_update, AdamParams, AdamaxParams, NadamParams,
};
pub use args::{RowSparseMode, UpdateArgs};
pub use cocob::{cocob_packed_update, cocob_update, CocobParams, COCOB_STATES};
pub use ftrl::{ftml_update, ftrl_update, FtmlParams, FtrlParams};
pub use group_adagrad::{group_adagrad_update, GroupAdaGradParams};
pub use lamb::{lamb_update, LambParams};
pub use norm::{scale_stored, stored_sum_sq};
pub use sgd::{
    nag_mom_update, sgd_mom_update, sgd_update, signsgd_update, signum_update, MomentumParams,
    SignumParams,
};

use crate::error::{Error, Result};
use crate::storage::{GradRef, UpdateRule, UpdateScalars};
use crate::{ArrayData, NDArray};

/// `base^t` for an update count `t` (bias corrections): `powi`, so results stay bit-identical
/// to MXNet's, while `t` fits an i32, `powf` beyond. An `as i32` there wrapped `2^31` to a
/// negative exponent (`0.9^-2147483648` is inf), and one step from a state file saved at
/// `t = 2^31 - 1` turned every weight NaN.
pub fn pow_count(base: f64, t: u64) -> f64 {
    match i32::try_from(t) {
        Ok(t) => base.powi(t),
        Err(_) => base.powf(t as f64),
    }
}

impl<P> UpdateArgs<P> {
    /// lr, wd, rescale_grad and clip_gradient as the backend receives them.
    fn scalars(&self) -> UpdateScalars {
        UpdateScalars {
            lr: self.lr,
            wd: self.wd,
            rescale_grad: self.rescale_grad,
            clip: self.clip_gradient,
        }
    }
}

/// Check the arrays of `op` (`check::check_arrays`: dtypes, shapes, storage types, no array
/// passed twice) and run `rule` on them once, the states named for the errors.
fn checked_run<P, const N: usize>(
    op: &'static str,
    weight: &NDArray,
    grad: &NDArray,
    states: [(&'static str, &NDArray); N],
    args: &UpdateArgs<P>,
    rule: UpdateRule,
) -> Result<[f64; 2]> {
    check::check_arrays(op, weight, grad, &states)?;
    run(weight, grad, states.map(|(_, s)| s), args, rule)
}

/// Run `rule` on the weight's storage: lock the weight and each state for writing, then the
/// gradient for reading (the order every update has always taken), and hand their buffers to
/// the backend in one call. The operator has checked the arrays (`check::check_arrays`).
/// Returns what the rule accumulates (LAMB's norms; zeros otherwise).
fn run<P, const N: usize>(
    weight: &NDArray,
    grad: &NDArray,
    states: [&NDArray; N],
    args: &UpdateArgs<P>,
    rule: UpdateRule,
) -> Result<[f64; 2]> {
    let op = rule.name();
    let mut wguard = weight.write();
    let rows = wguard.shape().first().copied().unwrap_or(0);
    let w = &mut wguard
        .as_dense_mut()
        .ok_or_else(|| Error::stype(op, "weight must be dense"))?
        .buf;
    // Fixed-size arrays, not collections: this runs for every parameter of every step.
    let mut sguards = states.map(|s| s.write());
    let sbufs = sguards
        .each_mut()
        .map(|g| g.as_dense_mut().map(|d| &mut d.buf));
    if sbufs.iter().any(Option::is_none) {
        return Err(Error::stype(op, "state arrays must be dense"));
    }
    let sbufs = sbufs.map(|b| b.expect("every state checked dense above"));
    let gguard = grad.read();
    let g = match &*gguard {
        ArrayData::Dense(d) => GradRef::Dense(&d.buf),
        ArrayData::RowSparse(r) => GradRef::RowSparse {
            indices: &r.indices,
            values: &r.data,
            row_len: r.row_len(),
        },
        ArrayData::Csr(_) => return Err(Error::stype(op, "csr gradients are not supported")),
    };
    // A read-write file-backed weight or state saves the rows this step changes in its undo
    // journal first (so a crash returns the file to its last flush): the gradient's rows for
    // a lazy row_sparse update, every row otherwise.
    use crate::ndarray::{journal_rows, JournalRows};
    let touched = || match &g {
        GradRef::RowSparse { indices, .. } if args.lazy() => {
            JournalRows::Ids(indices.host_arc().as_slice())
        }
        _ => JournalRows::Range(0..rows),
    };
    journal_rows(op, w, rows, touched())?;
    for s in &sbufs {
        journal_rows(op, s, rows, touched())?;
    }
    w.update(rows, g, sbufs, &args.scalars(), &rule, args.lazy())
}
