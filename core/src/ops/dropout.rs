//! Dropout's mask as an operator of its own, so that a graph records it like any other node
//! and each run of the graph draws a new mask (a host draw inside the layer would be code the
//! graph cannot see, and a graph that replayed one mask would not be dropout).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::{RandomDist, Storage};
use crate::NDArray;

/// A dropout layer's stream of masks: a seed and the number of masks drawn so far. The
/// layer, the graph nodes traced from it and every run of those graphs share one stream, so a
/// hybridized model draws the masks the eager model draws at the same calls (and a seed
/// reproduces a run either way).
#[derive(Debug)]
pub struct MaskStream {
    seed: u64,
    drawn: AtomicU64,
}

impl MaskStream {
    /// A stream that starts at `seed`.
    pub fn new(seed: u64) -> Arc<MaskStream> {
        Arc::new(MaskStream {
            seed,
            drawn: AtomicU64::new(0),
        })
    }

    /// Its seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// How many masks it has given so far.
    pub fn drawn(&self) -> u64 {
        self.drawn.load(Ordering::Relaxed)
    }

    /// The key of the next mask: the seed and the mask's number, well mixed, so consecutive
    /// masks come from unrelated streams.
    pub(crate) fn next_key(&self) -> u64 {
        crate::random::mix_seed(self.seed, self.drawn.fetch_add(1, Ordering::Relaxed))
    }
}

/// Streams are equal only to themselves (two layers with one seed still draw apart).
impl PartialEq for MaskStream {
    fn eq(&self, other: &MaskStream) -> bool {
        std::ptr::eq(self, other)
    }
}

impl NDArray {
    /// Dropout's mask for `self`: an array of `self`'s shape, float dtype and device whose
    /// elements are 0 with probability `p` and `1 / (1 - p)` otherwise, from the next key of
    /// `stream`. Dropout is `self * mask`; the gradient flows through that product (the mask
    /// itself has none). Inside a trace it is one graph node that draws again at every run.
    pub fn dropout_mask(&self, p: f64, stream: &Arc<MaskStream>) -> Result<NDArray> {
        crate::graph::traced!(
            Op::DropoutMask {
                p,
                stream: stream.clone()
            },
            [self],
            self.dropout_mask(p, stream)
        );
        let op = "dropout_mask";
        if !(0.0..1.0).contains(&p) {
            return Err(Error::arg(op, format!("rate {p} must be in [0, 1)")));
        }
        if !self.dtype().is_float() {
            return Err(Error::dtype(
                op,
                format!("needs a float array, got {}", self.dtype().name()),
            ));
        }
        let key = stream.next_key();
        let kept = Storage::random_on(
            RandomDist::Bernoulli { p: 1.0 - p },
            self.dtype(),
            self.size(),
            key,
            self.device(),
        )?;
        NDArray::from_buffer(kept, &self.shape())?.mul_scalar(1.0 / (1.0 - p))
    }
}
