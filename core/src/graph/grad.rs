//! The backward of a traced graph as graph nodes: each forward operator's vector-Jacobian
//! product written with graph operators ([`Op::Dot`], [`Op::Reshape`], [`Op::Binary`], ...)
//! and, where the eager backward runs a fused kernel of its own, a [`GradFn`] node calling
//! that same kernel. Written as nodes (not recorded from the tape's closures) because the tape's
//! closures capture this step's arrays and call crate-private kernels with no graph hook: a
//! node list is planned with the forward ([`crate::graph::MemoryPlan`] over the joint graph,
//! so an activation the backward reads stays live and the rest share buffers) and its products
//! run through the executor's write-into forms like forward products.
//!
//! Each rule mirrors the eager backward of its operator (same kernels, same operand order), so
//! gradients are the eager ones; an operator without a rule here is an error naming it (the
//! caller trains that signature eagerly).

use super::ir::{Graph, Node, ParamInfo, ValueInfo};
use super::op::{act_name, AttrValue, CmpFn, Op, ScalarFn, UnaryFn};
use crate::ops::activation::fused_map_grad;
use crate::ops::fused::FusedAct;
use crate::ops::{ActFn, BinaryOp};
use crate::storage::{Map, MapGrad};
use crate::{ArrayData, Error, NDArray, Result, SType};

const OP: &str = "graph backward";

/// A backward step that runs a kernel of the eager backward directly (no public operator
/// computes it).
#[derive(Debug, Clone, PartialEq)]
pub enum GradFn {
    /// `g * act'(y)` from the output `y` of `bias_act` and its head gradient `g`
    /// (inputs `y, g`): the fused kernel's input gradient.
    BiasActInput(FusedAct),
    /// The bias gradient of `bias_act`: column sums of `g * act'(y)` (inputs `y, g`).
    BiasActBias(FusedAct),
    /// Column sums of a dense `(rows, units)` `g`: the bias gradient of `bias_add`.
    ColumnSums,
    /// `x^T . g` as row_sparse for a csr `x` (inputs `x, g`): the weight gradient of
    /// `dot(csr, dense)`.
    CsrTDense,
    /// `g^T . x`, dense `(units, features)`, for a csr `x` (inputs `x, g`): the weight
    /// gradient of `dot_csr_dense_t`.
    CsrDenseTWeight,
    /// `g (sigmoid(x) - z)` in `x`'s shape (inputs `x, z, g`): the logits' gradient of the
    /// fused sigmoid binary cross-entropy.
    SigmoidBce,
    /// `g (softmax(x) sum(t) - t)` along the last axis (inputs `x, t, g`, `g` one value per
    /// row): the logits' gradient of the fused softmax cross-entropy; with `ids`, `t` holds
    /// one class id per row (its one-hot row).
    SoftmaxCe {
        /// `t` holds class ids.
        ids: bool,
    },
    /// The fused backward of an activation map (inputs: the saved array, then `g`): from the
    /// output for `sigmoid` and `tanh`, from the input for `relu` and `softrelu`.
    Activation(UnaryFn),
    /// The fused backward of an activation of `ops::activation` (inputs: its input `x`, then
    /// `g`).
    Act(ActFn),
    /// The slope of `leaky_relu(x, s)` at each `x` (1 where positive, else `s`; input `x`):
    /// the eager backward's `LeakyReluSlope` map, multiplied into `g` by a `mul` node.
    LeakyReluSlope(f64),
    /// 1 where `lo <= x <= hi`, else 0 (input `x`): the eager backward's mask of `clip`.
    InsideMask(f64, f64),
    /// The row_sparse gradient of an embedding table of `(vocab, dim)` (inputs: the ids, `g`):
    /// the rows of `g` summed per id, as the eager backward does.
    Embedding {
        /// Rows of the table.
        vocab: usize,
        /// Columns of the table.
        dim: usize,
    },
    /// The data gradient of a convolution of an `x_shape` input (inputs: the output's
    /// gradient, the weight): the eager backward's transposed convolution.
    ConvData {
        /// The convolution's parameters.
        params: crate::ops::ConvParams,
        /// The shape of its input (a strided convolution maps several to one output size).
        x_shape: Vec<usize>,
    },
    /// The input gradient of a pooling (inputs: its input, the output's gradient): the eager
    /// backward's kernel.
    PoolInput(crate::ops::PoolParams),
    /// The weight gradient of a convolution (inputs: an array shaped as its input, one
    /// shaped as its output) or, `transposed`, of a transposed convolution (inputs: its
    /// output's gradient, its input).
    ConvWeight {
        /// The convolution's parameters.
        params: crate::ops::ConvParams,
        /// The weight's shape.
        w_shape: Vec<usize>,
        /// Of a transposed convolution.
        transposed: bool,
    },
    /// The input gradient of a slice (input: the slice's gradient): zeros of `in_shape` with
    /// the gradient at the slice's positions, as the eager backward scatters it.
    SliceAxis {
        /// The sliced axis.
        axis: usize,
        /// First position.
        begin: usize,
        /// Distance between positions.
        step: i64,
        /// Number of positions.
        len: usize,
        /// The sliced array's shape.
        in_shape: Vec<usize>,
    },
    /// The operands' gradients of a recurrent sequence (inputs: the gradient of its saved
    /// array, the saved array, the recurrent weight), flattened and concatenated in operand
    /// order into one 1-D array (`ops::rnn::rnn_saved_grads_flat`).
    Rnn {
        /// The recurrence.
        mode: crate::ops::rnn::RnnMode,
        /// The reversed direction.
        reverse: bool,
        /// No state operands (no state gradients).
        zero_state: bool,
    },
}

/// The fused backward kernel of an activation, and whether it reads the output (else the
/// input).
pub(crate) fn activation_grad(u: UnaryFn) -> Option<(MapGrad, bool)> {
    match u {
        UnaryFn::Sigmoid => Some((MapGrad::SigmoidFromOutput, true)),
        UnaryFn::Tanh => Some((MapGrad::TanhFromOutput, true)),
        UnaryFn::Relu => Some((MapGrad::ReluFromInput, false)),
        UnaryFn::Softrelu => Some((MapGrad::SoftreluFromInput, false)),
        _ => None,
    }
}

impl GradFn {
    /// Number of inputs.
    pub fn arity(&self) -> usize {
        match self {
            GradFn::ColumnSums
            | GradFn::LeakyReluSlope(_)
            | GradFn::InsideMask(..)
            | GradFn::SliceAxis { .. } => 1,
            GradFn::SigmoidBce | GradFn::SoftmaxCe { .. } | GradFn::Rnn { .. } => 3,
            _ => 2,
        }
    }

    /// The node's name (training graphs are not exported; the name is for messages).
    pub fn name(&self) -> &'static str {
        match self {
            GradFn::BiasActInput(_) => "bias_act_grad_input",
            GradFn::BiasActBias(_) => "bias_act_grad_bias",
            GradFn::ColumnSums => "column_sums",
            GradFn::CsrTDense => "dot_csr_t_dense_rsp",
            GradFn::CsrDenseTWeight => "dot_csr_dense_t_grad_weight",
            GradFn::SigmoidBce => "sigmoid_bce_logits_grad",
            GradFn::SoftmaxCe { ids: false } => "softmax_ce_logits_grad",
            GradFn::SoftmaxCe { ids: true } => "softmax_ce_ids_grad",
            GradFn::Activation(_) | GradFn::Act(_) => "activation_grad",
            GradFn::LeakyReluSlope(_) => "leaky_relu_slope",
            GradFn::InsideMask(..) => "inside_mask",
            GradFn::Embedding { .. } => "embedding_grad",
            GradFn::ConvData { .. } => "convolution_grad_data",
            GradFn::ConvWeight { .. } => "convolution_grad_weight",
            GradFn::PoolInput(_) => "pooling_grad",
            GradFn::SliceAxis { .. } => "slice_axis_grad",
            GradFn::Rnn { .. } => "rnn_sequence_grad",
        }
    }

    /// Attributes (the activation where there is one).
    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        match self {
            GradFn::BiasActInput(a) | GradFn::BiasActBias(a) => {
                vec![("act", AttrValue::Str(act_name(Some(*a)).into()))]
            }
            GradFn::Activation(u) => vec![("act", AttrValue::Str(u.name().into()))],
            GradFn::Act(f) => {
                let mut a = vec![("act", AttrValue::Str(f.name().into()))];
                a.extend(f.param().map(|(k, v)| (k, AttrValue::Float(v))));
                a
            }
            GradFn::LeakyReluSlope(s) => vec![("slope", AttrValue::Float(*s))],
            GradFn::InsideMask(lo, hi) => vec![
                ("a_min", AttrValue::Float(*lo)),
                ("a_max", AttrValue::Float(*hi)),
            ],
            GradFn::Embedding { vocab, dim } => vec![
                ("vocab", AttrValue::Int(*vocab as i64)),
                ("dim", AttrValue::Int(*dim as i64)),
            ],
            _ => vec![],
        }
    }

    /// Compute the step on `x` (as many arrays as [`GradFn::arity`]).
    pub fn apply(&self, x: &[NDArray]) -> Result<NDArray> {
        match *self {
            GradFn::ConvData {
                ref params,
                ref x_shape,
            } => crate::ops::conv::conv_data_grad(&x[0], &x[1], params, x_shape),
            GradFn::ConvWeight {
                ref params,
                ref w_shape,
                transposed,
            } => crate::ops::conv::conv_weight_grad(&x[0], &x[1], params, w_shape, transposed),
            GradFn::PoolInput(ref params) => {
                crate::ops::pool::pool_input_grad(&x[0], &x[1], params)
            }
            GradFn::SliceAxis {
                axis,
                begin,
                step,
                len,
                ref in_shape,
            } => crate::ops::index::slice_run_grad(&x[0], in_shape, axis, begin, step, len),
            GradFn::Rnn {
                mode,
                reverse,
                zero_state,
            } => crate::ops::rnn::rnn_saved_grads_flat(
                &x[0], &x[1], &x[2], mode, reverse, zero_state,
            ),
            GradFn::LeakyReluSlope(s) => x[0].map_raw(Map::LeakyReluSlope(s)),
            GradFn::InsideMask(lo, hi) => x[0].map_raw(Map::InsideMask(lo, hi)),
            GradFn::Embedding { vocab, dim } => {
                crate::sparse::embedding_grad(&x[0], &x[1], [vocab, dim])
            }
            GradFn::Activation(u) => {
                let (op, _) = activation_grad(u).ok_or_else(|| {
                    Error::arg(OP, format!("'{}' has no fused backward", u.name()))
                })?;
                fused_map_grad(&x[0], &x[1], op)
            }
            GradFn::Act(f) => fused_map_grad(&x[0], &x[1], MapGrad::Act(f)),
            GradFn::BiasActInput(act) | GradFn::BiasActBias(act) => {
                let want_input = matches!(self, GradFn::BiasActInput(_));
                x[0].with_dense2(&x[1], |y, g| {
                    if y.shape.len() != 2 || g.shape != y.shape {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "bias_act backward of an output {:?} with a gradient {:?}",
                                y.shape, g.shape
                            ),
                        ));
                    }
                    let units = y.shape[1];
                    let (gp, db) = g.buf.bias_act_grad(&y.buf, units, act)?;
                    if want_input {
                        NDArray::from_buffer(gp, &y.shape)
                    } else {
                        NDArray::from_buffer(db, &[units])
                    }
                })
            }
            GradFn::ColumnSums => x[0].with_dense(|g| {
                if g.shape.len() != 2 {
                    return Err(Error::shape(
                        OP,
                        format!("column sums of a {:?} gradient", g.shape),
                    ));
                }
                let units = g.shape[1];
                NDArray::from_buffer(g.buf.column_sums(units)?, &[units])
            }),
            GradFn::CsrTDense => crate::sparse::csr_t_dense_of(&x[0], &x[1]),
            GradFn::CsrDenseTWeight => {
                let (xs, gs) = (x[0].shape(), x[1].shape());
                if xs.len() != 2 || gs.len() != 2 || gs[0] != xs[0] {
                    return Err(Error::shape(
                        OP,
                        format!("dot_csr_dense_t weight gradient of {xs:?} and {gs:?}"),
                    ));
                }
                crate::sparse::csr_dense_t_grad(&x[0], &x[1], [gs[1], xs[1]])
            }
            GradFn::SigmoidBce => {
                let g = x[2].read();
                let ArrayData::Dense(gd) = &*g else {
                    return Err(Error::arg(
                        OP,
                        "sigmoid_bce backward needs a dense gradient",
                    ));
                };
                x[0].with_dense2(&x[1], |xd, zd| {
                    if gd.buf.len() != xd.buf.len() || zd.buf.len() != xd.buf.len() {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "sigmoid_bce backward of {:?}, {:?} with a gradient {:?}",
                                xd.shape, zd.shape, gd.shape
                            ),
                        ));
                    }
                    let (dx, _) = gd.buf.sigmoid_bce_grad(&xd.buf, &zd.buf, false)?;
                    NDArray::from_buffer(dx, &xd.shape)
                })
            }
            GradFn::SoftmaxCe { ids } => {
                let (xs, ts, gs) = (x[0].shape(), x[1].shape(), x[2].shape());
                let rows = xs.iter().rev().skip(1).product::<usize>();
                let targets_fit = if ids {
                    ts.iter().product::<usize>() == rows
                } else {
                    xs == ts
                };
                if !targets_fit
                    || xs.last().is_none_or(|&c| c == 0)
                    || gs.iter().product::<usize>() != rows
                {
                    return Err(Error::shape(
                        OP,
                        format!("softmax_ce backward of {xs:?}, {ts:?} with a gradient {gs:?}"),
                    ));
                }
                let host = [&x[0], &x[1], &x[2]]
                    .iter()
                    .all(|a| a.device() == crate::Device::Cpu && a.stype() == crate::SType::Dense);
                if !host {
                    // Elsewhere than on the host, the formula through general operators.
                    return crate::ops::fused::softmax_ce_grad_composite(&x[0], &x[1], ids, &x[2]);
                }
                let classes = xs[xs.len() - 1];
                let g = x[2].read();
                let ArrayData::Dense(gd) = &*g else {
                    return Err(Error::arg(OP, "softmax_ce backward needs a dense gradient"));
                };
                x[0].with_dense2(&x[1], |xd, td| {
                    let dx = gd.buf.softmax_ce_grad(&xd.buf, &td.buf, classes, ids)?;
                    NDArray::from_buffer(dx, &xd.shape)
                })
            }
        }
    }
}

/// A forward graph extended with its backward: the joint graph, and where each parameter's
/// gradient is among its outputs.
#[derive(Debug, Clone)]
pub struct Backward {
    /// Inputs: the forward's, then one head gradient per forward output (`head_grad`, or
    /// `head_grad{k}` for several); outputs: the forward's outputs, then the inputs'
    /// gradients, then the parameters'.
    pub graph: Graph,
    /// Per forward input: the index among the joint graph's outputs of its gradient (`None`:
    /// not asked for, or the output does not depend on it).
    pub input_grad: Vec<Option<usize>>,
    /// Per forward parameter (in [`Graph::params`] order): the index among the joint graph's
    /// outputs of its gradient (`None`: the output does not depend on it).
    pub param_grad: Vec<Option<usize>>,
    /// Number of forward nodes (the joint graph's first nodes).
    pub forward_nodes: usize,
}

/// Builder state: the joint graph's values and nodes, and each value's gradient so far.
struct Builder {
    values: Vec<ValueInfo>,
    nodes: Vec<Node>,
    grad: Vec<Option<usize>>,
}

impl Builder {
    fn push(&mut self, op: Op, inputs: Vec<usize>, info: ValueInfo) -> usize {
        let v = self.values.len();
        self.values.push(info);
        self.grad.push(None);
        self.nodes.push(Node {
            op,
            inputs,
            output: v,
        });
        v
    }

    /// A dense value of `v`'s shape and dtype.
    fn dense_like(&self, v: usize) -> ValueInfo {
        dense_info(&self.values[v].shape, &self.values[v])
    }

    /// Add `g` to value `v`'s gradient (a value read by several nodes sums their gradients,
    /// as the tape's accumulation does, in the same order: later readers first).
    fn add_grad(&mut self, v: usize, g: usize) -> std::result::Result<(), String> {
        match self.grad[v] {
            None => self.grad[v] = Some(g),
            Some(prev) => {
                let (a, b) = (&self.values[prev], &self.values[g]);
                if a.stype != SType::Dense || b.stype != SType::Dense || a.shape != b.shape {
                    return Err(format!(
                        "a value read by several nodes gets {} and {} gradients of shapes \
                         {:?} and {:?}; only dense gradients of one shape are summed in a graph",
                        super::op::stype_name(a.stype),
                        super::op::stype_name(b.stype),
                        a.shape,
                        b.shape
                    ));
                }
                let info = self.dense_like(v);
                let s = self.push(Op::Binary(BinaryOp::Add), vec![prev, g], info);
                self.grad[v] = Some(s);
            }
        }
        Ok(())
    }

    /// `g` summed to `shape` as `ops::sum_to_shape` does: over the broadcast axes with
    /// `keepdims`, then reshaped (no nodes when `g` has the shape already).
    fn sum_to_shape(&mut self, g: usize, shape: &[usize]) -> usize {
        let gs = self.values[g].shape.clone();
        if gs == shape {
            return g;
        }
        let axes: Vec<i64> = crate::ops::broadcast::reduced_axes(shape, &gs)
            .into_iter()
            .map(|a| a as i64)
            .collect();
        let keep: Vec<usize> = gs
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&(i as i64)) { 1 } else { d })
            .collect();
        let info = dense_info(&keep, &self.values[g]);
        let s = self.push(
            Op::Sum {
                axes: Some(axes),
                keepdims: true,
            },
            vec![g],
            info,
        );
        self.reshape(s, shape)
    }

    /// `g` reshaped to `shape` (no node when it already has it).
    /// The weight gradient of a convolution (`transposed`: of a transposed one) from
    /// `inputs` (see [`GradFn::ConvWeight`]), added to the gradient of the weight `w_id`.
    fn conv_weight_grad(
        &mut self,
        params: &crate::ops::ConvParams,
        w: &ValueInfo,
        transposed: bool,
        inputs: [usize; 2],
        w_id: usize,
    ) -> std::result::Result<(), String> {
        let gw = self.push(
            Op::Grad(GradFn::ConvWeight {
                params: params.clone(),
                w_shape: w.shape.clone(),
                transposed,
            }),
            inputs.to_vec(),
            dense_info(&w.shape, w),
        );
        self.add_grad(w_id, gw)
    }

    fn reshape(&mut self, g: usize, shape: &[usize]) -> usize {
        if self.values[g].shape == shape {
            return g;
        }
        let info = dense_info(shape, &self.values[g]);
        self.push(Op::Reshape(shape.to_vec()), vec![g], info)
    }
}

fn dense_info(shape: &[usize], like: &ValueInfo) -> ValueInfo {
    ValueInfo {
        shape: shape.to_vec(),
        dtype: like.dtype,
        stype: SType::Dense,
        bytes: shape.iter().product::<usize>() * like.dtype.size_of(),
    }
}

/// Operators whose output carries no gradient (labels, masks, validation).
fn stops_gradient(op: &Op) -> bool {
    matches!(
        op,
        Op::Detach
            | Op::OneHot { .. }
            | Op::CheckClassIds { .. }
            | Op::DropoutMask { .. }
            | Op::RunningUpdate { .. }
            | Op::Compare(_)
            | Op::CompareScalar(..)
    )
}

/// The axes of `op`'s reduction over a `rank`-D input, normalized (`None`: all).
fn reduced_keep_shape(shape: &[usize], axes: &Option<Vec<i64>>) -> Result<Vec<usize>> {
    let rank = shape.len() as i64;
    let mut keep = shape.to_vec();
    match axes {
        None => keep.iter_mut().for_each(|d| *d = 1),
        Some(ax) => {
            for &a in ax {
                let n = if a < 0 { a + rank } else { a };
                if n < 0 || n >= rank {
                    return Err(Error::index(
                        OP,
                        format!("axis {a} out of range for {rank}-D"),
                    ));
                }
                keep[n as usize] = 1;
            }
        }
    }
    Ok(keep)
}

/// The forward graph `fwd` (one output, the loss) extended with the backward of that output
/// for a head gradient given as an extra input, with respect to every parameter. An operator
/// on the gradient path without a rule is an `Err` naming it.
pub fn backward_graph(fwd: &Graph) -> std::result::Result<Backward, String> {
    if fwd.outputs().len() != 1 {
        return Err(format!(
            "a training graph has one output (the loss), this one has {}",
            fwd.outputs().len()
        ));
    }
    let params = vec![true; fwd.params().len()];
    backward_graph_wrt(fwd, &vec![false; fwd.inputs().len()], &params)
}

/// [`backward_graph`] with respect to the inputs and parameters marked in `wrt_inputs` and
/// `wrt_params` (the others get no gradient, and the operators reading only them need no
/// rule). The joint graph's outputs: the forward's, then the gradients of the marked inputs,
/// then those of the marked parameters ([`Backward::input_grad`], [`Backward::param_grad`]).
pub fn backward_graph_wrt(
    fwd: &Graph,
    wrt_inputs: &[bool],
    wrt_params: &[bool],
) -> std::result::Result<Backward, String> {
    if wrt_inputs.len() != fwd.inputs().len() || wrt_params.len() != fwd.params().len() {
        return Err(format!(
            "gradients asked for {} inputs and {} parameters of a graph with {} and {}",
            wrt_inputs.len(),
            wrt_params.len(),
            fwd.inputs().len(),
            fwd.params().len()
        ));
    }
    let nv = fwd.values().len();
    // Which values depend on a parameter (and so need a gradient).
    let mut need = vec![false; nv];
    for (&v, _) in fwd.inputs().iter().zip(wrt_inputs).filter(|(_, &w)| w) {
        need[v] = true;
    }
    for (p, _) in fwd.params().iter().zip(wrt_params).filter(|(_, &w)| w) {
        need[p.value] = true;
    }
    for n in fwd.nodes() {
        need[n.output] = !stops_gradient(&n.op) && n.inputs.iter().any(|&x| need[x]);
    }
    let outs = fwd.outputs().to_vec();
    let mut b = Builder {
        values: fwd.values().to_vec(),
        nodes: fwd.nodes().to_vec(),
        grad: vec![None; nv],
    };
    // One head gradient per output (an output listed twice sums its two).
    let mut heads = Vec::with_capacity(outs.len());
    for &o in &outs {
        let info = fwd.values()[o].clone();
        if info.stype != SType::Dense || !info.dtype.is_float() {
            return Err("every output must be a dense float array to get a gradient".into());
        }
        let head = b.values.len();
        b.values.push(dense_info(&info.shape, &info));
        b.grad.push(None);
        heads.push(head);
        if need[o] {
            b.add_grad(o, head)?;
        }
    }
    // The node defining each value (inputs and parameters: none).
    let mut producer: Vec<Option<usize>> = vec![None; nv];
    for (k, n) in fwd.nodes().iter().enumerate() {
        producer[n.output] = Some(k);
    }
    for node in fwd.nodes().iter().rev() {
        let Some(g) = b.grad[node.output] else {
            continue;
        };
        if !need[node.output] {
            continue;
        }
        let ins = node.inputs.clone();
        let info = |k: usize| fwd.values()[ins[k]].clone();
        let needs = |k: usize| need[ins[k]];
        let refuse = |why: &str| {
            Err(format!(
                "operator '{}' has no backward in a graph ({why})",
                node.op.name()
            ))
        };
        match &node.op {
            Op::Dot { ta, tb } => {
                let (a, c) = (info(0), info(1));
                if a.stype == SType::Csr && c.stype == SType::Dense && !ta && !tb {
                    if needs(0) {
                        return refuse("a csr operand that needs a gradient");
                    }
                    if needs(1) {
                        // Stored rows: at most one per non-zero of x (the traced csr's
                        // bytes are about 8 + the element size per non-zero).
                        let esize = c.dtype.size_of();
                        let nnz = a.bytes / (8 + esize);
                        let rows = nnz.min(c.shape[0]);
                        let gi = ValueInfo {
                            stype: SType::RowSparse,
                            bytes: rows * (c.shape[1] * esize + 8),
                            ..c.clone()
                        };
                        let gw = b.push(Op::Grad(GradFn::CsrTDense), vec![ins[0], g], gi);
                        b.add_grad(ins[1], gw)?;
                    }
                    continue;
                }
                if a.stype != SType::Dense
                    || c.stype != SType::Dense
                    || a.shape.len() != 2
                    || c.shape.len() != 2
                {
                    return refuse("only dense 2-D products and csr . dense");
                }
                let (ta, tb) = (*ta, *tb);
                // As the eager backward: dA = g op(B)^T (transposed back if A was), dB likewise.
                if needs(0) {
                    let (op, inputs) = if ta {
                        (Op::Dot { ta: tb, tb: true }, vec![ins[1], g])
                    } else {
                        (Op::Dot { ta: false, tb: !tb }, vec![g, ins[1]])
                    };
                    let gi = b.dense_like(ins[0]);
                    let ga = b.push(op, inputs, gi);
                    b.add_grad(ins[0], ga)?;
                }
                if needs(1) {
                    let (op, inputs) = if tb {
                        (Op::Dot { ta: true, tb: ta }, vec![g, ins[0]])
                    } else {
                        (Op::Dot { ta: !ta, tb: false }, vec![ins[0], g])
                    };
                    let gi = b.dense_like(ins[1]);
                    let gb = b.push(op, inputs, gi);
                    b.add_grad(ins[1], gb)?;
                }
            }
            Op::DotCsrDenseT => {
                if needs(0) {
                    return refuse("a csr operand that needs a gradient");
                }
                if needs(1) {
                    let gi = b.dense_like(ins[1]);
                    let gw = b.push(Op::Grad(GradFn::CsrDenseTWeight), vec![ins[0], g], gi);
                    b.add_grad(ins[1], gw)?;
                }
            }
            Op::BiasAct { act, .. } => {
                if b.values[g].stype != SType::Dense || b.values[g].shape != info(0).shape {
                    return refuse("a gradient that is not dense of the output's shape");
                }
                let gy = match act {
                    Some(a) => {
                        let gi = b.dense_like(ins[0]);
                        b.push(Op::Grad(GradFn::BiasActInput(*a)), vec![node.output, g], gi)
                    }
                    None => g,
                };
                if needs(0) {
                    b.add_grad(ins[0], gy)?;
                }
                if needs(1) {
                    let gi = b.dense_like(ins[1]);
                    let gb = match act {
                        Some(a) => {
                            b.push(Op::Grad(GradFn::BiasActBias(*a)), vec![node.output, g], gi)
                        }
                        None => b.push(Op::Grad(GradFn::ColumnSums), vec![g], gi),
                    };
                    b.add_grad(ins[1], gb)?;
                }
            }
            Op::SigmoidBce | Op::SigmoidBceTo(_) => {
                if needs(1) {
                    return refuse("labels that need a gradient");
                }
                if needs(0) {
                    let gi = b.dense_like(ins[0]);
                    let gx = b.push(Op::Grad(GradFn::SigmoidBce), vec![ins[0], ins[1], g], gi);
                    b.add_grad(ins[0], gx)?;
                }
            }
            Op::SoftmaxCe | Op::SoftmaxCeIds => {
                if needs(1) {
                    return refuse("targets that need a gradient");
                }
                if needs(0) {
                    let gi = b.dense_like(ins[0]);
                    let ids = matches!(node.op, Op::SoftmaxCeIds);
                    let gf = GradFn::SoftmaxCe { ids };
                    let gx = b.push(Op::Grad(gf), vec![ins[0], ins[1], g], gi);
                    b.add_grad(ins[0], gx)?;
                }
            }
            Op::LogSoftmax(axis) => {
                // As the eager backward: g - exp(y) * sum(g, axis, keepdims).
                let x = info(0);
                let keep =
                    reduced_keep_shape(&x.shape, &Some(vec![*axis])).map_err(|e| e.to_string())?;
                let e = b.push(
                    Op::Unary(UnaryFn::Exp),
                    vec![node.output],
                    dense_info(&x.shape, &x),
                );
                let s = b.push(
                    Op::Sum {
                        axes: Some(vec![*axis]),
                        keepdims: true,
                    },
                    vec![g],
                    dense_info(&keep, &x),
                );
                let m = b.push(
                    Op::Binary(BinaryOp::Mul),
                    vec![e, s],
                    dense_info(&x.shape, &x),
                );
                let gx = b.push(
                    Op::Binary(BinaryOp::Sub),
                    vec![g, m],
                    dense_info(&x.shape, &x),
                );
                b.add_grad(ins[0], gx)?;
            }
            Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul))
                if info(0).shape == info(1).shape =>
            {
                let (a, c) = (info(0), info(1));
                if a.stype != SType::Dense || c.stype != SType::Dense {
                    return refuse("sparse operands");
                }
                for k in 0..2 {
                    if !needs(k) {
                        continue;
                    }
                    let gk = match op {
                        BinaryOp::Mul => {
                            let gi = b.dense_like(ins[k]);
                            b.push(Op::Binary(BinaryOp::Mul), vec![g, ins[1 - k]], gi)
                        }
                        BinaryOp::Sub if k == 1 => {
                            let gi = b.dense_like(ins[k]);
                            b.push(Op::Unary(UnaryFn::Neg), vec![g], gi)
                        }
                        _ => g,
                    };
                    b.add_grad(ins[k], gk)?;
                }
            }
            Op::Unary(UnaryFn::Neg) => {
                let gi = b.dense_like(ins[0]);
                let gx = b.push(Op::Unary(UnaryFn::Neg), vec![g], gi);
                b.add_grad(ins[0], gx)?;
            }
            // As the eager backwards: g * (2 x), g * sign(x).
            Op::Unary(u @ (UnaryFn::Square | UnaryFn::Abs)) => {
                let gi = b.dense_like(ins[0]);
                let d = match u {
                    UnaryFn::Square => b.push(Op::Scalar(ScalarFn::Mul, 2.0), vec![ins[0]], gi),
                    _ => b.push(Op::Unary(UnaryFn::Sign), vec![ins[0]], gi),
                };
                let gi = b.dense_like(ins[0]);
                let gx = b.push(Op::Binary(BinaryOp::Mul), vec![g, d], gi);
                b.add_grad(ins[0], gx)?;
            }
            Op::Unary(u) if activation_grad(*u).is_some() => {
                let x = info(0);
                if x.stype != SType::Dense || b.values[g].shape != x.shape {
                    return refuse("a sparse operand or gradient");
                }
                let (_, from_output) = activation_grad(*u).expect("checked by the guard");
                let saved = if from_output { node.output } else { ins[0] };
                let gi = b.dense_like(ins[0]);
                let gx = b.push(Op::Grad(GradFn::Activation(*u)), vec![saved, g], gi);
                b.add_grad(ins[0], gx)?;
            }
            Op::Act(f) => {
                // As the eager backward: one fused pass from the input.
                let x = info(0);
                if x.stype != SType::Dense || b.values[g].shape != x.shape {
                    return refuse("a sparse operand or gradient");
                }
                let gi = b.dense_like(ins[0]);
                let gx = b.push(Op::Grad(GradFn::Act(*f)), vec![ins[0], g], gi);
                b.add_grad(ins[0], gx)?;
            }
            Op::Scalar(f, s) if *f != ScalarFn::LeakyRelu => {
                let gi = b.dense_like(ins[0]);
                let gx = match f {
                    ScalarFn::Add | ScalarFn::Sub => g,
                    ScalarFn::RSub => b.push(Op::Unary(UnaryFn::Neg), vec![g], gi),
                    ScalarFn::Mul => b.push(Op::Scalar(ScalarFn::Mul, *s), vec![g], gi),
                    ScalarFn::Div => b.push(Op::Scalar(ScalarFn::Div, *s), vec![g], gi),
                    // As the eager backwards (`ops::unary`): g * (-s / x^2), g * (p x^(p-1)),
                    // and g times the mask where x won (ties to x).
                    f => {
                        if info(0).stype != SType::Dense {
                            return refuse("a sparse operand");
                        }
                        let x = ins[0];
                        let d = match f {
                            ScalarFn::RDiv => {
                                let sq = b.push(Op::Unary(UnaryFn::Square), vec![x], gi.clone());
                                b.push(Op::Scalar(ScalarFn::RDiv, -s), vec![sq], gi.clone())
                            }
                            ScalarFn::Pow => {
                                let pw =
                                    b.push(Op::Scalar(ScalarFn::Pow, s - 1.0), vec![x], gi.clone());
                                b.push(Op::Scalar(ScalarFn::Mul, *s), vec![pw], gi.clone())
                            }
                            ScalarFn::Maximum => {
                                b.push(Op::CompareScalar(CmpFn::Ge, *s), vec![x], gi.clone())
                            }
                            ScalarFn::Minimum => {
                                b.push(Op::CompareScalar(CmpFn::Le, *s), vec![x], gi.clone())
                            }
                            _ => return refuse("a scalar operator without a rule"),
                        };
                        b.push(Op::Binary(BinaryOp::Mul), vec![g, d], gi)
                    }
                };
                b.add_grad(ins[0], gx)?;
            }
            Op::Binary(op @ (BinaryOp::Pow | BinaryOp::Maximum | BinaryOp::Minimum)) => {
                // As the eager backward (`ops::arith::binary`), then each summed to its shape:
                // pow: a gets (g b) a^(b-1); b gets ((g a^b) ln(max(a, MIN_POSITIVE))) (a > 0);
                // maximum / minimum: a gets g where a wins (ties to a), b gets g (1 - that).
                let (a, c) = (info(0), info(1));
                if a.stype != SType::Dense || c.stype != SType::Dense {
                    return refuse("sparse operands");
                }
                let out = fwd.values()[node.output].clone();
                let full = dense_info(&out.shape, &out);
                let (ia, ib) = (ins[0], ins[1]);
                let mut grads = [None, None];
                if *op == BinaryOp::Pow {
                    if needs(0) {
                        let g_b = b.push(Op::Binary(BinaryOp::Mul), vec![g, ib], full.clone());
                        let bm1 = b.push(
                            Op::Scalar(ScalarFn::Add, -1.0),
                            vec![ib],
                            dense_info(&c.shape, &c),
                        );
                        let p = b.push(Op::Binary(BinaryOp::Pow), vec![ia, bm1], full.clone());
                        grads[0] =
                            Some(b.push(Op::Binary(BinaryOp::Mul), vec![g_b, p], full.clone()));
                    }
                    if needs(1) {
                        let ga = dense_info(&a.shape, &a);
                        let gp = b.push(
                            Op::Binary(BinaryOp::Mul),
                            vec![g, node.output],
                            full.clone(),
                        );
                        let am = b.push(
                            Op::Scalar(ScalarFn::Maximum, f64::MIN_POSITIVE),
                            vec![ia],
                            ga.clone(),
                        );
                        let ln = b.push(Op::Unary(UnaryFn::Log), vec![am], ga.clone());
                        let t = b.push(Op::Binary(BinaryOp::Mul), vec![gp, ln], full.clone());
                        let pos = b.push(Op::CompareScalar(CmpFn::Gt, 0.0), vec![ia], ga);
                        grads[1] =
                            Some(b.push(Op::Binary(BinaryOp::Mul), vec![t, pos], full.clone()));
                    }
                } else {
                    let cmp = if *op == BinaryOp::Maximum {
                        CmpFn::Ge
                    } else {
                        CmpFn::Le
                    };
                    let wins = b.push(Op::Compare(cmp), vec![ia, ib], full.clone());
                    if needs(0) {
                        grads[0] =
                            Some(b.push(Op::Binary(BinaryOp::Mul), vec![g, wins], full.clone()));
                    }
                    if needs(1) {
                        let loses =
                            b.push(Op::Scalar(ScalarFn::RSub, 1.0), vec![wins], full.clone());
                        grads[1] =
                            Some(b.push(Op::Binary(BinaryOp::Mul), vec![g, loses], full.clone()));
                    }
                }
                for (k, gk) in grads.into_iter().enumerate() {
                    if let Some(gk) = gk {
                        let gk = b.sum_to_shape(gk, &info(k).shape);
                        b.add_grad(ins[k], gk)?;
                    }
                }
            }
            Op::Reshape(_) => {
                let shape = info(0).shape;
                let gx = b.reshape(g, &shape);
                b.add_grad(ins[0], gx)?;
            }
            // As eagerly: a float-to-float cast of a dense value passes the gradient back,
            // cast to the input's dtype; casts from or to integers carry none.
            Op::Astype(to) => {
                let x = info(0);
                if x.stype == SType::Dense && x.dtype.is_float() && to.is_float() {
                    let gx = b.push(Op::Astype(x.dtype), vec![g], dense_info(&x.shape, &x));
                    b.add_grad(ins[0], gx)?;
                }
            }
            Op::Sum { axes, .. } | Op::Mean { axes, .. } => {
                let x = info(0);
                if x.stype != SType::Dense {
                    return refuse("a sparse operand");
                }
                let keep = reduced_keep_shape(&x.shape, axes).map_err(|e| e.to_string())?;
                let count: usize = x
                    .shape
                    .iter()
                    .zip(&keep)
                    .filter(|(d, k)| d != k)
                    .map(|(d, _)| *d)
                    .product();
                // The mean scales its sum's gradient by 1/count (eager: a mul_scalar node
                // after the sum, whose backward runs first).
                let g = if matches!(node.op, Op::Mean { .. }) && count > 1 {
                    let gi = b.values[g].clone();
                    b.push(Op::Scalar(ScalarFn::Mul, 1.0 / count as f64), vec![g], gi)
                } else {
                    g
                };
                let r = b.reshape(g, &keep);
                let gx = if keep == x.shape {
                    r
                } else {
                    b.push(
                        Op::BroadcastTo(x.shape.clone()),
                        vec![r],
                        dense_info(&x.shape, &x),
                    )
                };
                b.add_grad(ins[0], gx)?;
            }
            Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)) => {
                // As the eager backward (`ops::arith::binary`): each operand's gradient, then
                // summed to its shape where it was broadcast (`sum_to_shape`).
                let (a, c) = (info(0), info(1));
                if a.stype != SType::Dense || c.stype != SType::Dense {
                    return refuse("sparse operands");
                }
                let out = fwd.values()[node.output].clone();
                let full = || dense_info(&out.shape, &out);
                for k in 0..2 {
                    if !needs(k) {
                        continue;
                    }
                    let gk = match (op, k) {
                        (BinaryOp::Add, _) | (BinaryOp::Sub, 0) => g,
                        (BinaryOp::Sub, _) => {
                            let i = full();
                            b.push(Op::Unary(UnaryFn::Neg), vec![g], i)
                        }
                        (BinaryOp::Mul, _) => {
                            let i = full();
                            b.push(Op::Binary(BinaryOp::Mul), vec![g, ins[1 - k]], i)
                        }
                        (BinaryOp::Div, 0) => {
                            let i = full();
                            b.push(Op::Binary(BinaryOp::Div), vec![g, ins[1]], i)
                        }
                        _ => {
                            // d(a/b)/db = -(g a) / (b b)
                            let i = full();
                            let ga = b.push(Op::Binary(BinaryOp::Mul), vec![g, ins[0]], i);
                            let bb = b.push(
                                Op::Binary(BinaryOp::Mul),
                                vec![ins[1], ins[1]],
                                dense_info(&c.shape, &c),
                            );
                            let i = full();
                            let q = b.push(Op::Binary(BinaryOp::Div), vec![ga, bb], i);
                            let i = full();
                            b.push(Op::Unary(UnaryFn::Neg), vec![q], i)
                        }
                    };
                    let gk = b.sum_to_shape(gk, &info(k).shape);
                    b.add_grad(ins[k], gk)?;
                }
            }
            Op::Where => {
                // As the eager backward: m = (cond != 0) broadcast to the output, as g's dtype;
                // x gets g m and y gets g (1 - m), each summed to its shape.
                let (cv, out) = (info(0), fwd.values()[node.output].clone());
                if [0, 1, 2].iter().any(|&k| info(k).stype != SType::Dense) {
                    return refuse("sparse operands");
                }
                let ne = b.push(
                    Op::CompareScalar(super::op::CmpFn::Ne, 0.0),
                    vec![ins[0]],
                    dense_info(&cv.shape, &cv),
                );
                let nb = if cv.shape == out.shape {
                    ne
                } else {
                    b.push(
                        Op::BroadcastTo(out.shape.clone()),
                        vec![ne],
                        dense_info(&out.shape, &cv),
                    )
                };
                let m = if cv.dtype == out.dtype {
                    nb
                } else {
                    b.push(
                        Op::Astype(out.dtype),
                        vec![nb],
                        dense_info(&out.shape, &out),
                    )
                };
                for k in [1, 2] {
                    if !needs(k) {
                        continue;
                    }
                    let mk = if k == 1 {
                        m
                    } else {
                        let i = dense_info(&out.shape, &out);
                        b.push(Op::Scalar(ScalarFn::RSub, 1.0), vec![m], i)
                    };
                    let i = dense_info(&out.shape, &out);
                    let gk = b.push(Op::Binary(BinaryOp::Mul), vec![g, mk], i);
                    let gk = b.sum_to_shape(gk, &info(k).shape);
                    b.add_grad(ins[k], gk)?;
                }
            }
            Op::Unary(u @ (UnaryFn::Exp | UnaryFn::Log | UnaryFn::Sqrt)) => {
                // As the eager backwards: g y, g / x, g / (2 y).
                if info(0).stype != SType::Dense {
                    return refuse("a sparse operand");
                }
                let gi = b.dense_like(ins[0]);
                let gx = match u {
                    UnaryFn::Exp => b.push(Op::Binary(BinaryOp::Mul), vec![g, node.output], gi),
                    UnaryFn::Log => b.push(Op::Binary(BinaryOp::Div), vec![g, ins[0]], gi),
                    _ => {
                        let y2 = b.push(Op::Scalar(ScalarFn::Mul, 2.0), vec![node.output], gi);
                        let gi = b.dense_like(ins[0]);
                        b.push(Op::Binary(BinaryOp::Div), vec![g, y2], gi)
                    }
                };
                b.add_grad(ins[0], gx)?;
            }
            Op::Scalar(ScalarFn::LeakyRelu, s) | Op::Clip(s, _) => {
                // As the eager backwards: g times the slope (leaky_relu) or the inside mask
                // (clip) of x.
                if info(0).stype != SType::Dense {
                    return refuse("a sparse operand");
                }
                let f = match node.op {
                    Op::Clip(lo, hi) => GradFn::InsideMask(lo, hi),
                    _ => GradFn::LeakyReluSlope(*s),
                };
                let gi = b.dense_like(ins[0]);
                let d = b.push(Op::Grad(f), vec![ins[0]], gi);
                let gi = b.dense_like(ins[0]);
                let gx = b.push(Op::Binary(BinaryOp::Mul), vec![g, d], gi);
                b.add_grad(ins[0], gx)?;
            }
            Op::Softmax(axis) => {
                // As the eager backward: y (g - sum(g y, axis, keepdims)).
                let x = info(0);
                if x.stype != SType::Dense {
                    return refuse("a sparse operand");
                }
                let keep =
                    reduced_keep_shape(&x.shape, &Some(vec![*axis])).map_err(|e| e.to_string())?;
                let y = node.output;
                let gy = b.push(
                    Op::Binary(BinaryOp::Mul),
                    vec![g, y],
                    dense_info(&x.shape, &x),
                );
                let s = b.push(
                    Op::Sum {
                        axes: Some(vec![*axis]),
                        keepdims: true,
                    },
                    vec![gy],
                    dense_info(&keep, &x),
                );
                let d = b.push(
                    Op::Binary(BinaryOp::Sub),
                    vec![g, s],
                    dense_info(&x.shape, &x),
                );
                let gx = b.push(
                    Op::Binary(BinaryOp::Mul),
                    vec![y, d],
                    dense_info(&x.shape, &x),
                );
                b.add_grad(ins[0], gx)?;
            }
            Op::Embedding => {
                let t = info(0);
                if needs(1) {
                    return refuse("ids that need a gradient");
                }
                if t.stype != SType::Dense || t.shape.len() != 2 {
                    return refuse("a table that is not a dense matrix");
                }
                let (vocab, dim) = (t.shape[0], t.shape[1]);
                // Stored rows: at most one per id.
                let ids: usize = info(1).shape.iter().product();
                let esize = t.dtype.size_of();
                let gi = ValueInfo {
                    stype: SType::RowSparse,
                    bytes: ids.min(vocab) * (dim * esize + 8),
                    ..t.clone()
                };
                let gw = b.push(
                    Op::Grad(GradFn::Embedding { vocab, dim }),
                    vec![ins[1], g],
                    gi,
                );
                b.add_grad(ins[0], gw)?;
            }
            Op::Conv { params, bias } => {
                let (x, w) = (info(0), info(1));
                if x.stype != SType::Dense || w.stype != SType::Dense {
                    return refuse("sparse operands");
                }
                // As the eager backward: the transposed convolution for the data, the weight
                // kernel for the weight, the bias's sums over each plane and then the batch.
                if needs(0) {
                    let gx = b.push(
                        Op::Grad(GradFn::ConvData {
                            params: params.clone(),
                            x_shape: x.shape.clone(),
                        }),
                        vec![g, ins[1]],
                        dense_info(&x.shape, &x),
                    );
                    b.add_grad(ins[0], gx)?;
                }
                if needs(1) {
                    b.conv_weight_grad(params, &w, false, [ins[0], g], ins[1])?;
                }
                if *bias && needs(2) {
                    let gs = b.values[g].shape.clone();
                    if gs.len() < 3 {
                        return refuse("an output without spatial dims");
                    }
                    let (n, c) = (gs[0], gs[1]);
                    let plane: usize = gs[2..].iter().product();
                    let r = b.reshape(g, &[n, c, plane]);
                    let like = b.values[g].clone();
                    let per_plane = b.push(
                        Op::Sum {
                            axes: Some(vec![2]),
                            keepdims: false,
                        },
                        vec![r],
                        dense_info(&[n, c], &like),
                    );
                    let gb = b.push(
                        Op::Sum {
                            axes: Some(vec![0]),
                            keepdims: false,
                        },
                        vec![per_plane],
                        dense_info(&[c], &like),
                    );
                    b.add_grad(ins[2], gb)?;
                }
            }
            // As the eager backwards: the inverse permutation; each part's slice of the
            // gradient; the gradient scattered into zeros at the slice's positions.
            Op::Transpose(perm) => {
                let x = info(0);
                if x.stype != SType::Dense {
                    return refuse("a sparse input");
                }
                let mut inv = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = i;
                }
                let gx = b.push(Op::Transpose(inv), vec![g], dense_info(&x.shape, &x));
                b.add_grad(ins[0], gx)?;
            }
            Op::Concat { axis, .. } => {
                let mut begin = 0;
                for (k, &v) in ins.iter().enumerate() {
                    let x = info(k);
                    if x.stype != SType::Dense {
                        return refuse("sparse parts");
                    }
                    let Some(&len) = x.shape.get(*axis) else {
                        return refuse("an axis past a part's dimensions");
                    };
                    if need[v] {
                        let part = Op::SliceAxis {
                            axis: *axis,
                            begin,
                            step: 1,
                            len,
                        };
                        let gx = b.push(part, vec![g], dense_info(&x.shape, &x));
                        b.add_grad(v, gx)?;
                    }
                    begin += len;
                }
            }
            Op::SliceAxis {
                axis,
                begin,
                step,
                len,
            } => {
                let x = info(0);
                if x.stype != SType::Dense || b.values[g].stype != SType::Dense {
                    return refuse("a sparse input or gradient");
                }
                // The packed rows of a recurrent sequence's saved array (its only reader, as
                // traced): the sequence's backward takes their gradient as it is, instead of
                // scattered into zeros over the workspace rows, which carry no gradient.
                let packed_of_sequence = match producer[ins[0]].map(|k| &fwd.nodes()[k].op) {
                    Some(Op::RnnSequence { mode, .. }) => {
                        (*axis, *begin, *step) == (0, 0, 1)
                            && x.shape
                                .first()
                                .and_then(|&r| crate::ops::rnn::packed_rows(*mode, r))
                                == Some(*len)
                    }
                    _ => false,
                };
                if packed_of_sequence {
                    b.add_grad(ins[0], g)?;
                    continue;
                }
                let grad = GradFn::SliceAxis {
                    axis: *axis,
                    begin: *begin,
                    step: *step,
                    len: *len,
                    in_shape: x.shape.clone(),
                };
                let gx = b.push(Op::Grad(grad), vec![g], dense_info(&x.shape, &x));
                b.add_grad(ins[0], gx)?;
            }
            Op::RnnSequence {
                mode,
                reverse,
                zero_state,
            } => {
                if (0..ins.len()).any(|k| info(k).stype != SType::Dense) {
                    return refuse("sparse operands");
                }
                // One backward over the whole sequence (reading the workspace saved in the
                // forward's value), then each operand's gradient sliced out of it.
                let (xs, saved) = (info(0).shape, b.values[node.output].clone());
                if xs.len() != 3 || saved.shape.len() != 3 {
                    return refuse("operands that are not (T, N, G * H) sequences");
                }
                let shapes = crate::ops::rnn::saved_grad_shapes(
                    *mode,
                    xs[0],
                    xs[1],
                    saved.shape[2],
                    *zero_state,
                );
                let total = shapes
                    .iter()
                    .map(|s| s.iter().product::<usize>())
                    .sum::<usize>();
                let grad = GradFn::Rnn {
                    mode: *mode,
                    reverse: *reverse,
                    zero_state: *zero_state,
                };
                let flat = b.push(
                    Op::Grad(grad),
                    vec![g, node.output, ins[1]],
                    dense_info(&[total], &saved),
                );
                let mut begin = 0;
                for (k, shape) in shapes.iter().enumerate() {
                    let len: usize = shape.iter().product();
                    if needs(k) {
                        let part = Op::SliceAxis {
                            axis: 0,
                            begin,
                            step: 1,
                            len,
                        };
                        let p = b.push(part, vec![flat], dense_info(&[len], &saved));
                        let gk = b.reshape(p, shape);
                        b.add_grad(ins[k], gk)?;
                    }
                    begin += len;
                }
            }
            Op::Pool(params) => {
                let x = info(0);
                if x.stype != SType::Dense {
                    return refuse("a sparse input");
                }
                let gx = b.push(
                    Op::Grad(GradFn::PoolInput(params.clone())),
                    vec![ins[0], g],
                    dense_info(&x.shape, &x),
                );
                b.add_grad(ins[0], gx)?;
            }
            Op::ConvTranspose(params) => {
                let (x, w) = (info(0), info(1));
                if x.stype != SType::Dense || w.stype != SType::Dense {
                    return refuse("sparse operands");
                }
                // As the eager backward: the convolution of the gradient for the data, the
                // weight kernel with the roles of input and output exchanged for the weight.
                if needs(0) {
                    let conv = crate::ops::ConvParams {
                        output_padding: Vec::new(),
                        ..params.clone()
                    };
                    let gx = b.push(
                        Op::Conv {
                            params: conv,
                            bias: false,
                        },
                        vec![g, ins[1]],
                        dense_info(&x.shape, &x),
                    );
                    b.add_grad(ins[0], gx)?;
                }
                if needs(1) {
                    b.conv_weight_grad(params, &w, true, [g, ins[0]], ins[1])?;
                }
            }
            _ => return refuse("no rule for it yet"),
        }
    }
    let forward_nodes = fwd.nodes().len();
    let mut outputs = outs.clone();
    let mut grad_output = |v: usize, wanted: bool| match b.grad[v] {
        Some(g) if wanted => {
            outputs.push(g);
            Some(outputs.len() - 1)
        }
        _ => None,
    };
    let input_grad: Vec<Option<usize>> = fwd
        .inputs()
        .iter()
        .zip(wrt_inputs)
        .map(|(&v, &w)| grad_output(v, w))
        .collect();
    let param_grad: Vec<Option<usize>> = fwd
        .params()
        .iter()
        .zip(wrt_params)
        .map(|(p, &w)| grad_output(p.value, w))
        .collect();
    let mut input_names = fwd.input_names().to_vec();
    if heads.len() == 1 {
        input_names.push("head_grad".into());
    } else {
        input_names.extend((0..heads.len()).map(|k| format!("head_grad{k}")));
    }
    let mut inputs = fwd.inputs().to_vec();
    inputs.extend(heads);
    let params: Vec<ParamInfo> = fwd.params().to_vec();
    let graph = Graph::new(b.values, input_names, inputs, params, b.nodes, outputs)
        .map_err(|e| e.to_string())?;
    Ok(Backward {
        graph,
        input_grad,
        param_grad,
        forward_nodes,
    })
}
