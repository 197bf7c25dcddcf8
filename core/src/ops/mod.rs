//! Dense operators. Each public op validates its inputs, computes on the CPU backend and, when
//! autograd is recording, records its backward.

mod arith;
pub(crate) mod axis;
pub(crate) mod broadcast;
pub mod expf;
mod index;
mod linalg;
mod matmul;
pub(crate) mod reduce;
mod reduce_more;
mod shape;
mod softmax;
mod sort;
mod transform;
mod unary;

pub use arith::BinaryOp;
pub use broadcast::broadcast_shapes;
pub use reduce::sum_to_shape;

/// Arrays with at least this many elements are processed in parallel with rayon; smaller ones
/// stay on the calling thread so they do not pay the fork/join overhead (~5-20 us).
pub const PAR_THRESHOLD: usize = 1 << 15;

/// Run `$body` with type alias `$T` bound to f32 or f64 according to `$dtype`; other dtypes are
/// an error naming `$op`.
#[macro_export]
macro_rules! float_dispatch {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            other => {
                return Err($crate::Error::dtype(
                    $op,
                    format!("needs a float32 or float64 array, got {}", other.name()),
                ))
            }
        }
    };
}

/// Map a unary function over a slice, in parallel above [`PAR_THRESHOLD`].
pub fn map_slice<S: Copy + Send + Sync, D: Send>(
    src: &[S],
    f: impl Fn(S) -> D + Sync + Send,
) -> Vec<D> {
    if src.len() >= PAR_THRESHOLD {
        fill_parallel(src.len(), |start, out| {
            let end = start + out.len();
            for (o, &x) in out.iter_mut().zip(&src[start..end]) {
                o.write(f(x));
            }
        })
    } else {
        src.iter().map(|&x| f(x)).collect()
    }
}

/// Zip two equal-length slices through a binary function, in parallel above [`PAR_THRESHOLD`].
pub fn zip_slices<A: Copy + Send + Sync, B: Copy + Send + Sync, D: Send>(
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> D + Sync + Send,
) -> Vec<D> {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    if n >= PAR_THRESHOLD {
        fill_parallel(n, |start, out| {
            let end = start + out.len();
            for ((o, &x), &y) in out.iter_mut().zip(&a[start..end]).zip(&b[start..end]) {
                o.write(f(x, y));
            }
        })
    } else {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    }
}

/// A new vector of `n` elements whose chunks are written in parallel by `fill(start, chunk)`;
/// `fill` must initialise every element of its chunk. The buffer is asked to be backed by
/// transparent huge pages: on kernels where THP is `madvise`-only (as on the project machine), a
/// fresh 64 MB output otherwise costs 16,384 first-touch page faults, which dominated
/// elementwise ops (numpy makes the same request for large arrays).
fn fill_parallel<D: Send>(
    n: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<D>]) + Sync + Send,
) -> Vec<D> {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 14;
    let mut out: Vec<D> = Vec::with_capacity(n);
    crate::sys::advise_huge_pages(out.as_mut_ptr() as *mut u8, n * std::mem::size_of::<D>());
    out.spare_capacity_mut()[..n]
        .par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| fill(c * CHUNK, chunk));
    // SAFETY: every chunk of the first n slots was initialised by `fill` (its contract), and
    // the capacity is at least n.
    unsafe { out.set_len(n) };
    out
}
