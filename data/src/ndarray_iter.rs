//! `NDArrayIter`: batches over in-memory arrays (dense or CSR), with shuffle and every
//! last-batch mode (MXNet's CSR path supported only `discard`).

use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};
use sparrow_core::NDArray;

use crate::batch::{Batch, LastBatch};
use crate::error::{DataError, Result};
use crate::rows::{num_rows, take_rows};

/// The row order of one epoch, and what the last-batch mode hands to the next epoch.
#[derive(Debug, Clone, Default)]
pub(crate) struct EpochPlan {
    /// Row ids of each batch.
    pub batches: Vec<Vec<usize>>,
    /// Pad of each batch.
    pub pads: Vec<usize>,
    /// Rows carried to the next epoch (roll over).
    pub carry: Vec<usize>,
    /// Rows of the next epoch's order to skip (round batch).
    pub skip: usize,
}

/// Cut `carry ++ order(epoch)[skip..]` into batches under `mode`; `order(e)` gives epoch `e`'s
/// row order.
pub(crate) fn plan_epoch(
    n: usize,
    bs: usize,
    mode: LastBatch,
    carry: &[usize],
    skip: usize,
    order: &dyn Fn(u64) -> Vec<usize>,
    epoch: u64,
) -> EpochPlan {
    let this = order(epoch);
    let seq: Vec<usize> = carry
        .iter()
        .copied()
        .chain(this.iter().skip(skip).copied())
        .collect();
    let mut plan = EpochPlan::default();
    let full = seq.len() / bs * bs;
    for c in seq[..full].chunks(bs) {
        plan.batches.push(c.to_vec());
        plan.pads.push(0);
    }
    let rest = &seq[full..];
    if rest.is_empty() || n == 0 {
        return plan;
    }
    let need = bs - rest.len();
    match mode {
        LastBatch::Keep => {
            plan.batches.push(rest.to_vec());
            plan.pads.push(0);
        }
        LastBatch::Discard => {}
        LastBatch::RollOver => plan.carry = rest.to_vec(),
        LastBatch::Pad | LastBatch::RoundBatch => {
            let src = if mode == LastBatch::Pad {
                this
            } else {
                order(epoch + 1)
            };
            let mut b = rest.to_vec();
            b.extend((0..need).map(|k| src[k % n]));
            plan.batches.push(b);
            plan.pads.push(need);
            if mode == LastBatch::RoundBatch {
                plan.skip = need % n;
            }
        }
    }
    plan
}

/// Row order of an epoch: identity, or a permutation seeded by `(seed, epoch)`.
pub(crate) fn row_order(n: usize, shuffle: bool, seed: u64, epoch: u64) -> Vec<usize> {
    let mut o: Vec<usize> = (0..n).collect();
    if shuffle {
        let s = seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        o.shuffle(&mut StdRng::seed_from_u64(s));
    }
    o
}

/// Iterator over batches of in-memory arrays. Yields `Result<Batch>`; CSR data stays CSR.
///
/// ```
/// use sparrow_core::NDArray;
/// use sparrow_data::{LastBatch, NDArrayIter};
/// let x = NDArray::from_vec((0..10).map(|v| v as f32).collect(), &[5, 2])?;
/// let mut it = NDArrayIter::new(x, None, 2, false, LastBatch::Pad)?;
/// let pads: Vec<usize> = it.by_ref().map(|b| b.unwrap().pad).collect();
/// assert_eq!(pads, vec![0, 0, 1]);
/// # Ok::<(), sparrow_data::DataError>(())
/// ```
pub struct NDArrayIter {
    data: NDArray,
    label: Option<NDArray>,
    bs: usize,
    shuffle: bool,
    seed: u64,
    mode: LastBatch,
    n: usize,
    epoch: u64,
    plan: EpochPlan,
    cursor: usize,
}

impl NDArrayIter {
    /// Batches of `batch_size` rows of `data` (and `label`, same number of rows).
    pub fn new(
        data: NDArray,
        label: Option<NDArray>,
        batch_size: usize,
        shuffle: bool,
        last_batch: LastBatch,
    ) -> Result<Self> {
        let n = num_rows(&data)?;
        if let Some(l) = &label {
            if num_rows(l)? != n {
                return Err(DataError::arg(
                    "NDArrayIter",
                    format!("data has {n} rows but label has {:?}", l.shape()),
                ));
            }
        }
        if batch_size == 0 {
            return Err(DataError::arg("NDArrayIter", "batch_size must be > 0"));
        }
        let mut it = NDArrayIter {
            data,
            label,
            bs: batch_size,
            shuffle,
            seed: 0,
            mode: last_batch,
            n,
            epoch: 0,
            plan: EpochPlan::default(),
            cursor: 0,
        };
        it.replan(&[], 0);
        Ok(it)
    }

    /// Set the shuffle seed (restarts the current epoch).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self.replan(&[], 0);
        self
    }

    fn replan(&mut self, carry: &[usize], skip: usize) {
        let (n, sh, seed) = (self.n, self.shuffle, self.seed);
        let order = move |e: u64| row_order(n, sh, seed, e);
        self.plan = plan_epoch(n, self.bs, self.mode, carry, skip, &order, self.epoch);
        self.cursor = 0;
    }

    /// Start the next epoch.
    pub fn reset(&mut self) {
        let (carry, skip) = (std::mem::take(&mut self.plan.carry), self.plan.skip);
        self.epoch += 1;
        self.replan(&carry, skip);
    }
}

impl Iterator for NDArrayIter {
    type Item = Result<Batch>;
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.plan.batches.len().saturating_sub(self.cursor);
        (left, Some(left))
    }
    fn next(&mut self) -> Option<Result<Batch>> {
        let idx = self.plan.batches.get(self.cursor)?;
        let pad = self.plan.pads[self.cursor];
        self.cursor += 1;
        let batch = (|| {
            Ok(Batch {
                data: take_rows(&self.data, idx)?,
                label: match &self.label {
                    Some(l) => Some(take_rows(l, idx)?),
                    None => None,
                },
                pad,
            })
        })();
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparrow_core::{sparse::cast_storage, SType};

    fn ids(it: &mut NDArrayIter) -> Vec<Vec<f32>> {
        it.by_ref()
            .map(|b| b.unwrap().label.unwrap().to_vec::<f32>().unwrap())
            .collect()
    }

    #[test]
    fn modes_dense_and_csr_agree() {
        let x = NDArray::from_vec(
            (0..21)
                .map(|v| if v % 3 == 0 { v as f32 } else { 0.0 })
                .collect(),
            &[7, 3],
        )
        .unwrap();
        let y = NDArray::from_vec((0..7).map(|v| v as f32).collect(), &[7]).unwrap();
        let xc = cast_storage(&x, SType::Csr).unwrap();
        for mode in [
            LastBatch::Keep,
            LastBatch::Discard,
            LastBatch::Pad,
            LastBatch::RoundBatch,
            LastBatch::RollOver,
        ] {
            let mut a = NDArrayIter::new(x.clone(), Some(y.clone()), 3, true, mode).unwrap();
            let mut b = NDArrayIter::new(xc.clone(), Some(y.clone()), 3, true, mode).unwrap();
            for _ in 0..3 {
                for (ba, bb) in a.by_ref().zip(b.by_ref()) {
                    let (ba, bb) = (ba.unwrap(), bb.unwrap());
                    assert_eq!(bb.data.stype(), SType::Csr);
                    let dense = cast_storage(&bb.data, SType::Dense).unwrap();
                    assert_eq!(
                        dense.to_vec::<f32>().unwrap(),
                        ba.data.to_vec::<f32>().unwrap()
                    );
                    assert_eq!(ba.pad, bb.pad);
                }
                a.reset();
                b.reset();
            }
        }
    }

    #[test]
    fn last_batch_semantics() {
        let y = NDArray::from_vec((0..5).map(|v| v as f32).collect(), &[5]).unwrap();
        let mk = |m| NDArrayIter::new(y.clone(), Some(y.clone()), 2, false, m).unwrap();
        assert_eq!(
            ids(&mut mk(LastBatch::Keep)).concat(),
            vec![0., 1., 2., 3., 4.]
        );
        assert_eq!(ids(&mut mk(LastBatch::Discard)).len(), 2);
        let mut p = mk(LastBatch::Pad);
        assert_eq!(ids(&mut p)[2], vec![4., 0.]);
        p.reset();
        assert_eq!(ids(&mut p)[0], vec![0., 1.]);
        let mut r = mk(LastBatch::RoundBatch);
        assert_eq!(ids(&mut r)[2], vec![4., 0.]);
        r.reset();
        assert_eq!(ids(&mut r), vec![vec![1., 2.], vec![3., 4.]]);
        let mut o = mk(LastBatch::RollOver);
        assert_eq!(ids(&mut o).len(), 2);
        o.reset();
        assert_eq!(ids(&mut o)[0], vec![4., 0.]);
    }

    #[test]
    fn shuffle_seeded() {
        let y = NDArray::from_vec((0..50).map(|v| v as f32).collect(), &[50]).unwrap();
        let run = |seed| {
            let mut it = NDArrayIter::new(y.clone(), Some(y.clone()), 7, true, LastBatch::Keep)
                .unwrap()
                .with_seed(seed);
            ids(&mut it).concat()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        let mut s = run(3);
        s.sort_by(f32::total_cmp);
        assert_eq!(s, (0..50).map(|v| v as f32).collect::<Vec<_>>());
        assert!(NDArrayIter::new(
            y.clone(),
            Some(y.slice_rows_for_test()),
            2,
            false,
            LastBatch::Keep
        )
        .is_err());
    }

    trait Short {
        fn slice_rows_for_test(&self) -> NDArray;
    }
    impl Short for NDArray {
        fn slice_rows_for_test(&self) -> NDArray {
            take_rows(self, &[0, 1]).unwrap()
        }
    }
}
