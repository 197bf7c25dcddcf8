//! Per-row primitives of the sparse kernels: axpy over a row and cache prefetch hints.

use crate::dtype::Float;

/// `out += a * x` over one row. Written as a zip so LLVM vectorizes it.
#[inline]
pub(crate) fn axpy<T: Float>(out: &mut [T], a: T, x: &[T]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = *o + a * v;
    }
}

/// Ask the CPU to start loading a row into cache. The gathers of sparse products touch rows at
/// random positions of a huge matrix; prefetching a few non-zeros ahead overlaps those DRAM
/// latencies with the arithmetic on the current row.
#[inline(always)]
pub(crate) fn prefetch_row<T>(row: &[T]) {
    prefetch_bytes(row.as_ptr() as *const u8, std::mem::size_of_val(row));
}

/// Ask the CPU to start loading the cache lines of `bytes` bytes from `p`: eight lines per loop
/// step, then single lines for the rest, so a 512-byte row (128 f32) is eight straight-line
/// prefetches and one loop test (a loop of two lines per step was 20 instructions per such
/// row, half of it loop control; callgrind). A hint: it never faults and reads nothing,
/// whatever the address.
#[inline(always)]
pub(crate) fn prefetch_bytes(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY (each prefetch): a hint that never faults, whatever the address.
        let line = |off: usize| unsafe {
            _mm_prefetch(p.wrapping_add(off) as *const i8, _MM_HINT_T0);
        };
        let mut off = 0;
        while off + 512 <= bytes {
            for k in 0..8 {
                line(off + 64 * k);
            }
            off += 512;
        }
        while off < bytes {
            line(off);
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}
