//! Dense operators. Each public op validates its inputs, computes on the CPU backend and, when
//! autograd is recording, records its backward.

mod arith;
pub(crate) mod axis;
pub(crate) mod broadcast;
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
    use rayon::prelude::*;
    if src.len() >= PAR_THRESHOLD {
        src.par_iter().with_min_len(4096).map(|&x| f(x)).collect()
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
    use rayon::prelude::*;
    debug_assert_eq!(a.len(), b.len());
    if a.len() >= PAR_THRESHOLD {
        a.par_iter()
            .zip(b.par_iter())
            .with_min_len(4096)
            .map(|(&x, &y)| f(x, y))
            .collect()
    } else {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    }
}
