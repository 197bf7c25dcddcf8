//! sparrow-kvstore: MXNet's KVStore for data-parallel training.
//!
//! The [`KVStore`] trait is sparrow-optim's (the [`sparrow_optim::Trainer`] takes one); this
//! crate implements it as [`SyncStore`], MXNet's synchronous semantics over a [`Transport`]:
//!
//! - [`local`] / [`local_group`]: one process; threads as workers ([`ThreadTransport`]).
//! - `dist_sync` (cargo feature `mpi`): the ranks of an MPI job (`mpirun -np N`) as workers,
//!   through rsmpi; dense gradients by an all-reduce, row_sparse ones by exchanging their
//!   (row ids, rows) only.
//! - Sharded row_sparse tables ([`SyncStore::init_sharded`]): a table and its optimizer
//!   state split by rows across the workers, each row updated by its owner; a
//!   [`sparrow_optim::Trainer`] drives them: `shard_parameter` makes a model's parameter one
//!   (a `Dense` layer's product is computed by the rows' owners,
//!   [`sparrow_optim::KVStore::sharded_dot`]; an `Embedding` pulls a batch's rows),
//!   `add_sharded_table` / `pull_rows_for` a table outside any layer.
//!
//! [`partition_libsvm`] makes a `LibSVMIter` read the worker's part of the data.

#[cfg(feature = "mpi")]
pub mod mpi;
mod sharded;
mod sharded_dot;
mod store;
pub mod threads;
mod transport;
#[cfg(feature = "mpi")]
mod watchdog;
mod wire;

use std::time::Duration;

pub use sharded::shard_range;
pub use sparrow_optim::KVStore;
pub use store::SyncStore;
pub use threads::ThreadTransport;
pub use transport::{Traffic, Transport, MAX_TIMEOUT};

use sparrow_core::Result;
use sparrow_data::libsvm::LibSVMIterParams;

/// MXNet's `kv.create('local')` with one worker: pushes of several values (one per device)
/// are summed.
pub fn local() -> SyncStore<ThreadTransport> {
    let t = ThreadTransport::group(1, threads::DEFAULT_TIMEOUT)
        .expect("a group of one worker")
        .pop()
        .expect("one transport");
    SyncStore::new("local", t)
}

/// A `local` store with `workers` threads as workers: hand one store to each thread; every
/// push is summed over the threads (as over the ranks of `dist_sync`). A collective that not
/// every thread reaches within `timeout` fails on the threads that wait.
pub fn local_group(workers: usize, timeout: Duration) -> Result<Vec<SyncStore<ThreadTransport>>> {
    Ok(ThreadTransport::group(workers, timeout)?
        .into_iter()
        .map(|t| SyncStore::new("local", t))
        .collect())
}

/// Make a `LibSVMIter` read this worker's part of the data (MXNet's `num_parts =
/// kv.num_workers`, `part_index = kv.rank`).
pub fn partition_libsvm(params: &mut LibSVMIterParams, kv: &dyn KVStore) {
    params.num_parts = kv.num_workers();
    params.part_index = kv.rank();
}
