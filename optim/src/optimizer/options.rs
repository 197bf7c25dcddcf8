//! The hyper-parameters every optimizer shares ([`OptimizerOptions`]), the per-parameter
//! arguments of one update ([`ParamArgs`]) and their resolution into a [`StepCtx`].

use std::collections::HashMap;

use sparrow_core::update::{RowSparseMode, UpdateArgs};

use crate::schedule::LrScheduler;

/// Per-parameter multipliers by parameter index, for callers of [`super::Optimizer::update`]
/// (the Trainer passes its parameters' multipliers as [`ParamArgs`] instead). Uses foldhash's
/// fixed-seed hasher: the keys are our own indices, not attacker input.
pub type MultMap = HashMap<usize, f64, foldhash::fast::FixedState>;

/// Options shared by every optimizer (MXNet's `Optimizer.__init__` arguments).
pub struct OptimizerOptions {
    /// Base learning rate (used when no scheduler is set).
    pub learning_rate: f64,
    /// Weight decay (L2) coefficient.
    pub wd: f64,
    /// The gradient is multiplied by this before anything else, in
    /// [`super::Optimizer::update`]. A [`crate::Trainer`] reads it once, when it is made, as
    /// the `scale` it divides by the batch size at every step.
    pub rescale_grad: f64,
    /// Clip the rescaled gradient to `[-c, c]`; `None` (or a value `<= 0`) turns clipping off.
    pub clip_gradient: Option<f64>,
    /// Lazy row_sparse updates (only rows present in the gradient change). Default true.
    pub lazy_update: bool,
    /// Keep an f32 master copy of every f16 / bf16 weight (state array `weight32`) and update
    /// it instead, the half weight being the master rounded (MXNet's `multi_precision`).
    /// Default false; no effect on f32 and f64 weights. Read when a state is made.
    pub multi_precision: bool,
    /// Per-parameter learning-rate multipliers, by parameter index (used by `update`).
    pub lr_mult: MultMap,
    /// Per-parameter weight-decay multipliers, by parameter index (used by `update`).
    pub wd_mult: MultMap,
    /// Learning-rate schedule, evaluated at `num_update`; overrides `learning_rate` when set.
    pub lr_scheduler: Option<Box<dyn LrScheduler>>,
    /// The largest per-parameter update count seen so far (MXNet's `num_update`).
    pub num_update: u64,
}

impl OptimizerOptions {
    /// Options with the given learning rate and MXNet's defaults for the rest.
    pub fn new(learning_rate: f64) -> Self {
        OptimizerOptions {
            learning_rate,
            wd: 0.0,
            rescale_grad: 1.0,
            clip_gradient: None,
            lazy_update: true,
            multi_precision: false,
            lr_mult: MultMap::default(),
            wd_mult: MultMap::default(),
            lr_scheduler: None,
            num_update: 0,
        }
    }

    /// The learning rate now: the scheduler's value at `num_update`, or `learning_rate`.
    pub fn current_lr(&self) -> f64 {
        match &self.lr_scheduler {
            Some(s) => s.lr(self.num_update),
            None => self.learning_rate,
        }
    }

    /// The per-parameter arguments of parameter `index` held here: its multipliers from the
    /// `lr_mult` / `wd_mult` maps (1 when absent) and `rescale_grad`.
    pub fn param_args(&self, index: usize) -> ParamArgs {
        ParamArgs {
            lr_mult: self.lr_mult.get(&index).copied().unwrap_or(1.0),
            wd_mult: self.wd_mult.get(&index).copied().unwrap_or(1.0),
            rescale_grad: self.rescale_grad,
        }
    }

    /// Resolve the hyper-parameters of one update at the parameter's count `t`: the learning
    /// rate now times `lr_mult`, `wd * wd_mult`, and the given rescale factor.
    pub fn resolve(&self, t: u64, args: &ParamArgs) -> StepCtx {
        StepCtx {
            lr: self.current_lr() * args.lr_mult,
            wd: self.wd * args.wd_mult,
            rescale_grad: args.rescale_grad,
            clip_gradient: self.clip_gradient.filter(|c| *c > 0.0),
            lazy_update: self.lazy_update,
            t,
        }
    }

    /// Resolve the hyper-parameters for one step of parameter `index` at its count `t`, with
    /// the multipliers and rescale factor held here ([`OptimizerOptions::param_args`]).
    pub fn step_ctx(&self, index: usize, t: u64) -> StepCtx {
        self.resolve(t, &self.param_args(index))
    }
}

/// What the caller of one update says about the parameter: its multipliers and the factor its
/// gradient is rescaled by. The [`crate::Trainer`] passes its parameters' `lr_mult` and
/// `wd_mult` and `scale / batch_size` this way to [`super::Optimizer::update_with`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamArgs {
    /// Multiplies the learning rate.
    pub lr_mult: f64,
    /// Multiplies the weight decay.
    pub wd_mult: f64,
    /// The gradient is multiplied by this before anything else.
    pub rescale_grad: f64,
}

impl Default for ParamArgs {
    /// Multipliers 1, no rescaling.
    fn default() -> Self {
        ParamArgs {
            lr_mult: 1.0,
            wd_mult: 1.0,
            rescale_grad: 1.0,
        }
    }
}

/// Hyper-parameters of one update of one parameter, resolved from [`OptimizerOptions`] and
/// [`ParamArgs`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCtx {
    /// Learning rate (schedule x lr_mult).
    pub lr: f64,
    /// Weight decay (wd x wd_mult).
    pub wd: f64,
    /// Gradient multiplier.
    pub rescale_grad: f64,
    /// Clip threshold, `None` when off.
    pub clip_gradient: Option<f64>,
    /// Lazy row_sparse semantics.
    pub lazy_update: bool,
    /// This parameter's update count, 1 on its first update.
    pub t: u64,
}

impl StepCtx {
    /// The arguments of a core update operator for this step, with the operator's
    /// hyper-parameters `hyper`. A clip threshold `<= 0` turns clipping off, as in
    /// [`OptimizerOptions::clip_gradient`].
    pub fn args<P>(&self, hyper: P) -> UpdateArgs<P> {
        UpdateArgs {
            lr: self.lr,
            wd: self.wd,
            rescale_grad: self.rescale_grad,
            clip_gradient: self.clip_gradient.filter(|c| *c > 0.0),
            row_sparse: if self.lazy_update {
                RowSparseMode::Lazy
            } else {
                RowSparseMode::Standard
            },
            hyper,
        }
    }
}
