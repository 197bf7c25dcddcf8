//! The "write into this buffer" forms of node operators: what a planned graph runs so that a
//! node's output lands in its planned buffer (or over a dying input) instead of a new array.
//!
//! A node has a form when its operator has one and its operands are what the form's kernel
//! takes (dense, one float dtype, the shapes the eager operator would accept); it computes
//! with the same kernel as the eager operator, so the values are the same bits. Nodes without
//! a form run the eager operator (which allocates its output); [`Form::of`] returning `None`
//! is that fallback. The kernels are the storage families' `_into` / `_in_place` methods.

use super::grad::GradFn;
use super::ir::ValueInfo;
use super::op::{Op, ScalarFn, UnaryFn};
use crate::ops::axis::{norm_axis, split3};
use crate::ops::fused::FusedAct;
use crate::ops::BinaryOp;
use crate::storage::{Map, MapGrad, SoftmaxOp};
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
    /// `x . w` of a csr `x` and a dense `(feats, units)` weight.
    DotCsrDense,
    /// The dense 2-D product `op(a) . op(b)`.
    Dot {
        /// Transpose the left operand.
        ta: bool,
        /// Transpose the right operand.
        tb: bool,
    },
    /// Broadcasting arithmetic of inputs 0 and 1.
    Zip(BinaryOp),
    /// `broadcast_to` of input 0 to the output's shape.
    Broadcast,
    /// The sum of input 0 over the axes set in the mask (bit `k`: axis `k`), in one of the
    /// axis patterns whose eager order is fixed (see `PlannedOps::sum_into`).
    Sum {
        /// Reduced axes, one bit each.
        mask: u32,
    },
    /// The mean of input 0 over the axes set in the mask: the sum of [`Form::Sum`], then
    /// scaled by `1 / count` in place (eager: `sum` then `mul_scalar`).
    Mean {
        /// Reduced axes, one bit each.
        mask: u32,
        /// `1 / count` of the reduced elements.
        scale: f64,
    },
    /// A copy of input 0 (a reshape, or a sum over axes of size 1, which eager runs as one).
    Copy,
    /// A fused activation backward of (saved, `g`) (`GradFn::Activation`).
    MapGrad(MapGrad),
    /// The input gradient of `bias_act` from (`y`, `g`).
    BiasActGradInput(FusedAct),
    /// The bias gradient of `bias_act` from (`y`, `g`).
    BiasActGradBias(FusedAct),
    /// Column sums of `g` (the bias gradient of `bias_act` without activation).
    ColumnSums,
    /// The fused sigmoid BCE of logits and labels (inputs 0, 1; the output may have another
    /// shape of the same size).
    SigmoidBce,
    /// The logits' gradient of the sigmoid BCE from (`x`, `z`, `g`).
    SigmoidBceGrad,
    /// The fused softmax cross-entropy of logits and targets (inputs 0, 1) along the last
    /// axis, one value per row.
    SoftmaxCe {
        /// Length of the last axis.
        classes: usize,
        /// The targets are class ids, one per row.
        ids: bool,
    },
    /// The logits' gradient of the softmax cross-entropy from (`x`, `t`, `g`).
    SoftmaxCeGrad {
        /// Length of the last axis.
        classes: usize,
        /// The targets are class ids, one per row.
        ids: bool,
    },
    /// `check_class_ids` of float labels: validated, then copied.
    CheckClassIds {
        /// Number of classes.
        classes: usize,
    },
    /// Dropout's mask (float32 / float64), drawn from the node's stream by the executor
    /// (`Executor` passes the key: a form holds no stream).
    DropoutMask {
        /// Probability of a zero.
        p: f64,
    },
    /// `one_hot` of float ids into their own dtype.
    OneHot {
        /// Number of classes.
        depth: usize,
        /// Value at the id.
        on: f64,
        /// Value elsewhere.
        off: f64,
    },
}

/// The mask of a sum's reduced axes over a `rank`-D input when the planned kernel sums them
/// in eager's order, else `None`: everything below the CPU's parallel threshold (eager folds
/// that on one thread), trailing axes, or leading axes. Axes of size 1 only: eager reshapes.
fn sum_mask(axes: &Option<Vec<i64>>, x: &ValueInfo, out_elems: usize) -> Option<Form> {
    let rank = x.shape.len();
    if rank == 0 || rank > 32 {
        return None;
    }
    let mut mask = 0u32;
    match axes {
        None => {
            mask = if rank == 32 {
                u32::MAX
            } else {
                (1u32 << rank) - 1
            }
        }
        Some(ax) => {
            for &a in ax {
                mask |= 1 << norm_axis("sum", a, rank).ok()?;
            }
        }
    }
    let reduced: Vec<usize> = (0..rank).filter(|k| mask & (1 << k) != 0).collect();
    if reduced.iter().all(|&k| x.shape[k] == 1) {
        return Some(Form::Copy);
    }
    let n: usize = x.shape.iter().product();
    let trailing = reduced
        .iter()
        .enumerate()
        .all(|(i, &a)| a == rank - reduced.len() + i);
    let leading = reduced.iter().enumerate().all(|(i, &a)| a == i);
    let ok = (out_elems == 1 && n < crate::cpu::elementwise::PAR_THRESHOLD)
        || (out_elems > 1 && (trailing || leading));
    ok.then_some(Form::Sum { mask })
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
        if let Op::Dot {
            ta: false,
            tb: false,
        } = op
        {
            let (x, w) = (ins[0], ins[1]);
            if x.stype == SType::Csr {
                let fits = dense_float(w)
                    && dense_float(out)
                    && x.dtype == w.dtype
                    && w.dtype == out.dtype
                    && x.shape.len() == 2
                    && w.shape.len() == 2
                    && w.shape[0] == x.shape[1]
                    && out.shape[..] == [x.shape[0], w.shape[1]];
                return fits.then_some(Form::DotCsrDense);
            }
        }
        if !dense_float(out) || !ins.iter().all(|v| dense_float(v) && v.dtype == out.dtype) {
            return None;
        }
        let same_shape = || ins[0].shape == out.shape;
        match op {
            Op::Unary(u) if same_shape() => Some(Form::Map(unary_map(*u))),
            Op::Scalar(f, s) if same_shape() => Some(Form::Map(scalar_map(*f, *s))),
            // A non-finite parameter is the operator's error: the fallback reports it.
            Op::Act(f) if f.check().is_ok() && same_shape() => Some(Form::Map(Map::Act(*f))),
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
            Op::Binary(b)
                if crate::ops::broadcast_shapes("graph", &ins[0].shape, &ins[1].shape)
                    .is_ok_and(|s| s == out.shape) =>
            {
                Some(Form::Zip(*b))
            }
            Op::BroadcastTo(to) if *to == out.shape && ins[0].shape.len() <= to.len() => {
                Some(Form::Broadcast)
            }
            Op::Reshape(_) => Some(Form::Copy),
            // The operands the fused kernel takes (eager falls back to a formula otherwise).
            Op::SigmoidBce if ins[1].shape == ins[0].shape && same_shape() => {
                Some(Form::SigmoidBce)
            }
            Op::SigmoidBceTo(to)
                if elems(ins[1]) == elems(ins[0])
                    && to.iter().product::<usize>() == elems(ins[0])
                    && *to == out.shape =>
            {
                Some(Form::SigmoidBce)
            }
            Op::SoftmaxCe | Op::SoftmaxCeIds => {
                let ids = matches!(op, Op::SoftmaxCeIds);
                // One loss value per row.
                softmax_ce_classes(ins, ids, elems(out))
                    .map(|classes| Form::SoftmaxCe { classes, ids })
            }
            Op::CheckClassIds { classes, count } if elems(ins[0]) == *count && same_shape() => {
                Some(Form::CheckClassIds { classes: *classes })
            }
            Op::DropoutMask { p, .. }
                if same_shape() && matches!(out.dtype, crate::DType::F32 | crate::DType::F64) =>
            {
                Some(Form::DropoutMask { p: *p })
            }
            Op::OneHot { depth, on, off, .. } if elems(out) == elems(ins[0]) * depth => {
                Some(Form::OneHot {
                    depth: *depth,
                    on: *on,
                    off: *off,
                })
            }
            Op::Sum { axes, .. } => sum_mask(axes, ins[0], elems(out)),
            Op::Mean { axes, .. } => match sum_mask(axes, ins[0], elems(out))? {
                Form::Sum { mask } => {
                    let count: usize = (0..ins[0].shape.len())
                        .filter(|k| mask & (1 << k) != 0)
                        .map(|k| ins[0].shape[k])
                        .product();
                    Some(Form::Mean {
                        mask,
                        scale: 1.0 / count.max(1) as f64,
                    })
                }
                // Reduced axes of size 1: eager's sum is a reshape and nothing is scaled.
                f => Some(f),
            },
            Op::Grad(GradFn::Activation(u)) if ins[0].shape == ins[1].shape => {
                super::grad::activation_grad(*u).map(|(m, _)| Form::MapGrad(m))
            }
            Op::Grad(GradFn::Act(f)) if ins[0].shape == ins[1].shape => {
                Some(Form::MapGrad(MapGrad::Act(*f)))
            }
            Op::Grad(GradFn::BiasActInput(a))
                if ins[0].shape.len() == 2 && ins[1].shape == ins[0].shape =>
            {
                Some(Form::BiasActGradInput(*a))
            }
            Op::Grad(GradFn::BiasActBias(a))
                if ins[0].shape.len() == 2 && ins[1].shape == ins[0].shape =>
            {
                Some(Form::BiasActGradBias(*a))
            }
            Op::Grad(GradFn::ColumnSums) if ins[0].shape.len() == 2 => Some(Form::ColumnSums),
            // The masks of the leaky_relu and clip backwards: the eager maps.
            Op::Grad(GradFn::LeakyReluSlope(s)) if same_shape() => {
                Some(Form::Map(Map::LeakyReluSlope(*s)))
            }
            Op::Grad(GradFn::InsideMask(lo, hi)) if same_shape() => {
                Some(Form::Map(Map::InsideMask(*lo, *hi)))
            }
            Op::Grad(GradFn::SigmoidBce)
                if elems(ins[1]) == elems(ins[0]) && elems(ins[2]) == elems(ins[0]) =>
            {
                Some(Form::SigmoidBceGrad)
            }
            // One head gradient value per row, the output the logits' shape.
            Op::Grad(GradFn::SoftmaxCe { ids }) if same_shape() => {
                softmax_ce_classes(ins, *ids, elems(ins[2]))
                    .map(|classes| Form::SoftmaxCeGrad { classes, ids: *ids })
            }
            _ => None,
        }
    }

    /// True when the form's kernels write into a planned buffer on every backend (the CUDA
    /// backend too): dense products through the BLAS, the elementwise maps, bias +
    /// activation, softmax and copies. Elsewhere than on the host the executor runs the other
    /// forms' eager operators and copies their results into the planned buffers.
    pub(crate) fn has_device_kernels(&self) -> bool {
        matches!(
            self,
            Form::Map(_) | Form::BiasAct(_) | Form::Dot { .. } | Form::Softmax { .. } | Form::Copy
        )
    }

    /// True for the label checks (`check_class_ids`, `one_hot`), which a captured step runs
    /// as copies of label inputs its caller checked on the host ([`super::exec`]).
    pub(crate) fn checks_labels(&self) -> bool {
        matches!(self, Form::CheckClassIds { .. } | Form::OneHot { .. })
    }

    /// True when the form can overwrite its input 0 (same size in and out, each output
    /// element computed from the input element at its place; a copy, such as a reshape, then
    /// has nothing left to do).
    pub(crate) fn in_place_capable(&self) -> bool {
        matches!(self, Form::Map(_) | Form::BiasAct(_) | Form::Copy)
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
            Form::DotCsrDense => {
                let xg = args[0].read();
                let ArrayData::Csr(c) = &*xg else {
                    return Err(Error::arg(OP, "a csr product reads a csr value"));
                };
                with_dense(args[1], |w| {
                    let n = w.shape[1];
                    if w.shape.len() != 2
                        || w.shape[0] != c.shape[1]
                        || out.shape[..] != [c.shape[0], n]
                    {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "dot of {:?} and {:?} into {:?}",
                                c.shape, w.shape, out.shape
                            ),
                        ));
                    }
                    c.data
                        .csr_dense_into(&crate::sparse::csr_index(c), &w.buf, n, &mut out.buf)
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
            Form::Zip(op) => {
                let zip = |a: &DenseData, b: &DenseData, out: &mut DenseData| {
                    a.buf
                        .zip_into(&a.shape, &b.buf, &b.shape, &out.shape, op, &mut out.buf)
                };
                if args[0].same_array(args[1]) {
                    with_dense(args[0], |a| zip(a, a, out))
                } else {
                    with_dense(args[0], |a| with_dense(args[1], |b| zip(a, b, out)))
                }
            }
            Form::Broadcast => with_dense(args[0], |x| {
                x.buf.broadcast_into(&x.shape, &out.shape, &mut out.buf)
            }),
            Form::Copy => with_dense(args[0], |x| {
                same_len(x, out)?;
                x.buf.copy_into(&mut out.buf)
            }),
            Form::Sum { mask } => with_dense(args[0], |x| {
                let axes: smallvec::SmallVec<[usize; 8]> = (0..x.shape.len())
                    .filter(|k| mask & (1 << k) != 0)
                    .collect();
                x.buf.sum_into(&x.shape, &axes, &mut out.buf)
            }),
            Form::Mean { mask, scale } => with_dense(args[0], |x| {
                let axes: smallvec::SmallVec<[usize; 8]> = (0..x.shape.len())
                    .filter(|k| mask & (1 << k) != 0)
                    .collect();
                x.buf.sum_into(&x.shape, &axes, &mut out.buf)?;
                out.buf.map_in_place(Map::MulScalar(scale))
            }),
            Form::MapGrad(m) => with_dense(args[0], |s| {
                with_dense(args[1], |g| g.buf.map_grad_into(&s.buf, m, &mut out.buf))
            }),
            Form::BiasActGradInput(act) => with_dense(args[0], |y| {
                with_dense(args[1], |g| {
                    g.buf.bias_act_grad_input_into(&y.buf, act, &mut out.buf)
                })
            }),
            Form::BiasActGradBias(act) => with_dense(args[0], |y| {
                with_dense(args[1], |g| {
                    let units = y.shape[1];
                    g.buf
                        .bias_act_grad_bias_into(&y.buf, units, act, &mut out.buf)
                })
            }),
            Form::ColumnSums => with_dense(args[0], |g| {
                g.buf.column_sums_into(g.shape[1], &mut out.buf)
            }),
            Form::CheckClassIds { classes } => with_dense(args[0], |x| {
                x.buf.check_class_ids_into(classes, &mut out.buf)
            }),
            // The executor draws the key and writes the mask itself (`Executor::run_to`).
            Form::DropoutMask { .. } => Err(Error::arg(
                OP,
                "a dropout mask is written by the executor, which draws its key",
            )),
            Form::OneHot { depth, on, off } => with_dense(args[0], |x| {
                x.buf.one_hot_into(depth, on, off, &mut out.buf)
            }),
            Form::SigmoidBce => with_dense(args[0], |x| {
                with_dense(args[1], |z| x.buf.sigmoid_bce_into(&z.buf, &mut out.buf))
            }),
            Form::SigmoidBceGrad => with_dense(args[0], |x| {
                with_dense(args[1], |z| {
                    with_dense(args[2], |g| {
                        g.buf.sigmoid_bce_grad_into(&x.buf, &z.buf, &mut out.buf)
                    })
                })
            }),
            Form::SoftmaxCe { classes, ids } => with_dense(args[0], |x| {
                with_dense(args[1], |t| {
                    x.buf.softmax_ce_into(&t.buf, classes, ids, &mut out.buf)
                })
            }),
            Form::SoftmaxCeGrad { classes, ids } => with_dense(args[0], |x| {
                with_dense(args[1], |t| {
                    with_dense(args[2], |g| {
                        g.buf
                            .softmax_ce_grad_into(&x.buf, &t.buf, classes, ids, &mut out.buf)
                    })
                })
            }),
        }
    }

    /// Compute the node over `out`, which holds its input 0 (moved there by the executor);
    /// `args` are all its inputs (input 0's handle no longer holds the values and is not read).
    pub(crate) fn run_in_place(&self, args: &[&NDArray], out: &mut DenseData) -> Result<()> {
        match *self {
            Form::Map(m) => out.buf.map_in_place(m),
            // The buffer holds the input's values, which are the output's.
            Form::Copy => Ok(()),
            Form::BiasAct(act) => {
                if out.shape.len() != 2 {
                    return Err(Error::shape(OP, "bias_act in place needs a 2-D buffer"));
                }
                let units = out.shape[1];
                with_dense(args[1], |b| out.buf.bias_act_in_place(&b.buf, units, act))
            }
            _ => Err(Error::arg(OP, "this node cannot run in place")),
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

/// The class count of a fused softmax cross-entropy node of logits `ins[0]` and targets
/// `ins[1]` (dense rows of the logits' shape, or with `ids` one class id per row) whose other
/// value `per_row` has one element per row; `None` when they do not fit so.
fn softmax_ce_classes(ins: &[&ValueInfo], ids: bool, per_row: usize) -> Option<usize> {
    let (x, t) = (ins[0], ins[1]);
    let classes = x.shape.last().copied().filter(|&c| c > 0)?;
    let rows = elems(x) / classes;
    let targets_fit = if ids {
        elems(t) == rows
    } else {
        t.shape == x.shape
    };
    (targets_fit && per_row == rows).then_some(classes)
}

/// Number of elements of a value.
fn elems(v: &ValueInfo) -> usize {
    v.shape.iter().product()
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
