//! Dense matrix products on host memory. Every dense product goes through `gemm_into`, which
//! sends products with a tiny m or k to the memory-bound kernels of `skinny.rs` (f32, x86_64
//! AVX2) and otherwise picks a kernel by size: the `gemm` crate for tiny products (its
//! small-matrix path has the least call overhead); for everything larger `packed.rs` in f32 on
//! AVX2/FMA (as fast as matrixmultiply here, and its packing buffers are kept per thread, so a
//! planned step's products allocate nothing) and `matrixmultiply` otherwise (f64, other CPUs);
//! split over rayon's threads for large ones.

use super::cast::{as_f32, as_f32_mut, SendPtr};
use crate::dtype::Float;

/// Products with `m * n * k` below this go to the `gemm` crate, single-threaded: for
/// 10x128 by 128x8 it takes ~0.6-0.9 us against ~1.3-1.5 us for matrixmultiply (packing and
/// setup dominate); at 64^3 the two tie and above it matrixmultiply is faster (128^3: 60 vs
/// 85 us).
const SMALL_MNK: usize = 64 * 64 * 64;

/// Products with `m * n * k` at or above this (about 8 MFLOP) are split over rayon's threads.
/// Below it, waking the second thread costs more than it saves on two cores: 64x128x64
/// went from 18 to 53 us and 128^3 from 61 to 91 us when split; 64x784x128 (6.4M): 206 -> 167 us.
pub(crate) const PARALLEL_MNK: usize = 1 << 22;

/// Blocks of a split product are multiples of this many rows (or columns), the register-tile
/// height of matrixmultiply's AVX kernels, so only the last block has a partial tile.
const SPLIT_ALIGN: usize = 8;

/// The per-dtype entry points of the GEMM crates `gemm_into` uses (f32 and f64).
pub(crate) trait GemmScalar: Float {
    /// `c = a * b + beta * c` through matrixmultiply, single-threaded; strides in elements
    /// (row, col). With `beta = 0` `c` is only written.
    ///
    /// # Safety
    /// `a`, `b` must be valid for reads and `c` for writes of every element the dims and strides
    /// address; `c` must not alias `a` or `b` and its strides must not alias its own elements.
    #[allow(clippy::too_many_arguments)]
    unsafe fn mm_gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        a_rs: isize,
        a_cs: isize,
        b: *const Self,
        b_rs: isize,
        b_cs: isize,
        c: *mut Self,
        c_rs: isize,
        beta: Self,
    );
}

/// `GemmScalar` for a dtype through the matrixmultiply entry point of that dtype.
macro_rules! gemm_scalar {
    ($t:ty, $mm:path) => {
        impl GemmScalar for $t {
            unsafe fn mm_gemm(
                m: usize,
                k: usize,
                n: usize,
                a: *const $t,
                a_rs: isize,
                a_cs: isize,
                b: *const $t,
                b_rs: isize,
                b_cs: isize,
                c: *mut $t,
                c_rs: isize,
                beta: $t,
            ) {
                // SAFETY: forwarded from the caller's contract; beta = 0 means c is only written.
                unsafe { $mm(m, k, n, 1.0, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, 1) }
            }
        }
    };
}
gemm_scalar!(f64, matrixmultiply::dgemm);

impl GemmScalar for f32 {
    /// Through `packed.rs` where the CPU has AVX2+FMA (its packing buffers are kept per
    /// thread, so a product allocates nothing once its thread has seen the size), else
    /// matrixmultiply.
    unsafe fn mm_gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        a_rs: isize,
        a_cs: isize,
        b: *const f32,
        b_rs: isize,
        b_cs: isize,
        c: *mut f32,
        c_rs: isize,
        beta: f32,
    ) {
        #[cfg(target_arch = "x86_64")]
        if (beta == 0.0 || beta == 1.0) && super::packed::available() {
            // SAFETY: forwarded from the caller's contract; AVX2+FMA checked.
            unsafe {
                super::packed::sgemm(m, k, n, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, beta == 1.0)
            };
            return;
        }
        // SAFETY: forwarded from the caller's contract; beta = 0 means c is only written.
        unsafe {
            matrixmultiply::sgemm(m, k, n, 1.0, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, 1)
        }
    }
}

/// Whether every element `(r, c)`, `r < rows`, `c < cols`, at `r * rs + c * cs` lies inside a
/// slice of `len` elements (no overflow, no negative offset). O(1): the extreme offsets are at
/// the corners.
fn covers(len: usize, rows: usize, cols: usize, rs: isize, cs: isize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let (r, c) = ((rows - 1) as i128, (cols - 1) as i128);
    let (rs, cs) = (rs as i128, cs as i128);
    let lo = (r * rs).min(0) + (c * cs).min(0);
    let hi = (r * rs).max(0) + (c * cs).max(0);
    lo >= 0 && hi < len as i128
}

/// `c = a(m x k, strides) * b(k x n, strides)` into a row-major `m x n` buffer, overwriting
/// every element (dst is never read). Strides are (row stride, column stride) in elements, so
/// transposes cost nothing.
///
/// Panics when the slices do not cover the dims and strides (callers derive both from an
/// array's shape, whose buffer holds exactly its elements). This O(1) check is what the raw
/// pointer kernels below (GEMM crates, skinny.rs) rely on, so that a shape that slipped past
/// validation (a size product that wrapped) stops here instead of reading out of bounds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into<T: GemmScalar>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    b_rs: isize,
    b_cs: isize,
    dst: &mut [T],
) {
    assert!(
        m.checked_mul(n) == Some(dst.len())
            && covers(a.len(), m, k, a_rs, a_cs)
            && covers(b.len(), k, n, b_rs, b_cs),
        "gemm_into: operands do not cover {m}x{k} by {k}x{n} (lengths {}, {}, {})",
        a.len(),
        b.len(),
        dst.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst.iter_mut()
            .for_each(|x| *x = <T as num_traits::Zero>::zero());
        return;
    }
    // Products with a tiny m or k (a Dense layer on a wide batch) are memory-bound; both GEMM
    // crates run them far below bandwidth (see skinny.rs).
    #[cfg(target_arch = "x86_64")]
    if let (Some(a32), Some(b32), Some(d32)) = (as_f32(a), as_f32(b), as_f32_mut(dst)) {
        if super::skinny::try_skinny_f32(m, n, k, a32, a_rs, a_cs, b32, b_rs, b_cs, d32) {
            return;
        }
    }
    let mnk = m.saturating_mul(n).saturating_mul(k);
    if mnk < SMALL_MNK {
        // SAFETY: the slices cover every (row, col) the dims and strides address (asserted at
        // the top of this function, the guarantor); dst is m*n row-major and does not alias a
        // or b (a `&mut` and two `&` slices).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                a_cs,
                a_rs,
                b.as_ptr(),
                b_cs,
                b_rs,
                <T as num_traits::Zero>::zero(),
                <T as num_traits::One>::one(),
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        return;
    }
    let threads = rayon::current_num_threads();
    if threads <= 1 || mnk < PARALLEL_MNK {
        // SAFETY: as above (slices cover dims and strides, asserted at the top; dst is m*n
        // row-major, no aliasing).
        unsafe {
            T::mm_gemm(
                m,
                k,
                n,
                a.as_ptr(),
                a_rs,
                a_cs,
                b.as_ptr(),
                b_rs,
                b_cs,
                dst.as_mut_ptr(),
                n as isize,
                <T as num_traits::Zero>::zero(),
            )
        };
        return;
    }
    // One block of the output per thread, along the longer side: each block packs the whole
    // other operand once, so splitting the longer side repacks the smaller one.
    let split_rows = m >= n;
    let len = if split_rows { m } else { n };
    let block = len.div_ceil(threads).next_multiple_of(SPLIT_ALIGN);
    let c = SendPtr(dst.as_mut_ptr());
    let run_block = move |start: usize| {
        let size = block.min(len - start);
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        // SAFETY: block `start..start + size` of rows (or columns) lies inside the m x n output
        // and inside a's rows (or b's columns) (the slices cover the dims: asserted at the top
        // of `gemm_into`), so every offset pointer stays in its slice; blocks are disjoint, so
        // no two tasks write the same element, and every task ends before `gemm_into` returns
        // while dst is still mutably borrowed here.
        unsafe {
            if split_rows {
                let a_blk = ap.offset(start as isize * a_rs);
                let c_blk = c.get().add(start * n);
                T::mm_gemm(
                    size,
                    k,
                    n,
                    a_blk,
                    a_rs,
                    a_cs,
                    bp,
                    b_rs,
                    b_cs,
                    c_blk,
                    n as isize,
                    <T as num_traits::Zero>::zero(),
                );
            } else {
                let b_blk = bp.offset(start as isize * b_cs);
                let c_blk = c.get().add(start);
                T::mm_gemm(
                    m,
                    k,
                    size,
                    ap,
                    a_rs,
                    a_cs,
                    b_blk,
                    b_rs,
                    b_cs,
                    c_blk,
                    n as isize,
                    <T as num_traits::Zero>::zero(),
                );
            }
        }
    };
    let blocks = len.div_ceil(block);
    join_blocks(0, blocks, &|i| run_block(i * block));
}

/// Runs `f(i)` for every `i` in `lo..hi` over rayon's threads by halving the range with
/// `rayon::join`, whose jobs live on the stack (a `rayon::scope` boxes every spawned task, an
/// allocation per block of every product).
fn join_blocks(lo: usize, hi: usize, f: &(dyn Fn(usize) + Sync)) {
    match hi - lo {
        0 => {}
        1 => f(lo),
        len => {
            let mid = lo + len / 2;
            rayon::join(|| join_blocks(lo, mid, f), || join_blocks(mid, hi, f));
        }
    }
}

/// `dst (+)= a(m x k, strides) * b(k x n, strides)` into a row-major `m x n` buffer on the
/// calling thread, through matrixmultiply whatever the size: for callers that parallelise
/// over something else (a convolution over its batch). `accumulate` adds the product to
/// `dst`; otherwise `dst` is overwritten (never read).
///
/// Panics when the slices do not cover the dims and strides, as [`gemm_into`] does (the check
/// the raw-pointer GEMM relies on).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_serial<T: GemmScalar>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    b_rs: isize,
    b_cs: isize,
    dst: &mut [T],
    accumulate: bool,
) {
    assert!(
        m.checked_mul(n) == Some(dst.len())
            && covers(a.len(), m, k, a_rs, a_cs)
            && covers(b.len(), k, n, b_rs, b_cs),
        "gemm_serial: operands do not cover {m}x{k} by {k}x{n} (lengths {}, {}, {})",
        a.len(),
        b.len(),
        dst.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst.iter_mut()
                .for_each(|x| *x = <T as num_traits::Zero>::zero());
        }
        return;
    }
    let beta = if accumulate {
        <T as num_traits::One>::one()
    } else {
        <T as num_traits::Zero>::zero()
    };
    // SAFETY: the slices cover every (row, col) the dims and strides address (asserted
    // above); dst is m*n row-major and does not alias a or b (a `&mut` and two `&` slices).
    unsafe {
        T::mm_gemm(
            m,
            k,
            n,
            a.as_ptr(),
            a_rs,
            a_cs,
            b.as_ptr(),
            b_rs,
            b_cs,
            dst.as_mut_ptr(),
            n as isize,
            beta,
        )
    };
}

/// (row stride, column stride) in elements of a row-major matrix with `cols` columns, read
/// as its transpose when `transposed`: transposes cost nothing in `gemm_into`.
pub(crate) fn strides(cols: usize, transposed: bool) -> (isize, isize) {
    if transposed {
        (1, cols as isize)
    } else {
        (cols as isize, 1)
    }
}
