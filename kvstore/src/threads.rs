//! [`ThreadTransport`]: the collectives among threads of one process (the `local` store with
//! several workers).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sparrow_core::{Error, Result};

use crate::transport::{Traffic, Transport};

/// How long a thread waits at a collective for the others by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One worker of a group of threads ([`ThreadTransport::group`]). A collective that not every
/// worker reaches within the group's timeout fails on every worker that waits, and the group
/// stays failed; a worker dropped (its thread ended or panicked) fails the group at once, so
/// the others get an error instead of waiting.
pub struct ThreadTransport {
    rank: usize,
    shared: Arc<Shared>,
    traffic: Traffic,
}

struct Shared {
    size: usize,
    timeout: Duration,
    round: Mutex<Round>,
    cv: Condvar,
}

struct Round {
    arrived: usize,
    generation: u64,
    /// Why the group can no longer run collectives (a timeout, a worker gone).
    broken: Option<String>,
    /// `size * size` mailboxes: `slots[from * size + to]`.
    slots: Vec<Vec<u8>>,
}

impl ThreadTransport {
    /// `size` workers (ranks `0..size`) that wait for each other at most `timeout` per
    /// collective. Hand one to each thread. `timeout` must be more than zero and at most
    /// [`crate::MAX_TIMEOUT`].
    pub fn group(size: usize, timeout: Duration) -> Result<Vec<ThreadTransport>> {
        if size == 0 {
            return Err(Error::arg(
                "ThreadTransport::group",
                "needs at least 1 worker",
            ));
        }
        crate::transport::check_timeout("ThreadTransport::group", timeout)?;
        let slots = size.checked_mul(size).ok_or_else(|| {
            Error::arg(
                "ThreadTransport::group",
                format!("{size} workers is too many"),
            )
        })?;
        let shared = Arc::new(Shared {
            size,
            timeout,
            round: Mutex::new(Round {
                arrived: 0,
                generation: 0,
                broken: None,
                slots: vec![Vec::new(); slots],
            }),
            cv: Condvar::new(),
        });
        Ok((0..size)
            .map(|rank| ThreadTransport {
                rank,
                shared: shared.clone(),
                traffic: Traffic::default(),
            })
            .collect())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Round>> {
        let g = self.shared.round.lock().unwrap_or_else(|e| e.into_inner());
        match &g.broken {
            Some(why) => Err(Error::arg("kvstore", format!("local group failed: {why}"))),
            None => Ok(g),
        }
    }

    /// `f`, its time counted in the traffic's time in collectives.
    fn timed<R>(&mut self, f: impl FnOnce(&Self) -> R) -> R {
        let start = std::time::Instant::now();
        let r = f(self);
        self.traffic.time += start.elapsed();
        r
    }

    /// Wait until all `size` workers have arrived; fails after the timeout (marking the group
    /// failed, so every other waiter fails too).
    fn wait_all(&self, what: &str) -> Result<()> {
        let mut g = self.lock()?;
        g.arrived += 1;
        if g.arrived == self.shared.size {
            g.arrived = 0;
            g.generation += 1;
            self.shared.cv.notify_all();
            return Ok(());
        }
        let generation = g.generation;
        let deadline = Instant::now() + self.shared.timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                let why = format!(
                    "worker {} waited {:?} in {what} for the other workers (one stopped or \
                     skipped a collective call)",
                    self.rank, self.shared.timeout
                );
                g.broken = Some(why.clone());
                self.shared.cv.notify_all();
                return Err(Error::arg("kvstore", why));
            }
            let (ng, _) = self
                .shared
                .cv
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner());
            g = ng;
            if g.generation != generation {
                return Ok(());
            }
            if let Some(why) = &g.broken {
                return Err(Error::arg("kvstore", format!("local group failed: {why}")));
            }
        }
    }

    /// Post `parts[to]` in this worker's mailboxes, wait for everyone, read what `read`
    /// selects, wait again (so no mailbox is overwritten before it was read).
    fn exchange(
        &self,
        what: &str,
        parts: Vec<(usize, Vec<u8>)>,
        read: impl Fn(usize) -> usize,
    ) -> Result<Vec<Vec<u8>>> {
        let n = self.shared.size;
        {
            let mut g = self.lock()?;
            for (to, bytes) in parts {
                g.slots[self.rank * n + to] = bytes;
            }
        }
        self.wait_all(what)?;
        let out = {
            let g = self.lock()?;
            (0..n).map(|r| g.slots[read(r)].clone()).collect()
        };
        self.wait_all(what)?;
        Ok(out)
    }
}

impl Drop for ThreadTransport {
    fn drop(&mut self) {
        let mut g = self.shared.round.lock().unwrap_or_else(|e| e.into_inner());
        if g.broken.is_none() && self.shared.size > 1 {
            g.broken = Some(format!("worker {} left the group", self.rank));
        }
        self.shared.cv.notify_all();
    }
}

impl Transport for ThreadTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn barrier(&mut self) -> Result<()> {
        self.traffic.add(0);
        self.timed(|t| t.wait_all("barrier"))
    }

    fn all_gather(&mut self, send: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.shared.size;
        self.traffic.add(send.len());
        // Worker r's part sits in its mailbox to 0.
        self.timed(|t| t.exchange("all_gather", vec![(0, send.to_vec())], |r| r * n))
    }

    fn all_to_all(&mut self, send: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        let n = self.shared.size;
        if send.len() != n {
            return Err(Error::arg(
                "all_to_all",
                format!("{} parts for {n} workers", send.len()),
            ));
        }
        let rank = self.rank;
        let sent: usize = (0..n).filter(|&r| r != rank).map(|r| send[r].len()).sum();
        self.traffic.add(sent);
        self.timed(|t| {
            t.exchange("all_to_all", send.into_iter().enumerate().collect(), |r| {
                r * n + rank
            })
        })
    }

    fn broadcast(&mut self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let n = self.shared.size;
        if root >= n {
            return Err(Error::arg(
                "broadcast",
                format!("root {root} of {n} workers"),
            ));
        }
        let parts = if self.rank == root {
            self.traffic.add(buf.len());
            vec![(0, std::mem::take(buf))]
        } else {
            self.traffic.add(0);
            Vec::new()
        };
        let mut got = self.timed(|t| t.exchange("broadcast", parts, |r| r * n))?;
        *buf = std::mem::take(&mut got[root]);
        Ok(())
    }

    fn all_reduce_sum_f32(&mut self, buf: &mut [f32]) -> Result<()> {
        let bytes: Vec<u8> = buf.iter().flat_map(|x| x.to_le_bytes()).collect();
        let parts = self.all_gather(&bytes)?;
        // Summed in rank order on every worker: the same bits everywhere.
        buf.iter_mut().for_each(|x| *x = 0.0);
        for p in &parts {
            check_len("all_reduce_sum", p.len(), buf.len() * 4)?;
            for (x, c) in buf.iter_mut().zip(p.chunks_exact(4)) {
                *x += f32::from_le_bytes(c.try_into().expect("4 bytes"));
            }
        }
        Ok(())
    }

    fn all_reduce_sum_f64(&mut self, buf: &mut [f64]) -> Result<()> {
        let bytes: Vec<u8> = buf.iter().flat_map(|x| x.to_le_bytes()).collect();
        let parts = self.all_gather(&bytes)?;
        buf.iter_mut().for_each(|x| *x = 0.0);
        for p in &parts {
            check_len("all_reduce_sum", p.len(), buf.len() * 8)?;
            for (x, c) in buf.iter_mut().zip(p.chunks_exact(8)) {
                *x += f64::from_le_bytes(c.try_into().expect("8 bytes"));
            }
        }
        Ok(())
    }

    fn traffic(&self) -> Traffic {
        self.traffic
    }
}

fn check_len(op: &'static str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::shape(
            op,
            format!("a worker sent {got} bytes, this one has {want}"),
        ));
    }
    Ok(())
}
