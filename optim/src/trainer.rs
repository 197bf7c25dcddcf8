//! [`Trainer`]: applies an [`Optimizer`] to a set of [`Parameter`]s (Gluon's `gluon.Trainer`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sparrow_core::autograd::GradReq;
use sparrow_core::{DType, Error, NDArray, Result};
use sparrow_nn::{ParamDict, Parameter};

use crate::clip::clip_global_norm;
use crate::kvstore::KVStore;
use crate::optimizer::{Optimizer, ParamArgs, State};
use crate::persist;

mod on_store;
mod sharded;
mod shared_store;

pub use sharded::TableId;
use shared_store::{lock, Lent, SharedStore};
pub use shared_store::{OptimizerMut, OptimizerRef, StoreRef};

/// Updates parameters from their gradients with one optimizer.
///
/// `step(batch_size)` = `allreduce_grads()` + `update(batch_size)`: the gradient is rescaled by
/// `scale / batch_size` (`scale` is the optimizer's `rescale_grad` when the trainer was made,
/// 1 by default), and each parameter is updated with its own `lr_mult` and `wd_mult` according
/// to its gradient's storage type (dense, or row_sparse lazily / standard per the optimizer's
/// `lazy_update`). The multipliers and the rescale factor reach the optimizer as arguments of
/// [`Optimizer::update_with`]; the trainer never writes them into the optimizer's options.
/// With `grad_req = Write`
/// the gradient is consumed: a row_sparse gradient is cleared right away (it is small); a dense
/// one keeps its values readable until the next backward replaces them, as in Gluon (writing
/// zeros over a 512 MB gradient after every step would cost a full pass over it). With `Add`
/// the gradient is kept (the caller accumulates and clears). Parameters with
/// `grad_req = Null` are not touched.
///
/// **Stale gradients**, as in Gluon: a step that finds a parameter's gradient unchanged since
/// the previous step (no backward reached it: a bug, or a model that used only some of its
/// blocks) is an error naming the parameters, and nothing is updated. With
/// [`Trainer::set_ignore_stale_grad`] those parameters are skipped instead (no update, so no
/// weight decay or momentum either) and the others are updated. Every backward delivers a new
/// gradient array, which is how a fresh gradient is told from a stale one.
///
/// **Several workers**: [`Trainer::set_kvstore`] sums the gradients through a [`KVStore`] and
/// updates here (Gluon's `update_on_kvstore=False`); [`Trainer::set_kvstore_update`] gives
/// the optimizer to the store, which updates the weights the trainer then pulls (Gluon's
/// `update_on_kvstore=True`).
///
/// ```
/// use sparrow_core::{autograd, Device, NDArray};
/// use sparrow_nn::{Initializer, Parameter};
/// use sparrow_optim::{Sgd, Trainer};
/// let w = Parameter::new("w", &[2]);
/// w.initialize(&Initializer::Constant(1.0), Device::Cpu).unwrap();
/// let mut trainer = Trainer::new(vec![w.clone()], Sgd::new(0.5)).unwrap();
/// let loss = autograd::record(|| w.data()?.sum_all()).unwrap();
/// loss.backward().unwrap();
/// trainer.step(1).unwrap();
/// assert_eq!(w.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 0.5]);
/// ```
pub struct Trainer {
    params: Vec<Parameter>,
    optimizer: Box<dyn Optimizer>,
    states: Vec<Option<State>>,
    scale: f64,
    /// Per parameter, the id of the gradient array left in place by its last update: a step
    /// that finds the same array again had no backward since (a stale gradient).
    consumed: Vec<Option<u64>>,
    /// Skip parameters with stale gradients instead of failing (Gluon's `ignore_stale_grad`).
    ignore_stale_grad: bool,
    /// What a step does with gradients that hold NaN or ±inf.
    nonfinite: NonFinite,
    /// Steps skipped under [`NonFinite::SkipStep`].
    skipped: u64,
    /// The store that sums gradients over workers ([`Trainer::set_kvstore`]); `None` for one
    /// process on one device. Shared with the row sources of sharded parameters, which pull
    /// through it in their layers' forward ([`Trainer::shard_parameter`]).
    kvstore: Option<SharedStore>,
    /// Whether every parameter's key has been initialized in the store (on the first step).
    kv_ready: bool,
    /// Update on the store ([`Trainer::set_kvstore_update`]): the store runs the optimizer.
    update_on_kvstore: bool,
    /// Whether the optimizer has been given to the store (first step in update-on-store
    /// mode); `optimizer` then holds a stand-in and every optimizer access goes to the store.
    handed: bool,
    /// The list a step gathers its parameters into, empty between steps (its capacity kept,
    /// so a step makes no list).
    scratch: Vec<Entry>,
    /// Tables split by rows across the workers' stores ([`Trainer::add_sharded_table`]).
    tables: Vec<sharded::Table>,
}

/// What [`Trainer::step`] does when a gradient holds NaN or ±inf (checked per step through the
/// sum of squares of its stored values, one pass over each gradient, only when not `Apply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NonFinite {
    /// No check: the update applies whatever the gradients hold (the default, as in Gluon).
    #[default]
    Apply,
    /// The step fails naming the parameters, and nothing is updated.
    Error,
    /// The whole step is skipped and counted ([`Trainer::skipped_steps`]), as PyTorch's
    /// `GradScaler` skips an optimizer step whose gradients overflowed.
    SkipStep,
}

/// One trainable parameter as a step sees it ([`Trainer::gather`]).
struct Entry {
    index: usize,
    weight: NDArray,
    grad: NDArray,
    write: bool,
    lr_mult: f64,
    wd_mult: f64,
}

impl Trainer {
    /// A trainer over `params` (in order; the index of a parameter is its optimizer index).
    pub fn new<O: Optimizer + 'static>(
        params: impl IntoIterator<Item = Parameter>,
        optimizer: O,
    ) -> Result<Trainer> {
        Self::with_boxed(params, Box::new(optimizer))
    }

    /// A trainer over every parameter of a [`ParamDict`] (e.g. `net.collect_params()?`).
    pub fn from_params<O: Optimizer + 'static>(
        params: &ParamDict,
        optimizer: O,
    ) -> Result<Trainer> {
        Self::new(params.iter().map(|(_, p)| p.clone()), optimizer)
    }

    /// A trainer with an already boxed optimizer.
    pub fn with_boxed(
        params: impl IntoIterator<Item = Parameter>,
        optimizer: Box<dyn Optimizer>,
    ) -> Result<Trainer> {
        let params: Vec<Parameter> = params.into_iter().collect();
        for (i, p) in params.iter().enumerate() {
            if let Some(j) = params[..i].iter().position(|q| q.same(p)) {
                return Err(Error::arg(
                    "Trainer::new",
                    format!(
                        "parameter '{}' is listed twice (positions {j} and {i})",
                        p.name()
                    ),
                ));
            }
        }
        let o = optimizer.options();
        if !o.lr_mult.is_empty() || !o.wd_mult.is_empty() {
            // The trainer passes each parameter's own multipliers; maps on the optimizer would
            // be ignored without a word.
            return Err(Error::arg(
                "Trainer::new",
                "the optimizer has lr_mult / wd_mult maps by index; a Trainer takes the \
                 multipliers from its parameters (Parameter::with_lr_mult / with_wd_mult)",
            ));
        }
        let scale = o.rescale_grad;
        Ok(Trainer {
            states: vec![None; params.len()],
            consumed: vec![None; params.len()],
            ignore_stale_grad: false,
            nonfinite: NonFinite::Apply,
            skipped: 0,
            kvstore: None,
            kv_ready: false,
            update_on_kvstore: false,
            handed: false,
            tables: Vec::new(),
            scratch: Vec::with_capacity(params.len()),
            params,
            optimizer,
            scale,
        })
    }

    /// Skip parameters whose gradient is stale (no backward since the last step) instead of
    /// failing the step (Gluon's `ignore_stale_grad=True`). Off by default.
    pub fn set_ignore_stale_grad(&mut self, ignore: bool) {
        self.ignore_stale_grad = ignore;
    }

    /// Check gradients for NaN and ±inf before each step and fail or skip the step
    /// ([`NonFinite`]); off (`Apply`) by default.
    pub fn set_nonfinite(&mut self, policy: NonFinite) {
        self.nonfinite = policy;
    }

    /// Steps skipped because a gradient held NaN or ±inf ([`NonFinite::SkipStep`]).
    pub fn skipped_steps(&self) -> u64 {
        self.skipped
    }

    /// The parameters, in optimizer-index order.
    pub fn params(&self) -> &[Parameter] {
        &self.params
    }

    /// The optimizer (in update-on-store mode, once the first step has given it to the store,
    /// the store's: its learning rate and update count are the ones that advance).
    /// A guard: drop it before the next call that reaches the store (a step, or a forward of
    /// a sharded parameter's layer).
    pub fn optimizer(&self) -> OptimizerRef<'_> {
        match (&self.kvstore, self.handed) {
            (Some(kv), true) => OptimizerRef(Lent::Store(lock(kv), self.optimizer.as_ref())),
            _ => OptimizerRef(Lent::Trainer(self.optimizer.as_ref())),
        }
    }

    /// The optimizer, mutable (to change hyper-parameters or the schedule between steps; the
    /// store's in update-on-store mode, as [`Trainer::optimizer`]).
    pub fn optimizer_mut(&mut self) -> OptimizerMut<'_> {
        match (&self.kvstore, self.handed) {
            (Some(kv), true) => OptimizerMut(Lent::Store(lock(kv), self.optimizer.as_mut())),
            _ => OptimizerMut(Lent::Trainer(self.optimizer.as_mut())),
        }
    }

    /// The current learning rate.
    pub fn learning_rate(&self) -> f64 {
        self.optimizer().learning_rate()
    }

    /// Set the learning rate (fails when a schedule drives it).
    pub fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        self.optimizer_mut().set_learning_rate(lr)
    }

    /// The optimizer state of parameter `index`, once it has been updated (or loaded); in
    /// update-on-store mode, the state this worker's store keeps. A handle: its arrays are
    /// the state's own (an update changes them).
    pub fn state(&self, index: usize) -> Option<State> {
        if self.handed {
            return lock(self.kvstore.as_ref()?).optimizer_state(index).cloned();
        }
        self.states.get(index).and_then(|s| s.clone())
    }

    /// Bytes held by all optimizer states (momentum, moments, ...), for memory reports.
    pub fn state_bytes(&self) -> usize {
        (0..self.params.len())
            .filter_map(|i| self.state(i))
            .flat_map(|s| s.handles())
            .map(|a| a.nbytes())
            .sum()
    }

    /// One optimization step: `allreduce_grads()` then `update(batch_size)`; in update-on-store
    /// mode ([`Trainer::set_kvstore_update`]) a push of the gradients and a pull of the weights
    /// the store updated.
    pub fn step(&mut self, batch_size: usize) -> Result<()> {
        check_batch_size(batch_size)?;
        if self.update_on_kvstore {
            return self.step_on_store(batch_size);
        }
        let entries = self.gather("Trainer::allreduce_grads", true)?;
        self.reduce(&entries)?;
        self.apply(batch_size, entries)
    }

    /// Reduce gradients across workers: with a store ([`Trainer::set_kvstore`]) each
    /// gradient is replaced by its sum over the workers (`pushpull`; a row_sparse gradient
    /// stays row_sparse, over the union of the workers' rows). Without one there is nothing to
    /// sum; either way this checks that every trainable parameter has a gradient of its own
    /// shape, so a missing backward or an uninitialized parameter is reported before any
    /// weight changes.
    ///
    /// In update-on-store mode this is an error, as in Gluon: the store updates as it sums.
    pub fn allreduce_grads(&mut self) -> Result<()> {
        self.refuse_on_store("Trainer::allreduce_grads")?;
        let mut entries = self.gather("Trainer::allreduce_grads", true)?;
        let r = self.reduce(&entries);
        entries.clear();
        self.scratch = entries;
        r
    }

    /// Data-parallel training: gradients are summed over the store's workers before each
    /// update (Gluon's `Trainer(params, optimizer, kvstore=...)` with `update_on_kvstore =
    /// False`). Every worker runs the same loop on its own part of the data; `step(batch_size)`
    /// takes the worker's own batch size and rescales by `1 / (batch_size * num_workers)`, so
    /// N workers with batch B take the step one worker takes with batch N * B. On the first
    /// step every parameter's key is initialized and, with several workers, every worker's
    /// weights are set to worker 0's, so replicas start equal. A store that updates on the
    /// store side (an optimizer set) is refused: the trainer's optimizer updates here. So is
    /// any store once a step in update-on-store mode has given the optimizer to a store.
    pub fn set_kvstore(&mut self, kvstore: Box<dyn KVStore>) -> Result<()> {
        self.check_not_handed("Trainer::set_kvstore")?;
        if !self.tables.is_empty() {
            return Err(Error::arg(
                "Trainer::set_kvstore",
                "this trainer has sharded tables, which live in its store (update on kvstore)",
            ));
        }
        if kvstore.has_optimizer() {
            return Err(Error::arg(
                "Trainer::set_kvstore",
                format!(
                    "the '{}' store has an optimizer set (update on the store); the trainer \
                     sums gradients through the store and updates with its own optimizer",
                    kvstore.kind()
                ),
            ));
        }
        self.kvstore = Some(Arc::new(Mutex::new(kvstore)));
        self.kv_ready = false;
        self.update_on_kvstore = false;
        Ok(())
    }

    /// [`Trainer::set_kvstore`], by value.
    pub fn with_kvstore(mut self, kvstore: Box<dyn KVStore>) -> Result<Trainer> {
        self.set_kvstore(kvstore)?;
        Ok(self)
    }

    /// The store gradients are summed through, if any: a guard (drop it before the next
    /// call that reaches the store).
    pub fn kvstore(&self) -> Option<StoreRef<'_>> {
        self.kvstore.as_ref().map(|k| StoreRef(lock(k)))
    }

    /// How many workers a step's gradients are summed over (1 without a store).
    pub fn num_workers(&self) -> usize {
        self.kvstore.as_ref().map_or(1, |k| lock(k).num_workers())
    }

    /// Sum the gathered gradients over the store's workers, in place (nothing without a store).
    fn reduce(&mut self, entries: &[Entry]) -> Result<()> {
        self.init_keys()?;
        let Some(store) = self.kvstore.clone() else {
            return Ok(());
        };
        let mut kv = lock(&store);
        // All gradients in one call: the store sums them in a few collective calls.
        let keys: Vec<usize> = entries.iter().map(|e| e.index).collect();
        let grads: Vec<NDArray> = entries.iter().map(|e| e.grad.clone()).collect();
        kv.pushpull_many(&keys, &grads, &grads)
            .map_err(|err| keys_named("Trainer::allreduce_grads", err, &keys, &self.params))
    }

    /// On the first step with a store: every trainable parameter's key, whether or not this
    /// step has its gradient (keys are initialized once, in the same order on every worker),
    /// and with several workers every weight set to worker 0's. The store keeps the weights
    /// themselves ([`KVStore::init_shared`]), not copies.
    fn init_keys(&mut self) -> Result<()> {
        let Some(store) = self.kvstore.clone() else {
            return Ok(());
        };
        let mut kv = lock(&store);
        if self.kv_ready {
            return Ok(());
        }
        for (i, p) in self.params.iter().enumerate() {
            if p.grad_req() == GradReq::Null {
                continue;
            }
            let w = p.data()?;
            // The store keeps the weight itself, set to worker 0's, instead of a copy (the
            // tutorial's first layer is a 512 MB table). Updating on the store, its updates
            // land in the parameter and the pull after each step copies nothing; updating
            // here, the store never writes the value it keeps: the first step's sum replaces
            // it.
            kv.init_shared(i, &w)?;
        }
        self.kv_ready = true;
        Ok(())
    }

    fn trainable(&self) -> impl Iterator<Item = &Parameter> {
        self.params.iter().filter(|p| p.grad_req() != GradReq::Null)
    }

    /// Update every trainable parameter from its (already reduced) gradient, rescaled by
    /// `scale / batch_size`.
    ///
    /// In update-on-store mode this is an error, as in Gluon: the store updates the weights.
    pub fn update(&mut self, batch_size: usize) -> Result<()> {
        self.refuse_on_store("Trainer::update")?;
        check_batch_size(batch_size)?;
        let entries = self.gather("Trainer::update", false)?;
        self.apply(batch_size, entries)
    }

    /// Every trainable parameter's weight, gradient and settings, each parameter and each
    /// weight's autograd state read once (`step` used to read them twice, through a dozen
    /// getters per parameter: ~100 atomic operations per step of the tutorial's 6 parameters).
    /// Fails, before anything changes, on an uninitialized parameter or a missing gradient,
    /// and with `check_shapes` on a gradient whose shape is not the weight's.
    fn gather(&mut self, op: &'static str, check_shapes: bool) -> Result<Vec<Entry>> {
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        let mut stale = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            let view = p.update_view();
            if view.grad_req == GradReq::Null {
                continue;
            }
            // Uninitialized: `data()` says why (deferred or never initialized).
            let weight = match view.data {
                Some(w) => w,
                None => p.data()?,
            };
            let grad = weight.grad().ok_or_else(|| {
                Error::arg(
                    op,
                    format!(
                        "parameter '{}' has no gradient (attach_grad / initialize?)",
                        p.name()
                    ),
                )
            })?;
            if check_shapes && !grad.same_shape(&weight) {
                return Err(Error::shape(
                    op,
                    format!(
                        "gradient of '{}' has shape {:?}, the weight {:?}",
                        p.name(),
                        grad.shape(),
                        weight.shape()
                    ),
                ));
            }
            if self.consumed[i] == Some(grad.id()) {
                stale.push(p.name().to_string());
                continue;
            }
            entries.push(Entry {
                index: i,
                weight,
                grad,
                write: view.grad_req == GradReq::Write,
                lr_mult: view.lr_mult,
                wd_mult: view.wd_mult,
            });
        }
        if !stale.is_empty() && !self.ignore_stale_grad {
            return Err(Error::arg(
                op,
                format!(
                    "the gradient of {} has not been updated by a backward since the last \
                     step; if the model uses only some of its parameters on purpose, call \
                     set_ignore_stale_grad(true) to skip them",
                    stale
                        .iter()
                        .map(|n| format!("'{n}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(entries)
    }

    fn apply(&mut self, batch_size: usize, mut entries: Vec<Entry>) -> Result<()> {
        if self.nonfinite != NonFinite::Apply {
            let mut bad = Vec::new();
            for e in &entries {
                if !sparrow_core::update::stored_sum_sq(&e.grad)?.is_finite() {
                    bad.push(format!("'{}'", self.params[e.index].name()));
                }
            }
            if !bad.is_empty() {
                if self.nonfinite == NonFinite::SkipStep {
                    self.skipped += 1;
                    return Ok(());
                }
                return Err(Error::arg(
                    "Trainer::update",
                    format!(
                        "the gradient of {} holds NaN or inf; nothing was updated",
                        bad.join(", ")
                    ),
                ));
            }
        }
        // Gradients were summed over the workers' batches (MXNet's dist_sync rescale).
        let rescale_grad = self.scale / (batch_size * self.num_workers()) as f64;
        let r = entries
            .drain(..)
            .try_for_each(|e| self.apply_one(e, rescale_grad));
        self.scratch = entries;
        r
    }

    fn apply_one(&mut self, e: Entry, rescale_grad: f64) -> Result<()> {
        let (i, weight, grad) = (e.index, &e.weight, e.grad);
        let p = &self.params[i];
        if self.states[i].is_none() {
            self.states[i] = Some(self.optimizer.create_state(i, weight)?);
        }
        let state = self.states[i].as_mut().expect("state created above");
        let args = ParamArgs {
            lr_mult: e.lr_mult,
            wd_mult: e.wd_mult,
            rescale_grad,
        };
        self.optimizer
            .update_with(weight, &grad, state, &args)
            .map_err(|e| Error::arg("Trainer::update", format!("parameter '{}': {e}", p.name())))?;
        self.consume(i, weight, &grad, e.write);
        Ok(())
    }

    /// After parameter `i`'s update: remember the array a step without a backward would find
    /// again: the cleared one for a consumed (`write`) row_sparse gradient, else the gradient
    /// itself.
    fn consume(&mut self, i: usize, weight: &NDArray, grad: &NDArray, write: bool) {
        self.consumed[i] = if write && grad.stype() != sparrow_core::SType::Dense {
            weight.zero_grad();
            weight.grad().map(|g| g.id())
        } else {
            Some(grad.id())
        };
    }

    /// Scale all gradients so that their joint L2 norm is at most `max_norm` (Gluon's
    /// `clip_global_norm`); row_sparse gradients count only their stored rows. Returns the norm
    /// before scaling.
    pub fn clip_global_norm(&self, max_norm: f64) -> Result<f64> {
        let grads: Vec<NDArray> = self.trainable().filter_map(|p| p.grad()).collect();
        clip_global_norm(&grads, max_norm)
    }

    /// Save the optimizer states (arrays, update counts, scalars, `num_update`) to a
    /// safetensors file, atomically (temporary file + rename). In update-on-store mode, the
    /// states this worker's store keeps (every worker of a synchronous store keeps the same);
    /// the file is the one update-on-worker mode writes.
    pub fn save_states(&self, path: impl AsRef<Path>) -> Result<()> {
        let names: Vec<String> = self.params.iter().map(|p| p.name().to_string()).collect();
        let on_store: Vec<Option<State>>;
        let states = if self.handed {
            on_store = (0..self.params.len()).map(|i| self.state(i)).collect();
            &on_store
        } else {
            &self.states
        };
        let optimizer = self.optimizer();
        persist::save_states(
            path.as_ref(),
            optimizer.name(),
            optimizer.options().num_update,
            &names,
            states,
        )
    }

    /// Load optimizer states saved by [`Trainer::save_states`] for the same parameters (same
    /// names, order and shapes) and the same optimizer kind.
    ///
    /// In update-on-store mode the states go to this worker's store (before the first step,
    /// they wait in the trainer and go to the store with the optimizer).
    pub fn load_states(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let names: Vec<String> = self.params.iter().map(|p| p.name().to_string()).collect();
        let mut shapes = HashMap::new();
        let (num_update, states) = {
            let optimizer = self.optimizer();
            for (i, p) in self.params.iter().enumerate() {
                if let Ok(d) = p.data() {
                    // What a state array of this parameter must be (GroupAdaGrad's: `(rows, 1)`).
                    let shape = optimizer.state_shape(&d.shape());
                    // With multi_precision a half weight's states (and master) are f32.
                    let dtype = if crate::optimizer::uses_master(optimizer.options(), d.dtype()) {
                        DType::F32
                    } else {
                        d.dtype()
                    };
                    shapes.insert(i, (shape, d.shape(), dtype));
                }
            }
            persist::load_states(path.as_ref(), optimizer.name(), &names, &shapes)?
        };
        if self.handed {
            self.load_into_store(states)?;
        } else {
            self.states = states;
        }
        self.optimizer_mut().options_mut().num_update = num_update;
        Ok(())
    }
}

/// A store's error on a list of keys, with the keys named by their parameters.
fn keys_named(op: &'static str, err: Error, keys: &[usize], params: &[Parameter]) -> Error {
    let names: Vec<String> = keys
        .iter()
        .map(|&k| format!("{k} = '{}'", params[k].name()))
        .collect();
    Error::arg(
        op,
        format!("{err} (keys are parameters: {})", names.join(", ")),
    )
}

/// The batch size a step divides the gradients by, checked before anything is read.
fn check_batch_size(batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(Error::arg("Trainer::update", "batch_size must be >= 1"));
    }
    Ok(())
}
