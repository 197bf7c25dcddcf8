//! What [`crate::Estimator::fit`] trains on: any source that can start an epoch of
//! `(data, label)` batches — sparrow-data's [`LibSVMIter`], [`CSVIter`], [`DataLoader`] and
//! [`NDArrayIter`] directly, or a closure returning a fresh iterator each epoch — or, for a
//! model whose forward takes several arrays, of `(inputs, label)` batches ([`MultiInput`]).

use sparrow_core::{Error, NDArray, Result};
use sparrow_data::csv::CSVIter;
use sparrow_data::libsvm::LibSVMIter;
use sparrow_data::{Batch, DataLoader, NDArrayIter};

/// A batch for `fit`: the model's inputs (one array per input of its forward: one for a
/// single-input block, run with `Block::forward`; several for `Block::forward_multi`), the
/// labels, and how many rows at the end are padding (`Batch::pad`).
#[derive(Debug, Clone)]
pub struct LabelledBatch {
    /// The model's inputs, each with the batch's rows first.
    pub inputs: Vec<NDArray>,
    /// The labels, the batch's rows first.
    pub label: NDArray,
    /// Padding rows at the end of every input and of the labels.
    pub pad: usize,
}

impl LabelledBatch {
    /// A single-input batch.
    pub fn new(data: NDArray, label: NDArray, pad: usize) -> LabelledBatch {
        LabelledBatch {
            inputs: vec![data],
            label,
            pad,
        }
    }

    /// The batch's row count: the labels' first dimension, which every input must share (an
    /// error names the input that does not).
    pub(crate) fn rows(&self, op: &'static str) -> Result<usize> {
        let rows = self.label.shape().first().copied().unwrap_or(1);
        if self.inputs.is_empty() {
            return Err(Error::arg(op, "a batch with no inputs"));
        }
        for (i, x) in self.inputs.iter().enumerate() {
            let r = x.shape().first().copied().unwrap_or(1);
            if r != rows {
                return Err(Error::shape(
                    op,
                    format!(
                        "input {i} of a batch has {r} rows and its labels {rows} (shapes {:?} \
                         and {:?})",
                        x.shape(),
                        self.label.shape()
                    ),
                ));
            }
        }
        if self.pad > rows {
            return Err(Error::arg(
                op,
                format!(
                    "a batch of {rows} rows cannot have {} padding rows",
                    self.pad
                ),
            ));
        }
        Ok(rows.max(1))
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
    Ok(LabelledBatch::new(b.data, label, b.pad))
}

/// A batch without its `pad` last rows.
pub(crate) fn without_padding(b: LabelledBatch) -> Result<LabelledBatch> {
    let rows = b.rows("fit")?;
    if b.pad == 0 {
        return Ok(b);
    }
    let keep: Vec<i64> = (0..rows.saturating_sub(b.pad) as i64).collect();
    Ok(LabelledBatch {
        inputs: b
            .inputs
            .iter()
            .map(|x| x.take_rows(&keep))
            .collect::<Result<_>>()?,
        label: b.label.take_rows(&keep)?,
        pad: 0,
    })
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

/// A closure returning a fresh iterator of `(data, label)` batches per epoch. The iterator
/// owns what it reads (`move` the arrays in, or clone them per epoch).
impl<F, I> DataSource for F
where
    F: FnMut() -> I,
    I: Iterator<Item = Result<(NDArray, NDArray)>> + 'static,
{
    fn epoch(&mut self, _epoch: usize) -> Result<Epoch<'_>> {
        let it = self();
        let len = match it.size_hint() {
            (lo, Some(hi)) if lo == hi => Some(hi),
            _ => None,
        };
        Ok(Epoch {
            batches: Box::new(it.map(|b| b.map(|(d, l)| LabelledBatch::new(d, l, 0)))),
            len,
        })
    }
}

/// A closure returning a fresh iterator of `(inputs, label)` batches per epoch, for a model
/// whose forward takes several arrays (`Block::forward_multi`: user ids and item ids, a
/// sequence and its valid lengths, ...). Every input has the batch's rows first.
///
/// ```
/// use sparrow_core::{Error, NDArray};
/// use sparrow_optim::fit::{DataSource, MultiInput};
/// let users = NDArray::from_vec(vec![0f32, 1., 2., 3.], &[4]).unwrap();
/// let items = NDArray::from_vec(vec![5f32, 6., 7., 8.], &[4]).unwrap();
/// let ratings = NDArray::from_vec(vec![1f32, 0., 1., 1.], &[4]).unwrap();
/// // One batch per epoch; `Estimator::fit(&mut source, ..)` runs `net.forward_multi(&[u, i])`.
/// let mut source = MultiInput(move || {
///     std::iter::once(Ok::<_, Error>((vec![users.clone(), items.clone()], ratings.clone())))
/// });
/// let epoch = source.epoch(0).unwrap();
/// assert_eq!(epoch.len, Some(1));
/// let batches: Vec<_> = epoch.batches.collect::<Result<_, _>>().unwrap();
/// assert_eq!(batches[0].inputs.len(), 2);
/// ```
pub struct MultiInput<F>(pub F);

impl<F, I> DataSource for MultiInput<F>
where
    F: FnMut() -> I,
    I: Iterator<Item = Result<(Vec<NDArray>, NDArray)>> + 'static,
{
    fn epoch(&mut self, _epoch: usize) -> Result<Epoch<'_>> {
        let it = (self.0)();
        let len = match it.size_hint() {
            (lo, Some(hi)) if lo == hi => Some(hi),
            _ => None,
        };
        Ok(Epoch {
            batches: Box::new(it.map(|b| {
                b.map(|(inputs, label)| LabelledBatch {
                    inputs,
                    label,
                    pad: 0,
                })
            })),
            len,
        })
    }
}
