//! Static graphs traced from eager code (MXNet's hybridize / CachedOp, in sparrow's terms).
//!
//! * [`trace`]: run a forward eagerly while the operators it calls log themselves
//!   (`trace.rs`; one [`traced!`] line at the top of each traced operator).
//! * [`Graph`] (`ir.rs`): nodes = operator + attributes ([`Op`], `op.rs`) + input values;
//!   values with shape, dtype and storage type; built from a trace (inputs and parameters
//!   resolved, dead nodes dropped) or from parts (an imported file, fully validated). Running
//!   it replays each node through the same public operator, so autograd records the same
//!   backward as eager code and gradients keep their storage types; each value is released
//!   after its last reader.
//! * [`MemoryPlan`] (`plan.rs`): liveness-based buffer sharing and in-place candidates.
//! * [`Executor`] (`exec.rs`): runs a graph out of its plan (buffers allocated once, nodes
//!   writing into them through their "write into" forms, `into.rs`), for inference.
//! * [`TrainStep`] (`train.rs`, `grad.rs`): the forward and its backward (each operator's
//!   vector-Jacobian product as graph nodes) as one joint graph, planned and run together;
//!   optionally with forward values recomputed in the backward instead of kept
//!   ([`Recompute`], `recompute.rs`).
//! * [`CachedGraph`] (`cached.rs`): one graph per input signature, traced at the first call,
//!   an eager fallback with a message where a forward cannot be traced.

mod cached;
mod capture;
mod exec;
mod fuse;
mod grad;
mod into;
mod ir;
mod op;
mod plan;
mod recompute;
mod recorded;
mod trace;
mod train;

pub use cached::{
    select_params, CachedGraph, CompiledGraph, ForwardFn, GraphParamsFn, ParamsFn, RunCounts,
    Signature,
};
pub use exec::Executor;
pub use grad::{backward_graph, backward_graph_wrt, Backward, GradFn};
pub use ir::{Graph, Node, ParamInfo, ValueInfo};
pub use op::{
    dtype_from_name, dtype_name, stype_from_name, stype_name, AttrValue, CmpFn, Op, ScalarFn,
    UnaryFn,
};
pub use plan::MemoryPlan;
pub use recompute::{with_recompute, Recompute, RecomputePlan};
pub(crate) use trace::note_op;
pub use trace::{
    host_read, is_tracing, not_traceable, record_call, record_call_opt, record_call_plain, trace,
    tracing_outer, TraceLog,
};
pub use train::TrainStep;

/// The hook of a traced operator, its first line: while tracing at the forward's own level,
/// run `$call` (the operator itself, one level deeper) and log `$op` with `$inputs`.
/// `traced!(Op::Unary(UnaryFn::Relu), [self], self.relu());`
macro_rules! traced {
    ($op:expr, [$($x:expr),*], $call:expr) => {
        if $crate::graph::tracing_outer() {
            #[allow(unused_imports)]
            use $crate::graph::{CmpFn, Op, ScalarFn, UnaryFn};
            return $crate::graph::record_call(|| $op, &[$($x),*], || $call);
        }
    };
}
/// [`traced!`] for an operator returning `Result<Option<NDArray>>` (fused ops that decline).
macro_rules! traced_opt {
    ($op:expr, [$($x:expr),*], $call:expr) => {
        if $crate::graph::tracing_outer() {
            #[allow(unused_imports)]
            use $crate::graph::Op;
            return $crate::graph::record_call_opt(|| $op, &[$($x),*], || $call);
        }
    };
}
/// [`traced!`] for an infallible operator.
macro_rules! traced_plain {
    ($op:expr, [$($x:expr),*], $call:expr) => {
        if $crate::graph::tracing_outer() {
            #[allow(unused_imports)]
            use $crate::graph::Op;
            return $crate::graph::record_call_plain(|| $op, &[$($x),*], || $call);
        }
    };
}
pub(crate) use {traced, traced_opt, traced_plain};

#[cfg(test)]
mod exec_tests;
#[cfg(test)]
mod tests;
