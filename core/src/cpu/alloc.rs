//! Fallible host allocation for sizes that come from user input.
//!
//! `vec![x; n]` and `Vec::with_capacity(n)` abort the process when the allocator refuses, so a
//! server that embeds sparrow would die on one bad request (`zeros` of 100 GB, `one_hot` with
//! depth 2^40). The constructors that size an array from their arguments allocate through these
//! functions instead and return [`Error::Memory`] naming the operator and the bytes asked for.
//! On Linux's default overcommit heuristic a request larger than RAM plus swap is refused up
//! front; a request that is granted but later cannot be backed is the kernel's OOM killer's,
//! which no allocator API can turn into an error.

use crate::error::{Error, Result};

/// The error for a refused request of `n` elements of `T`.
fn refused<T>(op: &'static str, n: usize) -> Error {
    let bytes = (n as u128) * std::mem::size_of::<T>() as u128;
    Error::Memory {
        op,
        msg: format!(
            "cannot allocate {n} elements of {} bytes ({bytes} bytes)",
            std::mem::size_of::<T>()
        ),
    }
}

/// An empty vector with capacity for exactly `n` elements, or [`Error::Memory`].
pub(crate) fn try_with_capacity<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| refused::<T>(op, n))?;
    Ok(v)
}

/// [`try_with_capacity`] advised for huge pages before anything touches it (the fallible
/// [`crate::sys::uninit_vec`]): for a large array written once by the caller (random draws, a
/// copy of a weight or a table) that is then read at random rows, on 4 KiB pages every such
/// read would also be a TLB miss.
pub(crate) fn try_uninit_vec<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let mut v = try_with_capacity::<T>(op, n)?;
    crate::sys::advise_huge_pages(v.as_mut_ptr().cast(), n * std::mem::size_of::<T>());
    Ok(v)
}

/// `n` copies of `value`, or [`Error::Memory`].
pub(crate) fn try_filled<T: Copy>(op: &'static str, n: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_with_capacity(op, n)?;
    v.resize(n, value);
    Ok(v)
}

/// Element types whose all-zero bit pattern is the value zero, so that memory from
/// `alloc_zeroed` (calloc: large requests arrive as untouched zero pages) is a valid vector.
///
/// # Safety
/// Implement only for types for which every byte being 0 is a valid value.
pub(crate) unsafe trait ZeroBits: Copy {}
// SAFETY: all-zero bits are 0 for the integer types and +0.0 for the IEEE float types.
unsafe impl ZeroBits for f32 {}
// SAFETY: as above.
unsafe impl ZeroBits for f64 {}
// SAFETY: as above.
unsafe impl ZeroBits for i64 {}
// SAFETY: as above.
unsafe impl ZeroBits for i32 {}
// SAFETY: as above.
unsafe impl ZeroBits for u8 {}
// SAFETY: all-zero bits are +0.0 in f16 and bf16.
unsafe impl ZeroBits for half::f16 {}
// SAFETY: as above.
unsafe impl ZeroBits for half::bf16 {}

/// `n` zeros, or [`Error::Memory`]. Like `vec![0; n]` the memory comes from `alloc_zeroed`, so a
/// large array is not written until used (its pages are the kernel's zero pages until then).
pub(crate) fn try_zeroed<T: ZeroBits>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| refused::<T>(op, n))?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(refused::<T>(op, n));
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[T; n]` (the
    // layout `Vec<T>` uses for capacity `n`), is aligned for `T`, and its `n` elements are
    // initialised: all-zero bytes are a valid `T` (`ZeroBits`).
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_are_granted_with_their_values() {
        assert_eq!(try_zeroed::<f32>("t", 3).unwrap(), vec![0.0; 3]);
        assert_eq!(try_zeroed::<i64>("t", 0).unwrap(), Vec::<i64>::new());
        assert_eq!(try_filled("t", 4, 7u8).unwrap(), vec![7u8; 4]);
        assert!(try_with_capacity::<f64>("t", 5).unwrap().capacity() >= 5);
    }

    /// Whether the mapping of this process holding `addr` is advised for huge pages (`hg`
    /// among its `VmFlags` in /proc/self/smaps), or `None` when no mapping holds it.
    fn advised_huge(addr: usize) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            // A mapping's header starts with its address range, `start-end` in hex.
            let range = line.split(' ').next().and_then(|r| r.split_once('-'));
            let hex = |x: &str| usize::from_str_radix(x, 16).ok();
            if let Some((Some(a), Some(b))) = range.map(|(a, b)| (hex(a), hex(b))) {
                inside = (a..b).contains(&addr);
            } else if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| inside) {
                return Some(flags.split_whitespace().any(|f| f == "hg"));
            }
        }
        None
    }

    /// A large copy of an array (`duplicate`, behind `NDArray::try_copy`) is advised for huge
    /// pages like a fresh one; the plain vector it copies is not.
    #[test]
    fn a_large_copy_is_advised_for_huge_pages() {
        use crate::cpu::HostElement;
        use crate::storage::BackendStorage;
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            println!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let n = 4 << 20; // 16 MB of f32
        let src = <f32 as HostElement>::into_buffer(vec![1.0f32; n]);
        let copy = src.duplicate().unwrap();
        let mid = |s: &crate::cpu::CpuStorage| {
            <f32 as HostElement>::slice(s).unwrap().as_ptr() as usize + n * 2
        };
        assert_eq!(advised_huge(mid(&copy)), Some(true));
        assert_eq!(advised_huge(mid(&src)), Some(false));
        assert_eq!(<f32 as HostElement>::slice(&copy).unwrap()[n - 1], 1.0);
    }

    #[test]
    fn impossible_requests_are_errors_naming_the_op() {
        // 2^60 f32 = 4 EiB: beyond any address space, refused whatever the overcommit policy.
        let n = 1usize << 60;
        for e in [
            try_zeroed::<f32>("zeros", n).unwrap_err(),
            try_filled("full", n, 1.0f32).unwrap_err(),
            try_with_capacity::<f64>("arange", n).unwrap_err(),
            try_zeroed::<f64>("zeros", usize::MAX).unwrap_err(),
        ] {
            let s = e.to_string();
            assert!(matches!(e, Error::Memory { .. }), "{s}");
            assert!(s.contains("cannot allocate"), "{s}");
        }
    }
}
