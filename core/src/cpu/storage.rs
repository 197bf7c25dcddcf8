//! Host memory of the CPU backend: typed, reference-counted host buffers.
//!
//! Buffers are `Arc<HostBuf<T>>` so that `detach`, `reshape` and CSR row slices share memory; an
//! in-place write goes through `Arc::make_mut`, which copies only when the buffer is shared.
//! A [`HostBuf`] is a vector or the pages of a mapped file; kernels see a slice either way.

use crate::cpu::{HostBuf, HostElement};
use std::sync::Arc;

use crate::dtype::{DType, Element};

/// The CPU backend's storage: one typed host vector.
#[derive(Debug, Clone)]
pub enum CpuStorage {
    /// f32 elements.
    F32(Arc<HostBuf<f32>>),
    /// f64 elements.
    F64(Arc<HostBuf<f64>>),
    /// i64 elements.
    I64(Arc<HostBuf<i64>>),
    /// i32 elements.
    I32(Arc<HostBuf<i32>>),
    /// u8 elements.
    U8(Arc<HostBuf<u8>>),
    /// f16 elements (`half::f16`).
    F16(Arc<HostBuf<half::f16>>),
    /// bf16 elements (`half::bf16`).
    BF16(Arc<HostBuf<half::bf16>>),
}

/// Run `$body` with `$v` bound to the typed `Arc<Vec<T>>` of a buffer (a `CpuStorage` or the
/// host memory of a `Storage`), whatever its dtype.
macro_rules! with_buffer {
    (&mut $buf:expr, $v:ident => $body:expr) => {
        match $crate::storage::AsHostMut::as_host_mut(&mut $buf) {
            $crate::cpu::CpuStorage::F32($v) => $body,
            $crate::cpu::CpuStorage::F64($v) => $body,
            $crate::cpu::CpuStorage::I64($v) => $body,
            $crate::cpu::CpuStorage::I32($v) => $body,
            $crate::cpu::CpuStorage::U8($v) => $body,
            $crate::cpu::CpuStorage::F16($v) => $body,
            $crate::cpu::CpuStorage::BF16($v) => $body,
        }
    };
    ($buf:expr, $v:ident => $body:expr) => {
        match $crate::storage::AsHost::as_host($buf) {
            $crate::cpu::CpuStorage::F32($v) => $body,
            $crate::cpu::CpuStorage::F64($v) => $body,
            $crate::cpu::CpuStorage::I64($v) => $body,
            $crate::cpu::CpuStorage::I32($v) => $body,
            $crate::cpu::CpuStorage::U8($v) => $body,
            $crate::cpu::CpuStorage::F16($v) => $body,
            $crate::cpu::CpuStorage::BF16($v) => $body,
        }
    };
}

pub(crate) use with_buffer;

impl CpuStorage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        with_buffer!(self, v => v.len())
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of the elements.
    pub fn nbytes(&self) -> usize {
        self.len() * self.dtype().size_of()
    }
    /// A zero-filled buffer for sizes the caller derived from existing arrays. Large buffers
    /// come from `alloc_zeroed` (calloc), so untouched pages cost nothing until written; a
    /// large calloc is a fresh mapping that glibc does not clear itself, so the huge-page advice
    /// still lands before the first touch.
    ///
    /// # Panics
    /// When the allocator refuses; sizes that come from user input go through
    /// [`CpuStorage::try_zeros`].
    pub fn zeros(dtype: DType, n: usize) -> CpuStorage {
        CpuStorage::try_zeros("zeros", dtype, n).unwrap_or_else(|e| panic!("{e}"))
    }
    /// [`CpuStorage::zeros`], or [`Error::Memory`](crate::Error::Memory) naming `op` when the
    /// allocator refuses `n` elements.
    pub fn try_zeros(op: &'static str, dtype: DType, n: usize) -> crate::Result<CpuStorage> {
        use super::alloc::{try_zeroed, ZeroBits};
        fn advised<T: ZeroBits + Send + Sync + 'static>(
            op: &'static str,
            n: usize,
        ) -> crate::Result<Arc<HostBuf<T>>> {
            let mut v = try_zeroed::<T>(op, n)?;
            crate::sys::advise_huge_pages(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(&v[..]));
            Ok(Arc::new(HostBuf::owned(v)))
        }
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(advised(op, n)?),
            DType::F64 => CpuStorage::F64(advised(op, n)?),
            DType::I64 => CpuStorage::I64(advised(op, n)?),
            DType::I32 => CpuStorage::I32(advised(op, n)?),
            DType::U8 => CpuStorage::U8(advised(op, n)?),
            DType::F16 => CpuStorage::F16(advised(op, n)?),
            DType::BF16 => CpuStorage::BF16(advised(op, n)?),
        })
    }
    /// Typed borrow.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::slice(self)
    }
    /// Typed mutable borrow (copy-on-write if shared), `None` when the dtype differs.
    pub fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        self.writable::<T>("write").ok().flatten()
    }
    /// Typed mutable borrow for an in-place operator named `op`: `Ok(None)` when the dtype
    /// differs; a buffer shared with another array is copied first, except a mapped file's,
    /// which is an error (see `host_buf::unique_mut`).
    pub(crate) fn writable<T: Element>(
        &mut self,
        op: &'static str,
    ) -> crate::Result<Option<&mut [T]>> {
        use super::host_buf::unique_mut;
        // Matching on the variant and downcasting keeps this generic without transmutes.
        let any: &mut dyn std::any::Any = match self {
            CpuStorage::F32(v) => unique_mut(op, v)?,
            CpuStorage::F64(v) => unique_mut(op, v)?,
            CpuStorage::I64(v) => unique_mut(op, v)?,
            CpuStorage::I32(v) => unique_mut(op, v)?,
            CpuStorage::U8(v) => unique_mut(op, v)?,
            CpuStorage::F16(v) => unique_mut(op, v)?,
            CpuStorage::BF16(v) => unique_mut(op, v)?,
        };
        Ok(any.downcast_mut::<HostBuf<T>>().map(|b| &mut b[..]))
    }
    /// Element `i` as f64 (for inspection and tests).
    pub fn get_f64(&self, i: usize) -> f64 {
        with_buffer!(self, v => v[i].to_f64())
    }
    /// Convert every element to another dtype (`as` semantics; to f16 / bf16 rounded to
    /// nearest even, once).
    pub fn cast(&self, dtype: DType) -> CpuStorage {
        if dtype == self.dtype() {
            return self.clone();
        }
        fn conv<S: Element, T: Element>(s: &[S]) -> Vec<T> {
            // Large buffers convert in parallel chunks: widening half weights to f32 is on the
            // path of every half kernel.
            use rayon::prelude::*;
            if s.len() >= 1 << 16 {
                s.par_iter()
                    .with_min_len(1 << 14)
                    .map(|&x| T::from_f64(x.to_f64()))
                    .collect()
            } else {
                s.iter().map(|&x| T::from_f64(x.to_f64())).collect()
            }
        }
        with_buffer!(self, v => match dtype {
            DType::F32 => f32::into_buffer(conv(v)),
            DType::F64 => f64::into_buffer(conv(v)),
            DType::I64 => i64::into_buffer(conv(v)),
            DType::I32 => i32::into_buffer(conv(v)),
            DType::U8 => u8::into_buffer(conv(v)),
            DType::F16 => half::f16::into_buffer(conv(v)),
            DType::BF16 => half::bf16::into_buffer(conv(v)),
        })
    }
    /// Gather elements by positions into a new buffer of the same dtype.
    pub fn gather(&self, positions: impl Iterator<Item = usize>) -> CpuStorage {
        with_buffer!(self, v => crate::cpu::HostElement::into_buffer(positions.map(|p| v[p]).collect()))
    }
}
