//! [`Transport`]: the collective operations a synchronous store is built on, and the byte
//! counts every transport keeps.

use std::ops::Range;
use std::time::Duration;

use sparrow_core::{Error, Result};

/// Collective operations among the workers of one store. Every worker calls the same
/// operations in the same order (a collective that some worker never reaches fails with a
/// timeout error on the transports that can tell, see each implementation).
///
/// Implementations: [`crate::threads::ThreadTransport`] (threads of one process, the `local`
/// store) and, with the `mpi` feature, `crate::mpi::MpiTransport` (ranks of an MPI job,
/// `dist_sync`).
pub trait Transport: Send {
    /// This worker's index.
    fn rank(&self) -> usize;
    /// The number of workers.
    fn size(&self) -> usize;
    /// Wait for every worker.
    fn barrier(&mut self) -> Result<()>;
    /// Every worker's `send` (any lengths), in rank order (MPI's allgatherv).
    fn all_gather(&mut self, send: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// [`Transport::all_gather`] into one buffer the caller keeps: every worker's `send`,
    /// concatenated in rank order, is written from the start of `recv` (grown where it is
    /// shorter; what lies past the parts is unspecified), and the ranges of `recv` that each
    /// worker's part occupies are returned. A store that gathers a
    /// step's rows every step keeps one buffer instead of allocating (and faulting in) fresh
    /// memory for every worker's part every step.
    fn all_gather_into(&mut self, send: &[u8], recv: &mut Vec<u8>) -> Result<Vec<Range<usize>>> {
        let parts = self.all_gather(send)?;
        Ok(concat_into(&parts, recv))
    }
    /// [`Transport::all_gather`] of parts whose lengths every worker knows beforehand, straight
    /// into the caller's memory: worker `r`'s `send` is written to `recv[parts[r]]` on every
    /// worker (this worker's own too), and no lengths are exchanged first. `parts` (the same
    /// on every worker) must be `size()` ascending, non-overlapping ranges inside `recv`, and
    /// `send.len()` this worker's part's length; a worker whose `send` differs from what the
    /// others expect fails the call (the MPI transport's library ends the job). A
    /// product's gradient is gathered this way into the array the owner's kernel reads.
    fn all_gather_known_into(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        parts: &[Range<usize>],
    ) -> Result<()> {
        check_known_parts(self.rank(), self.size(), send.len(), recv.len(), parts)?;
        let got = self.all_gather(send)?;
        for (r, (part, bytes)) in parts.iter().zip(&got).enumerate() {
            if bytes.len() != part.len() {
                return Err(Error::arg(
                    "all_gather",
                    format!(
                        "worker {r} sent {} bytes where {} were expected",
                        bytes.len(),
                        part.len()
                    ),
                ));
            }
            recv[part.clone()].copy_from_slice(bytes);
        }
        Ok(())
    }
    /// `send[r]` goes to worker `r`; returns what each worker sent to this one, in rank order
    /// (MPI's alltoallv). `send.len()` must be `size()`.
    fn all_to_all(&mut self, send: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>>;
    /// [`Transport::all_to_all`] from one buffer and into one the caller keeps: `send[parts[r]]`
    /// goes to worker `r` (`parts.len()` must be `size()`); what each worker sent to this one,
    /// concatenated in rank order, is written from the start of `recv` (as
    /// [`Transport::all_gather_into`]), and the ranges each worker's part occupies are returned.
    fn all_to_all_into(
        &mut self,
        send: &[u8],
        parts: &[Range<usize>],
        recv: &mut Vec<u8>,
    ) -> Result<Vec<Range<usize>>> {
        let send = parts
            .iter()
            .map(|r| {
                send.get(r.clone()).map(<[u8]>::to_vec).ok_or_else(|| {
                    sparrow_core::Error::index(
                        "all_to_all",
                        format!("part {r:?} of a {}-byte message", send.len()),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let got = self.all_to_all(send)?;
        Ok(concat_into(&got, recv))
    }
    /// Root's `buf` on every worker (MPI's bcast; lengths may differ before the call).
    fn broadcast(&mut self, root: usize, buf: &mut Vec<u8>) -> Result<()>;
    /// Root's `buf` into every worker's `buf`, whose length every worker already agrees on:
    /// no buffer of the message's size besides the caller's (a 512 MB weight is broadcast
    /// into the weight). The default goes through [`Transport::broadcast`] and a copy.
    fn broadcast_into(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        let mut v = if self.rank() == root {
            buf.to_vec()
        } else {
            Vec::new()
        };
        self.broadcast(root, &mut v)?;
        if v.len() != buf.len() {
            return Err(sparrow_core::Error::arg(
                "broadcast",
                format!(
                    "worker {root} sent {} bytes into a buffer of {}",
                    v.len(),
                    buf.len()
                ),
            ));
        }
        buf.copy_from_slice(&v);
        Ok(())
    }
    /// Elementwise sum over the workers, in place (MPI's allreduce with `MPI_SUM`). Every
    /// worker gets the same values.
    fn all_reduce_sum_f32(&mut self, buf: &mut [f32]) -> Result<()>;
    /// [`Transport::all_reduce_sum_f32`] for f64.
    fn all_reduce_sum_f64(&mut self, buf: &mut [f64]) -> Result<()>;
    /// Bytes this worker has handed to the transport to send so far (see [`Traffic`]).
    fn traffic(&self) -> Traffic;
}

/// The checks of [`Transport::all_gather_known_into`]'s arguments on worker `rank` of `size`.
pub(crate) fn check_known_parts(
    rank: usize,
    size: usize,
    send: usize,
    recv: usize,
    parts: &[Range<usize>],
) -> Result<()> {
    const OP: &str = "all_gather";
    if parts.len() != size {
        return Err(Error::arg(
            OP,
            format!("{} parts for {size} workers", parts.len()),
        ));
    }
    let mut end = 0;
    for p in parts {
        if p.start < end || p.start > p.end || p.end > recv {
            return Err(Error::index(
                OP,
                format!(
                    "parts {parts:?} are not ascending, non-overlapping ranges of a {recv}-byte \
                     buffer"
                ),
            ));
        }
        end = p.end;
    }
    if parts[rank].len() != send {
        return Err(Error::arg(
            OP,
            format!(
                "this worker sends {send} bytes into a part of {}",
                parts[rank].len()
            ),
        ));
    }
    Ok(())
}

/// `parts` one after another as `recv`'s contents, and where each one lies in it.
fn concat_into(parts: &[Vec<u8>], recv: &mut Vec<u8>) -> Vec<Range<usize>> {
    recv.clear();
    parts
        .iter()
        .map(|p| {
            let start = recv.len();
            recv.extend_from_slice(p);
            start..recv.len()
        })
        .collect()
}

/// What a worker has sent through its transport, counted where the bytes are handed over: an
/// all-reduce counts the buffer once, a gather this worker's part once, an all-to-all the parts
/// for the other workers, a broadcast the buffer at the root. Payload bytes (the message
/// lengths MPI itself exchanges for variable-size collectives, 4 bytes per worker, are
/// counted too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent.
    pub bytes: u64,
    /// Collective calls made.
    pub calls: u64,
    /// Time spent inside collective calls: moving the bytes, and waiting for the other
    /// workers to arrive (what a step loses to the exchange, beside its own work).
    pub time: std::time::Duration,
}

impl Traffic {
    /// Count one call that sends `bytes`.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.bytes += bytes as u64;
        self.calls += 1;
    }
}

/// The longest wait a store allows a collective call (a year): a deadline is the clock plus
/// the timeout, and a longer one could overflow it.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A transport's per-collective `timeout`, checked: more than zero (a zero timeout would fail
/// every call that waits at all) and at most [`MAX_TIMEOUT`].
pub(crate) fn check_timeout(op: &'static str, timeout: Duration) -> Result<()> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(Error::arg(
            op,
            format!("timeout {timeout:?}: must be more than zero and at most {MAX_TIMEOUT:?}"),
        ));
    }
    Ok(())
}

/// An all-to-all message that fails the exchange on every worker: one byte to each of `n`
/// workers, in `buf` (cleared first). A worker that meets an error of its own between a
/// call's exchanges still makes the call's next exchange with this message instead of
/// returning early and leaving the others waiting in it; one byte is no part that any
/// exchange sends (a part is whole 4- or 8-byte values or a length-prefixed message, or
/// empty), so every receiver rejects it. Returns the parts to hand to
/// [`Transport::all_to_all_into`].
pub(crate) fn poison_parts(buf: &mut Vec<u8>, n: usize) -> Vec<Range<usize>> {
    buf.clear();
    buf.resize(n, 0);
    (0..n).map(|r| r..r + 1).collect()
}
