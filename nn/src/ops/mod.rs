//! Operators nn needs that core does not provide yet, written against core's public API
//! (`record_op`, storage types). Candidates to move into core.

mod bias_add;
mod csr_dot;
mod sigmoid_bce;

pub use bias_add::{bias_act, bias_act_absorbing, bias_add, FusedAct};
pub use csr_dot::csr_dot_t;
pub use sigmoid_bce::{sigmoid_bce_logits, sigmoid_bce_logits_to};
