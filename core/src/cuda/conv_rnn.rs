//! Convolution, pooling and the recurrent layers on CUDA ([`ConvOps`], [`RnnOps`]): no CUDA
//! kernels yet. Each method returns the not-ported [`Error::Device`](crate::Error::Device)
//! naming the operation and the device (cuDNN, or kernels of our own, would go here).

use super::launch::not_ported;
use super::storage::CudaStorage;
use crate::error::Result;
use crate::storage::{ConvGeom, ConvOps, PoolGeom, RnnDims, RnnGrads, RnnOps};

impl ConvOps for CudaStorage {
    fn conv(&self, _w: &Self, _bias: Option<&Self>, _g: &ConvGeom) -> Result<Self> {
        Err(not_ported("convolution", self.ordinal()))
    }
    fn conv_data_grad(&self, _w: &Self, _g: &ConvGeom) -> Result<Self> {
        Err(not_ported("convolution backward", self.ordinal()))
    }
    fn conv_weight_grad(&self, _dy: &Self, _g: &ConvGeom) -> Result<Self> {
        Err(not_ported("convolution backward", self.ordinal()))
    }
    fn pool(&self, _g: &PoolGeom) -> Result<Self> {
        Err(not_ported("pooling", self.ordinal()))
    }
    fn pool_grad(&self, _dy: &Self, _g: &PoolGeom) -> Result<Self> {
        Err(not_ported("pooling backward", self.ordinal()))
    }
}

impl RnnOps for CudaStorage {
    fn rnn_forward(
        &self,
        _w: &Self,
        _b: &Self,
        _h0: &Self,
        _c0: Option<&Self>,
        _dims: &RnnDims,
    ) -> Result<(Self, Self)> {
        Err(not_ported("rnn", self.ordinal()))
    }
    fn rnn_backward(&self, _ws: &Self, _w: &Self, _dims: &RnnDims) -> Result<RnnGrads<Self>> {
        Err(not_ported("rnn backward", self.ordinal()))
    }
}
