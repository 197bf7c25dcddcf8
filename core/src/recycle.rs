//! A small pool of large dense buffers handed back for reuse.
//!
//! A training step with a big dense weight gradient (the tutorial's variant (a): 1,000,000 x 128
//! f32, 512 MB) makes a fresh gradient every backward pass while the previous one is dropped.
//! Fresh memory arrives as untouched pages that the kernel zeroes on first write; profiled, that
//! zeroing (`clear_page_erms`) was ~half of a step, for memory about to be overwritten anyway.
//! The autograd engine hands the replaced gradient's buffer here, and the next product that
//! needs a buffer of exactly that length takes it back, already faulted in. Two buffers then
//! alternate between "current gradient" and "being computed", which is the same peak memory as
//! dropping the old gradient after the new one exists.
//!
//! Only buffers of at least [`RECYCLE_MIN_BYTES`] are kept, at most [`POOL_MAX`] of them (the
//! oldest is freed first), so the pool never holds more than two large buffers. Buffers come
//! back with their old contents: callers must overwrite every element.

use crate::storage::Storage;
use std::any::Any;
use std::sync::Mutex;

/// Buffers smaller than this go straight back to the allocator (small allocations are cheap).
pub const RECYCLE_MIN_BYTES: usize = 32 << 20;
/// How many buffers the pool keeps.
pub const POOL_MAX: usize = 2;

static POOL: Mutex<Vec<Box<dyn Any + Send>>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Box<dyn Any + Send>>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keep `v` for reuse if it is large; otherwise drop it.
pub(crate) fn recycle<T: Send + 'static>(v: Vec<T>) {
    if std::mem::size_of_val(&v[..]) < RECYCLE_MIN_BYTES {
        return;
    }
    let evicted = {
        let mut p = pool();
        let evicted = (p.len() >= POOL_MAX).then(|| p.remove(0));
        p.push(Box::new(v));
        evicted
    };
    drop(evicted); // freed outside the lock
}

/// A kept buffer of exactly `n` elements of `T` (old contents), if the pool has one.
pub(crate) fn take<T: Send + 'static>(n: usize) -> Option<Vec<T>> {
    if n.saturating_mul(std::mem::size_of::<T>()) < RECYCLE_MIN_BYTES {
        return None;
    }
    let mut p = pool();
    let i = p
        .iter()
        .position(|b| b.downcast_ref::<Vec<T>>().is_some_and(|v| v.len() == n))?;
    p.remove(i).downcast::<Vec<T>>().ok().map(|b| *b)
}

/// Free every kept buffer (for a program that is done with its large gradients and wants the
/// memory back; training loops never need to call it).
pub fn release_recycled_buffers() {
    let kept = std::mem::take(&mut *pool());
    drop(kept);
}

/// Bytes the pool currently holds.
pub fn recycled_bytes() -> usize {
    pool()
        .iter()
        .map(|b| {
            if let Some(v) = b.downcast_ref::<Vec<f32>>() {
                std::mem::size_of_val(&v[..])
            } else if let Some(v) = b.downcast_ref::<Vec<f64>>() {
                std::mem::size_of_val(&v[..])
            } else {
                0
            }
        })
        .sum()
}

/// `n` elements of `T` for an output that the caller overwrites completely: a recycled buffer
/// when the pool has one of that length, else a zeroed one (`calloc`: large sizes arrive as
/// untouched pages, advised for huge pages before the first write).
pub fn overwritable_vec<T: Send + Copy + num_traits::Zero + 'static>(n: usize) -> Vec<T> {
    take(n).unwrap_or_else(|| fresh_zeroed(n, T::zero()))
}

/// A new vector of `n` copies of `zero` (a zeroed allocation: `calloc` for large sizes, whose
/// untouched pages are advised for huge pages before the first write).
fn fresh_zeroed<T: Copy>(n: usize, zero: T) -> Vec<T> {
    let mut v = vec![zero; n];
    crate::sys::advise_huge_pages(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(&v[..]));
    v
}

/// `n` zeros of `T`: a recycled buffer cleared in parallel when the pool has one of that length
/// (already faulted in: clearing it is one write pass, where fresh pages cost a kernel fault and
/// clear each, ~2 s for 512 MB), else a zeroed allocation (`calloc`, advised
/// for huge pages). Dense gradients densified from row_sparse ones are such buffers.
pub fn zeroed_vec<T: Send + Sync + Copy + Default + 'static>(n: usize) -> Vec<T> {
    use rayon::prelude::*;
    match take::<T>(n) {
        Some(mut v) => {
            v.par_chunks_mut(1 << 20).for_each(|c| c.fill(T::default()));
            v
        }
        None => fresh_zeroed(n, T::default()),
    }
}

impl crate::NDArray {
    /// Hand this array's dense f32/f64 buffer to the pool when this handle is the only owner of
    /// the array and of its buffer (a gradient being replaced); otherwise just drop the handle.
    pub(crate) fn recycle_buffer(self) {
        use crate::{ArrayData, CpuStorage};
        let Ok(inner) = std::sync::Arc::try_unwrap(self.inner) else {
            return;
        };
        let data = inner.data.into_inner().unwrap_or_else(|e| e.into_inner());
        if let ArrayData::Dense(d) = data {
            match d.buf {
                Storage::Cpu(CpuStorage::F32(a)) => {
                    if let Ok(v) = std::sync::Arc::try_unwrap(a) {
                        recycle(v);
                    }
                }
                Storage::Cpu(CpuStorage::F64(a)) => {
                    if let Ok(v) = std::sync::Arc::try_unwrap(a) {
                        recycle(v);
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is process-global; the tests that touch it run in one test function so they
    /// do not race each other.
    #[test]
    fn keeps_large_buffers_of_exact_length_and_bounds_its_size() {
        release_recycled_buffers();
        let n = RECYCLE_MIN_BYTES / 4;
        // Small buffers are not kept.
        recycle(vec![1.0f32; 16]);
        assert_eq!(recycled_bytes(), 0);
        assert!(take::<f32>(16).is_none());
        // A large one comes back once, with its contents, only for the same type and length.
        let v = vec![7.0f32; n];
        let ptr = v.as_ptr();
        recycle(v);
        assert_eq!(recycled_bytes(), n * 4);
        assert!(take::<f64>(n).is_none());
        assert!(take::<f32>(n + 1).is_none());
        let back = take::<f32>(n).expect("kept");
        assert_eq!(back.as_ptr(), ptr);
        assert!(back.iter().all(|&x| x == 7.0));
        assert!(take::<f32>(n).is_none());
        // At most POOL_MAX buffers; the oldest goes first.
        for k in 0..POOL_MAX + 1 {
            recycle(vec![k as f32; n]);
        }
        assert_eq!(recycled_bytes(), POOL_MAX * n * 4);
        let first = take::<f32>(n).unwrap();
        assert_eq!(first[0], 1.0);
        // overwritable_vec: recycled when available, zeroed otherwise.
        release_recycled_buffers();
        assert!(overwritable_vec::<f32>(n).iter().all(|&x| x == 0.0));
        recycle(vec![3.0f32; n]);
        assert_eq!(overwritable_vec::<f32>(n)[0], 3.0);
        // zeroed_vec: a recycled buffer comes back cleared.
        recycle(vec![5.0f32; n]);
        let z = zeroed_vec::<f32>(n);
        assert!(z.iter().all(|&x| x == 0.0));
        assert_eq!(recycled_bytes(), 0);
        assert!(zeroed_vec::<f64>(n / 2).iter().all(|&x| x == 0.0));
        // recycle_buffer: only a sole owner gives its buffer back.
        release_recycled_buffers();
        let a = crate::NDArray::from_vec(vec![1.0f32; n], &[n]).unwrap();
        let b = a.clone();
        a.recycle_buffer();
        assert_eq!(recycled_bytes(), 0);
        b.recycle_buffer();
        assert_eq!(recycled_bytes(), n * 4);
        release_recycled_buffers();
        assert_eq!(recycled_bytes(), 0);
    }
}
