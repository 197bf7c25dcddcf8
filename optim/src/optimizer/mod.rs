//! The [`Optimizer`] trait, its shared options and per-parameter [`State`].
//!
//! An optimizer updates plain `(weight, grad, state)` arrays in place; it knows nothing about
//! layers. The hyper-parameters every optimizer shares live in [`OptimizerOptions`] and are
//! resolved per step and per parameter into a [`StepCtx`] exactly as MXNet 1.9.1's Python
//! `Optimizer` does: the update count of the parameter is bumped first, the learning rate comes
//! from the schedule (evaluated at the global `num_update`) times `lr_mult`, and the weight decay
//! is `wd * wd_mult` — for every parameter, biases included, unless a `wd_mult` says otherwise.
//!
//! Storage types: the weight and the states are dense; the gradient is dense or row_sparse. A
//! row_sparse gradient is applied lazily (only its rows, weight *and* states) when
//! `lazy_update` is true, and with the standard semantics (every row, absent rows with a zero
//! gradient) otherwise.
//!
//! `multi_precision`: MXNet keeps an f32 master copy of f16 weights. sparrow has no f16, and f32
//! and f64 weights are updated in their own precision, which is what MXNet does for them too
//! (it ignores `multi_precision` unless the weight is f16). There is therefore no such option
//! here; f64 master copies for f32 weights are not implemented.

mod ada;
mod adam;
pub(crate) mod driver;
mod ftrl;
mod lamb;
mod sgd;

pub use ada::{AdaDelta, AdaGrad, RMSProp};
pub use adam::{Adam, AdamW, Adamax, Nadam};
pub use ftrl::{Ftml, Ftrl};
pub use lamb::Lamb;
pub use sgd::{Nag, Sgd, Signum};

use std::collections::HashMap;

use sparrow_core::{DType, Error, NDArray, Result, SType, Shape};

use crate::schedule::LrScheduler;

/// Per-parameter multipliers by parameter index. The Trainer reads two of them per parameter
/// per step; std's SipHash made those lookups ~2% of a small sparse training step, so the map
/// uses foldhash's fixed-seed hasher (the keys are our own indices, not attacker input).
pub type MultMap = HashMap<usize, f64, foldhash::fast::FixedState>;

/// Options shared by every optimizer (MXNet's `Optimizer.__init__` arguments).
pub struct OptimizerOptions {
    /// Base learning rate (used when no scheduler is set).
    pub learning_rate: f64,
    /// Weight decay (L2) coefficient.
    pub wd: f64,
    /// The gradient is multiplied by this before anything else (the Trainer sets 1/batch_size).
    pub rescale_grad: f64,
    /// Clip the rescaled gradient to `[-c, c]`; `None` (or a value `<= 0`) turns clipping off.
    pub clip_gradient: Option<f64>,
    /// Lazy row_sparse updates (only rows present in the gradient change). Default true.
    pub lazy_update: bool,
    /// Per-parameter learning-rate multipliers, by parameter index.
    pub lr_mult: MultMap,
    /// Per-parameter weight-decay multipliers, by parameter index.
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

    /// Resolve the hyper-parameters for one step of parameter `index` at its count `t`.
    pub fn step_ctx(&self, index: usize, t: u64) -> StepCtx {
        let lr = self.current_lr() * self.lr_mult.get(&index).copied().unwrap_or(1.0);
        let wd = self.wd * self.wd_mult.get(&index).copied().unwrap_or(1.0);
        StepCtx {
            lr,
            wd,
            rescale_grad: self.rescale_grad,
            clip_gradient: self.clip_gradient.filter(|c| *c > 0.0),
            lazy_update: self.lazy_update,
            t,
        }
    }

    fn validate(&self, op: &'static str) -> Result<()> {
        let bad = |name: &str, v: f64| Error::arg(op, format!("{name} must be finite, got {v}"));
        for (name, v) in [
            ("learning_rate", self.learning_rate),
            ("wd", self.wd),
            ("rescale_grad", self.rescale_grad),
        ] {
            if !v.is_finite() {
                return Err(bad(name, v));
            }
        }
        Ok(())
    }
}

/// Hyper-parameters of one update of one parameter, resolved from [`OptimizerOptions`].
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

/// Per-parameter optimizer state: named dense arrays shaped like the weight, named scalars, and
/// the parameter's update count `t`. Allocated once by [`Optimizer::create_state`].
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Number of updates applied to this parameter.
    pub t: u64,
    /// Named state arrays (momentum, mean, var, ...), dense, same shape and dtype as the weight.
    pub arrays: Vec<(String, NDArray)>,
    /// Named scalar state (e.g. Nadam's momentum schedule product).
    pub scalars: Vec<(String, f64)>,
}

impl State {
    /// A state with zero-filled arrays of the weight's shape and dtype, one per name.
    pub fn zeros_like(weight: &NDArray, names: &[&str]) -> Result<State> {
        let mut arrays = Vec::with_capacity(names.len());
        for n in names {
            arrays.push((
                n.to_string(),
                NDArray::zeros(&weight.shape(), weight.dtype())?,
            ));
        }
        Ok(State {
            t: 0,
            arrays,
            scalars: Vec::new(),
        })
    }

    /// The state array called `name`.
    pub fn array(&self, name: &str) -> Option<&NDArray> {
        self.arrays.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The state arrays in order, as plain handles.
    pub fn handles(&self) -> Vec<NDArray> {
        self.arrays.iter().map(|(_, a)| a.clone()).collect()
    }

    /// The scalar called `name`.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.scalars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// Set (or add) the scalar called `name`.
    pub fn set_scalar(&mut self, name: &str, v: f64) {
        match self.scalars.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = v,
            None => self.scalars.push((name.to_string(), v)),
        }
    }
}

/// An optimizer: updates a weight in place from its gradient and its [`State`].
///
/// Implementors provide [`Optimizer::create_state`] and [`Optimizer::step`]; the provided
/// [`Optimizer::update`] does the bookkeeping MXNet does before calling the kernel (update
/// counts, learning rate, multipliers) and checks shapes, dtypes and storage types.
///
/// ```
/// use sparrow_core::NDArray;
/// use sparrow_optim::{Optimizer, Sgd};
/// let w = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
/// let g = NDArray::from_vec(vec![0.5f32, -0.5], &[2]).unwrap();
/// let mut opt = Sgd::new(0.1);
/// let mut st = opt.create_state(0, &w).unwrap();
/// opt.update(0, &w, &g, &mut st).unwrap();
/// assert_eq!(w.to_vec::<f32>().unwrap(), vec![0.95, 2.05]);
/// ```
pub trait Optimizer: Send {
    /// Name, as MXNet spells it (`sgd`, `adam`, ...).
    fn name(&self) -> &'static str;
    /// Shared options.
    fn options(&self) -> &OptimizerOptions;
    /// Shared options, mutable.
    fn options_mut(&mut self) -> &mut OptimizerOptions;
    /// Allocate the state of parameter `index` (zeros shaped like `weight`).
    fn create_state(&self, index: usize, weight: &NDArray) -> Result<State>;
    /// Apply one step with resolved hyper-parameters (no bookkeeping).
    fn step(
        &self,
        ctx: &StepCtx,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()>;

    /// Update `weight` in place from `grad`: bump the parameter's count, resolve the learning
    /// rate and weight decay, and run the kernel. Absent a row_sparse gradient's rows, lazy mode
    /// leaves weight and state rows untouched.
    fn update(
        &mut self,
        index: usize,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()> {
        check_inputs(self.name(), weight, grad, state)?;
        self.options().validate("optimizer update")?;
        state.t += 1;
        let opts = self.options_mut();
        opts.num_update = opts.num_update.max(state.t);
        let ctx = self.options().step_ctx(index, state.t);
        self.step(&ctx, weight, grad, state)
    }

    /// The current learning rate (from the schedule when one is set).
    fn learning_rate(&self) -> f64 {
        self.options().current_lr()
    }

    /// Set the base learning rate. Fails when a scheduler drives the rate (set it there).
    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        if !lr.is_finite() {
            return Err(Error::arg(
                "set_learning_rate",
                format!("lr must be finite, got {lr}"),
            ));
        }
        let o = self.options_mut();
        if o.lr_scheduler.is_some() {
            return Err(Error::arg(
                "set_learning_rate",
                "a learning-rate scheduler is set; change the scheduler's base rate instead",
            ));
        }
        o.learning_rate = lr;
        Ok(())
    }
}

/// Shapes, dtypes and storage types every kernel relies on. Each array is read once (one lock
/// round trip, not one per property: this runs for every parameter of every step).
pub(crate) fn check_inputs(
    op: &'static str,
    weight: &NDArray,
    grad: &NDArray,
    state: &State,
) -> Result<()> {
    if weight.same_array(grad) {
        return Err(Error::arg(op, "weight and gradient are the same array"));
    }
    let (w_stype, w_dtype, w_shape) = {
        let w = weight.read();
        (w.stype(), w.dtype(), Shape::from_slice(w.shape()))
    };
    let (g_stype, g_dtype, g_same_shape) = {
        let g = grad.read();
        (g.stype(), g.dtype(), g.shape() == &w_shape[..])
    };
    if w_stype != SType::Dense {
        return Err(Error::stype(
            op,
            format!("weight must be dense, got {w_stype:?}"),
        ));
    }
    if !matches!(w_dtype, DType::F32 | DType::F64) {
        return Err(Error::dtype(
            op,
            format!("weight must be float32 or float64, got {}", w_dtype.name()),
        ));
    }
    if g_dtype != w_dtype {
        return Err(Error::dtype_mismatch(op, w_dtype, g_dtype));
    }
    if !g_same_shape {
        return Err(Error::shape(
            op,
            format!("weight {:?} vs gradient {:?}", &w_shape[..], grad.shape()),
        ));
    }
    match g_stype {
        SType::Dense | SType::RowSparse => {}
        SType::Csr => {
            return Err(Error::stype(
                op,
                "csr gradients are not supported; use a row_sparse gradient",
            ))
        }
    }
    if g_stype == SType::RowSparse && w_shape.is_empty() {
        return Err(Error::shape(op, "row_sparse gradient of a 0-d weight"));
    }
    for (name, a) in &state.arrays {
        if a.same_array(weight) || a.same_array(grad) {
            return Err(Error::arg(
                op,
                format!("state {name} aliases the weight or gradient"),
            ));
        }
        let (a_stype, a_dtype, a_same_shape) = {
            let r = a.read();
            (r.stype(), r.dtype(), r.shape() == &w_shape[..])
        };
        if !a_same_shape || a_dtype != w_dtype || a_stype != SType::Dense {
            return Err(Error::shape(
                op,
                format!(
                    "state {name} is {:?} {} {a_stype:?}, weight is {:?} {}",
                    a.shape(),
                    a_dtype.name(),
                    &w_shape[..],
                    w_dtype.name()
                ),
            ));
        }
    }
    Ok(())
}

/// Round an f64 hyper-parameter to the kernel's element type (MXNet passes f32 to f32 kernels).
#[inline]
pub(crate) fn cast<T: sparrow_core::Float>(v: f64) -> T {
    <T as sparrow_core::Element>::from_f64(v)
}

/// MXNet's `clip::Map`: clamp to `[-c, c]` when clipping is on.
#[inline]
pub(crate) fn clip<T: sparrow_core::Float>(x: T, c: Option<T>) -> T {
    match c {
        Some(c) => {
            if x > c {
                c
            } else if x < -c {
                -c
            } else {
                x
            }
        }
        None => x,
    }
}

/// Run `$self.run::<T>(args)` for the weight's float dtype.
macro_rules! dispatch_float {
    ($self:ident, $ctx:expr, $w:expr, $g:expr, $st:expr) => {
        match $w.dtype() {
            sparrow_core::DType::F32 => $self.run::<f32>($ctx, $w, $g, $st),
            sparrow_core::DType::F64 => $self.run::<f64>($ctx, $w, $g, $st),
            other => Err(sparrow_core::Error::dtype(
                "optimizer update",
                format!("weight must be float32 or float64, got {}", other.name()),
            )),
        }
    };
}
pub(crate) use dispatch_float;

/// The sign as MXNet's `sign::Map` computes it (0 for 0).
#[inline]
pub(crate) fn sign<T: sparrow_core::Float>(x: T) -> T {
    if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        T::zero()
    }
}
