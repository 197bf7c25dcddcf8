//! Sparse storage types: csr and row_sparse construction, conversion and operators.
//!
//! Operators on `NDArray` (`dot`, `add`, `mul`, `relu`, ...) dispatch here on the storage types
//! of their inputs; the free functions below are the sparse-specific entry points.

mod binary;
mod construct;
pub(crate) use construct::{check_rsp, checked_csr};
mod convert;
mod dispatch;
mod dot;
pub(crate) use dot::{csr_index, csr_t_dense_of, csr_t_dense_over};
mod dot_t;
mod embedding;
mod groups;
mod random;
mod reduce;
mod retain;
mod row_local;
mod scatter_nd;
pub(crate) use row_local::{gathered_rows_grad, row_local_grad};
mod slice;
mod stage;
mod unary;

pub(crate) use convert::densify;
pub use convert::{add_grads, cast_storage, zeros_stype_on};
pub use dispatch::{densify_warnings, fallback, set_strict_stype, strict_stype};
pub(crate) use dispatch::{
    densifying, dispatch_binary, dispatch_clip, dispatch_dot, dispatch_scalar, dispatch_unary,
    run_backward_checked,
};
pub use dot::{
    dot_csr_csr, dot_csr_dense, dot_csr_rsp, dot_csr_t_dense, dot_dense_csr, dot_dense_csr_to_csr,
};
pub(crate) use dot_t::csr_dense_t_grad;
pub use dot_t::dot_csr_dense_t;
pub(crate) use embedding::embedding_grad;
pub use embedding::{embedding, take_rows};
pub use groups::ColumnGroups;
pub use random::{rand_sparse, rand_sparse_seeded, SparseDist};
pub(crate) use reduce::dispatch_sum;
pub use reduce::{norm, square_sum};
pub use retain::retain_rows;
pub(crate) use scatter_nd::{scatter_nd_rsp, scatter_set_nd_rsp};
pub use slice::concat_rows;
pub(crate) use slice::{concat_csr_recorded, slice_rows_recorded};
pub use stage::{compact_columns, compact_ids, stage_rows};
