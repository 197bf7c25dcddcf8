//! GroupAdaGrad: AdaGrad with one accumulator per row (MXNet's `contrib.group_adagrad_update`),
//! the optimizer MXNet offers for embedding tables.

use crate::error::{Error, Result};
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_finite, UpdateArgs};
use super::check::check_arrays_shaped;
use super::run;

/// The hyper-parameters of [`group_adagrad_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupAdaGradParams {
    /// Added to the square root of the history (MXNet's `epsilon`, 1e-5).
    pub epsilon: f64,
}

/// GroupAdaGrad, in place, per row `i` of the weight (MXNet's kernel, in the weight's dtype;
/// the row's sum of squares is taken in eight interleaved partial sums, which vectorize, so
/// the history can differ from MXNet's running sum in the last bit):
/// with `g = clip(rescale_grad * grad[i, ..])`,
/// `history[i] += mean(g^2); weight[i, ..] -= lr * g / (sqrt(history[i]) + epsilon)`.
///
/// One learning rate per row instead of one per element: the state is `rows` values, not the
/// weight's size, which is what makes AdaGrad affordable for large embedding tables. `history`
/// is a dense array of shape `(rows, 1)` in the weight's dtype; the weight has at least one
/// dimension, its first indexing the rows (MXNet's optimizer asks for 2-D; a 1-D weight is
/// rows of one element). Weight decay is not supported, as in MXNet: `args.wd` must be 0.
///
/// A row_sparse gradient updates only its rows in both modes: a row without gradient adds 0
/// to its history and moves by 0, so standard and lazy updates agree (MXNet always updates
/// lazily). Rows of no elements (a `(rows, 0)` weight) change nothing (MXNet would divide by
/// the zero row length).
///
/// MXNet's Python `GroupAdaGrad` computes a *dense* gradient's step as
/// `lr * g / sqrt(history + eps)` instead; this operator applies its kernel's formula (the
/// documented one) to every gradient, so the two storage types give the same step.
///
/// ```
/// use sparrow_core::update::{group_adagrad_update, GroupAdaGradParams, UpdateArgs};
/// use sparrow_core::{DType, NDArray};
/// let w = NDArray::from_vec(vec![1.0f64, 1.0, 2.0, 2.0], &[2, 2]).unwrap();
/// let history = NDArray::zeros(&[2, 1], DType::F64).unwrap();
/// // Row 1 only: its history becomes mean([3^2, 4^2]) = 12.5.
/// let g = NDArray::row_sparse_from_parts(vec![3.0f64, 4.0], vec![1], &[2, 2]).unwrap();
/// let args = UpdateArgs::new(0.1, GroupAdaGradParams { epsilon: 1e-5 });
/// group_adagrad_update(&w, &g, &history, &args).unwrap();
/// assert_eq!(history.to_vec::<f64>().unwrap(), vec![0.0, 12.5]);
/// let d = 12.5f64.sqrt() + 1e-5;
/// assert_eq!(w.to_vec::<f64>().unwrap(), vec![1.0, 1.0, 2.0 - 0.1 * 3.0 / d, 2.0 - 0.1 * 4.0 / d]);
/// ```
///
/// Fails, before writing anything, as the other update operators do, on a non-zero `wd`, a
/// non-finite or non-positive `epsilon`, a 0-d weight, and a history of another shape.
pub fn group_adagrad_update(
    weight: &NDArray,
    grad: &NDArray,
    history: &NDArray,
    args: &UpdateArgs<GroupAdaGradParams>,
) -> Result<()> {
    const OP: &str = "group_adagrad_update";
    args.check(OP)?;
    let eps = args.hyper.epsilon;
    check_finite(OP, &[("epsilon", eps)])?;
    if eps <= 0.0 {
        // With a zero guard a row whose gradient is all zeros divides 0 by 0.
        return Err(Error::arg(OP, format!("epsilon must be > 0, got {eps}")));
    }
    if args.wd != 0.0 {
        return Err(Error::arg(
            OP,
            format!(
                "weight decay is not supported (as in MXNet), got wd = {}",
                args.wd
            ),
        ));
    }
    let shape = weight.shape();
    let rows = shape.first().copied().unwrap_or(1);
    let states = [("history", history)];
    check_arrays_shaped(OP, weight, grad, &states, Some(&[rows, 1]))?;
    if shape.is_empty() {
        return Err(Error::shape(
            OP,
            "a 0-d weight has no rows; the weight needs at least one dimension",
        ));
    }
    let rule = UpdateRule::GroupAdaGrad { epsilon: eps };
    run(weight, grad, [history], args, rule).map(drop)
}
