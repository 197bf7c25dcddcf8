//! Dense operators. Each public op validates its inputs, computes with a backend's kernels
//! (`crate::cpu`) and, when autograd is recording, records its backward.

pub(crate) mod activation;
mod arith;
pub(crate) mod axis;
pub(crate) mod broadcast;
mod check;
pub(crate) mod conv;
mod dropout;
pub use crate::cpu::expf;
pub mod fused;
pub(crate) mod index;
mod linalg;
pub(crate) use linalg::dot_geometry;
mod matmul;
pub(crate) mod nd_index;
pub(crate) mod pool;
pub(crate) mod reduce;
mod reduce_more;
pub mod rnn;
mod running;
mod shape;
mod softmax;
mod sort;
mod transform;
mod unary;

pub use crate::cpu::map::sigmoid;
pub use activation::{ActFn, SELU_ALPHA, SELU_LAMBDA};
pub use arith::BinaryOp;
pub use broadcast::broadcast_shapes;
pub use conv::ConvParams;
pub use dropout::MaskStream;
pub use pool::{PoolParams, PoolType};
pub use reduce::sum_to_shape;

pub(crate) use crate::cpu::elementwise::{map_assign, map_slice, zip_assign, zip_assign_rows};

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
