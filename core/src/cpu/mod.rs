//! The CPU backend: host memory ([`CpuStorage`]) and every kernel that computes on it.
//!
//! Operators in `crate::ops` and `crate::sparse` validate, dispatch and record; the loops live
//! here. Files by concept: elementwise maps and zips (`elementwise`), the `exp` kernel
//! (`expf`), dense products (`gemm`, with the memory-bound `skinny` and `tiny` shapes), convolution (`conv`: im2col +
//! GEMM) and pooling (`pool`), and the
//! sparse inner loops (`gather`, `segment`, `rows`, `radix`), and the span loop of the
//! optimizer update operators (`update`).

pub(crate) mod act_math;
mod activation;
pub(crate) mod alloc;
pub(crate) mod broadcast;
pub(crate) mod cast;
pub(crate) mod conv;
mod element;
pub(crate) mod elementwise;
pub mod expf;
pub(crate) mod gather;
pub(crate) mod gemm;
pub(crate) mod half;
mod host_buf;
pub(crate) mod journal;
pub(crate) mod layout;
pub(crate) mod linalg;
pub(crate) mod map;
pub(crate) mod mapped;
#[cfg(target_arch = "x86_64")]
pub(crate) mod packed;
mod planned;
pub(crate) mod pool;
pub(crate) mod radix;
pub(crate) mod random;
pub(crate) mod reduce;
mod rnn;
pub(crate) mod rows;
pub(crate) mod segment;
#[cfg(target_arch = "x86_64")]
pub(crate) mod skinny;
mod softmax_ce;
pub(crate) mod sparse;
pub(crate) mod sparse_dot;
mod spgemm;
mod storage;
pub(crate) mod tiny;
pub(crate) mod update;
mod update_rules;
pub(crate) mod winograd;

pub use element::HostElement;
pub use host_buf::HostBuf;
pub(crate) use storage::with_buffer;
pub use storage::CpuStorage;
