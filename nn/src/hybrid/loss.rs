//! Hybridized losses: a loss's computation traced and cached like a block's.

use sparrow_core::graph::{CachedGraph, RunCounts};
use sparrow_core::{NDArray, Result};

use crate::loss::Loss;

/// A loss whose computation runs as a traced graph per signature of `(pred, label)` (and of
/// the sample weight when one is given); see [`crate::hybrid`].
pub struct HybridLoss<L: Loss> {
    inner: L,
    plain: CachedGraph,
    weighted: CachedGraph,
    /// The (empty) parameter list of every call, made once.
    no_params: std::sync::Arc<[NDArray]>,
}

impl<L: Loss> HybridLoss<L> {
    /// Wrap `loss`; `name` names it in fallback messages.
    pub fn new(name: &str, loss: L) -> HybridLoss<L> {
        HybridLoss {
            inner: loss,
            plain: CachedGraph::new(name, &["pred", "label"]),
            weighted: CachedGraph::new(name, &["pred", "label", "sample_weight"]),
            no_params: Vec::new().into(),
        }
    }

    /// The wrapped loss.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The graph of the most recent trace (without a sample weight).
    pub fn graph(&self) -> Option<std::sync::Arc<sparrow_core::graph::Graph>> {
        self.plain.last_graph()
    }

    /// For each signature that runs eagerly: why.
    pub fn fallback_reasons(&self) -> Vec<String> {
        let mut v = self.plain.fallback_reasons();
        v.extend(self.weighted.fallback_reasons());
        v
    }

    /// How the calls of its graphs ran so far (planned, recorded, replayed; see
    /// [`RunCounts`]).
    pub fn run_counts(&self) -> RunCounts {
        self.plain.run_counts() + self.weighted.run_counts()
    }
}

impl<L: Loss> Loss for HybridLoss<L> {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sample_weight: Option<&NDArray>,
    ) -> Result<NDArray> {
        let no_params = || Ok(Vec::new());
        let no_graph_params =
            |_: &std::sync::Arc<sparrow_core::graph::Graph>| Ok(self.no_params.clone());
        match sample_weight {
            None => self.plain.call_first(
                &[pred.clone(), label.clone()],
                &no_params,
                &no_graph_params,
                &|x| Ok(vec![self.inner.forward_weighted(&x[0], &x[1], None)?]),
            ),
            Some(sw) => self.weighted.call_first(
                &[pred.clone(), label.clone(), sw.clone()],
                &no_params,
                &no_graph_params,
                &|x| {
                    Ok(vec![self.inner.forward_weighted(
                        &x[0],
                        &x[1],
                        Some(&x[2]),
                    )?])
                },
            ),
        }
    }
}
