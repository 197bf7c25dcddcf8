//! Update on the store: the [`Trainer`] gives its optimizer to the [`KVStore`], each step
//! pushes the gradients and pulls the weights the store updated (Gluon's
//! `Trainer(..., kvstore=store, update_on_kvstore=True)`).
//!
//! The store's update is the trainer's own: the trainer writes each step's `rescale_grad`
//! (`scale / (batch_size * num_workers)`) and its parameters' `lr_mult` / `wd_mult` into the
//! store's optimizer's options, which [`Optimizer::update`] turns into the very [`ParamArgs`]
//! update-on-worker mode passes, so one worker updates the same bits in both modes.
//!
//! [`ParamArgs`]: crate::optimizer::ParamArgs

use std::sync::{Arc, Mutex};

use sparrow_core::{Error, NDArray, Result};

use super::shared_store::lock;
use super::{keys_named, NonFinite, Trainer};
use crate::kvstore::KVStore;
use crate::optimizer::{Optimizer, OptimizerOptions, State, StepCtx};

impl Trainer {
    /// Data-parallel training with the update on the store (Gluon's `Trainer(params,
    /// optimizer, kvstore=store, update_on_kvstore=True)`; [`Trainer::set_kvstore`] is
    /// `update_on_kvstore=False`).
    ///
    /// On the first step every trainable parameter's key is initialized (with several workers,
    /// every worker's weights are set to worker 0's) and the trainer's optimizer is given to
    /// the store ([`KVStore::set_optimizer`]), with any states loaded before. From then on
    /// `step(batch_size)` pushes the gradients, the store sums them over the workers and
    /// updates its copy of each weight with `rescale_grad = scale / (batch_size *
    /// num_workers)` and the parameter's multipliers (a row_sparse gradient updates only its
    /// rows where the optimizer is lazy, as on the worker), and the trainer pulls the updated
    /// weights into the parameters. The keys are initialized with [`KVStore::init_shared`]:
    /// a store that can keeps the parameter's weight itself as its replica, so its update
    /// writes the weight in place (only the pushed rows of a lazy row_sparse update) and the
    /// pull copies nothing; a store that keeps a copy has the whole weight pulled.
    ///
    /// The optimizer then lives in the store: [`Trainer::optimizer`],
    /// [`Trainer::set_learning_rate`], schedules, [`Trainer::state`],
    /// [`Trainer::save_states`] and [`Trainer::load_states`] reach it there. `allreduce_grads`
    /// and `update` are errors in this mode (as in Gluon), and so is a step with a
    /// [`NonFinite`] policy other than `Apply`: the store updates as soon as the gradients
    /// are summed, so a step cannot be skipped on every worker alike.
    ///
    /// Fails on a store that already has an optimizer, and once a step has given the
    /// optimizer to a store (make a new trainer to change stores).
    ///
    /// ```text
    /// // The stores are in sparrow-kvstore (which depends on this crate).
    /// let mut trainer = Trainer::new(net.collect_params()?.iter().map(|(_, p)| p.clone()),
    ///                                Adam::new(0.01))?;
    /// trainer.set_kvstore_update(Box::new(sparrow_kvstore::local()))?;
    /// // per batch: record, backward, then
    /// trainer.step(batch_size)?;
    /// ```
    pub fn set_kvstore_update(&mut self, kvstore: Box<dyn KVStore>) -> Result<()> {
        const OP: &str = "Trainer::set_kvstore_update";
        self.check_not_handed(OP)?;
        if !self.tables.is_empty() {
            return Err(Error::arg(
                OP,
                "this trainer has sharded tables, which live in its current store",
            ));
        }
        if kvstore.has_optimizer() {
            return Err(Error::arg(
                OP,
                format!(
                    "the '{}' store already has an optimizer; the trainer gives the store its \
                     own (pass a store without one)",
                    kvstore.kind()
                ),
            ));
        }
        self.kvstore = Some(Arc::new(Mutex::new(kvstore)));
        self.kv_ready = false;
        self.update_on_kvstore = true;
        Ok(())
    }

    /// [`Trainer::set_kvstore_update`], by value.
    pub fn with_kvstore_update(mut self, kvstore: Box<dyn KVStore>) -> Result<Trainer> {
        self.set_kvstore_update(kvstore)?;
        Ok(self)
    }

    /// Whether the store updates the weights ([`Trainer::set_kvstore_update`]; Gluon's
    /// `update_on_kvstore`).
    pub fn update_on_kvstore(&self) -> bool {
        self.update_on_kvstore
    }

    /// Gluon's error for `allreduce_grads` / `update` called on their own in update-on-store
    /// mode.
    pub(super) fn refuse_on_store(&self, op: &'static str) -> Result<()> {
        if self.update_on_kvstore {
            return Err(Error::arg(
                op,
                "the store updates the weights (update on kvstore: Trainer::set_kvstore_update), \
                 so gradients cannot be reduced or applied on their own; call step(batch_size), \
                 or use Trainer::set_kvstore to update on the worker",
            ));
        }
        Ok(())
    }

    /// Stores cannot change once the optimizer lives in one.
    pub(super) fn check_not_handed(&self, op: &'static str) -> Result<()> {
        if self.handed {
            return Err(Error::arg(
                op,
                "the optimizer and its states live in the current store (update on kvstore) \
                 since the first step; make a new Trainer to use another store",
            ));
        }
        Ok(())
    }

    /// One step in update-on-store mode (see [`Trainer::set_kvstore_update`]).
    pub(super) fn step_on_store(&mut self, batch_size: usize) -> Result<()> {
        const OP: &str = "Trainer::step";
        if self.nonfinite != NonFinite::Apply {
            return Err(Error::arg(
                OP,
                format!(
                    "the NonFinite::{:?} policy needs the summed gradients before the update, \
                     which happens in the store (update on kvstore); use NonFinite::Apply or \
                     Trainer::set_kvstore",
                    self.nonfinite
                ),
            ));
        }
        let mut entries = self.gather(OP, true)?;
        self.init_keys()?;
        if !self.handed {
            self.hand_optimizer()?;
        }
        let rescale_grad = self.scale / (batch_size * self.num_workers()) as f64;
        let store = self.kvstore.clone().ok_or_else(|| no_store(OP))?;
        let mut kv = lock(&store);
        let opts = kv
            .optimizer_mut()
            .ok_or_else(|| lost_optimizer(OP))?
            .options_mut();
        opts.rescale_grad = rescale_grad;
        for e in &entries {
            opts.lr_mult.insert(e.index, e.lr_mult);
            opts.wd_mult.insert(e.index, e.wd_mult);
        }
        // Every gradient in one call. A store that shares the weights (`init_shared`) has
        // updated the parameters' own arrays and the pull is a no-op; from one that keeps
        // copies, the pull brings the updated weights back.
        let keys: Vec<usize> = entries.iter().map(|e| e.index).collect();
        let grads: Vec<NDArray> = entries.iter().map(|e| e.grad.clone()).collect();
        let weights: Vec<NDArray> = entries.iter().map(|e| e.weight.clone()).collect();
        // Products read from sharded tables send their gradients in the same exchange.
        self.pushpull_with_tables(&mut **kv, &keys, &grads, &weights)
            .map_err(|err| keys_named(OP, err, &keys, &self.params))?;
        drop(kv);
        for e in entries.drain(..) {
            self.consume(e.index, &e.weight, &e.grad, e.write);
        }
        self.scratch = entries;
        self.push_tables()
    }

    /// Give the optimizer (and any states loaded before the first step) to the store.
    fn hand_optimizer(&mut self) -> Result<()> {
        const OP: &str = "Trainer::step";
        let store = self.kvstore.clone().ok_or_else(|| no_store(OP))?;
        let mut kv = lock(&store);
        if kv.has_optimizer() {
            return Err(Error::arg(
                OP,
                format!("the '{}' store already has an optimizer", kv.kind()),
            ));
        }
        let stand_in = Box::new(OnStore {
            name: self.optimizer.name(),
            opts: OptimizerOptions::new(self.optimizer.learning_rate()),
        });
        let optimizer = std::mem::replace(&mut self.optimizer, stand_in);
        let given = kv.set_optimizer(optimizer);
        drop(kv);
        // Taken or not, the optimizer has left the trainer: later steps fail on the store's
        // missing optimizer rather than hand over the stand-in.
        self.handed = true;
        given.map_err(|e| {
            Error::arg(
                OP,
                format!(
                    "the store refused the optimizer ({e}); it is gone with the call, so this \
                     trainer cannot step: make a new one"
                ),
            )
        })?;
        let loaded = std::mem::take(&mut self.states);
        self.states = vec![None; self.params.len()];
        self.load_into_store(loaded)?;
        self.load_tables_into_store()
    }

    /// Hand states (loaded from a file) to the store, key by key.
    pub(super) fn load_into_store(&mut self, states: Vec<Option<State>>) -> Result<()> {
        let store = self
            .kvstore
            .clone()
            .ok_or_else(|| no_store("Trainer::load_states"))?;
        let mut kv = lock(&store);
        for (i, s) in states.into_iter().enumerate() {
            if let Some(s) = s {
                kv.set_optimizer_state(i, s)?;
            }
        }
        Ok(())
    }
}

fn no_store(op: &'static str) -> Error {
    Error::arg(op, "update on kvstore without a store")
}

fn lost_optimizer(op: &'static str) -> Error {
    Error::arg(
        op,
        "the store does not return the optimizer the trainer gave it (KVStore::optimizer_mut)",
    )
}

/// What the trainer holds once its optimizer is in the store: every optimizer access goes to
/// the store's; this one only answers if the store lost it, and refuses to update.
struct OnStore {
    name: &'static str,
    opts: OptimizerOptions,
}

impl Optimizer for OnStore {
    fn name(&self) -> &'static str {
        self.name
    }
    fn options(&self) -> &OptimizerOptions {
        &self.opts
    }
    fn options_mut(&mut self) -> &mut OptimizerOptions {
        &mut self.opts
    }
    fn create_state(&self, _index: usize, _weight: &NDArray) -> Result<State> {
        Err(lost_optimizer("Optimizer::create_state"))
    }
    fn step(&self, _: &StepCtx, _: &NDArray, _: &NDArray, _: &mut State) -> Result<()> {
        Err(lost_optimizer("Optimizer::update"))
    }
}
