//! The trainer's store behind a lock, and borrowed views of it.
//!
//! A parameter sharded across the workers ([`Trainer::shard_parameter`]) pulls its rows
//! through the trainer's store in its layer's forward, while the trainer pushes and updates
//! through the same store in `step`; so the trainer and its sharded parameters share the
//! store (`Arc<Mutex<_>>`). Accessors that used to lend a reference into the store lend a
//! guard instead ([`StoreRef`], [`OptimizerRef`], [`OptimizerMut`]); drop it before calling
//! the trainer again (a forward of a sharded layer included), as with any lock.
//!
//! [`Trainer::shard_parameter`]: super::Trainer::shard_parameter

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::kvstore::KVStore;
use crate::optimizer::Optimizer;

/// A store shared by a trainer and the row sources of its sharded parameters.
pub(super) type SharedStore = Arc<Mutex<Box<dyn KVStore>>>;

/// Lock the store. A panic while it was held (in another thread's forward) leaves it as that
/// call left it: the store's own calls fail cleanly on a broken collective, so the lock is
/// taken over rather than poisoning every later call.
pub(super) fn lock(store: &SharedStore) -> MutexGuard<'_, Box<dyn KVStore>> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

/// The trainer's store, borrowed ([`super::Trainer::kvstore`]): derefs to the store.
pub struct StoreRef<'a>(pub(super) MutexGuard<'a, Box<dyn KVStore>>);

impl Deref for StoreRef<'_> {
    type Target = dyn KVStore;
    fn deref(&self) -> &Self::Target {
        &**self.0
    }
}

/// The trainer's optimizer, borrowed ([`super::Trainer::optimizer`]): the trainer's own, or
/// the store's once update on the store has given it there.
pub struct OptimizerRef<'a>(pub(super) Lent<'a, &'a (dyn Optimizer + 'static)>);

/// The trainer's optimizer, mutably borrowed ([`super::Trainer::optimizer_mut`]).
pub struct OptimizerMut<'a>(pub(super) Lent<'a, &'a mut (dyn Optimizer + 'static)>);

/// Where a lent optimizer lives: in the trainer, or in its store (with the trainer's
/// stand-in, which answers if the store returns none).
pub(super) enum Lent<'a, O> {
    Trainer(O),
    Store(MutexGuard<'a, Box<dyn KVStore>>, O),
}

impl Deref for OptimizerRef<'_> {
    type Target = dyn Optimizer;
    fn deref(&self) -> &Self::Target {
        match &self.0 {
            Lent::Trainer(o) => *o,
            Lent::Store(kv, stand_in) => kv.optimizer().unwrap_or(*stand_in),
        }
    }
}

impl Deref for OptimizerMut<'_> {
    type Target = dyn Optimizer;
    fn deref(&self) -> &Self::Target {
        match &self.0 {
            Lent::Trainer(o) => &**o,
            Lent::Store(kv, stand_in) => kv.optimizer().unwrap_or(&**stand_in),
        }
    }
}

impl DerefMut for OptimizerMut<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.0 {
            Lent::Trainer(o) => &mut **o,
            Lent::Store(kv, stand_in) => {
                if let Some(o) = kv.optimizer_mut() {
                    return o;
                }
                &mut **stand_in
            }
        }
    }
}
