//! `Dense`: a fully connected layer that is sparse-aware.
//!
//! ## Weight layout
//! - Default (`grad_stype` dense): weight `(units, in_units)` as in Gluon, `y = X W^T + b`.
//!   A CSR batch is multiplied by the sparse kernel; the weight gradient is dense.
//! - `grad_stype(SType::RowSparse)`: weight stored **transposed**, `(in_units, units)`, and
//!   `y = X W + b`. Row `k` of the weight belongs to input feature `k`, so the gradient
//!   `X^T dY` of a CSR batch is row_sparse over exactly the features the batch used, and lazy
//!   optimizers touch only those rows. Parameter files store this weight as it is held,
//!   `(in_units, units)` (see [`Dense::weight_transposed`]); transpose it to compare with a
//!   Gluon/PyTorch `(out, in)` weight.

use sparrow_core::{DType, Error, NDArray, Result, SType, Shape};

use super::activation::apply_activation;
use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;
use sparrow_core::sparse::dot_csr_dense_t;

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
        let transposed = self.weight_transposed();
        let shape = if transposed {
            [self.in_units, self.units]
        } else {
            [self.units, self.in_units]
        };
        let mut w = Parameter::new("weight", &shape)
            .with_dtype(self.dtype)
            .with_grad_stype(self.grad_stype)
            .with_fan_in_first(transposed);
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
    /// Builder: activation applied to the output (`relu`, `sigmoid`, `tanh`, `softrelu`,
    /// `softsign`); an unknown name is reported at the first forward.
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
    /// Builder: storage type of the weight gradient. `RowSparse` switches the weight to the
    /// `(in_units, units)` layout (see the module docs).
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

    /// True when the weight is stored `(in_units, units)` (row_sparse gradient layout).
    pub fn weight_transposed(&self) -> bool {
        self.grad_stype == SType::RowSparse
    }
    /// The weight parameter.
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
        let shape = if self.weight_transposed() {
            [in_units, self.units]
        } else {
            [self.units, in_units]
        };
        self.weight.data_for_shape(&shape)
    }
}

impl Block for Dense {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let transposed = self.weight_transposed();
        let xshape = x.dims();
        let (y, lead) = if x.stype() == SType::Csr {
            let w = self.infer(xshape[1])?;
            // (in, out) layout: core's csr x dense kernel, whose weight gradient is row_sparse
            // over the batch's columns. Gluon layout: X W^T with a dense gradient.
            let y = if transposed {
                x.dot(&w)?
            } else {
                dot_csr_dense_t(x, &w)?
            };
            (y, Shape::from_slice(&xshape[..1]))
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
            let w = self.infer(x2.dims()[1])?;
            let y = if transposed {
                x2.dot(&w)?
            } else {
                x2.dot_t(&w, false, true)?
            };
            (y, lead)
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
            self.weight.shape()[if self.weight_transposed() { 0 } else { 1 }]
        } else {
            self.in_units
        };
        let act = self.activation.as_deref().unwrap_or("linear");
        let layout = if self.weight_transposed() {
            ", weight (in, out), row_sparse grad"
        } else {
            ""
        };
        format!("Dense({inu} -> {}, {act}{layout})", self.units)
    }
}
