//! [`Watchdog`]: ends a collective call that waits too long. MPI's blocking collectives have
//! no timeout of their own; a rank that died, hung or lost its link would leave the others
//! waiting forever.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Expire = Box<dyn Fn(String) + Send>;

/// A thread that watches the collective call in progress (one at a time) and calls its
/// `on_expire` with a message naming the worker, the call and the wait when the call has not
/// finished within the timeout (noticed at most a quarter of the timeout late).
pub(crate) struct Watchdog {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

struct Inner {
    rank: usize,
    timeout: Duration,
    /// The call in progress: its deadline and name.
    armed: Mutex<Watch>,
    cv: Condvar,
}

#[derive(Default)]
struct Watch {
    call: Option<(Instant, &'static str)>,
    stop: bool,
    /// Time spent in guarded calls so far.
    busy: Duration,
}

/// Disarms the watchdog when the call it was made for returns.
pub(crate) struct Guard<'a>(&'a Inner, Instant);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let mut w = self.0.armed.lock().unwrap_or_else(|e| e.into_inner());
        w.call = None;
        w.busy += self.1.elapsed();
    }
}

impl Watchdog {
    /// Watch worker `rank`'s calls, each allowed `timeout`.
    pub(crate) fn start(rank: usize, timeout: Duration, on_expire: Expire) -> Watchdog {
        let inner = Arc::new(Inner {
            rank,
            timeout,
            armed: Mutex::new(Watch::default()),
            cv: Condvar::new(),
        });
        let watcher = inner.clone();
        let thread = std::thread::Builder::new()
            .name("kvstore-watchdog".into())
            .spawn(move || watch(&watcher, on_expire))
            .ok();
        Watchdog { inner, thread }
    }

    /// Arm for the call `op` until the guard is dropped. The watching thread is not woken:
    /// it looks at the call in progress at least every [`Inner::period`], so arming costs an
    /// uncontended lock rather than a thread switch per collective (a training step makes a
    /// few collectives of a few microseconds each, and waking the watcher for each one put a
    /// third thread on a two-rank, two-core machine's cores).
    pub(crate) fn guard(&self, op: &'static str) -> Guard<'_> {
        let mut w = self.inner.armed.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        w.call = Some((now + self.inner.timeout, op));
        Guard(&self.inner, now)
    }

    /// Time spent in guarded calls so far (from each guard's making to its drop).
    pub(crate) fn busy(&self) -> Duration {
        self.inner
            .armed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .busy
    }
}

impl Inner {
    /// How often the watcher looks at the call in progress when it sees none: a quarter of the
    /// timeout, so a call that hangs is reported between one and 1.25 timeouts after it began.
    fn period(&self) -> Duration {
        self.timeout / 4
    }
}

fn watch(inner: &Inner, on_expire: Expire) {
    let mut w = inner.armed.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if w.stop {
            return;
        }
        w = match w.call {
            None => {
                inner
                    .cv
                    .wait_timeout(w, inner.period())
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            Some((deadline, op)) => {
                let now = Instant::now();
                if now >= deadline {
                    w.call = None;
                    let msg = format!(
                        "sparrow-kvstore: worker {} waited more than {:?} in {op} for the other \
                         workers (one died, hangs, skipped a call or lost its link); ending the job",
                        inner.rank, inner.timeout
                    );
                    drop(w);
                    on_expire(msg);
                    inner.armed.lock().unwrap_or_else(|e| e.into_inner())
                } else {
                    inner
                        .cv
                        .wait_timeout(w, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            }
        };
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            let mut w = self.inner.armed.lock().unwrap_or_else(|e| e.into_inner());
            w.stop = true;
            self.inner.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_call_past_its_timeout_is_reported_with_the_worker_and_the_call() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let dog = Watchdog::start(
            3,
            Duration::from_millis(50),
            Box::new(move |m| {
                let _ = tx.lock().unwrap().send(m);
            }),
        );
        {
            let _g = dog.guard("all_reduce");
            std::thread::sleep(Duration::from_millis(200));
        }
        let msg = rx.recv_timeout(Duration::from_secs(5)).expect("expired");
        assert!(
            msg.contains("worker 3") && msg.contains("all_reduce"),
            "{msg}"
        );
    }

    #[test]
    fn calls_that_return_in_time_are_not_reported() {
        let (tx, rx) = mpsc::channel::<String>();
        let tx = Mutex::new(tx);
        let dog = Watchdog::start(
            0,
            Duration::from_millis(300),
            Box::new(move |m| {
                let _ = tx.lock().unwrap().send(m);
            }),
        );
        for _ in 0..20 {
            let _g = dog.guard("barrier");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The time inside the 20 guarded calls is counted; the wait after them is not.
        let busy = dog.busy();
        std::thread::sleep(Duration::from_millis(400));
        assert!(busy >= Duration::from_millis(100), "{busy:?}");
        assert_eq!(dog.busy(), busy);
        drop(dog);
        assert!(rx.try_recv().is_err());
    }
}
