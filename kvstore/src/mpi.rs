//! `dist_sync` over MPI (cargo feature `mpi`): [`MpiTransport`], the ranks of an MPI job as
//! the workers of a [`SyncStore`], through rsmpi.

use std::ops::Range;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use sparrow_core::{Error, Result};

use crate::store::SyncStore;
use crate::transport::{Traffic, Transport};
use crate::watchdog::Watchdog;

/// Elements per all-reduce call: a 512 MB gradient is reduced in 16 MB pieces, so the extra
/// buffer MPI needs (send and receive must differ) stays small.
const REDUCE_CHUNK: usize = 4 << 20;

/// The ranks of `MPI_COMM_WORLD` as the workers of a store, on a communicator of its own
/// (a duplicate of the world's), so several stores of one process never mix their messages.
/// The first one made initializes MPI; MPI is finalized when the last one is dropped.
///
/// A watchdog thread ends the job (`MPI_Abort`, with a message naming the rank and the call)
/// when a collective call has not returned within the timeout: a rank that died, hung, or lost
/// its link then stops the whole job with an error instead of leaving the others waiting
/// forever. A rank that exits makes `mpirun` end the others itself.
pub struct MpiTransport {
    // Fields drop in order: the watchdog's thread, which may call `MPI_Abort` on the
    // communicator, is joined before the communicator is freed.
    watchdog: Watchdog,
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    traffic: Traffic,
    // Dropped last: the last transport's drop finalizes MPI.
    _universe: Arc<Mpi>,
}

/// The initialized MPI library (rsmpi's `Universe`, whose drop finalizes it).
struct Mpi(Universe);
// The universe is only read (for the world communicator) under `MPI` below, and dropped once,
// by the last transport; MPI runs with MPI_THREAD_MULTIPLE.
unsafe impl Send for Mpi {}
unsafe impl Sync for Mpi {}

/// The library while some transport or session uses it.
static MPI: Mutex<Weak<Mpi>> = Mutex::new(Weak::new());

/// Keeps MPI initialized while it lives. MPI cannot be initialized again once finalized, and
/// it is finalized when the last store (and session) is dropped; a program that makes stores
/// one after another holds a session for as long as it makes them.
pub struct MpiSession(#[allow(dead_code)] Arc<Mpi>);

impl MpiSession {
    /// Initialize MPI, or join the stores already using it.
    pub fn start() -> Result<MpiSession> {
        Ok(MpiSession(universe()?))
    }
}

/// The initialized library, initializing it if no transport or session holds it.
fn universe() -> Result<Arc<Mpi>> {
    const OP: &str = "dist_sync";
    let mut alive = MPI.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(u) = alive.upgrade() {
        return Ok(u);
    }
    let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .ok_or_else(|| {
            Error::arg(
                OP,
                "MPI was initialized outside sparrow-kvstore, or finalized (when the last store \
                 was dropped; hold an MpiSession to make stores one after another)",
            )
        })?;
    if threading != mpi::Threading::Multiple {
        return Err(Error::arg(
            OP,
            format!(
                "the MPI library provides {threading:?} threading; the store's watchdog needs \
                 Multiple"
            ),
        ));
    }
    let u = Arc::new(Mpi(universe));
    *alive = Arc::downgrade(&u);
    Ok(u)
}

// The communicator is a handle into the MPI library, which was initialized with
// `MPI_THREAD_MULTIPLE` (checked in `world`), so calls may come from any thread; `&mut self` on
// every collective keeps them one at a time, in order, as collectives require.
unsafe impl Send for MpiTransport {}

impl MpiTransport {
    /// A duplicate of `MPI_COMM_WORLD`, initializing MPI first if no transport is alive.
    /// Fails when MPI was initialized (or finalized) by someone else, or does not provide
    /// `MPI_THREAD_MULTIPLE`, or `timeout` is zero or longer than [`crate::MAX_TIMEOUT`].
    pub fn world(timeout: Duration) -> Result<MpiTransport> {
        crate::transport::check_timeout("MpiTransport::world", timeout)?;
        let universe = universe()?;
        let world = universe.0.world().duplicate();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let comm = RawComm(world.as_raw());
        let watchdog = Watchdog::start(
            rank,
            timeout,
            Box::new(move |msg| {
                eprintln!("{msg}");
                comm.abort();
            }),
        );
        Ok(MpiTransport {
            world,
            rank,
            size,
            traffic: Traffic::default(),
            watchdog,
            _universe: universe,
        })
    }

    /// Sum `buf` over the ranks in place, in pieces below MPI's count limit.
    fn all_reduce_sum<T: Equivalence + Copy>(&mut self, buf: &mut [T]) -> Result<()> {
        self.traffic.add(std::mem::size_of_val(buf));
        let _g = self.watchdog.guard("all_reduce");
        let mut send = Vec::with_capacity(REDUCE_CHUNK.min(buf.len()));
        for piece in buf.chunks_mut(REDUCE_CHUNK) {
            send.clear();
            send.extend_from_slice(piece);
            self.world
                .all_reduce_into(&send[..], piece, SystemOperation::sum());
        }
        Ok(())
    }

    /// MPI's lengths and displacements of the byte ranges `parts`, each checked.
    fn layout(
        &mut self,
        what: &'static str,
        parts: &[Range<usize>],
    ) -> Result<(Vec<Count>, Vec<Count>)> {
        let lens = parts.iter().map(|p| self.counts(what, p.len()));
        let lens = lens.collect::<Result<Vec<_>>>()?;
        let starts = parts.iter().map(|p| self.counts(what, p.start));
        Ok((lens, starts.collect::<Result<Vec<_>>>()?))
    }

    fn counts(&mut self, what: &'static str, n: usize) -> Result<Count> {
        Count::try_from(n).map_err(|_| {
            Error::arg(
                what,
                format!(
                    "a message of {n} bytes is over MPI's count limit ({})",
                    Count::MAX
                ),
            )
        })
    }
}

/// The world communicator's handle, moved to the watchdog thread.
struct RawComm(mpi::ffi::MPI_Comm);
// A handle MPI lets any thread use under MPI_THREAD_MULTIPLE.
unsafe impl Send for RawComm {}

impl RawComm {
    /// End every rank of the job (exit code 3).
    fn abort(&self) {
        // SAFETY: MPI runs with MPI_THREAD_MULTIPLE, so this thread may call it while the main
        // thread is blocked in a collective.
        unsafe {
            mpi::ffi::MPI_Abort(self.0, 3);
        }
    }
}

/// Make `recv` at least `total` bytes long. It never shrinks: a store's exchanges alternate
/// between sizes (a batch's parts, then products, then gradients), and growing back a
/// shrunk vector zeroes the regrown bytes every call, a pass over each message before MPI
/// writes it.
fn grow(recv: &mut Vec<u8>, total: usize) {
    if recv.len() < total {
        recv.resize(total, 0);
    }
}

/// Displacements of consecutive parts of the given lengths.
fn displs(counts: &[Count]) -> Result<Vec<Count>> {
    let mut at: Count = 0;
    counts
        .iter()
        .map(|&c| {
            let d = at;
            at = at.checked_add(c).ok_or_else(|| {
                Error::arg(
                    "dist_sync",
                    "messages add up to more than MPI's count limit",
                )
            })?;
            Ok(d)
        })
        .collect()
}

impl Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn barrier(&mut self) -> Result<()> {
        self.traffic.add(0);
        let _g = self.watchdog.guard("barrier");
        self.world.barrier();
        Ok(())
    }

    fn all_gather(&mut self, send: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut recv = Vec::new();
        let ranges = self.all_gather_into(send, &mut recv)?;
        Ok(ranges.into_iter().map(|r| recv[r].to_vec()).collect())
    }

    fn all_gather_into(&mut self, send: &[u8], recv: &mut Vec<u8>) -> Result<Vec<Range<usize>>> {
        let mine = self.counts("all_gather", send.len())?;
        self.traffic.add(send.len() + std::mem::size_of::<Count>());
        let _g = self.watchdog.guard("all_gather");
        let mut counts = vec![0 as Count; self.size];
        self.world.all_gather_into(&mine, &mut counts[..]);
        let displs = displs(&counts)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        grow(recv, total);
        // See `all_to_all_into`: the receive buffer must not share an empty send's address.
        if recv.capacity() == 0 {
            recv.reserve(1);
        }
        {
            let mut part = PartitionMut::new(&mut recv[..total], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(send, &mut part);
        }
        Ok(displs
            .iter()
            .zip(&counts)
            .map(|(&d, &c)| d as usize..(d + c) as usize)
            .collect())
    }

    fn all_gather_known_into(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        parts: &[Range<usize>],
    ) -> Result<()> {
        crate::transport::check_known_parts(self.rank, self.size, send.len(), recv.len(), parts)?;
        // Nothing to move (the same on every worker): no call, so no two empty buffers that
        // share one dangling address reach MPI as the same buffer (see `all_to_all_into`).
        if parts.iter().all(|p| p.is_empty()) {
            self.traffic.add(0);
            return Ok(());
        }
        let (counts, displs) = self.layout("all_gather", parts)?;
        self.traffic.add(send.len());
        let _g = self.watchdog.guard("all_gather");
        let mut part = PartitionMut::new(recv, &counts[..], &displs[..]);
        self.world.all_gather_varcount_into(send, &mut part);
        Ok(())
    }

    fn all_to_all(&mut self, send: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        let mut parts = Vec::with_capacity(send.len());
        let mut at = 0;
        for p in &send {
            parts.push(at..at + p.len());
            at += p.len();
        }
        let mut recv = Vec::new();
        let ranges = self.all_to_all_into(&send.concat(), &parts, &mut recv)?;
        Ok(ranges.into_iter().map(|r| recv[r].to_vec()).collect())
    }

    fn all_to_all_into(
        &mut self,
        send: &[u8],
        parts: &[Range<usize>],
        recv: &mut Vec<u8>,
    ) -> Result<Vec<Range<usize>>> {
        if parts.len() != self.size {
            return Err(Error::arg(
                "all_to_all",
                format!("{} parts for {} workers", parts.len(), self.size),
            ));
        }
        if let Some(r) = parts.iter().find(|r| r.start > r.end || r.end > send.len()) {
            return Err(Error::index(
                "all_to_all",
                format!("part {r:?} of a {}-byte message", send.len()),
            ));
        }
        let (scounts, sdispls) = self.layout("all_to_all", parts)?;
        let rank = self.rank;
        let others: usize = (0..self.size)
            .filter(|&r| r != rank)
            .map(|r| parts[r].len() + std::mem::size_of::<Count>())
            .sum();
        self.traffic.add(others);
        let _g = self.watchdog.guard("all_to_all");
        let mut rcounts = vec![0 as Count; self.size];
        self.world.all_to_all_into(&scounts[..], &mut rcounts[..]);
        let rdispls = displs(&rcounts)?;
        let total: usize = rcounts.iter().map(|&c| c as usize).sum();
        grow(recv, total);
        // Two empty buffers that never allocated share one dangling address, and MPI refuses a
        // send buffer that is the receive buffer (MPI_ERR_ARG): the receive buffer allocates.
        if recv.capacity() == 0 {
            recv.reserve(1);
        }
        {
            let sp = Partition::new(send, &scounts[..], &sdispls[..]);
            let mut rp = PartitionMut::new(&mut recv[..total], &rcounts[..], &rdispls[..]);
            self.world.all_to_all_varcount_into(&sp, &mut rp);
        }
        Ok(rdispls
            .iter()
            .zip(&rcounts)
            .map(|(&d, &c)| d as usize..(d + c) as usize)
            .collect())
    }

    fn broadcast(&mut self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        if root >= self.size {
            return Err(Error::arg(
                "broadcast",
                format!("root {root} of {} workers", self.size),
            ));
        }
        let mut len = buf.len() as u64;
        self.traffic
            .add(if self.rank == root { buf.len() + 8 } else { 0 });
        let _g = self.watchdog.guard("broadcast");
        let root_process = self.world.process_at_rank(root as i32);
        root_process.broadcast_into(&mut len);
        if self.rank != root {
            *buf = vec![0u8; len as usize];
        }
        // In pieces below MPI's count limit.
        for piece in buf.chunks_mut(1 << 30) {
            root_process.broadcast_into(piece);
        }
        Ok(())
    }

    fn broadcast_into(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        if root >= self.size {
            return Err(Error::arg(
                "broadcast",
                format!("root {root} of {} workers", self.size),
            ));
        }
        self.traffic
            .add(if self.rank == root { buf.len() } else { 0 });
        let _g = self.watchdog.guard("broadcast");
        let root_process = self.world.process_at_rank(root as i32);
        // In pieces below MPI's count limit; every worker's `buf` has the same length.
        for piece in buf.chunks_mut(1 << 30) {
            root_process.broadcast_into(piece);
        }
        Ok(())
    }

    fn all_reduce_sum_f32(&mut self, buf: &mut [f32]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn all_reduce_sum_f64(&mut self, buf: &mut [f64]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            time: self.watchdog.busy(),
            ..self.traffic
        }
    }
}

/// MXNet's `kv.create('dist_sync')`: the ranks of this MPI job (`mpirun -np N`) as workers.
/// Initializes MPI (once per process). A collective call that has not completed within
/// `timeout` aborts the job with a message (see [`MpiTransport`]).
pub fn dist_sync(timeout: Duration) -> Result<SyncStore<MpiTransport>> {
    Ok(SyncStore::new("dist_sync", MpiTransport::world(timeout)?))
}
