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
pub use unary::sigmoid;

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
/// `fill` must initialise every element of its chunk.
///
/// The buffer is uninitialised and advised for transparent huge pages before the first write
/// ([`crate::sys::uninit_vec`]): on kernels where THP is `madvise`-only (as on the project
/// machine) a fresh 64 MiB output otherwise costs 16,384 first-touch page faults, which dominated
/// elementwise ops (numpy makes the same request for large arrays).
///
/// Chunking: a few chunks per thread (for balance when a core is busy with something else), never
/// below [`MIN_CHUNK_BYTES`], and for large outputs whole huge pages starting at huge-page
/// boundaries. Each 2 MiB page then belongs to one task, so the two threads fault in (and the
/// kernel zeroes) different pages side by side instead of queueing on the same page, which is
/// what 64 KiB chunks did. Measured on a 64 MiB add: 16K-element chunks 11.6 ms, 2M-element
/// chunks 9.8 ms.
fn fill_parallel<D: Send>(
    n: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<D>]) + Sync + Send,
) -> Vec<D> {
    use crate::sys::HUGE_PAGE;
    use rayon::prelude::*;
    let size = std::mem::size_of::<D>().max(1);
    let mut out: Vec<D> = crate::sys::uninit_vec(n);
    let tasks = rayon::current_num_threads().max(1) * TASKS_PER_THREAD;
    let mut chunk = n.div_ceil(tasks).max(MIN_CHUNK_BYTES / size).max(1);
    // Elements before the first huge-page boundary of the output (all of them if it has none).
    let mut head = 0;
    if n * size >= 2 * HUGE_PAGE && HUGE_PAGE.is_multiple_of(size) {
        let per_page = HUGE_PAGE / size;
        chunk = chunk.div_ceil(per_page) * per_page;
        let addr = out.as_ptr() as usize;
        head = ((HUGE_PAGE - addr % HUGE_PAGE) % HUGE_PAGE / size).min(n);
    }
    let (first, rest) = out.spare_capacity_mut()[..n].split_at_mut(head);
    rayon::join(
        || {
            if !first.is_empty() {
                fill(0, first)
            }
        },
        || {
            rest.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(c, part)| fill(head + c * chunk, part))
        },
    );
    // SAFETY: `first` and the chunks of `rest` cover the first n slots, and `fill` initialised
    // every element of each (its contract); the capacity is at least n.
    unsafe { out.set_len(n) };
    out
}

/// Parallel fills aim for this many chunks per rayon thread: one per thread is fastest on an
/// idle machine, a few more keep both cores busy when one of them is shared.
const TASKS_PER_THREAD: usize = 4;

/// Smallest chunk of a parallel fill in bytes: below this the fork/join cost per task is no
/// longer small against the work.
const MIN_CHUNK_BYTES: usize = 64 << 10;
