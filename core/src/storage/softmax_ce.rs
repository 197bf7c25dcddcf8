//! The fused softmax cross-entropy on storage (`ops::fused::softmax_ce_logits`): host memory
//! only, where the operator declines other devices before it gets here (they compose the
//! general operators, which every backend has).

use super::Storage;
use crate::error::{Error, Result};

fn host_only(op: &'static str) -> Error {
    Error::arg(
        op,
        "the fused softmax cross-entropy runs on host storage; an operand is on another device",
    )
}

impl Storage {
    /// `-sum(t * log_softmax(x))` of each row of `classes` logits `self` against targets `t`
    /// (dense rows, or one class id per row when `ids`).
    pub(crate) fn softmax_ce(&self, t: &Storage, classes: usize, ids: bool) -> Result<Storage> {
        match (self, t) {
            (Storage::Cpu(x), Storage::Cpu(t)) => Ok(Storage::from(x.softmax_ce(t, classes, ids)?)),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("softmax_ce_logits")),
        }
    }
    /// [`Storage::softmax_ce`] into `out` (a planned buffer of one element per row).
    pub(crate) fn softmax_ce_into(
        &self,
        t: &Storage,
        classes: usize,
        ids: bool,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, t, out) {
            (Storage::Cpu(x), Storage::Cpu(t), Storage::Cpu(o)) => {
                x.softmax_ce_into(t, classes, ids, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("softmax_ce_logits")),
        }
    }
    /// The logits' gradient `g * (softmax(x) * sum(t) - t)` for the head gradient `self` (one
    /// value per row).
    pub(crate) fn softmax_ce_grad(
        &self,
        x: &Storage,
        t: &Storage,
        classes: usize,
        ids: bool,
    ) -> Result<Storage> {
        match (self, x, t) {
            (Storage::Cpu(g), Storage::Cpu(x), Storage::Cpu(t)) => {
                Ok(Storage::from(g.softmax_ce_grad(x, t, classes, ids)?))
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("softmax_ce_logits backward")),
        }
    }
    /// [`Storage::softmax_ce_grad`] into `out` (the logits' size).
    pub(crate) fn softmax_ce_grad_into(
        &self,
        x: &Storage,
        t: &Storage,
        classes: usize,
        ids: bool,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, x, t, out) {
            (Storage::Cpu(g), Storage::Cpu(x), Storage::Cpu(t), Storage::Cpu(o)) => {
                g.softmax_ce_grad_into(x, t, classes, ids, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("softmax_ce_logits backward")),
        }
    }
}
