//! The one array type, [`NDArray`]: dense, csr or row_sparse, with autograd metadata.
//!
//! An `NDArray` is a cheap handle (`Arc`) to an array: cloning it shares the array, exactly as
//! an MXNet NDArray handle does, so optimizers can update a parameter in place and every holder
//! sees the new values. `detach` gives a new handle sharing the buffers but not the graph.

mod access;
pub(crate) use access::dense_cow;
mod create;
pub(crate) use create::checked_size;
mod blocked;
mod data;
mod host;
mod mapped;
pub(crate) use mapped::{journal_rows, JournalRows};

pub use host::CsrView;

pub use data::Shape;
pub(crate) use data::{ArrayData, CsrData, DenseData, RowSparseData};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::autograd::AutogradMeta;
use crate::{DType, Device, SType};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Ids a thread takes from [`NEXT_ID`] at once. Creating an array is frequent (a dozen or two
/// per training step); one shared atomic add per array was one more ~3 ns serializing
/// instruction each time. Ids stay unique across threads, not sequential across them.
const ID_BLOCK: u64 = 1024;

thread_local! {
    /// The calling thread's next id and the end of its block.
    static ID_RANGE: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A process-unique array id.
fn next_id() -> u64 {
    ID_RANGE.with(|r| {
        let (mut next, mut end) = r.get();
        if next == end {
            next = NEXT_ID.fetch_add(ID_BLOCK, Ordering::Relaxed);
            end = next + ID_BLOCK;
        }
        r.set((next + 1, end));
        next
    })
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) data: RwLock<ArrayData>,
    pub(crate) meta: Mutex<AutogradMeta>,
    /// A csr array's column grouping, when prepared ahead (`sparse::groups`).
    pub(crate) column_groups: Mutex<Option<Arc<crate::sparse::ColumnGroups>>>,
}

/// An n-dimensional array with a storage type (dense, csr, row_sparse), a dtype and a device.
#[derive(Clone)]
pub struct NDArray {
    pub(crate) inner: Arc<Inner>,
}

impl NDArray {
    /// Wrap array data into a new handle (no autograd history).
    pub(crate) fn from_data(data: ArrayData) -> NDArray {
        NDArray {
            inner: Arc::new(Inner {
                id: next_id(),
                data: RwLock::new(data),
                meta: Mutex::new(AutogradMeta::default()),
                column_groups: Mutex::new(None),
            }),
        }
    }

    /// A process-unique id of this array (handles that share the array share the id).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Give this handle a new id when it is the only handle of its array (`false` otherwise):
    /// a planned graph's output reused by the next run is a new array to its readers (a
    /// trainer tells a fresh gradient from a stale one by its id).
    pub(crate) fn renew_id(&mut self) -> bool {
        match Arc::get_mut(&mut self.inner) {
            Some(i) => {
                i.id = next_id();
                true
            }
            None => false,
        }
    }

    /// True when both handles refer to the same array.
    pub fn same_array(&self, other: &NDArray) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Read access to the storage. Hold the guard briefly: writers (optimizers) wait on it.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, ArrayData> {
        self.inner.data.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the storage, for in-place updates (optimizers, `set_data`).
    /// In-place writes are not recorded by autograd.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, ArrayData> {
        self.inner.data.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Replace the whole storage of this array in place (all handles see the new value).
    pub(crate) fn replace_data(&self, data: ArrayData) {
        *self.write() = data;
    }

    /// A clone of the storage (cheap: buffers are reference-counted).
    pub(crate) fn data(&self) -> ArrayData {
        self.read().clone()
    }

    /// The logical shape.
    pub fn shape(&self) -> Vec<usize> {
        self.read().shape().to_vec()
    }
    /// The logical shape as an inline [`Shape`]: no allocation for up to 4 dimensions, for
    /// per-step code (a `shape()` vector costs an allocation and a free, ~120 instructions).
    pub fn dims(&self) -> Shape {
        Shape::from_slice(self.read().shape())
    }
    /// True when this array's shape is `shape`. Allocates nothing, unlike `shape() == ...`.
    pub fn has_shape(&self, shape: &[usize]) -> bool {
        self.read().shape() == shape
    }
    /// True when both arrays have the same shape. Allocates nothing for up to 8 dimensions:
    /// the autograd engine and the optimizers compare shapes once per gradient, and two
    /// `shape()` vectors per comparison were a quarter of a small training step's allocations.
    /// Holds one array's lock at a time (no lock-order dependence between arrays).
    pub fn same_shape(&self, other: &NDArray) -> bool {
        let own = smallvec::SmallVec::<[usize; 8]>::from_slice(self.read().shape());
        other.has_shape(&own)
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.read().shape().len()
    }
    /// Number of logical elements (product of the shape).
    pub fn size(&self) -> usize {
        self.read().shape().iter().product()
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.read().dtype()
    }
    /// Storage type.
    pub fn stype(&self) -> SType {
        self.read().stype()
    }
    /// The device whose memory holds this array.
    pub fn device(&self) -> Device {
        self.read().device()
    }

    /// This array on `device` (MXNet's `as_in_context`, PyTorch's `to`): the same array, with
    /// its graph, when it is already there; otherwise a copy in `device`'s memory (values and
    /// index arrays), without a graph (copies between devices are explicit and not
    /// recorded). An unavailable device is an [`Error::Device`](crate::Error::Device) naming it
    /// and why (no `cuda` feature, no driver, no GPU).
    pub fn to_device(&self, device: Device) -> crate::Result<NDArray> {
        if device == self.device() {
            return Ok(self.clone());
        }
        if !device.is_available() {
            return Err(Device::unavailable_error("to_device", device));
        }
        let d = self.read();
        let moved = match &*d {
            ArrayData::Dense(dd) => ArrayData::Dense(DenseData {
                shape: dd.shape.clone(),
                buf: dd.buf.to_device(device)?,
            }),
            ArrayData::Csr(c) => ArrayData::Csr(CsrData {
                shape: c.shape,
                indptr: c.indptr.to_device(device)?,
                indices: c.indices.to_device(device)?,
                data: c.data.to_device(device)?,
                offset: c.offset,
            }),
            ArrayData::RowSparse(r) => ArrayData::RowSparse(RowSparseData {
                shape: r.shape.clone(),
                indices: r.indices.to_device(device)?,
                data: r.data.to_device(device)?,
            }),
        };
        drop(d);
        let out = NDArray::from_data(moved);
        // A csr batch's column grouping (prepared by its loader) describes its structure,
        // which moves unchanged: the copy keeps it, so the weight gradient on the device skips
        // the sort.
        if let Some(groups) = self.csr_column_groups() {
            *out.column_cache() = Some(groups);
        }
        Ok(out)
    }
    /// Bytes held by the storage: data + indices (+ indptr) for sparse arrays.
    pub fn nbytes(&self) -> usize {
        self.read().nbytes()
    }
}

impl std::fmt::Debug for NDArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.read();
        write!(
            f,
            "NDArray(shape={:?}, dtype={}, stype={:?}",
            d.shape(),
            d.dtype().name(),
            d.stype()
        )?;
        if let ArrayData::Dense(dd) = &*d {
            if dd.buf.len() <= 16 {
                // A device's values are copied to the host for the printout.
                if let Ok(h) = dd.buf.to_host() {
                    let vals: Vec<f64> = (0..h.len()).map(|i| h.get_f64(i)).collect();
                    write!(f, ", data={vals:?}")?;
                }
            }
            if d.device() != Device::Cpu {
                write!(f, ", device={:?}", d.device())?;
            }
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod id_tests {
    use super::*;

    /// Ids come from per-thread blocks: they must still be unique across threads, and past
    /// the end of a block.
    #[test]
    fn array_ids_are_unique_across_threads_and_blocks() {
        let per_thread = 3 * ID_BLOCK as usize + 7;
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..per_thread)
                        .map(|_| NDArray::from_vec(vec![0.0f32], &[1]).unwrap().id())
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        let mut ids: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert!(ids[0] >= 1);
    }
}
