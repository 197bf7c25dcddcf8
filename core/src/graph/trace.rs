//! The tracer: a thread-local log of the operators a forward pass calls.
//!
//! Tracing is eager execution plus a log. Each traced public operator starts with one
//! [`traced!`](crate::graph::traced) line: while a trace is active and the call is not nested
//! inside another traced operator, it runs the operator one level deeper (where the hook is
//! skipped) and appends `(op, inputs, output)` to the log. Operators called inside a traced
//! operator (a `mean` calling `sum` and `mul_scalar`) are its implementation and are not
//! logged. What cannot become a graph is noted instead of logged: values read on the host at
//! the top level (data-dependent control flow), blocks that declare themselves not traceable,
//! and the names of recorded operators without a hook, so the fallback message can name them.

use std::cell::{Cell, RefCell};

use super::op::Op;
use crate::{Error, NDArray, Result};

thread_local! {
    /// 0: not tracing; 1: tracing, at the forward's own level; > 1: inside a traced operator.
    static STATE: Cell<u32> = const { Cell::new(0) };
    static LOG: RefCell<Option<TraceLog>> = const { RefCell::new(None) };
}

/// One logged operator application.
pub(crate) struct Entry {
    pub op: Op,
    pub inputs: Vec<NDArray>,
    pub output: NDArray,
}

/// What a trace saw: the operators in call order, and why it cannot become a graph, if so.
#[derive(Default)]
pub struct TraceLog {
    pub(crate) entries: Vec<Entry>,
    /// Outputs of recorded operators that have no hook, with the operator's name.
    pub(crate) untraced: Vec<(NDArray, &'static str)>,
    /// The first reason the forward cannot be a static graph.
    pub(crate) problem: Option<String>,
}

impl TraceLog {
    /// Number of operators logged.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when no operator was logged.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The first reason the traced forward cannot become a graph (host reads, a block that
    /// declared itself not traceable), if any.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }
}

/// True while a trace runs on this thread (at any depth).
pub fn is_tracing() -> bool {
    STATE.with(|s| s.get() > 0)
}

/// True while a trace runs and the caller is at the forward's own level: the operators hook.
#[inline]
pub fn tracing_outer() -> bool {
    STATE.with(|s| s.get() == 1)
}

/// One level deeper for the life of the guard (also on unwinding).
struct Deeper;

impl Deeper {
    fn enter() -> Deeper {
        STATE.with(|s| s.set(s.get() + 1));
        Deeper
    }
}

impl Drop for Deeper {
    fn drop(&mut self) {
        STATE.with(|s| s.set(s.get().saturating_sub(1)));
    }
}

fn push(op: Op, inputs: &[&NDArray], output: &NDArray) {
    LOG.with(|l| {
        if let Some(log) = l.borrow_mut().as_mut() {
            log.entries.push(Entry {
                op,
                inputs: inputs.iter().map(|&x| x.clone()).collect(),
                output: output.clone(),
            });
        }
    });
}

fn note_problem(msg: impl FnOnce() -> String) {
    LOG.with(|l| {
        if let Some(log) = l.borrow_mut().as_mut() {
            if log.problem.is_none() {
                log.problem = Some(msg());
            }
        }
    });
}

/// Run a traced operator one level deeper and log it (what [`traced!`](crate::graph::traced)
/// expands to while tracing).
pub fn record_call(
    op: impl FnOnce() -> Op,
    inputs: &[&NDArray],
    call: impl FnOnce() -> Result<NDArray>,
) -> Result<NDArray> {
    let out = {
        let _d = Deeper::enter();
        call()
    }?;
    push(op(), inputs, &out);
    Ok(out)
}

/// [`record_call`] for operators that may decline (`Ok(None)`: nothing computed, nothing
/// logged).
pub fn record_call_opt(
    op: impl FnOnce() -> Op,
    inputs: &[&NDArray],
    call: impl FnOnce() -> Result<Option<NDArray>>,
) -> Result<Option<NDArray>> {
    let out = {
        let _d = Deeper::enter();
        call()
    }?;
    if let Some(o) = &out {
        push(op(), inputs, o);
    }
    Ok(out)
}

/// [`record_call`] for infallible operators (`detach`).
pub fn record_call_plain(
    op: impl FnOnce() -> Op,
    inputs: &[&NDArray],
    call: impl FnOnce() -> NDArray,
) -> NDArray {
    let out = {
        let _d = Deeper::enter();
        call()
    };
    push(op(), inputs, &out);
    out
}

/// Called by the public host reads (`to_vec`, `to_f64_vec`, `item`): a value read on the host
/// by the forward itself decides something the graph cannot see.
#[inline]
pub fn host_read(what: &'static str, a: &NDArray) {
    if tracing_outer() {
        note_problem(|| {
            format!(
                "reads the values of an array of shape {:?} on the host ({what}): \
                 data-dependent control flow or host arithmetic cannot be traced",
                a.shape()
            )
        });
    }
}

/// Called by `autograd::record_op` for every operator: while tracing at the top level, an
/// operator output not logged by a hook is remembered with the operator's name, so that the
/// fallback message can name the untraced operator.
#[inline]
pub(crate) fn note_op(op: &'static str, out: &NDArray) {
    if tracing_outer() {
        LOG.with(|l| {
            if let Some(log) = l.borrow_mut().as_mut() {
                log.untraced.push((out.clone(), op));
            }
        });
    }
}

/// Declare that the running forward cannot be traced (`block`: who, `why`: the reason), e.g.
/// a BatchNorm updating its running statistics in training mode or a Dropout drawing its mask.
/// Outside a trace it does nothing; inside, the block runs eagerly with this message.
pub fn not_traceable(block: &str, why: &str) {
    if is_tracing() {
        note_problem(|| format!("{block}: {why}"));
    }
}

/// Restores "not tracing" when dropped (also on unwinding) and clears the log.
struct Tracing;

impl Drop for Tracing {
    fn drop(&mut self) {
        STATE.with(|s| s.set(0));
        LOG.with(|l| l.borrow_mut().take());
    }
}

/// Run `f` eagerly with tracing on and return its result with the log. Tracing inside a trace
/// is an error (a hybridized block inside a tracing parent runs its forward inline instead).
pub fn trace<R>(f: impl FnOnce() -> R) -> Result<(R, TraceLog)> {
    if is_tracing() {
        return Err(Error::arg(
            "graph::trace",
            "already tracing on this thread (nested traces are inlined by the caller)",
        ));
    }
    LOG.with(|l| *l.borrow_mut() = Some(TraceLog::default()));
    STATE.with(|s| s.set(1));
    let guard = Tracing;
    let r = f();
    let log = LOG.with(|l| l.borrow_mut().take()).unwrap_or_default();
    drop(guard);
    Ok((r, log))
}
