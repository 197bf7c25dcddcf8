//! Gluon-style datasets, samplers and a multi-threaded `DataLoader` whose batchify stacks CSR
//! rows into a CSR batch (Gluon's DataLoader densified sparse samples).

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use sparrow_core::NDArray;

use crate::batch::{Batch, LastBatch};
use crate::error::{DataError, Result};
use crate::libsvm::{load_libsvm, LibSvmOptions};
use crate::ndarray_iter::{plan_epoch, row_order};
use crate::rows::{num_rows, take_rows};

/// A random-access collection of samples. `batch(idx)` returns the samples `idx` stacked into
/// one batch (data, label); implementations keep sparse samples sparse.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The samples `idx`, stacked (the batchify step).
    fn batch(&self, idx: &[usize]) -> Result<(NDArray, Option<NDArray>)>;
}

/// A dataset over arrays (dense or CSR) whose first axis indexes samples: Gluon's array
/// dataset, under PyTorch's name (`TensorDataset`), which keeps core's storage names apart.
#[derive(Clone)]
pub struct TensorDataset {
    data: NDArray,
    label: Option<NDArray>,
    n: usize,
}

impl TensorDataset {
    /// Samples are the rows of `data` (and of `label`, which must have as many rows).
    pub fn new(data: NDArray, label: Option<NDArray>) -> Result<Self> {
        let n = num_rows(&data)?;
        if let Some(l) = &label {
            if num_rows(l)? != n {
                return Err(DataError::arg(
                    "TensorDataset",
                    format!("data has {n} rows, label shape is {:?}", l.shape()),
                ));
            }
        }
        Ok(TensorDataset { data, label, n })
    }
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.n
    }
    fn batch(&self, idx: &[usize]) -> Result<(NDArray, Option<NDArray>)> {
        Ok((
            take_rows(&self.data, idx)?,
            match &self.label {
                Some(l) => Some(take_rows(l, idx)?),
                None => None,
            },
        ))
    }
}

/// A LibSVM file loaded into memory as a CSR dataset (labels: one per row, dense).
pub struct LibSvmDataset(TensorDataset);

impl LibSvmDataset {
    /// Load `path` (file or directory) with `opts`.
    pub fn new(path: impl AsRef<Path>, opts: &LibSvmOptions) -> Result<Self> {
        let d = load_libsvm(path, opts)?;
        Ok(LibSvmDataset(TensorDataset::new(
            d.csr()?,
            Some(d.labels()?),
        )?))
    }
}

impl Dataset for LibSvmDataset {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn batch(&self, idx: &[usize]) -> Result<(NDArray, Option<NDArray>)> {
        self.0.batch(idx)
    }
}

/// The sample ids of one batch and its pad.
pub type IndexBatch = (Vec<usize>, usize);

/// The order in which samples are visited each epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampler {
    /// 0, 1, ..., n-1.
    Sequential,
    /// A permutation seeded by `(seed, epoch)`.
    Random {
        /// Seed.
        seed: u64,
    },
}

/// Groups a sampler's order into batches (Gluon's `BatchSampler`; `last_batch` keep, discard,
/// rollover, plus pad/round_batch).
#[derive(Debug, Clone, Copy)]
pub struct BatchSampler {
    /// The sample order.
    pub sampler: Sampler,
    /// Samples per batch.
    pub batch_size: usize,
    /// What to do with a short last batch.
    pub last_batch: LastBatch,
}

impl BatchSampler {
    /// The index batches of one epoch, with each batch's pad; `carry`/`skip` come from the
    /// previous epoch (roll over / round batch) and the new ones are returned.
    pub fn epoch(
        &self,
        n: usize,
        epoch: u64,
        carry: &[usize],
        skip: usize,
    ) -> (Vec<IndexBatch>, Vec<usize>, usize) {
        let (shuffle, seed) = match self.sampler {
            Sampler::Sequential => (false, 0),
            Sampler::Random { seed } => (true, seed),
        };
        let order = move |e: u64| row_order(n, shuffle, seed, e);
        let p = plan_epoch(
            n,
            self.batch_size.max(1),
            self.last_batch,
            carry,
            skip,
            &order,
            epoch,
        );
        (p.batches.into_iter().zip(p.pads).collect(), p.carry, p.skip)
    }
}

/// Loads batches from a [`Dataset`] on `num_workers` threads (0: on the caller's thread), in
/// sampler order, a bounded number of batches ahead.
///
/// ```
/// use sparrow_core::NDArray;
/// use sparrow_data::dataset::{TensorDataset, DataLoader};
/// let x = NDArray::from_vec(vec![1.0f32; 12], &[6, 2])?;
/// let ds = TensorDataset::new(x, None)?;
/// let mut dl = DataLoader::new(ds, 4, true, true, 2);
/// assert_eq!(dl.iter().count(), 1); // drop_last: 6 rows -> one batch of 4
/// # Ok::<(), sparrow_data::DataError>(())
/// ```
pub struct DataLoader {
    dataset: Arc<dyn Dataset>,
    sampler: BatchSampler,
    num_workers: usize,
    epoch: u64,
    carry: Vec<usize>,
    skip: usize,
}

impl DataLoader {
    /// A loader with a sequential or random (seed 0) sampler; `drop_last` discards a short last
    /// batch, otherwise it is kept.
    pub fn new(
        dataset: impl Dataset + 'static,
        batch_size: usize,
        shuffle: bool,
        drop_last: bool,
        num_workers: usize,
    ) -> Self {
        let sampler = BatchSampler {
            sampler: if shuffle {
                Sampler::Random { seed: 0 }
            } else {
                Sampler::Sequential
            },
            batch_size,
            last_batch: if drop_last {
                LastBatch::Discard
            } else {
                LastBatch::Keep
            },
        };
        Self::with_sampler(dataset, sampler, num_workers)
    }

    /// A loader with an explicit batch sampler.
    pub fn with_sampler(
        dataset: impl Dataset + 'static,
        sampler: BatchSampler,
        num_workers: usize,
    ) -> Self {
        DataLoader {
            dataset: Arc::new(dataset),
            sampler,
            num_workers,
            epoch: 0,
            carry: Vec::new(),
            skip: 0,
        }
    }

    /// The batches of the next epoch (each call is a new epoch).
    pub fn iter(&mut self) -> DataLoaderIter {
        let (batches, carry, skip) =
            self.sampler
                .epoch(self.dataset.len(), self.epoch, &self.carry, self.skip);
        self.epoch += 1;
        self.carry = carry;
        self.skip = skip;
        let total = batches.len();
        let w = self.num_workers;
        if w == 0 {
            return DataLoaderIter {
                inline: Some((self.dataset.clone(), batches)),
                rx: Vec::new(),
                threads: Vec::new(),
                next: 0,
                total,
            };
        }
        let batches = Arc::new(batches);
        let mut rx = Vec::new();
        let mut threads = Vec::new();
        for k in 0..w {
            // Worker k builds batches k, k+w, ...; each has its own bounded queue, and the
            // consumer takes them round-robin, which keeps sampler order.
            let (tx, r) = sync_channel(2);
            let (ds, bs) = (self.dataset.clone(), batches.clone());
            threads.push(std::thread::spawn(move || {
                for (idx, pad) in bs.iter().skip(k).step_by(w) {
                    let b = ds.batch(idx).map(|(data, label)| Batch {
                        data,
                        label,
                        pad: *pad,
                    });
                    if tx.send(b).is_err() {
                        return;
                    }
                }
            }));
            rx.push(r);
        }
        DataLoaderIter {
            inline: None,
            rx,
            threads,
            next: 0,
            total,
        }
    }
}

/// One epoch of a [`DataLoader`].
pub struct DataLoaderIter {
    inline: Option<(Arc<dyn Dataset>, Vec<IndexBatch>)>,
    rx: Vec<Receiver<Result<Batch>>>,
    threads: Vec<JoinHandle<()>>,
    next: usize,
    total: usize,
}

impl Iterator for DataLoaderIter {
    type Item = Result<Batch>;
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.total.saturating_sub(self.next);
        (left, Some(left))
    }
    fn next(&mut self) -> Option<Result<Batch>> {
        if self.next >= self.total {
            return None;
        }
        let k = self.next;
        self.next += 1;
        if let Some((ds, batches)) = &self.inline {
            let (idx, pad) = &batches[k];
            return Some(ds.batch(idx).map(|(data, label)| Batch {
                data,
                label,
                pad: *pad,
            }));
        }
        let w = self.rx.len();
        Some(self.rx[k % w].recv().unwrap_or_else(|_| {
            Err(DataError::arg(
                "DataLoader",
                "a worker thread stopped unexpectedly",
            ))
        }))
    }
}

impl Drop for DataLoaderIter {
    fn drop(&mut self) {
        self.rx.clear(); // workers' sends fail and they exit
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparrow_core::{sparse::cast_storage, SType};

    fn data() -> (NDArray, NDArray) {
        let x: Vec<f32> = (0..40)
            .map(|v| if v % 4 == 1 { v as f32 } else { 0.0 })
            .collect();
        let x = NDArray::from_vec(x, &[10, 4]).unwrap();
        let y = NDArray::from_vec((0..10).map(|v| v as f32).collect(), &[10]).unwrap();
        (cast_storage(&x, SType::Csr).unwrap(), y)
    }

    #[test]
    fn csr_batches_stay_csr_and_workers_keep_order() {
        let (x, y) = data();
        for workers in [0, 1, 3] {
            let ds = TensorDataset::new(x.clone(), Some(y.clone())).unwrap();
            let mut dl = DataLoader::new(ds, 3, false, false, workers);
            let bs: Vec<Batch> = dl.iter().map(|b| b.unwrap()).collect();
            assert_eq!(bs.len(), 4);
            assert_eq!(bs[3].data.shape(), vec![1, 4]);
            let mut labels = Vec::new();
            for b in &bs {
                assert_eq!(b.data.stype(), SType::Csr);
                let d = cast_storage(&b.data, SType::Dense)
                    .unwrap()
                    .to_vec::<f32>()
                    .unwrap();
                let l = b.label.as_ref().unwrap().to_vec::<f32>().unwrap();
                for (r, lab) in l.iter().enumerate() {
                    assert_eq!(d[r * 4 + 1], lab * 4.0 + 1.0);
                }
                labels.extend(l);
            }
            assert_eq!(labels, (0..10).map(|v| v as f32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn drop_last_shuffle_and_samplers() {
        let (x, y) = data();
        let ds = TensorDataset::new(x, Some(y)).unwrap();
        let mut dl = DataLoader::new(ds.clone(), 3, true, true, 2);
        let e0: Vec<f32> = dl
            .iter()
            .flat_map(|b| b.unwrap().label.unwrap().to_vec::<f32>().unwrap())
            .collect();
        assert_eq!(e0.len(), 9);
        let e1: Vec<f32> = dl
            .iter()
            .flat_map(|b| b.unwrap().label.unwrap().to_vec::<f32>().unwrap())
            .collect();
        assert_ne!(e0, e1, "each epoch reshuffles");
        let s = BatchSampler {
            sampler: Sampler::Sequential,
            batch_size: 4,
            last_batch: LastBatch::RollOver,
        };
        let (b0, carry, _) = s.epoch(10, 0, &[], 0);
        assert_eq!(b0.len(), 2);
        assert_eq!(carry, vec![8, 9]);
        let (b1, _, _) = s.epoch(10, 1, &carry, 0);
        assert_eq!(b1[0].0, vec![8, 9, 0, 1]);
        assert!(TensorDataset::new(
            ds.batch(&[0]).unwrap().0,
            Some(ds.batch(&[0, 1]).unwrap().0)
        )
        .is_err());
    }

    #[test]
    fn libsvm_dataset() {
        let dir = std::env::temp_dir().join(format!("sparrow-ds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("d.svm");
        std::fs::write(&f, "1 0:1 3:2\n0 2:5\n1\n").unwrap();
        let o = LibSvmOptions {
            num_features: Some(4),
            ..Default::default()
        };
        let ds = LibSvmDataset::new(&f, &o).unwrap();
        assert_eq!(ds.len(), 3);
        let (x, y) = ds.batch(&[2, 0]).unwrap();
        assert_eq!(x.stype(), SType::Csr);
        assert_eq!(y.unwrap().to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
        let d = cast_storage(&x, SType::Dense)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(d, vec![0., 0., 0., 0., 1., 0., 0., 2.]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
