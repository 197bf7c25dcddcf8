//! Fused operators: several elementwise steps as one recorded op with one backward.
//!
//! Layers and losses call these where the general ops would record a chain of small ops whose
//! bookkeeping, not their arithmetic, dominates a small-batch training step. Each returns
//! `Ok(None)` when its operands are outside the fused case; the caller then composes the
//! general operators, which handle every storage type, shape and dtype.

mod bias_act;
mod sigmoid_bce;
mod softmax_ce;

pub use bias_act::{bias_act, bias_act_absorbing, bias_add, FusedAct};
pub use sigmoid_bce::{sigmoid_bce_logits, sigmoid_bce_logits_to};
pub(crate) use softmax_ce::{softmax_ce_composite, softmax_ce_grad_composite};
pub use softmax_ce::{softmax_ce_ids, softmax_ce_logits};
