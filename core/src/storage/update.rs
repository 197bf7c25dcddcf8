//! The update family of the backend interface: the optimizer update operators
//! (`crate::update`), which change a weight and its state arrays in place from a dense or
//! row_sparse gradient, and the two passes of global-norm clipping.
//!
//! An operator names its formula with an [`UpdateRule`] (hyper-parameters in f64, as the
//! caller gave them) and passes the shared [`UpdateScalars`]; a backend rounds them to the
//! weight's dtype and runs the rule over spans of the weight lined up with the gradient: the
//! CPU matches the rule once, outside its span loop, so each rule is its own monomorphized loop
//! (`crate::cpu::update_rules`); a device backend would launch one kernel per rule. Shapes,
//! dtypes, storage types and aliasing were checked by the operator (`crate::update::check`).

use std::ops::Range;

use super::sparse::index_device;
use super::{IndexStorage, SparseOps, Storage};
use crate::error::{Error, Result};

/// What MXNet passes to every optimizer kernel, in f64 (the backend rounds them to the
/// weight's dtype, as MXNet passes f32 to f32 kernels).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UpdateScalars {
    /// Learning rate.
    pub(crate) lr: f64,
    /// Weight decay.
    pub(crate) wd: f64,
    /// Factor the gradient is multiplied by first.
    pub(crate) rescale_grad: f64,
    /// Clip threshold of the rescaled gradient (`None`: no clipping).
    pub(crate) clip: Option<f64>,
}

/// One update formula and its own hyper-parameters (MXNet's kernels; see the operators in
/// `crate::update` for each formula). Terms the operator derives in f64 (Nadam's schedule,
/// LAMB's bias corrections and trust-ratio rate) arrive precomputed, so every backend rounds
/// the same f64 values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum UpdateRule {
    /// `sgd_update`; no state.
    Sgd,
    /// `sgd_mom_update`; state `[mom]`.
    SgdMom {
        /// Momentum.
        momentum: f64,
    },
    /// `nag_mom_update`; state `[mom]`.
    NagMom {
        /// Momentum.
        momentum: f64,
    },
    /// `signsgd_update`; no state.
    SignSgd,
    /// `signum_update`; state `[mom]`.
    Signum {
        /// Momentum.
        momentum: f64,
        /// Decoupled weight decay of the sign step.
        wd_lh: f64,
    },
    /// `adam_update`; states `[mean, var]`.
    Adam {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Denominator guard.
        epsilon: f64,
    },
    /// `adamw_update`; states `[mean, var]`.
    AdamW {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Denominator guard.
        epsilon: f64,
    },
    /// `adamax_update`; states `[mean, inf_norm]`.
    Adamax {
        /// First-moment decay.
        beta1: f64,
        /// Infinity-norm decay.
        beta2: f64,
    },
    /// `nadam_update`; states `[mean, var]`.
    Nadam {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Denominator guard.
        epsilon: f64,
        /// `1 - M_t`.
        d_g: f64,
        /// `1 - M_t * mu_{t+1}`.
        d_m: f64,
        /// `1 - beta2^t`.
        d_v: f64,
        /// `1 - mu_t`.
        c_g: f64,
        /// `mu_{t+1}`.
        c_m: f64,
    },
    /// `adagrad_update`; state `[history]`.
    AdaGrad {
        /// Guard inside the square root.
        epsilon: f64,
    },
    /// `adadelta_update`; states `[acc_grad, acc_delta]`.
    AdaDelta {
        /// Decay.
        rho: f64,
        /// Guard.
        epsilon: f64,
    },
    /// `rmsprop_update`; state `[n]`.
    RmsProp {
        /// Decay of the squared-gradient average.
        gamma1: f64,
        /// Guard.
        epsilon: f64,
        /// Clip of the updated weight.
        clip_weights: Option<f64>,
    },
    /// `rmspropalex_update`; states `[n, g, delta]`.
    RmsPropAlex {
        /// Decay of the averages.
        gamma1: f64,
        /// Momentum of the step.
        gamma2: f64,
        /// Guard.
        epsilon: f64,
        /// Clip of the updated weight.
        clip_weights: Option<f64>,
    },
    /// `ftrl_update`; states `[z, n]`.
    Ftrl {
        /// L1 strength.
        lambda1: f64,
        /// Per-coordinate rate offset.
        beta: f64,
    },
    /// `group_adagrad_update`; state `[history]`, one value per row of the weight (not one
    /// per element like every other rule's states).
    GroupAdaGrad {
        /// Guard added to the square root.
        epsilon: f64,
    },
    /// `cocob_update`; states `[l, s, r, theta, w0]`.
    Cocob {
        /// Caps the bet while few gradients have been seen.
        alpha: f64,
    },
    /// `cocob_packed_update`: [`UpdateRule::Cocob`] with its five states in one array, the
    /// weight's shape with a last axis of 5 (`l, s, r, theta, w0` of an element side by side).
    CocobPacked {
        /// Caps the bet while few gradients have been seen.
        alpha: f64,
    },
    /// `ftml_update`; states `[d, v, z]`.
    Ftml {
        /// First decay.
        beta1: f64,
        /// Second decay.
        beta2: f64,
        /// Guard.
        epsilon: f64,
        /// This update's number (the powers are taken in the weight's dtype, as MXNet does).
        t: u64,
    },
    /// LAMB's first pass (`lamb_update_phase1`); states `[mean, var]`: updates the moments
    /// and returns `[sum of w^2, sum of u^2]`, accumulated in f64.
    LambPhase1 {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Denominator guard.
        epsilon: f64,
        /// First-moment bias correction (1 without).
        d1: f64,
        /// Second-moment bias correction (1 without).
        d2: f64,
    },
    /// LAMB's second pass (`lamb_update_phase2`); states `[mean, var]`: applies the direction
    /// with the trust-ratio rate `lr` (which replaces [`UpdateScalars::lr`]).
    LambPhase2 {
        /// Denominator guard.
        epsilon: f64,
        /// First-moment bias correction.
        d1: f64,
        /// Second-moment bias correction.
        d2: f64,
        /// The rate scaled by the trust ratio.
        lr: f64,
    },
}

impl UpdateRule {
    /// The operator's name in errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            UpdateRule::Sgd => "sgd_update",
            UpdateRule::SgdMom { .. } => "sgd_mom_update",
            UpdateRule::NagMom { .. } => "nag_mom_update",
            UpdateRule::SignSgd => "signsgd_update",
            UpdateRule::Signum { .. } => "signum_update",
            UpdateRule::Adam { .. } => "adam_update",
            UpdateRule::AdamW { .. } => "adamw_update",
            UpdateRule::Adamax { .. } => "adamax_update",
            UpdateRule::Nadam { .. } => "nadam_update",
            UpdateRule::AdaGrad { .. } => "adagrad_update",
            UpdateRule::AdaDelta { .. } => "adadelta_update",
            UpdateRule::RmsProp { .. } => "rmsprop_update",
            UpdateRule::RmsPropAlex { .. } => "rmspropalex_update",
            UpdateRule::Ftrl { .. } => "ftrl_update",
            UpdateRule::GroupAdaGrad { .. } => "group_adagrad_update",
            UpdateRule::Cocob { .. } => "cocob_update",
            UpdateRule::CocobPacked { .. } => "cocob_packed_update",
            UpdateRule::Ftml { .. } => "ftml_update",
            UpdateRule::LambPhase1 { .. } => "lamb_update_phase1",
            UpdateRule::LambPhase2 { .. } => "lamb_update_phase2",
        }
    }
}

/// The gradient of an update: a dense buffer of the weight's size, or the stored rows of a
/// row_sparse array (`S` the values' storage, `I` the row ids').
#[derive(Debug, Clone, Copy)]
pub(crate) enum GradRef<'a, S, I: ?Sized> {
    /// Every element.
    Dense(&'a S),
    /// Rows `indices` (sorted, unique, checked by the backend) of `row_len` values each.
    RowSparse {
        /// The stored row ids.
        indices: &'a I,
        /// `indices.len() * row_len` values.
        values: &'a S,
        /// Elements per row.
        row_len: usize,
    },
}

/// What a backend implements for the update operators. The weight (`self`) and the states are
/// dense, of one float dtype and the weight's size (except [`UpdateRule::GroupAdaGrad`]'s
/// history: one value per row), and distinct buffers; `rows` is the weight's first dimension
/// (the row count a row_sparse gradient's ids index).
pub(crate) trait UpdateOps: SparseOps {
    /// Apply `rule` in place to the weight and `states` (in the order the rule names them)
    /// from `grad`; `lazy` selects the row_sparse mode (only the gradient's rows, or every row
    /// with absent rows as zero). Returns the norms [`UpdateRule::LambPhase1`] accumulates,
    /// zeros for every other rule.
    fn update(
        &mut self,
        rows: usize,
        grad: GradRef<'_, Self, Self::Index>,
        states: &mut [&mut Self],
        scalars: &UpdateScalars,
        rule: &UpdateRule,
        lazy: bool,
    ) -> Result<[f64; 2]>;
    /// The sum of the squares of the elements at `range`, accumulated in f64 (float dtypes).
    fn sum_sq_range(&self, range: Range<usize>) -> Result<f64>;
    /// Multiply the elements at `range` by `factor` (rounded to the dtype first) in place.
    fn scale_range(&mut self, range: Range<usize>, factor: f64) -> Result<()>;
}

impl Storage {
    /// See [`UpdateOps::update`]: the weight (`self`), the gradient's buffers and the states
    /// must share one backend (else [`Error::Device`]).
    #[inline]
    pub(crate) fn update<const N: usize>(
        &mut self,
        rows: usize,
        grad: GradRef<'_, Storage, IndexStorage>,
        states: [&mut Storage; N],
        scalars: &UpdateScalars,
        rule: &UpdateRule,
        lazy: bool,
    ) -> Result<[f64; 2]> {
        let op = rule.name();
        let device = self.device();
        super::on_backend!(self, w => {
            let g = typed_grad(w, op, device, grad)?;
            // The states as the backend's type (an array: no allocation per update).
            let st = states.map(|s| typed_state(w, s));
            if let Some(d) = st.iter().find_map(|s| s.as_ref().err()) {
                return Err(Error::device_mismatch(op, device, *d));
            }
            let mut st = st.map(|s| s.expect("every state checked on this backend above"));
            w.update(rows, g, &mut st[..], scalars, rule, lazy)
        })
    }
    /// See [`UpdateOps::sum_sq_range`].
    pub(crate) fn sum_sq_range(&self, range: Range<usize>) -> Result<f64> {
        super::on_backend!(self, b => b.sum_sq_range(range))
    }
    /// See [`UpdateOps::scale_range`].
    pub(crate) fn scale_range(&mut self, range: Range<usize>, factor: f64) -> Result<()> {
        super::on_backend!(self, b => b.scale_range(range, factor))
    }
}

/// The gradient of an update as the weight's backend's types, or the device error.
fn typed_grad<'a, B>(
    _w: &B,
    op: &'static str,
    device: crate::Device,
    grad: GradRef<'a, Storage, IndexStorage>,
) -> Result<GradRef<'a, B, B::Index>>
where
    B: super::IndexOf + super::sparse::ValuesOf,
{
    let values = |s: &'a Storage| {
        B::values_of(op, s).map_err(|_| Error::device_mismatch(op, device, s.device()))
    };
    Ok(match grad {
        GradRef::Dense(g) => GradRef::Dense(values(g)?),
        GradRef::RowSparse {
            indices,
            values: v,
            row_len,
        } => GradRef::RowSparse {
            values: values(v)?,
            indices: B::index_of(op, indices)
                .map_err(|_| Error::device_mismatch(op, device, index_device(indices)))?,
            row_len,
        },
    })
}

/// A state of an update as the weight's backend's type, or the device it is on.
fn typed_state<'a, B: super::sparse::ValuesOfMut>(
    _w: &B,
    s: &'a mut Storage,
) -> std::result::Result<&'a mut B, crate::Device> {
    let d = s.device();
    B::values_of_mut(s).ok_or(d)
}
