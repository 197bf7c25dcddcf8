//! `Embedding` and `SparseEmbedding`: row lookups whose gradient is row_sparse.

use sparrow_core::{DType, NDArray, Result, SType};

use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;
use sparrow_core::sparse::embedding;

/// Maps integer ids (any shape, any dtype holding whole numbers) to rows of a
/// `(input_dim, output_dim)` weight (Gluon's `nn.Embedding`). With `sparse_grad` the weight
/// gradient is row_sparse over the ids of the batch; otherwise it is dense.
#[derive(Debug, Clone)]
pub struct Embedding {
    input_dim: usize,
    output_dim: usize,
    weight: Parameter,
}

impl Embedding {
    /// A table of `input_dim` rows of size `output_dim`, f32, dense gradient.
    pub fn new(input_dim: usize, output_dim: usize) -> Embedding {
        Embedding::with_options(input_dim, output_dim, false, DType::F32)
    }

    /// Full constructor: `sparse_grad` selects a row_sparse gradient.
    pub fn with_options(
        input_dim: usize,
        output_dim: usize,
        sparse_grad: bool,
        dtype: DType,
    ) -> Embedding {
        let gs = if sparse_grad {
            SType::RowSparse
        } else {
            SType::Dense
        };
        Embedding {
            input_dim,
            output_dim,
            weight: Parameter::new("weight", &[input_dim, output_dim])
                .with_dtype(dtype)
                .with_grad_stype(gs),
        }
    }

    /// Builder: the weight's own initializer.
    pub fn weight_initializer(self, init: Initializer) -> Self {
        self.weight.set_init(Some(init));
        self
    }

    /// The weight parameter.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }
}

impl Block for Embedding {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        if self.weight.stages_rows() {
            // A table over its device's budget stays in host memory, and a sharded one lives
            // in a store's workers: the rows the ids name are staged on the device (pulled
            // from their owners) and their gradient comes back as row_sparse.
            let (local, wk) = self.weight.stage_for_ids(x)?;
            return embedding(&wk, &local);
        }
        embedding(&self.weight.data()?, x)
    }
    fn kind(&self) -> &'static str {
        "embedding"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![("weight".into(), self.weight.clone())]
    }
    fn describe(&self) -> String {
        format!("Embedding({} -> {})", self.input_dim, self.output_dim)
    }
}

/// An embedding whose weight has `stype = RowSparse` and a row_sparse gradient (Gluon's
/// `contrib.nn.SparseEmbedding`): trainers pull and update only the rows a batch uses, and
/// parameter files may store it as `(indices, data)` pairs.
#[derive(Debug, Clone)]
pub struct SparseEmbedding {
    inner: Embedding,
}

impl SparseEmbedding {
    /// A row_sparse table of `input_dim` rows of size `output_dim`, f32.
    pub fn new(input_dim: usize, output_dim: usize) -> SparseEmbedding {
        let mut inner = Embedding::with_options(input_dim, output_dim, true, DType::F32);
        inner.weight = inner.weight.with_stype(SType::RowSparse);
        SparseEmbedding { inner }
    }

    /// The weight parameter.
    pub fn weight(&self) -> &Parameter {
        &self.inner.weight
    }
}

impl Block for SparseEmbedding {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        self.inner.forward(x)
    }
    fn kind(&self) -> &'static str {
        "sparseembedding"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.inner.params()
    }
    fn describe(&self) -> String {
        format!(
            "SparseEmbedding({} -> {})",
            self.inner.input_dim, self.inner.output_dim
        )
    }
}
