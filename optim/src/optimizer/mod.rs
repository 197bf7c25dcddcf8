//! The [`Optimizer`] trait, its shared options and per-parameter [`State`].
//!
//! An optimizer updates plain `(weight, grad, state)` arrays in place; it knows nothing about
//! layers. The arithmetic is core's: each optimizer calls one of the update operators of
//! [`sparrow_core::update`] (`sgd_update`, `adam_update`, ...), passing the learning rate, the
//! weight decay, the rescale factor, the clip threshold and its hyper-parameters as arguments.
//! What stays here is what MXNet's Python `Optimizer` does around its kernels: the shared
//! options ([`OptimizerOptions`]), learning-rate schedules, update counts, per-parameter state,
//! and Adam's bias-corrected rate. The hyper-parameters are resolved per step and per
//! parameter into a [`StepCtx`] exactly as MXNet 1.9.1 does: the update count of the parameter
//! is bumped first, the learning rate comes from the schedule (evaluated at the global
//! `num_update`) times `lr_mult`, and the weight decay is `wd * wd_mult` — for every parameter,
//! biases included, unless a `wd_mult` says otherwise.
//!
//! Storage types: the weight and the states are dense; the gradient is dense or row_sparse. A
//! row_sparse gradient is applied lazily (only its rows, weight *and* states) when
//! `lazy_update` is true, and with the standard semantics (every row, absent rows with a zero
//! gradient) otherwise.
//!
//! `multi_precision` ([`OptimizerOptions::multi_precision`], every optimizer): an f32 master
//! copy of each f16 / bf16 weight, updated instead of it, as MXNet does (see
//! [`precision`](MASTER_SLOT)'s notes in `precision.rs`). f32 and f64 weights are updated in
//! their own precision, as in MXNet; f64 master copies for f32 weights are not implemented.

mod ada;
mod adam;
mod build;
pub(crate) mod cocob;
mod ftrl;
mod group_adagrad;
mod lamb;
mod options;
mod precision;
mod sgd;
mod state;

pub use ada::{AdaDelta, AdaGrad, RMSProp};
pub use adam::{Adam, AdamW, Adamax, Nadam};
pub use build::{create, OPTIMIZER_NAMES};
pub use cocob::Cocob;
pub use ftrl::{Ftml, Ftrl};
pub use group_adagrad::GroupAdaGrad;
pub use lamb::Lamb;
pub use options::{MultMap, OptimizerOptions, ParamArgs, StepCtx};
pub use precision::{uses_master, MASTER_SLOT};
pub use sgd::{Nag, Sgd, Signum};
pub use state::State;

use sparrow_core::{NDArray, Result};

/// An optimizer: updates a weight in place from its gradient and its [`State`].
///
/// Implementors provide [`Optimizer::create_state`] and [`Optimizer::step`]; the provided
/// [`Optimizer::update`] and [`Optimizer::update_with`] do the bookkeeping MXNet does before
/// calling the kernel (update counts, learning rate, multipliers). The core operators the
/// built-in optimizers call check shapes, dtypes and storage types.
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
    /// Allocate the state of parameter `index` (zeros shaped as [`Optimizer::state_shape`]).
    fn create_state(&self, index: usize, weight: &NDArray) -> Result<State>;
    /// The shape of each state array for a weight of shape `weight`: the weight's own, except
    /// for optimizers that keep fewer values (GroupAdaGrad: `(rows, 1)`). Loading saved states
    /// checks their arrays against it.
    fn state_shape(&self, weight: &[usize]) -> Vec<usize> {
        weight.to_vec()
    }
    /// Apply one step with resolved hyper-parameters (no bookkeeping).
    fn step(
        &self,
        ctx: &StepCtx,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()>;

    /// Update `weight` in place from `grad`, with parameter `index`'s multipliers from the
    /// options' maps and the options' `rescale_grad` ([`OptimizerOptions::param_args`]); see
    /// [`Optimizer::update_with`].
    fn update(
        &mut self,
        index: usize,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()> {
        let args = self.options().param_args(index);
        self.update_with(weight, grad, state, &args)
    }

    /// Update `weight` in place from `grad` with the per-parameter arguments `args`: bump the
    /// parameter's count, resolve the learning rate and weight decay, and run the kernel.
    /// Absent a row_sparse gradient's rows, lazy mode leaves weight and state rows untouched.
    /// On an error (bad shapes, dtypes, storage types or arguments, found before anything is
    /// written) the counts are left as they were.
    fn update_with(
        &mut self,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
        args: &ParamArgs,
    ) -> Result<()> {
        let (t0, num_update0) = (state.t, self.options().num_update);
        // A count loaded from a file can be anything: overflowing it is an error, not a wrap.
        state.t = t0.checked_add(1).ok_or_else(|| {
            sparrow_core::Error::arg(
                "update",
                format!("the update count {t0} cannot be incremented (state file corrupted?)"),
            )
        })?;
        let opts = self.options_mut();
        opts.num_update = opts.num_update.max(state.t);
        let ctx = self.options().resolve(state.t, args);
        let done = self.step(&ctx, weight, grad, state);
        if done.is_err() {
            state.t = t0;
            self.options_mut().num_update = num_update0;
        }
        done
    }

    /// The current learning rate (from the schedule when one is set).
    fn learning_rate(&self) -> f64 {
        self.options().current_lr()
    }

    /// Set the base learning rate. Fails when a scheduler drives the rate (set it there).
    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        if !lr.is_finite() {
            return Err(sparrow_core::Error::arg(
                "set_learning_rate",
                format!("lr must be finite, got {lr}"),
            ));
        }
        let o = self.options_mut();
        if o.lr_scheduler.is_some() {
            return Err(sparrow_core::Error::arg(
                "set_learning_rate",
                "a learning-rate scheduler is set; change the scheduler's base rate instead",
            ));
        }
        o.learning_rate = lr;
        Ok(())
    }
}

/// A boxed optimizer (what [`create`] returns) is an optimizer, so it goes wherever a typed one
/// does (`Trainer::new`, `Trainer::from_params`).
impl Optimizer for Box<dyn Optimizer> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn options(&self) -> &OptimizerOptions {
        (**self).options()
    }
    fn options_mut(&mut self) -> &mut OptimizerOptions {
        (**self).options_mut()
    }
    fn create_state(&self, index: usize, weight: &NDArray) -> Result<State> {
        (**self).create_state(index, weight)
    }
    fn state_shape(&self, weight: &[usize]) -> Vec<usize> {
        (**self).state_shape(weight)
    }
    fn step(
        &self,
        ctx: &StepCtx,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()> {
        (**self).step(ctx, weight, grad, state)
    }
    fn update_with(
        &mut self,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
        args: &ParamArgs,
    ) -> Result<()> {
        (**self).update_with(weight, grad, state, args)
    }
}

/// What each built-in optimizer defines; [`declare_optimizers!`] turns it into its
/// [`Optimizer`] implementation, so all of them are declared alike.
trait Rule {
    /// The name, as MXNet spells it.
    const NAME: &'static str;
    /// The names of the state arrays in this configuration (e.g. none for SGD without
    /// momentum), in the order the core operator takes them.
    fn state_names(&self) -> &'static [&'static str];
    /// The shape of each state array for a weight of shape `weight` (the weight's own unless
    /// the rule keeps fewer values).
    fn state_shape(&self, weight: &[usize]) -> Vec<usize> {
        weight.to_vec()
    }
    /// Set the initial scalar state (Nadam's momentum schedule product).
    fn init_scalars(&self, _state: &mut State) {}
    /// One update through the core operator.
    fn apply(
        &self,
        ctx: &StepCtx,
        weight: &NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()>;
}

/// The [`Optimizer`] implementation of each listed optimizer, from its [`Rule`] and its
/// `opts: OptimizerOptions` field.
macro_rules! declare_optimizers {
    ($($ty:ty),* $(,)?) => {$(
        impl Optimizer for $ty {
            fn name(&self) -> &'static str {
                <$ty as Rule>::NAME
            }
            fn options(&self) -> &OptimizerOptions {
                &self.opts
            }
            fn options_mut(&mut self) -> &mut OptimizerOptions {
                &mut self.opts
            }
            fn create_state(&self, _index: usize, weight: &NDArray) -> Result<State> {
                let shape = Rule::state_shape(self, &weight.shape());
                let mut state = match precision::state_template(&self.opts, weight)? {
                    // f32 states beside an f32 master copy (multi_precision, half weight).
                    Some(master) => {
                        let mut s = State::zeros_shaped(&master, self.state_names(), &shape)?;
                        s.arrays.push((MASTER_SLOT.to_string(), master));
                        s
                    }
                    None => State::zeros_shaped(weight, self.state_names(), &shape)?,
                };
                self.init_scalars(&mut state);
                Ok(state)
            }
            fn state_shape(&self, weight: &[usize]) -> Vec<usize> {
                Rule::state_shape(self, weight)
            }
            fn step(
                &self,
                ctx: &StepCtx,
                weight: &NDArray,
                grad: &NDArray,
                state: &mut State,
            ) -> Result<()> {
                precision::step_with_master(weight, grad, state, |w, g, s| {
                    self.apply(ctx, w, g, s)
                })
            }
        }
    )*};
}

declare_optimizers!(
    Sgd,
    Nag,
    Signum,
    Adam,
    AdamW,
    Adamax,
    Nadam,
    AdaGrad,
    AdaDelta,
    RMSProp,
    Ftrl,
    Ftml,
    Lamb,
    Cocob,
    GroupAdaGrad,
);
