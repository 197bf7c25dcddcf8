//! Pooling layers (Gluon's `nn.MaxPool1D/2D/3D`, `AvgPool1D/2D/3D`, `GlobalMaxPool1D/2D/3D`,
//! `GlobalAvgPool1D/2D/3D`), layouts NCW / NCHW / NCDHW, over core's [`NDArray::pool`].
//! No parameters. `ceil_mode` and `count_include_pad` are Gluon's (see
//! [`PoolParams`](sparrow_core::ops::PoolParams)).

use sparrow_core::ops::{PoolParams, PoolType};
use sparrow_core::{Error, NDArray, Result};

use crate::block::Block;

/// Pool `x` after checking it has `nd` spatial dims.
fn pool(name: &'static str, nd: usize, p: &PoolParams, x: &NDArray) -> Result<NDArray> {
    if x.ndim() != nd + 2 {
        return Err(Error::shape(
            name,
            format!(
                "expects (batch, channels, {nd} spatial dims), got {:?}",
                x.shape()
            ),
        ));
    }
    x.pool(p)
}

/// A short description of a pooling.
fn describe(name: &str, p: &PoolParams) -> String {
    if p.global {
        return format!("{name}()");
    }
    let stride = if p.stride.is_empty() {
        &p.kernel
    } else {
        &p.stride
    };
    let mut s = format!("{name}(size={:?}, stride={stride:?}", p.kernel);
    if !p.padding.is_empty() {
        s.push_str(&format!(", padding={:?}", p.padding));
    }
    if p.ceil_mode {
        s.push_str(", ceil_mode");
    }
    if p.kind == PoolType::Avg && !p.count_include_pad {
        s.push_str(", count_include_pad=false");
    }
    s + ")"
}

/// Defines one windowed pooling layer.
macro_rules! pool_layer {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $nd:literal, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $ty(PoolParams);

        impl $ty {
            /// Windows of `pool_size` (one value for every spatial dim, or one per dim),
            /// stride = pool size, no padding, output size rounded down.
            pub fn new(pool_size: &[usize]) -> Self {
                $ty(PoolParams::new($kind, pool_size))
            }
            /// Builder: the stride (default: the pool size).
            pub fn strides(mut self, s: &[usize]) -> Self {
                self.0.stride = s.to_vec();
                self
            }
            /// Builder: implicit padding on both sides (smaller than the pool size).
            pub fn padding(mut self, p: &[usize]) -> Self {
                self.0.padding = p.to_vec();
                self
            }
            /// Builder: round the output size up (Gluon's `ceil_mode`).
            pub fn ceil_mode(mut self, yes: bool) -> Self {
                self.0.ceil_mode = yes;
                self
            }
            /// The pooling parameters.
            pub fn pool_params(&self) -> &PoolParams {
                &self.0
            }
        }

        impl Block for $ty {
            fn forward(&self, x: &NDArray) -> Result<NDArray> {
                pool($name, $nd, &self.0, x)
            }
            fn kind(&self) -> &'static str {
                "pool"
            }
            fn describe(&self) -> String {
                describe($name, &self.0)
            }
        }
    };
}

/// Defines the `count_include_pad` builder of an average pooling layer.
macro_rules! count_include_pad {
    ($ty:ident) => {
        impl $ty {
            /// Builder: whether the padding counts in each window's divisor (default true).
            pub fn count_include_pad(mut self, yes: bool) -> Self {
                self.0.count_include_pad = yes;
                self
            }
        }
    };
}

/// Defines one global pooling layer.
macro_rules! global_pool_layer {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $nd:literal, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $ty(PoolParams);

        impl $ty {
            /// Pools each plane to one value; the output keeps its spatial dims as size 1.
            pub fn new() -> Self {
                $ty(PoolParams::global($kind))
            }
        }

        impl Default for $ty {
            fn default() -> Self {
                Self::new()
            }
        }

        impl Block for $ty {
            fn forward(&self, x: &NDArray) -> Result<NDArray> {
                pool($name, $nd, &self.0, x)
            }
            fn kind(&self) -> &'static str {
                "pool"
            }
            fn describe(&self) -> String {
                describe($name, &self.0)
            }
        }
    };
}

pool_layer!(
    /// 1-D max pooling over `(batch, channels, width)` (Gluon's `nn.MaxPool1D`).
    MaxPool1D, "MaxPool1D", 1, PoolType::Max
);
pool_layer!(
    /// 2-D max pooling over `(batch, channels, height, width)` (Gluon's `nn.MaxPool2D`).
    ///
    /// ```
    /// use sparrow_nn::{Block, MaxPool2D};
    /// use sparrow_core::{DType, NDArray};
    /// let pool = MaxPool2D::new(&[2]).ceil_mode(true);
    /// let y = pool.forward(&NDArray::ones(&[1, 3, 5, 5], DType::F32).unwrap()).unwrap();
    /// assert_eq!(y.shape(), vec![1, 3, 3, 3]);
    /// ```
    MaxPool2D, "MaxPool2D", 2, PoolType::Max
);
pool_layer!(
    /// 3-D max pooling over `(batch, channels, depth, height, width)` (Gluon's `nn.MaxPool3D`).
    MaxPool3D, "MaxPool3D", 3, PoolType::Max
);
pool_layer!(
    /// 1-D average pooling (Gluon's `nn.AvgPool1D`); padding counts in the divisor unless
    /// `count_include_pad(false)`.
    AvgPool1D, "AvgPool1D", 1, PoolType::Avg
);
pool_layer!(
    /// 2-D average pooling (Gluon's `nn.AvgPool2D`); padding counts in the divisor unless
    /// `count_include_pad(false)`.
    AvgPool2D, "AvgPool2D", 2, PoolType::Avg
);
pool_layer!(
    /// 3-D average pooling (Gluon's `nn.AvgPool3D`); padding counts in the divisor unless
    /// `count_include_pad(false)`.
    AvgPool3D, "AvgPool3D", 3, PoolType::Avg
);
count_include_pad!(AvgPool1D);
count_include_pad!(AvgPool2D);
count_include_pad!(AvgPool3D);

global_pool_layer!(
    /// Largest value of each `(batch, channel)` row (Gluon's `nn.GlobalMaxPool1D`):
    /// `(batch, channels, 1)`.
    GlobalMaxPool1D, "GlobalMaxPool1D", 1, PoolType::Max
);
global_pool_layer!(
    /// Largest value of each `(batch, channel)` plane (Gluon's `nn.GlobalMaxPool2D`):
    /// `(batch, channels, 1, 1)`.
    GlobalMaxPool2D, "GlobalMaxPool2D", 2, PoolType::Max
);
global_pool_layer!(
    /// Largest value of each `(batch, channel)` volume (Gluon's `nn.GlobalMaxPool3D`).
    GlobalMaxPool3D, "GlobalMaxPool3D", 3, PoolType::Max
);
global_pool_layer!(
    /// Mean of each `(batch, channel)` row (Gluon's `nn.GlobalAvgPool1D`).
    GlobalAvgPool1D, "GlobalAvgPool1D", 1, PoolType::Avg
);
global_pool_layer!(
    /// Mean of each `(batch, channel)` plane (Gluon's `nn.GlobalAvgPool2D`):
    /// `(batch, channels, 1, 1)`, the head of a ResNet.
    GlobalAvgPool2D, "GlobalAvgPool2D", 2, PoolType::Avg
);
global_pool_layer!(
    /// Mean of each `(batch, channel)` volume (Gluon's `nn.GlobalAvgPool3D`).
    GlobalAvgPool3D, "GlobalAvgPool3D", 3, PoolType::Avg
);
