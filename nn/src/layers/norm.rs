//! Normalization layers: `BatchNorm` and `LayerNorm`.

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::{DType, Error, NDArray, Result};

use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;

fn norm_axis(axis: i64, nd: usize, op: &'static str) -> Result<usize> {
    let a = if axis < 0 { axis + nd as i64 } else { axis };
    if a < 0 || a >= nd as i64 {
        return Err(Error::index(
            op,
            format!("axis {axis} out of range for a {nd}-D input"),
        ));
    }
    Ok(a as usize)
}

/// Shape `[1, .., C, .., 1]` that broadcasts a per-channel vector along `axis`.
fn channel_shape(nd: usize, axis: usize, c: usize) -> Vec<usize> {
    (0..nd).map(|i| if i == axis { c } else { 1 }).collect()
}

/// Batch normalization over every axis but `axis` (Gluon's `nn.BatchNorm`). In training mode
/// it normalizes with the batch statistics and updates the running ones
/// (`running = momentum * running + (1 - momentum) * batch`); in predict mode it uses the
/// running statistics. `running_mean`/`running_var` have `grad_req = Null`.
#[derive(Debug, Clone)]
pub struct BatchNorm {
    axis: i64,
    momentum: f64,
    epsilon: f64,
    gamma: Parameter,
    beta: Parameter,
    running_mean: Parameter,
    running_var: Parameter,
}

impl BatchNorm {
    /// Channel axis 1, momentum 0.9, epsilon 1e-5, channels inferred at the first forward.
    pub fn new() -> BatchNorm {
        BatchNorm::with_options(1, 0.9, 1e-5, 0, DType::F32)
    }

    /// All options; `in_channels = 0` infers the channel count.
    pub fn with_options(
        axis: i64,
        momentum: f64,
        epsilon: f64,
        in_channels: usize,
        dtype: DType,
    ) -> BatchNorm {
        let p = |n: &str, init: Initializer, req: GradReq| {
            Parameter::new(n, &[in_channels])
                .with_dtype(dtype)
                .with_init(init)
                .with_grad_req(req)
        };
        BatchNorm {
            axis,
            momentum,
            epsilon,
            gamma: p("gamma", Initializer::One, GradReq::Write),
            beta: p("beta", Initializer::Zero, GradReq::Write),
            running_mean: p("running_mean", Initializer::Zero, GradReq::Null),
            running_var: p("running_var", Initializer::One, GradReq::Null),
        }
    }
}

impl Default for BatchNorm {
    fn default() -> Self {
        BatchNorm::new()
    }
}

impl Block for BatchNorm {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let shape = x.shape();
        let nd = shape.len();
        let ax = norm_axis(self.axis, nd, "BatchNorm")?;
        let c = shape[ax];
        for p in [
            &self.gamma,
            &self.beta,
            &self.running_mean,
            &self.running_var,
        ] {
            p.infer_shape(&[c])?;
        }
        let cs = channel_shape(nd, ax, c);
        let red: Vec<i64> = (0..nd).filter(|&i| i != ax).map(|i| i as i64).collect();
        let (mean, var) = if autograd::is_training() {
            let mean = x.mean(Some(&red), true)?;
            let var = x.sub(&mean)?.square()?.mean(Some(&red), true)?;
            // Running statistics: `m * running + (1 - m) * batch`, in place by an operator
            // (traced: a hybridized BatchNorm updates them at every graph run), on the device
            // the parameters live on.
            autograd::pause(|| -> Result<()> {
                for (p, b) in [(&self.running_mean, &mean), (&self.running_var, &var)] {
                    p.data()?.update_running(&b.reshape(&[c])?, self.momentum)?;
                }
                Ok(())
            })?;
            (mean, var)
        } else {
            (
                self.running_mean.data()?.detach().reshape(&cs)?,
                self.running_var.data()?.detach().reshape(&cs)?,
            )
        };
        let xhat = x.sub(&mean)?.div(&var.add_scalar(self.epsilon)?.sqrt()?)?;
        xhat.mul(&self.gamma.data()?.reshape(&cs)?)?
            .add(&self.beta.data()?.reshape(&cs)?)
    }
    fn kind(&self) -> &'static str {
        "batchnorm"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![
            ("gamma".into(), self.gamma.clone()),
            ("beta".into(), self.beta.clone()),
            ("running_mean".into(), self.running_mean.clone()),
            ("running_var".into(), self.running_var.clone()),
        ]
    }
    fn describe(&self) -> String {
        format!(
            "BatchNorm(axis={}, momentum={}, eps={})",
            self.axis, self.momentum, self.epsilon
        )
    }
}

/// Layer normalization over `axis` (default last) with per-channel `gamma` and `beta`
/// (Gluon's `nn.LayerNorm`).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    axis: i64,
    epsilon: f64,
    gamma: Parameter,
    beta: Parameter,
}

impl LayerNorm {
    /// Last axis, epsilon 1e-5, size inferred at the first forward.
    pub fn new() -> LayerNorm {
        LayerNorm::with_options(-1, 1e-5, 0, DType::F32)
    }

    /// All options; `in_channels = 0` infers the size.
    pub fn with_options(axis: i64, epsilon: f64, in_channels: usize, dtype: DType) -> LayerNorm {
        LayerNorm {
            axis,
            epsilon,
            gamma: Parameter::new("gamma", &[in_channels])
                .with_dtype(dtype)
                .with_init(Initializer::One),
            beta: Parameter::new("beta", &[in_channels])
                .with_dtype(dtype)
                .with_init(Initializer::Zero),
        }
    }
}

impl Default for LayerNorm {
    fn default() -> Self {
        LayerNorm::new()
    }
}

impl Block for LayerNorm {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let shape = x.shape();
        let nd = shape.len();
        let ax = norm_axis(self.axis, nd, "LayerNorm")?;
        let c = shape[ax];
        self.gamma.infer_shape(&[c])?;
        self.beta.infer_shape(&[c])?;
        let cs = channel_shape(nd, ax, c);
        let a = [ax as i64];
        let mean = x.mean(Some(&a), true)?;
        let xc = x.sub(&mean)?;
        let var = xc.square()?.mean(Some(&a), true)?;
        let xhat = xc.div(&var.add_scalar(self.epsilon)?.sqrt()?)?;
        xhat.mul(&self.gamma.data()?.reshape(&cs)?)?
            .add(&self.beta.data()?.reshape(&cs)?)
    }
    fn kind(&self) -> &'static str {
        "layernorm"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![
            ("gamma".into(), self.gamma.clone()),
            ("beta".into(), self.beta.clone()),
        ]
    }
    fn describe(&self) -> String {
        format!("LayerNorm(axis={}, eps={})", self.axis, self.epsilon)
    }
}
