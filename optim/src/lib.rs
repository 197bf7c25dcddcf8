//! sparrow-optim: sparse-aware optimizers, learning-rate schedules, the [`Trainer`] and a
//! [`fit`] loop.
//!
//! Optimizers update plain `(weight, grad, state)` arrays in place through core's update
//! operators ([`sparrow_core::update`]), which follow MXNet 1.9.1's kernels, so a model trained
//! here matches one trained there. A row_sparse gradient updates only its rows (lazy, the
//! default) or every row as if absent rows had a zero gradient (standard,
//! `lazy_update = false`).

mod clip;
pub mod fit;
mod kvstore;
pub mod optimizer;
mod persist;
pub mod schedule;
mod source;
mod trainer;

pub use clip::clip_global_norm;
pub use fit::{
    Accuracy, BatchInputs, DataSource, EarlyStopping, Epoch, EpochStats, Estimator, EventHandler,
    FitOptions, LabelledBatch, Metric,
};
pub use kvstore::{check_many, shard_range, KVStore, ProductGrad, ShardedDot};
pub use trainer::{NonFinite, TableId, Trainer};

pub use optimizer::{
    create, AdaDelta, AdaGrad, Adam, AdamW, Adamax, Cocob, Ftml, Ftrl, GroupAdaGrad, Lamb, MultMap,
    Nadam, Nag, Optimizer, OptimizerOptions, ParamArgs, RMSProp, Sgd, Signum, State, StepCtx,
};
pub use schedule::{
    CosineScheduler, FactorScheduler, LrScheduler, MultiFactorScheduler, PolyScheduler, Warmup,
};
