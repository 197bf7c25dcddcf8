//! What a graph node computes: an operator with its attributes, replayed through the same
//! public operator the eager code called (so a replayed node records the same backward, keeps
//! the same storage types and runs the same kernel), and its name and attributes as plain
//! values for the exported graph format.

use crate::ops::fused::FusedAct;
use crate::ops::{ActFn, BinaryOp};
use crate::{DType, Error, NDArray, Result, SType};

/// An attribute value of an exported node (the JSON format maps each to one JSON value).
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A whole number (axes, depths).
    Int(i64),
    /// A number (scalars, slopes).
    Float(f64),
    /// A flag.
    Bool(bool),
    /// A list of whole numbers (shapes, axes).
    Ints(Vec<i64>),
    /// A name (dtype, activation).
    Str(String),
}

/// Elementwise unary operators without attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryFn {
    /// `-x`.
    Neg,
    /// `exp(x)`.
    Exp,
    /// `ln(x)`.
    Log,
    /// `sqrt(x)`.
    Sqrt,
    /// `x^2`.
    Square,
    /// `|x|`.
    Abs,
    /// `sign(x)`.
    Sign,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `max(x, 0)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `ln(1 + exp(x))`.
    Softrelu,
}

/// Elementwise operators with one scalar operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarFn {
    /// `x + s`.
    Add,
    /// `x - s`.
    Sub,
    /// `s - x`.
    RSub,
    /// `x * s`.
    Mul,
    /// `x / s`.
    Div,
    /// `s / x`.
    RDiv,
    /// `x ^ s`.
    Pow,
    /// `max(x, s)`.
    Maximum,
    /// `min(x, s)`.
    Minimum,
    /// `x` where positive, else `s x`.
    LeakyRelu,
}

/// Comparisons (1/0 of the input dtype, not differentiable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpFn {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
}

/// One traced operator application: which public operator and with which attributes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Broadcasting binary arithmetic (`add`, `sub`, `mul`, ...); inputs `a, b`.
    Binary(BinaryOp),
    /// Elementwise unary map; input `x`.
    Unary(UnaryFn),
    /// Elementwise op with a scalar; input `x`.
    Scalar(ScalarFn, f64),
    /// An activation of `ops::activation` (ELU, GELU, Swish, ...); input `x`.
    Act(ActFn),
    /// Broadcasting comparison; inputs `a, b`.
    Compare(CmpFn),
    /// Comparison against a scalar; input `x`.
    CompareScalar(CmpFn, f64),
    /// `clip(x, lo, hi)`.
    Clip(f64, f64),
    /// `reshape(x, shape)`.
    Reshape(Vec<usize>),
    /// `broadcast_to(x, shape)`.
    BroadcastTo(Vec<usize>),
    /// `dot_t(a, b, transpose_a, transpose_b)` (dispatches on storage types as eager does).
    Dot {
        /// Transpose the left operand.
        ta: bool,
        /// Transpose the right operand.
        tb: bool,
    },
    /// `sparse::dot_csr_dense_t(x, w)`: csr `x` times the transpose of a Gluon-layout weight.
    DotCsrDenseT,
    /// `ops::fused::bias_act{,_absorbing}(y, b, act)`; inputs `y, b`.
    BiasAct {
        /// The fused activation.
        act: Option<FusedAct>,
        /// Fold `y`'s producer into this node (only when `y` has no other reader).
        absorb: bool,
    },
    /// `ops::fused::sigmoid_bce_logits(x, z)`.
    SigmoidBce,
    /// `ops::fused::sigmoid_bce_logits_to(x, z, shape)`.
    SigmoidBceTo(Vec<usize>),
    /// `ops::fused::softmax_ce_logits(x, t)`.
    SoftmaxCe,
    /// `ops::fused::softmax_ce_ids(x, ids)`.
    SoftmaxCeIds,
    /// `sum(x, axes, keepdims)`.
    Sum {
        /// Reduced axes (`None`: all).
        axes: Option<Vec<i64>>,
        /// Keep reduced axes as size 1.
        keepdims: bool,
    },
    /// `mean(x, axes, keepdims)`.
    Mean {
        /// Reduced axes (`None`: all).
        axes: Option<Vec<i64>>,
        /// Keep reduced axes as size 1.
        keepdims: bool,
    },
    /// `softmax(x, axis)`.
    Softmax(i64),
    /// `log_softmax(x, axis)`.
    LogSoftmax(i64),
    /// `one_hot(ids, depth, on, off, dtype)`.
    OneHot {
        /// Number of classes.
        depth: usize,
        /// Value at the id.
        on: f64,
        /// Value elsewhere.
        off: f64,
        /// Output dtype.
        dtype: DType,
    },
    /// `where_(cond, x, y)`.
    Where,
    /// `astype(x, dtype)`.
    Astype(DType),
    /// `detach(x)`: same values, no gradient path.
    Detach,
    /// `sparse::embedding(table, ids)`.
    Embedding,
    /// A backward step of a training graph (`grad.rs`): built by
    /// [`crate::graph::TrainStep`], never traced or read from a file.
    Grad(super::grad::GradFn),
    /// `check_class_ids(labels, classes, count)`: validates labels, returns them unchanged.
    CheckClassIds {
        /// Number of classes.
        classes: usize,
        /// Number of labels expected.
        count: usize,
    },
    /// `convolution(x, w, b, params)`; inputs `x, w` and, with `bias`, `b`.
    Conv {
        /// Strides, padding, dilation, groups.
        params: crate::ops::ConvParams,
        /// Whether a bias is the third input.
        bias: bool,
    },
    /// `conv_transpose(x, w, None, params)`; inputs `x, w` (a bias is traced as its add).
    ConvTranspose(crate::ops::ConvParams),
    /// `update_running(stat, batch, momentum)`: a running statistic moved toward the batch's,
    /// in place ([`Op::runs_once`]).
    RunningUpdate {
        /// Weight of the old value.
        momentum: f64,
    },
    /// `pool(x, params)`: max or average pooling.
    Pool(crate::ops::PoolParams),
    /// `transpose(x, perm)` (also `swapaxes`).
    Transpose(Vec<usize>),
    /// `concat(xs, axis)` of `n` inputs.
    Concat {
        /// The joined axis.
        axis: usize,
        /// Number of inputs.
        n: usize,
    },
    /// `slice_axis(x, axis, ...)` with its bounds resolved: `len` positions `begin, begin +
    /// step, ...` along `axis`.
    SliceAxis {
        /// The sliced axis.
        axis: usize,
        /// First position.
        begin: usize,
        /// Distance between positions (negative: backwards).
        step: i64,
        /// Number of positions.
        len: usize,
    },
    /// One direction of a recurrent layer over a sequence with its workspace
    /// (`ops::rnn::rnn_sequence_saved`): inputs `xproj, w_hh, b_hh` and, unless `zero_state`,
    /// `h0` (and `c0` for the LSTM); a traced `rnn_sequence` is this node and the slice of its
    /// packed rows.
    RnnSequence {
        /// The recurrence.
        mode: crate::ops::rnn::RnnMode,
        /// The reversed direction of a bidirectional layer.
        reverse: bool,
        /// Starts from zero states (no state inputs).
        zero_state: bool,
    },
    /// `dropout_mask(x, p, stream)`: a new random mask at every run ([`Op::is_random`]).
    DropoutMask {
        /// Probability of a zero.
        p: f64,
        /// The layer's stream of masks (exported as its seed).
        stream: std::sync::Arc<crate::ops::MaskStream>,
    },
}

macro_rules! name_table {
    ($ty:ty, $($v:ident => $n:literal),* $(,)?) => {
        impl $ty {
            /// The name in the exported format.
            pub fn name(self) -> &'static str {
                match self { $(Self::$v => $n),* }
            }
            /// The variant of an exported name.
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $($n => Some(Self::$v),)* _ => None }
            }
        }
    };
}

name_table!(UnaryFn, Neg => "neg", Exp => "exp", Log => "log", Sqrt => "sqrt",
    Square => "square", Abs => "abs", Sign => "sign", Sigmoid => "sigmoid", Relu => "relu",
    Tanh => "tanh", Softrelu => "softrelu");
name_table!(ScalarFn, Add => "add_scalar", Sub => "sub_scalar", RSub => "rsub_scalar",
    Mul => "mul_scalar", Div => "div_scalar", RDiv => "rdiv_scalar", Pow => "pow_scalar",
    Maximum => "maximum_scalar", Minimum => "minimum_scalar", LeakyRelu => "leaky_relu");
name_table!(CmpFn, Eq => "equal", Ne => "not_equal", Gt => "greater", Ge => "greater_equal",
    Lt => "lesser", Le => "lesser_equal");

impl CmpFn {
    /// The comparison of a storage kernel's enum.
    pub(crate) fn of(c: crate::storage::CmpOp) -> CmpFn {
        use crate::storage::CmpOp;
        match c {
            CmpOp::Eq => CmpFn::Eq,
            CmpOp::Ne => CmpFn::Ne,
            CmpOp::Gt => CmpFn::Gt,
            CmpOp::Ge => CmpFn::Ge,
            CmpOp::Lt => CmpFn::Lt,
            CmpOp::Le => CmpFn::Le,
        }
    }
}

const BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Pow,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
];

/// The exported name of a dtype.
pub fn dtype_name(d: DType) -> &'static str {
    d.name()
}

/// The dtype of an exported name.
pub fn dtype_from_name(name: &str) -> Option<DType> {
    [
        DType::F32,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::F16,
        DType::BF16,
    ]
    .into_iter()
    .find(|d| d.name() == name)
}

/// The exported name of a storage type.
pub fn stype_name(s: SType) -> &'static str {
    match s {
        SType::Dense => "default",
        SType::Csr => "csr",
        SType::RowSparse => "row_sparse",
    }
}

/// The storage type of an exported name (MXNet's names).
pub fn stype_from_name(name: &str) -> Option<SType> {
    [SType::Dense, SType::Csr, SType::RowSparse]
        .into_iter()
        .find(|&s| stype_name(s) == name)
}

pub(crate) fn act_name(a: Option<FusedAct>) -> &'static str {
    match a {
        None => "identity",
        Some(FusedAct::Sigmoid) => "sigmoid",
        Some(FusedAct::Tanh) => "tanh",
        Some(FusedAct::Relu) => "relu",
    }
}

fn usizes(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&d| d as i64).collect())
}

/// A convolution's parameters in the exported format (empty lists: the defaults).
fn conv_attrs(p: &crate::ops::ConvParams) -> Vec<(&'static str, AttrValue)> {
    vec![
        ("stride", usizes(&p.stride)),
        ("padding", usizes(&p.padding)),
        ("dilation", usizes(&p.dilation)),
        ("groups", AttrValue::Int(p.groups as i64)),
        ("output_padding", usizes(&p.output_padding)),
    ]
}

impl Op {
    /// The number of inputs the operator takes.
    pub fn arity(&self) -> usize {
        match self {
            Op::Binary(_)
            | Op::Compare(_)
            | Op::Dot { .. }
            | Op::DotCsrDenseT
            | Op::BiasAct { .. }
            | Op::SigmoidBce
            | Op::SigmoidBceTo(_)
            | Op::SoftmaxCe
            | Op::SoftmaxCeIds
            | Op::Embedding => 2,
            Op::Where => 3,
            Op::Conv { bias, .. } => 2 + usize::from(*bias),
            Op::RunningUpdate { .. } => 2,
            Op::ConvTranspose(_) => 2,
            Op::Concat { n, .. } => *n,
            Op::RnnSequence {
                mode, zero_state, ..
            } => {
                if *zero_state {
                    3
                } else {
                    3 + mode.states()
                }
            }
            Op::Grad(g) => g.arity(),
            _ => 1,
        }
    }

    /// True for operators that map each element on its own (same shape in and out): the
    /// candidates for running in place of a dying input.
    pub fn is_elementwise_unary(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Scalar(..) | Op::Act(_) | Op::CompareScalar(..) | Op::Clip(..)
        )
    }

    /// The name in the exported format.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Binary(b) => b.name(),
            Op::Unary(u) => u.name(),
            Op::Scalar(s, _) => s.name(),
            Op::Act(f) => f.name(),
            Op::Compare(c) => c.name(),
            Op::CompareScalar(..) => "compare_scalar",
            Op::Clip(..) => "clip",
            Op::Reshape(_) => "reshape",
            Op::BroadcastTo(_) => "broadcast_to",
            Op::Dot { .. } => "dot",
            Op::DotCsrDenseT => "dot_csr_dense_t",
            Op::BiasAct { .. } => "bias_act",
            Op::SigmoidBce => "sigmoid_bce_logits",
            Op::SigmoidBceTo(_) => "sigmoid_bce_logits_to",
            Op::SoftmaxCe => "softmax_ce_logits",
            Op::SoftmaxCeIds => "softmax_ce_ids",
            Op::Sum { .. } => "sum",
            Op::Mean { .. } => "mean",
            Op::Softmax(_) => "softmax",
            Op::LogSoftmax(_) => "log_softmax",
            Op::OneHot { .. } => "one_hot",
            Op::Where => "where",
            Op::Astype(_) => "astype",
            Op::Detach => "detach",
            Op::Embedding => "embedding",
            Op::CheckClassIds { .. } => "check_class_ids",
            Op::DropoutMask { .. } => "dropout_mask",
            Op::Conv { .. } => "convolution",
            Op::ConvTranspose(_) => "conv_transpose",
            Op::Pool(_) => "pooling",
            Op::RunningUpdate { .. } => "update_running",
            Op::Transpose(_) => "transpose",
            Op::Concat { .. } => "concat",
            Op::SliceAxis { .. } => "slice_axis",
            Op::RnnSequence { .. } => "rnn_sequence",
            Op::Grad(g) => g.name(),
        }
    }

    /// The attributes in the exported format, by name.
    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        let axes = |a: &Option<Vec<i64>>| match a {
            Some(v) => AttrValue::Ints(v.clone()),
            None => AttrValue::Str("all".into()),
        };
        match self {
            Op::Binary(_) | Op::Unary(_) | Op::Compare(_) => vec![],
            Op::Scalar(_, s) => vec![("scalar", AttrValue::Float(*s))],
            Op::Act(f) => f
                .param()
                .map(|(k, v)| vec![(k, AttrValue::Float(v))])
                .unwrap_or_default(),
            Op::CompareScalar(c, s) => vec![
                ("cmp", AttrValue::Str(c.name().into())),
                ("scalar", AttrValue::Float(*s)),
            ],
            Op::Clip(lo, hi) => vec![("lo", AttrValue::Float(*lo)), ("hi", AttrValue::Float(*hi))],
            Op::Reshape(s) | Op::BroadcastTo(s) | Op::SigmoidBceTo(s) => vec![("shape", usizes(s))],
            Op::Dot { ta, tb } => vec![
                ("transpose_a", AttrValue::Bool(*ta)),
                ("transpose_b", AttrValue::Bool(*tb)),
            ],
            Op::BiasAct { act, absorb } => vec![
                ("act", AttrValue::Str(act_name(*act).into())),
                ("absorb", AttrValue::Bool(*absorb)),
            ],
            Op::Sum { axes: a, keepdims } | Op::Mean { axes: a, keepdims } => {
                vec![("axes", axes(a)), ("keepdims", AttrValue::Bool(*keepdims))]
            }
            Op::Softmax(a) | Op::LogSoftmax(a) => vec![("axis", AttrValue::Int(*a))],
            Op::OneHot {
                depth,
                on,
                off,
                dtype,
            } => vec![
                ("depth", AttrValue::Int(*depth as i64)),
                ("on", AttrValue::Float(*on)),
                ("off", AttrValue::Float(*off)),
                ("dtype", AttrValue::Str(dtype.name().into())),
            ],
            Op::Astype(d) => vec![("dtype", AttrValue::Str(d.name().into()))],
            Op::CheckClassIds { classes, count } => vec![
                ("classes", AttrValue::Int(*classes as i64)),
                ("count", AttrValue::Int(*count as i64)),
            ],
            Op::Conv { params, bias } => {
                let mut a = conv_attrs(params);
                a.push(("bias", AttrValue::Bool(*bias)));
                a
            }
            Op::ConvTranspose(params) => conv_attrs(params),
            Op::RunningUpdate { momentum } => vec![("momentum", AttrValue::Float(*momentum))],
            Op::Transpose(perm) => vec![("axes", usizes(perm))],
            Op::Concat { axis, n } => vec![
                ("axis", AttrValue::Int(*axis as i64)),
                ("num_args", AttrValue::Int(*n as i64)),
            ],
            Op::SliceAxis {
                axis,
                begin,
                step,
                len,
            } => vec![
                ("axis", AttrValue::Int(*axis as i64)),
                ("begin", AttrValue::Int(*begin as i64)),
                ("step", AttrValue::Int(*step)),
                ("len", AttrValue::Int(*len as i64)),
            ],
            Op::RnnSequence {
                mode,
                reverse,
                zero_state,
            } => vec![
                ("mode", AttrValue::Str(mode.name().into())),
                ("reverse", AttrValue::Bool(*reverse)),
                ("zero_state", AttrValue::Bool(*zero_state)),
            ],
            Op::Pool(p) => vec![
                (
                    "pool_type",
                    AttrValue::Str(
                        match p.kind {
                            crate::ops::PoolType::Max => "max",
                            crate::ops::PoolType::Avg => "avg",
                        }
                        .into(),
                    ),
                ),
                ("kernel", usizes(&p.kernel)),
                ("stride", usizes(&p.stride)),
                ("padding", usizes(&p.padding)),
                ("ceil_mode", AttrValue::Bool(p.ceil_mode)),
                ("count_include_pad", AttrValue::Bool(p.count_include_pad)),
                ("global", AttrValue::Bool(p.global)),
            ],
            // The seed's 64 bits as a whole number (read back with the same bits).
            Op::DropoutMask { p, stream } => vec![
                ("p", AttrValue::Float(*p)),
                ("seed", AttrValue::Int(stream.seed() as i64)),
            ],
            Op::DotCsrDenseT
            | Op::SigmoidBce
            | Op::SoftmaxCe
            | Op::SoftmaxCeIds
            | Op::Where
            | Op::Detach
            | Op::Embedding => vec![],
            Op::Grad(g) => g.attrs(),
        }
    }

    /// The operator of an exported name and attributes; an unknown name, a missing or
    /// ill-typed attribute is an error naming it.
    pub fn from_attrs(name: &str, attrs: &[(String, AttrValue)]) -> Result<Op> {
        const OP: &str = "graph import";
        let get = |k: &str| -> Result<&AttrValue> {
            attrs
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v)
                .ok_or_else(|| Error::arg(OP, format!("operator '{name}' needs attribute '{k}'")))
        };
        let bad = |k: &str, want: &str| {
            Error::arg(
                OP,
                format!("operator '{name}': attribute '{k}' must be {want}"),
            )
        };
        let float = |k: &str| match get(k)? {
            AttrValue::Float(f) => Ok(*f),
            AttrValue::Int(i) => Ok(*i as f64),
            _ => Err(bad(k, "a number")),
        };
        let boolean = |k: &str| match get(k)? {
            AttrValue::Bool(b) => Ok(*b),
            _ => Err(bad(k, "true or false")),
        };
        let int = |k: &str| match get(k)? {
            AttrValue::Int(i) => Ok(*i),
            _ => Err(bad(k, "a whole number")),
        };
        let count =
            |k: &str| usize::try_from(int(k)?).map_err(|_| bad(k, "a non-negative whole number"));
        let shape = |k: &str| match get(k)? {
            AttrValue::Ints(v) => v
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| bad(k, "a list of sizes >= 0")))
                .collect::<Result<Vec<usize>>>(),
            _ => Err(bad(k, "a list of sizes")),
        };
        let string = |k: &str| match get(k)? {
            AttrValue::Str(s) => Ok(s.clone()),
            _ => Err(bad(k, "a name")),
        };
        let dtype = |k: &str| {
            dtype_from_name(&string(k)?)
                .ok_or_else(|| bad(k, "float32, float64, int64, int32 or uint8"))
        };
        let axes = |k: &str| match get(k)? {
            AttrValue::Str(s) if s == "all" => Ok(None),
            AttrValue::Ints(v) => Ok(Some(v.clone())),
            _ => Err(bad(k, "a list of axes or \"all\"")),
        };
        if let Some(b) = BINARY.into_iter().find(|b| b.name() == name) {
            return Ok(Op::Binary(b));
        }
        if let Some(u) = UnaryFn::from_name(name) {
            return Ok(Op::Unary(u));
        }
        if let Some(s) = ScalarFn::from_name(name) {
            return Ok(Op::Scalar(s, float("scalar")?));
        }
        if let Some(c) = CmpFn::from_name(name) {
            return Ok(Op::Compare(c));
        }
        let act_param = match name {
            "elu" => Some(float("alpha")?),
            "swish" => Some(float("beta")?),
            _ => None,
        };
        if let Some(f) = ActFn::from_name(name, act_param) {
            return Ok(Op::Act(f));
        }
        Ok(match name {
            "compare_scalar" => {
                let c = string("cmp")?;
                let c = CmpFn::from_name(&c).ok_or_else(|| bad("cmp", "a comparison name"))?;
                Op::CompareScalar(c, float("scalar")?)
            }
            "clip" => Op::Clip(float("lo")?, float("hi")?),
            "reshape" => Op::Reshape(shape("shape")?),
            "broadcast_to" => Op::BroadcastTo(shape("shape")?),
            "sigmoid_bce_logits_to" => Op::SigmoidBceTo(shape("shape")?),
            "dot" => Op::Dot {
                ta: boolean("transpose_a")?,
                tb: boolean("transpose_b")?,
            },
            "dot_csr_dense_t" => Op::DotCsrDenseT,
            "bias_act" => {
                let a = string("act")?;
                let act = match a.as_str() {
                    "identity" => None,
                    other => Some(
                        FusedAct::from_name(other)
                            .ok_or_else(|| bad("act", "identity, sigmoid, tanh or relu"))?,
                    ),
                };
                Op::BiasAct {
                    act,
                    absorb: boolean("absorb")?,
                }
            }
            "sigmoid_bce_logits" => Op::SigmoidBce,
            "softmax_ce_logits" => Op::SoftmaxCe,
            "softmax_ce_ids" => Op::SoftmaxCeIds,
            "sum" => Op::Sum {
                axes: axes("axes")?,
                keepdims: boolean("keepdims")?,
            },
            "mean" => Op::Mean {
                axes: axes("axes")?,
                keepdims: boolean("keepdims")?,
            },
            "softmax" => Op::Softmax(int("axis")?),
            "log_softmax" => Op::LogSoftmax(int("axis")?),
            "one_hot" => Op::OneHot {
                depth: count("depth")?,
                on: float("on")?,
                off: float("off")?,
                dtype: dtype("dtype")?,
            },
            "where" => Op::Where,
            "astype" => Op::Astype(dtype("dtype")?),
            "detach" => Op::Detach,
            "embedding" => Op::Embedding,
            "check_class_ids" => Op::CheckClassIds {
                classes: count("classes")?,
                count: count("count")?,
            },
            "convolution" | "conv_transpose" => {
                let params = crate::ops::ConvParams {
                    stride: shape("stride")?,
                    padding: shape("padding")?,
                    dilation: shape("dilation")?,
                    groups: count("groups")?,
                    output_padding: shape("output_padding")?,
                };
                if name == "convolution" {
                    Op::Conv {
                        params,
                        bias: boolean("bias")?,
                    }
                } else {
                    Op::ConvTranspose(params)
                }
            }
            "transpose" => {
                let perm = shape("axes")?;
                let mut seen = vec![false; perm.len()];
                if perm
                    .iter()
                    .any(|&a| a >= perm.len() || std::mem::replace(&mut seen[a], true))
                {
                    return Err(bad("axes", "a permutation of 0..n"));
                }
                Op::Transpose(perm)
            }
            "concat" => {
                let n = count("num_args")?;
                if n == 0 {
                    return Err(bad("num_args", "at least 1"));
                }
                Op::Concat {
                    axis: count("axis")?,
                    n,
                }
            }
            "slice_axis" => {
                let step = int("step")?;
                if step == 0 {
                    return Err(bad("step", "a non-zero whole number"));
                }
                Op::SliceAxis {
                    axis: count("axis")?,
                    begin: count("begin")?,
                    step,
                    len: count("len")?,
                }
            }
            "rnn_sequence" => {
                use crate::ops::rnn::RnnMode;
                let mode = string("mode")?;
                let mode = [
                    RnnMode::RnnTanh,
                    RnnMode::RnnRelu,
                    RnnMode::Lstm,
                    RnnMode::Gru,
                ]
                .into_iter()
                .find(|m| m.name() == mode)
                .ok_or_else(|| bad("mode", "rnn_tanh, rnn_relu, lstm or gru"))?;
                Op::RnnSequence {
                    mode,
                    reverse: boolean("reverse")?,
                    zero_state: boolean("zero_state")?,
                }
            }
            "update_running" => Op::RunningUpdate {
                momentum: float("momentum")?,
            },
            "pooling" => Op::Pool(crate::ops::PoolParams {
                kind: match string("pool_type")?.as_str() {
                    "max" => crate::ops::PoolType::Max,
                    "avg" => crate::ops::PoolType::Avg,
                    _ => return Err(bad("pool_type", "max or avg")),
                },
                kernel: shape("kernel")?,
                stride: shape("stride")?,
                padding: shape("padding")?,
                ceil_mode: boolean("ceil_mode")?,
                count_include_pad: boolean("count_include_pad")?,
                global: boolean("global")?,
            }),
            "dropout_mask" => {
                let p = float("p")?;
                if !(0.0..1.0).contains(&p) {
                    return Err(bad("p", "a rate in [0, 1)"));
                }
                Op::DropoutMask {
                    p,
                    stream: crate::ops::MaskStream::new(int("seed")? as u64),
                }
            }
            other => {
                return Err(Error::arg(
                    OP,
                    format!("unknown operator '{other}' (not one sparrow traces)"),
                ))
            }
        })
    }

    /// Run the operator on `x` (as many arrays as [`Op::arity`]) through the public operator
    /// the traced code called.
    pub fn apply(&self, x: &[NDArray]) -> Result<NDArray> {
        if x.len() != self.arity() {
            return Err(Error::arg(
                "graph",
                format!(
                    "operator '{}' takes {} inputs, got {}",
                    self.name(),
                    self.arity(),
                    x.len()
                ),
            ));
        }
        let declined = |what: &str| {
            Error::arg(
                "graph",
                format!(
                    "operator '{}' declined operands it accepted when traced ({what})",
                    self.name()
                ),
            )
        };
        match self {
            Op::Binary(b) => {
                let (a, c) = (&x[0], &x[1]);
                match b {
                    BinaryOp::Add => a.add(c),
                    BinaryOp::Sub => a.sub(c),
                    BinaryOp::Mul => a.mul(c),
                    BinaryOp::Div => a.div(c),
                    BinaryOp::Pow => a.pow(c),
                    BinaryOp::Maximum => a.maximum(c),
                    BinaryOp::Minimum => a.minimum(c),
                }
            }
            Op::Unary(u) => {
                let a = &x[0];
                match u {
                    UnaryFn::Neg => a.neg(),
                    UnaryFn::Exp => a.exp(),
                    UnaryFn::Log => a.log(),
                    UnaryFn::Sqrt => a.sqrt(),
                    UnaryFn::Square => a.square(),
                    UnaryFn::Abs => a.abs(),
                    UnaryFn::Sign => a.sign(),
                    UnaryFn::Sigmoid => a.sigmoid(),
                    UnaryFn::Relu => a.relu(),
                    UnaryFn::Tanh => a.tanh(),
                    UnaryFn::Softrelu => a.softrelu(),
                }
            }
            Op::Act(f) => x[0].activation(*f),
            Op::Scalar(f, s) => {
                let (a, s) = (&x[0], *s);
                match f {
                    ScalarFn::Add => a.add_scalar(s),
                    ScalarFn::Sub => a.sub_scalar(s),
                    ScalarFn::RSub => a.rsub_scalar(s),
                    ScalarFn::Mul => a.mul_scalar(s),
                    ScalarFn::Div => a.div_scalar(s),
                    ScalarFn::RDiv => a.rdiv_scalar(s),
                    ScalarFn::Pow => a.pow_scalar(s),
                    ScalarFn::Maximum => a.maximum_scalar(s),
                    ScalarFn::Minimum => a.minimum_scalar(s),
                    ScalarFn::LeakyRelu => a.leaky_relu(s),
                }
            }
            Op::Compare(c) => {
                let (a, b) = (&x[0], &x[1]);
                match c {
                    CmpFn::Eq => a.equal(b),
                    CmpFn::Ne => a.not_equal(b),
                    CmpFn::Gt => a.greater(b),
                    CmpFn::Ge => a.greater_equal(b),
                    CmpFn::Lt => a.lesser(b),
                    CmpFn::Le => a.lesser_equal(b),
                }
            }
            Op::CompareScalar(c, s) => {
                let (a, s) = (&x[0], *s);
                match c {
                    CmpFn::Eq => a.equal_scalar(s),
                    CmpFn::Ne => a.not_equal_scalar(s),
                    CmpFn::Gt => a.greater_scalar(s),
                    CmpFn::Ge => a.greater_equal_scalar(s),
                    CmpFn::Lt => a.lesser_scalar(s),
                    CmpFn::Le => a.lesser_equal_scalar(s),
                }
            }
            Op::Clip(lo, hi) => x[0].clip(*lo, *hi),
            Op::Reshape(s) => x[0].reshape(s),
            Op::BroadcastTo(s) => x[0].broadcast_to(s),
            Op::Dot { ta, tb } => x[0].dot_t(&x[1], *ta, *tb),
            Op::DotCsrDenseT => crate::sparse::dot_csr_dense_t(&x[0], &x[1]),
            Op::BiasAct { act, absorb } => {
                let r = if *absorb {
                    crate::ops::fused::bias_act_absorbing(&x[0], &x[1], *act)?
                } else {
                    crate::ops::fused::bias_act(&x[0], &x[1], *act)?
                };
                r.ok_or_else(|| declined("a 2-D dense product and a bias of its column count"))
            }
            Op::SigmoidBce => crate::ops::fused::sigmoid_bce_logits(&x[0], &x[1])?
                .ok_or_else(|| declined("dense float operands of one shape")),
            Op::SigmoidBceTo(s) => crate::ops::fused::sigmoid_bce_logits_to(&x[0], &x[1], s)?
                .ok_or_else(|| declined("dense float operands of one element count")),
            // Declined off the host (an imported graph run on a device): the same loss composed.
            Op::SoftmaxCe => match crate::ops::fused::softmax_ce_logits(&x[0], &x[1])? {
                Some(l) => Ok(l),
                None => crate::ops::fused::softmax_ce_composite(&x[0], &x[1], false),
            },
            Op::SoftmaxCeIds => match crate::ops::fused::softmax_ce_ids(&x[0], &x[1])? {
                Some(l) => Ok(l),
                None => crate::ops::fused::softmax_ce_composite(&x[0], &x[1], true),
            },
            Op::Sum { axes, keepdims } => x[0].sum(axes.as_deref(), *keepdims),
            Op::Mean { axes, keepdims } => x[0].mean(axes.as_deref(), *keepdims),
            Op::Softmax(a) => x[0].softmax(*a),
            Op::LogSoftmax(a) => x[0].log_softmax(*a),
            Op::OneHot {
                depth,
                on,
                off,
                dtype,
            } => x[0].one_hot(*depth, *on, *off, *dtype),
            Op::Where => NDArray::where_(&x[0], &x[1], &x[2]),
            Op::Astype(d) => x[0].astype(*d),
            Op::Detach => Ok(x[0].detach()),
            Op::Embedding => crate::sparse::embedding(&x[0], &x[1]),
            Op::CheckClassIds { classes, count } => x[0].check_class_ids(*classes, *count),
            Op::DropoutMask { p, stream } => x[0].dropout_mask(*p, stream),
            Op::Conv { params, .. } => x[0].convolution(&x[1], x.get(2), params),
            Op::ConvTranspose(params) => x[0].conv_transpose(&x[1], None, params),
            Op::Pool(params) => x[0].pool(params),
            Op::RunningUpdate { momentum } => x[0].update_running(&x[1], *momentum),
            Op::Transpose(perm) => x[0].transpose(Some(perm)),
            Op::Concat { axis, .. } => NDArray::concat(&x.iter().collect::<Vec<_>>(), *axis as i64),
            Op::SliceAxis {
                axis,
                begin,
                step,
                len,
            } => x[0].slice_run(*axis, *begin, *step, *len),
            Op::RnnSequence {
                mode,
                reverse,
                zero_state,
            } => {
                let states = (!*zero_state).then(|| (&x[3], x.get(4)));
                crate::ops::rnn::rnn_sequence_saved(*mode, &x[0], &x[1], &x[2], states, *reverse)
            }
            Op::Grad(g) => g.apply(x),
        }
    }

    /// True for operators that draw new values at every run (dropout's mask): a graph must
    /// run such a node exactly once per run, so it is never recomputed in the backward, and
    /// a CUDA graph, which would replay the values of its capture, is not made of it.
    pub fn is_random(&self) -> bool {
        matches!(self, Op::DropoutMask { .. })
    }

    /// True for operators whose every run must happen exactly once per graph run: random
    /// draws ([`Op::is_random`]) and updates of an input in place (a running statistic).
    /// Recomputation never clones them.
    pub fn runs_once(&self) -> bool {
        self.is_random() || matches!(self, Op::RunningUpdate { .. })
    }

    /// Whether [`Op::apply_over`] can rewrite an earlier result of this operator.
    pub(crate) fn rewrites_over(&self) -> bool {
        matches!(self, Op::Grad(super::grad::GradFn::CsrTDense))
    }

    /// This operator's result on `x` written over `out`, an earlier result of it that nobody
    /// else holds, reusing its buffers: `Ok(false)`, nothing written, for operators without
    /// such a form or where `out` cannot take the result (the caller then applies the
    /// operator). Today the row_sparse weight gradient `x^T g` of a csr batch, whose result
    /// has no planned buffer (its row count depends on the batch).
    pub(crate) fn apply_over(&self, x: &[NDArray], out: &NDArray) -> Result<bool> {
        if !self.rewrites_over() {
            return Ok(false);
        }
        match (self, x) {
            (Op::Grad(super::grad::GradFn::CsrTDense), [xs, g]) => {
                crate::sparse::csr_t_dense_over(xs, g, out)
            }
            _ => Ok(false),
        }
    }
}
