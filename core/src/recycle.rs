//! A small pool of large host buffers handed back for reuse.
//!
//! A training step with a big dense weight gradient (the tutorial's variant (a): 1,000,000 x 128
//! f32, 512 MB) makes a fresh gradient every backward pass while the previous one is dropped.
//! Fresh memory arrives as untouched pages that the kernel zeroes on first write; profiled, that
//! zeroing (`clear_page_erms`) was ~half of a step, for memory about to be overwritten anyway.
//!
//! So every owned host vector of at least [`RECYCLE_MIN_BYTES`] comes here when its array is
//! dropped ([`HostBuf`](crate::cpu::HostBuf)'s `Drop`), and the next kernel that needs about
//! that many elements takes it back, already faulted in. The pool keeps at most [`POOL_MAX`]
//! buffers and [`POOL_MAX_BYTES`] in all (the oldest are freed first), so what it holds beyond
//! the live arrays stays bounded. Buffers come back with their old contents: callers overwrite
//! every element.

use std::any::Any;
use std::sync::Mutex;

/// Buffers smaller than this go straight back to the allocator (small allocations are cheap).
pub const RECYCLE_MIN_BYTES: usize = 32 << 20;
/// How many buffers the pool keeps.
pub const POOL_MAX: usize = 4;
/// How many bytes the pool keeps in all; a larger buffer is freed at once.
pub const POOL_MAX_BYTES: usize = 2 << 30;

/// One kept buffer: its bytes (capacity), for the budget, and the typed vector.
struct Kept {
    bytes: usize,
    buf: Box<dyn Any + Send>,
}

/// The pool's bookkeeping, separate from the global so that tests can run their own.
#[derive(Default)]
struct Pool {
    kept: Vec<Kept>,
}

impl Pool {
    /// Keep `v` if it is large enough and fits the budget; returns what had to be evicted
    /// (freed by the caller outside the lock).
    fn put<T: Send + 'static>(&mut self, v: Vec<T>) -> Vec<Kept> {
        let bytes = v.capacity() * std::mem::size_of::<T>();
        let mut evicted = Vec::new();
        if !(RECYCLE_MIN_BYTES..=POOL_MAX_BYTES).contains(&bytes) {
            evicted.push(Kept {
                bytes,
                buf: Box::new(v),
            });
            return evicted;
        }
        while !self.kept.is_empty()
            && (self.kept.len() >= POOL_MAX || self.bytes() + bytes > POOL_MAX_BYTES)
        {
            evicted.push(self.kept.remove(0));
        }
        self.kept.push(Kept {
            bytes,
            buf: Box::new(v),
        });
        evicted
    }

    /// A kept vector of `T` with room for `n` elements and at most a quarter more (so a small
    /// request never pins a much larger buffer), preferring the closest fit. Its length is
    /// what it was when kept; its elements are old values.
    fn take<T: Send + 'static>(&mut self, n: usize) -> Option<Vec<T>> {
        if n.saturating_mul(std::mem::size_of::<T>()) < RECYCLE_MIN_BYTES {
            return None;
        }
        let limit = n.saturating_add(n / 4);
        let (i, _) = self
            .kept
            .iter()
            .enumerate()
            .filter_map(|(i, k)| {
                let v = k.buf.downcast_ref::<Vec<T>>()?;
                (n..=limit)
                    .contains(&v.capacity())
                    .then_some((i, v.capacity()))
            })
            .min_by_key(|&(_, cap)| cap)?;
        self.kept
            .remove(i)
            .buf
            .downcast::<Vec<T>>()
            .ok()
            .map(|b| *b)
    }

    fn bytes(&self) -> usize {
        self.kept.iter().map(|k| k.bytes).sum()
    }
}

static POOL: Mutex<Pool> = Mutex::new(Pool { kept: Vec::new() });

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keep `v` for reuse if it is large; otherwise free it.
pub(crate) fn recycle<T: Send + 'static>(v: Vec<T>) {
    if v.capacity() * std::mem::size_of::<T>() < RECYCLE_MIN_BYTES {
        return;
    }
    let evicted = pool().put(v);
    drop(evicted); // freed outside the lock
}

/// Free every kept buffer (for a program that is done with its large arrays and wants the
/// memory back; training loops never need to call it).
pub fn release_recycled_buffers() {
    let kept = std::mem::take(&mut pool().kept);
    drop(kept);
}

/// Bytes the pool currently holds.
pub fn recycled_bytes() -> usize {
    pool().bytes()
}

/// A kept buffer resized to exactly `n` elements (old values; a tail beyond its old length is
/// `fill`), if the pool has one that fits.
fn take_len<T: Send + Copy + 'static>(n: usize, fill: T) -> Option<Vec<T>> {
    let mut v = pool().take::<T>(n)?;
    v.resize(n, fill);
    Some(v)
}

/// `n` elements of `T` for an output that the caller overwrites completely: a recycled buffer
/// when the pool has one that fits, else a zeroed one (`calloc`: large sizes arrive as
/// untouched pages, advised for huge pages before the first write).
pub fn overwritable_vec<T: Send + Copy + num_traits::Zero + 'static>(n: usize) -> Vec<T> {
    take_len(n, T::zero()).unwrap_or_else(|| fresh_zeroed(n, T::zero()))
}

/// A new vector of `n` copies of `zero` (a zeroed allocation: `calloc` for large sizes, whose
/// untouched pages are advised for huge pages before the first write).
fn fresh_zeroed<T: Copy>(n: usize, zero: T) -> Vec<T> {
    let mut v = vec![zero; n];
    crate::sys::advise_huge_pages(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(&v[..]));
    v
}

/// `n` zeros of `T`: a recycled buffer cleared in parallel when the pool has one that fits
/// (already faulted in: clearing it is one write pass, where fresh pages cost a kernel fault and
/// clear each, ~2 s for 512 MB), else a zeroed allocation (`calloc`, advised
/// for huge pages). Dense gradients densified from row_sparse ones are such buffers.
pub fn zeroed_vec<T: Send + Sync + Copy + Default + 'static>(n: usize) -> Vec<T> {
    use rayon::prelude::*;
    match take_len::<T>(n, T::default()) {
        Some(mut v) => {
            v.par_chunks_mut(1 << 20).for_each(|c| c.fill(T::default()));
            v
        }
        None => fresh_zeroed(n, T::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private pool: the global one also receives every large buffer the crate's other
    /// tests drop, concurrently.
    #[test]
    fn keeps_large_buffers_that_fit_and_bounds_its_size() {
        let mut p = Pool::default();
        let n = RECYCLE_MIN_BYTES / 2; // f32 elements: twice the smallest kept size
                                       // Small buffers are not kept.
        assert_eq!(p.put(vec![1.0f32; 16]).len(), 1);
        assert_eq!(p.bytes(), 0);
        assert!(p.take::<f32>(16).is_none());
        // A large one comes back once, with its contents, only for the same type and a length
        // it can hold without being more than a quarter too large.
        let v = vec![7.0f32; n];
        let ptr = v.as_ptr();
        assert!(p.put(v).is_empty());
        assert_eq!(p.bytes(), n * 4);
        assert!(p.take::<f64>(n).is_none());
        assert!(p.take::<f32>(n + 1).is_none());
        assert!(p.take::<f32>(n / 2).is_none());
        let back = p.take::<f32>(n - n / 8).expect("kept");
        assert_eq!(back.as_ptr(), ptr);
        assert!(back.iter().all(|&x| x == 7.0));
        assert!(p.take::<f32>(n).is_none());
        // At most POOL_MAX buffers; the oldest goes first.
        for k in 0..POOL_MAX + 1 {
            p.put(vec![k as f32; n]);
        }
        assert_eq!(p.bytes(), POOL_MAX * n * 4);
        assert_eq!(p.take::<f32>(n).unwrap()[0], 1.0);
        // The closest fit wins.
        let mut p = Pool::default();
        let m = 4 * n; // u8 elements
        p.put(vec![0u8; m + m / 5]);
        p.put(vec![1u8; m]);
        assert_eq!(p.take::<u8>(m).unwrap()[0], 1);
        // The byte budget: a buffer over it is not kept.
        let mut p = Pool::default();
        let huge: Vec<u8> = Vec::with_capacity(POOL_MAX_BYTES + 1);
        assert_eq!(p.put(huge).len(), 1);
        assert_eq!(p.bytes(), 0);
    }
}
