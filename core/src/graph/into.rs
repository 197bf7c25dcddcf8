//! The "write into this buffer" forms of node operators: what a planned graph runs so that a
//! node's output lands in its planned buffer (or over a dying input) instead of a new array.
//!
//! A node has a form when its operator has one and its operands are what the form's kernel
//! takes (dense, one float dtype, the shapes the eager operator would accept); it computes
//! with the same kernel as the eager operator, so the values are the same bits. Nodes without
//! a form run the eager operator (which allocates its output); [`Form::of`] returning `None`
//! is that fallback. The kernels are the storage families' `_into` / `_in_place` methods.

use super::ir::ValueInfo;
use super::op::{Op, ScalarFn, UnaryFn};
use crate::ops::axis::{norm_axis, split3};
use crate::ops::fused::FusedAct;
use crate::storage::{Map, SoftmaxOp};
use crate::{ArrayData, DenseData, Error, NDArray, Result, SType};

const OP: &str = "graph executor";

/// How a node writes its output into a given buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Form {
    /// An elementwise map of input 0 (unary functions, scalar arithmetic, clip).
    Map(Map),
    /// `act(y + b)` of a dense `(rows, units)` product `y` (input 0) and a `(units,)` bias.
    BiasAct(Option<FusedAct>),
    /// softmax or log_softmax of input 0 along an axis.
    Softmax {
        /// Which of the two.
        op: SoftmaxOp,
        /// The axis, as the node gives it (normalized against the input's rank at the run).
        axis: i64,
    },
    /// `x . w^T` of a csr `x` and a dense `(units, feats)` weight (a Dense layer on csr).
    DotCsrDenseT,
    /// The dense 2-D product `op(a) . op(b)`.
    Dot {
        /// Transpose the left operand.
        ta: bool,
        /// Transpose the right operand.
        tb: bool,
    },
}

/// The kernel enum of a unary node, as the eager operator names it.
fn unary_map(u: UnaryFn) -> Map {
    match u {
        UnaryFn::Neg => Map::Neg,
        UnaryFn::Exp => Map::Exp,
        UnaryFn::Log => Map::Log,
        UnaryFn::Sqrt => Map::Sqrt,
        UnaryFn::Square => Map::Square,
        UnaryFn::Abs => Map::Abs,
        UnaryFn::Sign => Map::Sign,
        UnaryFn::Sigmoid => Map::Sigmoid,
        UnaryFn::Relu => Map::Relu,
        UnaryFn::Tanh => Map::Tanh,
        UnaryFn::Softrelu => Map::Softrelu,
    }
}

/// The kernel enum of a scalar node (`sub_scalar(s)` is `add_scalar(-s)`, as eagerly).
fn scalar_map(f: ScalarFn, s: f64) -> Map {
    match f {
        ScalarFn::Add => Map::AddScalar(s),
        ScalarFn::Sub => Map::AddScalar(-s),
        ScalarFn::RSub => Map::RsubScalar(s),
        ScalarFn::Mul => Map::MulScalar(s),
        ScalarFn::Div => Map::DivScalar(s),
        ScalarFn::RDiv => Map::RdivScalar(s),
        ScalarFn::Pow => Map::PowScalar(s),
        ScalarFn::Maximum => Map::MaximumScalar(s),
        ScalarFn::Minimum => Map::MinimumScalar(s),
        ScalarFn::LeakyRelu => Map::LeakyRelu(s),
    }
}

impl Form {
    /// The form of `op` applied to values `ins` giving `out`, or `None` where the node runs
    /// the eager operator (no form for the operator, or operands its kernel does not take).
    pub(crate) fn of(op: &Op, ins: &[&ValueInfo], out: &ValueInfo) -> Option<Form> {
        let dense_float = |v: &ValueInfo| v.stype == SType::Dense && v.dtype.is_float();
        if let Op::DotCsrDenseT = op {
            let (x, w) = (ins[0], ins[1]);
            let fits = x.stype == SType::Csr
                && dense_float(w)
                && dense_float(out)
                && x.dtype == w.dtype
                && w.dtype == out.dtype
                && x.shape.len() == 2
                && w.shape.len() == 2
                && w.shape[1] == x.shape[1]
                && out.shape[..] == [x.shape[0], w.shape[0]];
            return fits.then_some(Form::DotCsrDenseT);
        }
        if !dense_float(out) || !ins.iter().all(|v| dense_float(v) && v.dtype == out.dtype) {
            return None;
        }
        let same_shape = || ins[0].shape == out.shape;
        match op {
            Op::Unary(u) if same_shape() => Some(Form::Map(unary_map(*u))),
            Op::Scalar(f, s) if same_shape() => Some(Form::Map(scalar_map(*f, *s))),
            // lo > hi is the operator's error: the fallback reports it.
            Op::Clip(lo, hi) if lo <= hi && same_shape() => Some(Form::Map(Map::Clip(*lo, *hi))),
            Op::BiasAct { act, .. }
                if ins[0].shape.len() == 2
                    && ins[1].shape.len() == 1
                    && ins[1].shape[0] == ins[0].shape[1]
                    && same_shape() =>
            {
                Some(Form::BiasAct(*act))
            }
            Op::Softmax(axis) if same_shape() => Some(Form::Softmax {
                op: SoftmaxOp::Softmax,
                axis: *axis,
            }),
            Op::LogSoftmax(axis) if same_shape() => Some(Form::Softmax {
                op: SoftmaxOp::LogSoftmax,
                axis: *axis,
            }),
            Op::Dot { ta, tb } if ins[0].shape.len() == 2 && ins[1].shape.len() == 2 => {
                Some(Form::Dot { ta: *ta, tb: *tb })
            }
            _ => None,
        }
    }

    /// True when the form can overwrite its input 0 (same size in and out, each output
    /// element computed from the input element at its place).
    pub(crate) fn in_place_capable(&self) -> bool {
        matches!(self, Form::Map(_) | Form::BiasAct(_))
    }

    /// Compute the node from `args` (its inputs, in order) into `out`, a dense buffer of the
    /// output's shape and dtype.
    pub(crate) fn write_into(&self, args: &[&NDArray], out: &mut DenseData) -> Result<()> {
        match *self {
            Form::Map(m) => with_dense(args[0], |x| {
                same_len(x, out)?;
                x.buf.map_into(m, &mut out.buf)
            }),
            Form::DotCsrDenseT => {
                let xg = args[0].read();
                let ArrayData::Csr(c) = &*xg else {
                    return Err(Error::arg(OP, "dot_csr_dense_t reads a csr value"));
                };
                with_dense(args[1], |w| {
                    let (rows, units) = (c.shape[0], w.shape[0]);
                    if w.shape.len() != 2
                        || w.shape[1] != c.shape[1]
                        || out.shape[..] != [rows, units]
                    {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "dot_csr_dense_t of {:?} and {:?} into {:?}",
                                c.shape, w.shape, out.shape
                            ),
                        ));
                    }
                    c.data.csr_dense_t_into(
                        &crate::sparse::csr_index(c),
                        &w.buf,
                        units,
                        &mut out.buf,
                    )
                })
            }
            Form::Softmax { op, axis } => with_dense(args[0], |x| {
                same_len(x, out)?;
                let ax = norm_axis(op.name(), axis, x.shape.len())?;
                x.buf.softmax_into(split3(&x.shape, ax), op, &mut out.buf)
            }),
            Form::BiasAct(act) => with_dense(args[0], |y| {
                same_len(y, out)?;
                with_dense(args[1], |b| {
                    y.buf.bias_act_into(&b.buf, y.shape[1], act, &mut out.buf)
                })
            }),
            Form::Dot { ta, tb } => {
                let dot = |a: &DenseData, b: &DenseData, out: &mut DenseData| -> Result<()> {
                    let mm = crate::ops::dot_geometry(a, b, ta, tb)?;
                    if out.shape[..] != [mm.m, mm.n] {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "dot makes ({}, {}), the planned buffer is {:?}",
                                mm.m, mm.n, out.shape
                            ),
                        ));
                    }
                    a.buf.matmul_into(&b.buf, &mm, &mut out.buf)
                };
                if args[0].same_array(args[1]) {
                    // One lock for `x . x^T`.
                    with_dense(args[0], |a| dot(a, a, out))
                } else {
                    with_dense(args[0], |a| with_dense(args[1], |b| dot(a, b, out)))
                }
            }
        }
    }

    /// Compute the node over `out`, which holds its input 0 (moved there by the executor);
    /// `args` are all its inputs (input 0's handle no longer holds the values and is not read).
    pub(crate) fn run_in_place(&self, args: &[&NDArray], out: &mut DenseData) -> Result<()> {
        match *self {
            Form::Map(m) => out.buf.map_in_place(m),
            Form::BiasAct(act) => {
                if out.shape.len() != 2 {
                    return Err(Error::shape(OP, "bias_act in place needs a 2-D buffer"));
                }
                let units = out.shape[1];
                with_dense(args[1], |b| out.buf.bias_act_in_place(&b.buf, units, act))
            }
            Form::Dot { .. } | Form::Softmax { .. } | Form::DotCsrDenseT => {
                Err(Error::arg(OP, "this node cannot run in place"))
            }
        }
    }
}

/// Run `f` on the dense storage of `a` (read-locked for the call).
fn with_dense<R>(a: &NDArray, f: impl FnOnce(&DenseData) -> Result<R>) -> Result<R> {
    let g = a.read();
    match &*g {
        ArrayData::Dense(d) => f(d),
        _ => Err(Error::arg(OP, "a planned node read a sparse value")),
    }
}

/// `x` has as many elements as `out`.
fn same_len(x: &DenseData, out: &DenseData) -> Result<()> {
    if x.buf.len() != out.buf.len() {
        return Err(Error::shape(
            OP,
            format!(
                "input of {} elements, planned buffer of {}",
                x.buf.len(),
                out.buf.len()
            ),
        ));
    }
    Ok(())
}
