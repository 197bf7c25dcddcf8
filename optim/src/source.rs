//! What [`crate::Estimator::fit`] trains on: any source that can start an epoch of
//! `(inputs, label)` batches — sparrow-data's [`LibSVMIter`], [`CSVIter`], [`DataLoader`] and
//! [`NDArrayIter`] directly, or a closure returning a fresh iterator each epoch, whose batches
//! may hold several input arrays for a multi-input block (see [`BatchInputs`]).

use sparrow_core::{Error, NDArray, Result};
use sparrow_data::csv::CSVIter;
use sparrow_data::libsvm::LibSVMIter;
use sparrow_data::{Batch, DataLoader, NDArrayIter};

/// A batch for `fit`: its inputs (one array, or several that a multi-input block takes in
/// this order through `Block::forward_multi`), labels, and how many rows at the end are
/// padding (`Batch::pad`).
pub type LabelledBatch = (Vec<NDArray>, NDArray, usize);

/// The inputs of a batch a closure source yields: one array, or several for a multi-input
/// block (`(user_ids, item_ids)`, `[a, b, c]`, a `Vec`), passed to `Block::forward_multi` in
/// order.
pub trait BatchInputs {
    /// The arrays, in the order the block takes them.
    fn into_inputs(self) -> Vec<NDArray>;
}

impl BatchInputs for NDArray {
    fn into_inputs(self) -> Vec<NDArray> {
        vec![self]
    }
}

impl BatchInputs for Vec<NDArray> {
    fn into_inputs(self) -> Vec<NDArray> {
        self
    }
}

impl<const N: usize> BatchInputs for [NDArray; N] {
    fn into_inputs(self) -> Vec<NDArray> {
        self.into()
    }
}

impl BatchInputs for (NDArray, NDArray) {
    fn into_inputs(self) -> Vec<NDArray> {
        vec![self.0, self.1]
    }
}

impl BatchInputs for (NDArray, NDArray, NDArray) {
    fn into_inputs(self) -> Vec<NDArray> {
        vec![self.0, self.1, self.2]
    }
}

/// One epoch of batches, with its length when the source knows it (the progress bar then
/// shows the total and an ETA).
pub struct Epoch<'s> {
    /// The batches.
    pub batches: Box<dyn Iterator<Item = Result<LabelledBatch>> + 's>,
    /// Number of batches, when known.
    pub len: Option<usize>,
}

/// A source of training or validation batches for `fit`.
///
/// Epoch `0` reads the source as it is (pass a fresh iterator); each later epoch starts a new
/// pass — `reset` for the iterators, the next `iter` for a [`DataLoader`] — so a shuffling
/// source reshuffles every epoch with a stream derived from its seed and the epoch number.
/// Batches without labels are an error. Padding rows are trained on as they come (as MXNet's
/// `fit` does: with the default `RoundBatch` they are the next pass's first rows, which that
/// pass then skips) and cut off in validation, so each validation sample counts once. Give
/// validation a source with `LastBatch::Pad` or `Keep`, so that every pass reads every row: with
/// `RoundBatch` a later pass skips the rows the previous one borrowed.
pub trait DataSource {
    /// The batches of epoch `epoch` (0-based).
    fn epoch(&mut self, epoch: usize) -> Result<Epoch<'_>>;
}

/// `(data, label, pad)` of a batch: labels required.
fn labelled(batch: sparrow_data::Result<Batch>) -> Result<LabelledBatch> {
    let b = batch?;
    let label = b.label.ok_or_else(|| {
        Error::arg(
            "fit",
            "the data source yields batches without labels; fit needs (data, label) pairs",
        )
    })?;
    Ok((vec![b.data], label, b.pad))
}

/// A batch without its `pad` last rows (of every input and of the labels).
pub(crate) fn without_padding(b: LabelledBatch) -> Result<(Vec<NDArray>, NDArray)> {
    let (inputs, label, pad) = b;
    if pad == 0 {
        return Ok((inputs, label));
    }
    let rows = label.shape().first().copied().unwrap_or(0);
    let keep: Vec<i64> = (0..rows.saturating_sub(pad) as i64).collect();
    let inputs = inputs
        .iter()
        .map(|x| x.take_rows(&keep))
        .collect::<Result<Vec<_>>>()?;
    Ok((inputs, label.take_rows(&keep)?))
}

/// The file iterators stream an epoch of unknown length and restart with `reset`.
macro_rules! streaming_source {
    ($($iter:ty),*) => {$(
        impl DataSource for $iter {
            fn epoch(&mut self, epoch: usize) -> Result<Epoch<'_>> {
                if epoch > 0 {
                    self.reset();
                }
                Ok(Epoch {
                    batches: Box::new(self.map(labelled)),
                    len: None,
                })
            }
        }
    )*};
}

streaming_source!(LibSVMIter, CSVIter);

impl DataSource for NDArrayIter {
    fn epoch(&mut self, epoch: usize) -> Result<Epoch<'_>> {
        if epoch > 0 {
            self.reset();
        }
        let len = self.size_hint().1;
        Ok(Epoch {
            batches: Box::new(self.map(labelled)),
            len,
        })
    }
}

impl DataSource for DataLoader {
    fn epoch(&mut self, _epoch: usize) -> Result<Epoch<'_>> {
        // Every `iter` call is a new epoch of the loader's own count.
        let it = self.iter();
        let len = it.size_hint().1;
        Ok(Epoch {
            batches: Box::new(it.map(labelled)),
            len,
        })
    }
}

/// A closure returning a fresh iterator of `(inputs, label)` batches per epoch, the inputs one
/// array or several ([`BatchInputs`]: a tuple, an array or a `Vec` of arrays for a multi-input
/// block). The iterator owns what it reads (`move` the arrays in, or clone them per epoch).
impl<F, I, D> DataSource for F
where
    F: FnMut() -> I,
    I: Iterator<Item = Result<(D, NDArray)>> + 'static,
    D: BatchInputs,
{
    fn epoch(&mut self, _epoch: usize) -> Result<Epoch<'_>> {
        let it = self();
        let len = match it.size_hint() {
            (lo, Some(hi)) if lo == hi => Some(hi),
            _ => None,
        };
        Ok(Epoch {
            batches: Box::new(it.map(|b| b.map(|(d, l)| (d.into_inputs(), l, 0)))),
            len,
        })
    }
}
