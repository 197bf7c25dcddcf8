//! The four parameters of one recurrent cell or one direction of one layer, and the input
//! projection every step's gates start from.

use sparrow_core::ops::fused::bias_add;
use sparrow_core::ops::rnn::RnnMode;
use sparrow_core::{DType, Error, NDArray, Result};

use crate::init::Initializer;
use crate::parameter::Parameter;

/// `i2h_weight (G*H, I)`, `h2h_weight (G*H, H)`, `i2h_bias`, `h2h_bias (G*H,)`: Gluon's names
/// and PyTorch's layout (`weight_ih_l0` etc.), gates stacked in MXNet's order.
#[derive(Debug, Clone)]
pub(crate) struct RnnParams {
    prefix: String,
    pub(crate) i2h_weight: Parameter,
    pub(crate) h2h_weight: Parameter,
    pub(crate) i2h_bias: Parameter,
    pub(crate) h2h_bias: Parameter,
}

impl RnnParams {
    /// Parameters named `{prefix}i2h_weight` etc. for `hidden` units and `input_size` inputs
    /// (0: inferred at the first forward). Biases start at zero, as in Gluon.
    pub(crate) fn new(
        prefix: &str,
        mode: RnnMode,
        hidden: usize,
        input_size: usize,
        dtype: DType,
    ) -> RnnParams {
        let gh = mode.gates() * hidden;
        let p = |name: &str, shape: &[usize]| {
            Parameter::new(&format!("{prefix}{name}"), shape).with_dtype(dtype)
        };
        RnnParams {
            prefix: prefix.to_string(),
            i2h_weight: p("i2h_weight", &[gh, input_size]),
            h2h_weight: p("h2h_weight", &[gh, hidden]),
            i2h_bias: p("i2h_bias", &[gh]).with_init(Initializer::Zero),
            h2h_bias: p("h2h_bias", &[gh]).with_init(Initializer::Zero),
        }
    }

    /// The input size as known now (0 until inferred).
    pub(crate) fn input_size(&self) -> usize {
        self.i2h_weight.shape().get(1).copied().unwrap_or(0)
    }

    /// The four parameters with local names `{prefix}i2h_weight`, ... in Gluon's order.
    pub(crate) fn named(&self) -> Vec<(String, Parameter)> {
        let prefix = &self.prefix;
        [
            ("i2h_weight", &self.i2h_weight),
            ("h2h_weight", &self.h2h_weight),
            ("i2h_bias", &self.i2h_bias),
            ("h2h_bias", &self.h2h_bias),
        ]
        .into_iter()
        .map(|(n, p)| (format!("{prefix}{n}"), p.clone()))
        .collect()
    }
}

/// `x i2h_weight^T + i2h_bias` for a `(rows, input)` matrix `x`: every gate of every row in
/// one product, the bias added in the same recorded node where core's fused op takes it.
pub(crate) fn input_projection(x: &NDArray, p: &RnnParams) -> Result<NDArray> {
    let xs = x.shape();
    if xs.len() != 2 {
        return Err(Error::shape(
            "rnn input projection",
            format!("needs a (rows, input) matrix, got {xs:?}"),
        ));
    }
    let gh = p.h2h_bias.shape()[0];
    let w = p.i2h_weight.data_for_shape(&[gh, xs[1]])?;
    let b = p.i2h_bias.data_for_shape(&[gh])?;
    let y = x.dot_t(&w, false, true)?;
    match bias_add(&y, &b)? {
        Some(out) => Ok(out),
        None => y.add(&b),
    }
}
