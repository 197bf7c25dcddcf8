//! `Dense`: a fully connected layer that is sparse-aware.
//!
//! ## Weight layout: `(in_units, units)`, whatever the gradient's storage type
//! The weight is held, saved and initialized as `(in_units, units)` and the layer computes
//! `y = X W + b`, for a dense gradient as for a row_sparse one, so a model's parameter files
//! do not depend on its gradient storage types. This is the transpose of Gluon's and PyTorch's
//! `(units, in_units)`; it is the kernel layout of Keras and Flax, and the layout of MXNet's own
//! sparse models (`dot(csr, weight)`). Chosen because it is the only layout in which one input
//! feature's weights are one contiguous row: a CSR batch's gradient `X^T dY` is then row_sparse
//! over exactly the features the batch used, lazy optimizers touch only those rows, and the
//! forward gathers whole rows. A dense product costs the same either way (the GEMM reads a
//! transposed operand in place).
//!
//! Parameter files say so (`layout = in_out` in their metadata, see [`crate::io`]); a Gluon or
//! PyTorch weight `(units, in_units)` (a file saved with `layout = out_in`, or by another tool,
//! without a layout) is transposed when loaded, so ports load their files unchanged. To put a
//! Gluon weight in by hand, transpose it: `w.transpose(None)` before `set_data`.

use sparrow_core::{DType, Error, NDArray, Result, SType, Shape};

use super::activation::apply_activation;
use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;

/// Fully connected layer (Gluon's `nn.Dense`).
#[derive(Debug, Clone)]
pub struct Dense {
    units: usize,
    in_units: usize,
    use_bias: bool,
    flatten: bool,
    activation: Option<String>,
    dtype: DType,
    grad_stype: SType,
    weight_init: Option<Initializer>,
    weight: Parameter,
    bias: Option<Parameter>,
}

impl Dense {
    /// `units` outputs; input size inferred at the first forward, bias on, flatten on.
    pub fn new(units: usize) -> Dense {
        let mut d = Dense {
            units,
            in_units: 0,
            use_bias: true,
            flatten: true,
            activation: None,
            dtype: DType::F32,
            grad_stype: SType::Dense,
            weight_init: None,
            weight: Parameter::new("weight", &[]),
            bias: None,
        };
        d.rebuild();
        d
    }

    fn rebuild(&mut self) {
        let mut w = Parameter::new("weight", &[self.in_units, self.units])
            .with_dtype(self.dtype)
            .with_grad_stype(self.grad_stype)
            .with_fan_in_first(true);
        if let Some(i) = &self.weight_init {
            w = w.with_init(i.clone());
        }
        self.weight = w;
        self.bias = self.use_bias.then(|| {
            Parameter::new("bias", &[self.units])
                .with_dtype(self.dtype)
                .with_init(Initializer::Zero)
        });
    }

    /// Builder: number of input features (otherwise inferred at the first forward).
    pub fn in_units(mut self, n: usize) -> Self {
        self.in_units = n;
        self.rebuild();
        self
    }
    /// Builder: activation applied to the output, by a name of
    /// [`apply_activation`](crate::layers::apply_activation) (`relu`, `sigmoid`, `tanh`,
    /// `softrelu`, `softsign`, `gelu`, `silu`, ...); an unknown name is reported at the first
    /// forward.
    pub fn activation(mut self, name: &str) -> Self {
        self.activation = Some(name.to_string());
        self
    }
    /// Builder: add a bias (default true).
    pub fn use_bias(mut self, yes: bool) -> Self {
        self.use_bias = yes;
        self.rebuild();
        self
    }
    /// Builder: flatten inputs to 2-D (default true); when false the layer applies to the
    /// last axis.
    pub fn flatten(mut self, yes: bool) -> Self {
        self.flatten = yes;
        self
    }
    /// Builder: element type of the parameters.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self.rebuild();
        self
    }
    /// Builder: storage type of the weight gradient: `RowSparse` for a gradient over the rows
    /// (input features) a CSR batch uses, which lazy optimizers update alone. The weight's
    /// layout is `(in_units, units)` either way (see the module docs).
    pub fn grad_stype(mut self, stype: SType) -> Self {
        self.grad_stype = stype;
        self.rebuild();
        self
    }
    /// Builder: the weight's own initializer.
    pub fn weight_initializer(mut self, init: Initializer) -> Self {
        self.weight_init = Some(init);
        self.rebuild();
        self
    }

    /// The weight parameter, `(in_units, units)`.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }
    /// The bias parameter, if any.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
    /// Number of outputs.
    pub fn units(&self) -> usize {
        self.units
    }

    fn infer(&self, in_units: usize) -> Result<NDArray> {
        self.weight.data_for_shape(&[in_units, self.units])
    }
}

impl Block for Dense {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let xshape = x.dims();
        let (y, lead) = if x.stype() == SType::Csr {
            if self.weight.stages_rows() {
                // A weight over its device's budget stays in host memory (the batch's rows are
                // staged on the device), and a sharded one lives in a store's workers (the
                // rows' owners compute the product); the gradient comes back as row_sparse.
                // A sharded table's shape is known; a batch of the wrong width is the store's
                // error, raised on every worker at once instead of on this one alone.
                if !self.weight.is_sharded() {
                    self.weight.infer_shape(&[xshape[1], self.units])?;
                }
                (self.weight.csr_dot(x)?, Shape::from_slice(&xshape[..1]))
            } else {
                let w = self.infer(xshape[1])?;
                // Core's csr x dense kernel: its weight gradient is row_sparse over the batch's
                // columns (densified on delivery when the weight's gradient is dense).
                (x.dot(&w)?, Shape::from_slice(&xshape[..1]))
            }
        } else {
            if xshape.is_empty() {
                return Err(Error::shape("Dense", "input must have at least 1 dim"));
            }
            let (x2, lead) = if xshape.len() == 2 {
                // Already (batch, features): flattening or not, the input is used as it is
                // (no reshape node in the graph).
                (x.clone(), Shape::from_slice(&xshape[..1]))
            } else if self.flatten {
                let b = xshape[0];
                let rest: usize = xshape[1..].iter().product();
                (x.reshape(&[b, rest])?, Shape::from_slice(&[b]))
            } else {
                let last = *xshape.last().unwrap_or(&1);
                let lead = Shape::from_slice(&xshape[..xshape.len() - 1]);
                (x.reshape(&[lead.iter().product(), last])?, lead)
            };
            if self.weight.stages_rows() {
                let where_ = if self.weight.is_sharded() {
                    "split across the workers of a store (sharded)".to_string()
                } else {
                    format!(
                        "in host memory (over {:?}'s memory budget)",
                        self.weight.device()
                    )
                };
                return Err(Error::stype(
                    "Dense",
                    format!(
                        "weight '{}' is {where_} and is read a batch's rows at a time, which \
                         needs a csr input; this input is dense",
                        self.weight.name(),
                    ),
                ));
            }
            let w = self.infer(x2.dims()[1])?;
            (x2.dot(&w)?, lead)
        };
        // Bias and activation in one recorded op where the activation allows it (sigmoid, tanh,
        // relu), which also takes over the product's node (`y` is ours alone): one node per
        // layer. `act_done` says whether the activation still has to be applied below.
        let fused = self
            .activation
            .as_deref()
            .and_then(sparrow_core::ops::fused::FusedAct::from_name);
        let (y, act_done) = match &self.bias {
            Some(b) => {
                let bias = b.data_for_shape(&[self.units])?;
                match sparrow_core::ops::fused::bias_act_absorbing(&y, &bias, fused)? {
                    Some(out) => (out, fused.is_some()),
                    None => (y.add(&bias)?, false),
                }
            }
            None => (y, false),
        };
        let mut oshape = lead;
        oshape.push(self.units);
        let y = if y.has_shape(&oshape) {
            y
        } else {
            y.reshape(&oshape)?
        };
        match self.activation.as_deref().filter(|_| !act_done) {
            Some(a) => apply_activation(a, &y),
            None => Ok(y),
        }
    }
    fn kind(&self) -> &'static str {
        "dense"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b.clone()));
        }
        v
    }
    fn describe(&self) -> String {
        let inu = if self.in_units == 0 {
            self.weight.shape()[0]
        } else {
            self.in_units
        };
        let act = self.activation.as_deref().unwrap_or("linear");
        let grad = if self.grad_stype == SType::RowSparse {
            ", row_sparse grad"
        } else {
            ""
        };
        format!("Dense({inu} -> {}, {act}{grad})", self.units)
    }
}
