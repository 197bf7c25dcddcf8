//! The elementwise family of the backend interface: unary maps (activations, scalar arithmetic,
//! comparisons with a scalar), their fused backward passes, and broadcasting binary operators.
//!
//! Operators name what to compute with a small enum ([`Map`], [`MapGrad`], [`BinaryOp`],
//! [`CmpOp`]) and a backend turns each variant into a kernel: the CPU monomorphizes one loop per
//! variant (`crate::cpu::map`); a device backend would pick a compiled kernel by the variant's
//! name. Every method validates nothing about shapes: the operator did that.

use super::Storage;
use crate::error::Result;
use crate::ops::{ActFn, BinaryOp};

/// A unary elementwise operator, with its scalar argument where it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Map {
    /// `-x`
    Neg,
    /// `exp(x)`
    Exp,
    /// `ln(x)`
    Log,
    /// `sqrt(x)`
    Sqrt,
    /// `x * x`
    Square,
    /// `|x|`
    Abs,
    /// `sign(x)` in {-1, 0, 1}
    Sign,
    /// `1 / (1 + exp(-x))`
    Sigmoid,
    /// `max(x, 0)`
    Relu,
    /// `tanh(x)`
    Tanh,
    /// `ln(1 + exp(x))`
    Softrelu,
    /// `x` for x > 0, else `slope * x`
    LeakyRelu(f64),
    /// `x + s`
    AddScalar(f64),
    /// `s - x`
    RsubScalar(f64),
    /// `x * s`
    MulScalar(f64),
    /// `x / s`
    DivScalar(f64),
    /// `s / x`
    RdivScalar(f64),
    /// `x ^ p`
    PowScalar(f64),
    /// `max(x, s)` (ties to x)
    MaximumScalar(f64),
    /// `min(x, s)` (ties to x)
    MinimumScalar(f64),
    /// `min(max(x, lo), hi)`
    Clip(f64, f64),
    /// Where `lo <= x <= hi`: 1, else 0 (the gradient mask of [`Map::Clip`]).
    InsideMask(f64, f64),
    /// Where x > 0: 1, else `slope` (the derivative of [`Map::LeakyRelu`]).
    LeakyReluSlope(f64),
    /// `sin(x)`
    Sin,
    /// `cos(x)` (the derivative of [`Map::Sin`])
    Cos,
    /// `tan(x)`
    Tan,
    /// `arcsin(x)`
    Arcsin,
    /// `arctan(x)`
    Arctan,
    /// `sinh(x)`
    Sinh,
    /// `cosh(x)` (the derivative of [`Map::Sinh`])
    Cosh,
    /// `arcsinh(x)`
    Arcsinh,
    /// `arctanh(x)`
    Arctanh,
    /// `exp(x) - 1`, exact near 0
    Expm1,
    /// `ln(1 + x)`, exact near 0
    Log1p,
    /// cube root
    Cbrt,
    /// nearest whole number, halves away from zero
    Round,
    /// nearest whole number, halves to even
    Rint,
    /// smallest whole number `>= x`
    Ceil,
    /// largest whole number `<= x`
    Floor,
    /// `x` rounded toward zero (MXNet's `trunc` and `fix`)
    Trunc,
    /// An activation of `ops::activation` (ELU, GELU, Swish, ...).
    Act(ActFn),
}

impl Map {
    /// The operator's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Map::Neg => "neg",
            Map::Exp => "exp",
            Map::Log => "log",
            Map::Sqrt => "sqrt",
            Map::Square => "square",
            Map::Abs => "abs",
            Map::Sign => "sign",
            Map::Sigmoid => "sigmoid",
            Map::Relu => "relu",
            Map::Tanh => "tanh",
            Map::Softrelu => "softrelu",
            Map::LeakyRelu(_) | Map::LeakyReluSlope(_) => "leaky_relu",
            Map::AddScalar(_) => "add_scalar",
            Map::RsubScalar(_) => "rsub_scalar",
            Map::MulScalar(_) => "mul_scalar",
            Map::DivScalar(_) => "div_scalar",
            Map::RdivScalar(_) => "rdiv_scalar",
            Map::PowScalar(_) => "pow_scalar",
            Map::MaximumScalar(_) => "maximum_scalar",
            Map::MinimumScalar(_) => "minimum_scalar",
            Map::Clip(..) | Map::InsideMask(..) => "clip",
            Map::Sin => "sin",
            Map::Cos => "cos",
            Map::Tan => "tan",
            Map::Arcsin => "arcsin",
            Map::Arctan => "arctan",
            Map::Sinh => "sinh",
            Map::Cosh => "cosh",
            Map::Arcsinh => "arcsinh",
            Map::Arctanh => "arctanh",
            Map::Expm1 => "expm1",
            Map::Log1p => "log1p",
            Map::Cbrt => "cbrt",
            Map::Round => "round",
            Map::Rint => "rint",
            Map::Ceil => "ceil",
            Map::Floor => "floor",
            Map::Trunc => "trunc",
            Map::Act(f) => f.name(),
        }
    }
}

/// The fused backward of an activation, `dx = f(g, s)` in one pass over the head gradient `g`
/// and one saved array `s` (the op's input or output, as named).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum MapGrad {
    /// `g * y * (1 - y)` from the sigmoid's output `y`.
    SigmoidFromOutput,
    /// `g` where x > 0, else 0, from the relu's input.
    ReluFromInput,
    /// `g * (1 - y^2)` from the tanh's output `y`.
    TanhFromOutput,
    /// `g * sigmoid(x)` from the softrelu's input.
    SoftreluFromInput,
    /// `g * f'(x)` from the input of an activation of `ops::activation`.
    Act(ActFn),
}

impl MapGrad {
    /// The operator's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            MapGrad::SigmoidFromOutput => "sigmoid backward",
            MapGrad::ReluFromInput => "relu backward",
            MapGrad::TanhFromOutput => "tanh backward",
            MapGrad::SoftreluFromInput => "softrelu backward",
            MapGrad::Act(f) => f.name(),
        }
    }
}

/// An elementwise comparison; results are 1 or 0 in the operands' dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

/// What a backend implements for elementwise operators. Shapes are row-major and already
/// checked by the operator; `out` is the broadcast shape of two operands.
pub(crate) trait ElementwiseOps: Sized {
    /// `op` applied to every element (float dtypes).
    fn map(&self, op: Map) -> Result<Self>;
    /// [`ElementwiseOps::map`] written into `out`, a buffer of `self`'s length and dtype.
    fn map_into(&self, op: Map, out: &mut Self) -> Result<()>;
    /// [`ElementwiseOps::map`] over `self` in place.
    fn map_in_place(&mut self, op: Map) -> Result<()>;
    /// The maps `ops` one after the other (a fused chain: `ops[1](ops[0](x))`...), written
    /// into `out` (`self`'s length and dtype) in one pass over memory. Each element goes
    /// through the same functions as the maps one by one, so the bits are theirs.
    fn map_chain_into(&self, ops: &[Map], out: &mut Self) -> Result<()>;
    /// [`ElementwiseOps::map_chain_into`] over `self` in place.
    fn map_chain_in_place(&mut self, ops: &[Map]) -> Result<()>;
    /// The fused backward `op` of head gradient `self` and saved array `saved` (same length
    /// and dtype, float).
    fn map_grad(&self, saved: &Self, op: MapGrad) -> Result<Self>;
    /// `op(x, y)` with broadcasting from `xs` and `ys` to `out` (float dtypes).
    fn zip(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        out: &[usize],
        op: BinaryOp,
    ) -> Result<Self>;
    /// `x op y` as 1/0 with broadcasting (any dtype; both the same).
    fn compare(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        out: &[usize],
        op: CmpOp,
    ) -> Result<Self>;
    /// `x op s` as 1/0 against a scalar (any dtype, compared as f64).
    fn compare_scalar(&self, s: f64, op: CmpOp) -> Result<Self>;
}

impl Storage {
    /// See [`ElementwiseOps::map`].
    pub(crate) fn map(&self, op: Map) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.map(op)?)))
    }
    /// See [`ElementwiseOps::map_into`].
    pub(crate) fn map_into(&self, op: Map, out: &mut Storage) -> Result<()> {
        super::on_backends!(op.name(), (self, out), (a, o) => a.map_into(op, o))
    }
    /// See [`ElementwiseOps::map_in_place`].
    pub(crate) fn map_in_place(&mut self, op: Map) -> Result<()> {
        super::on_backend!(self, b => b.map_in_place(op))
    }
    /// See [`ElementwiseOps::map_chain_into`].
    pub(crate) fn map_chain_into(&self, ops: &[Map], out: &mut Storage) -> Result<()> {
        super::on_backends!("map chain", (self, out), (a, o) => a.map_chain_into(ops, o))
    }
    /// See [`ElementwiseOps::map_chain_in_place`].
    pub(crate) fn map_chain_in_place(&mut self, ops: &[Map]) -> Result<()> {
        super::on_backend!(self, b => b.map_chain_in_place(ops))
    }
    /// See [`ElementwiseOps::map_grad`].
    pub(crate) fn map_grad(&self, saved: &Storage, op: MapGrad) -> Result<Storage> {
        super::on_backends!(op.name(), (self, saved), (g, s) => Ok(Storage::from(g.map_grad(s, op)?)))
    }
    /// See [`ElementwiseOps::zip`].
    pub(crate) fn zip(
        &self,
        xs: &[usize],
        y: &Storage,
        ys: &[usize],
        out: &[usize],
        op: BinaryOp,
    ) -> Result<Storage> {
        super::on_backends!(op.name(), (self, y), (a, b) => Ok(Storage::from(a.zip(xs, b, ys, out, op)?)))
    }
    /// See [`ElementwiseOps::compare`].
    pub(crate) fn compare(
        &self,
        xs: &[usize],
        y: &Storage,
        ys: &[usize],
        out: &[usize],
        op: CmpOp,
    ) -> Result<Storage> {
        super::on_backends!("compare", (self, y), (a, b) => Ok(Storage::from(a.compare(xs, b, ys, out, op)?)))
    }
    /// See [`ElementwiseOps::compare_scalar`].
    pub(crate) fn compare_scalar(&self, s: f64, op: CmpOp) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.compare_scalar(s, op)?)))
    }
}
