//! The random family of the backend interface: arrays drawn from a distribution.
//!
//! An operator (`crate::random`) validates the parameters, draws one 64-bit key from its
//! generator and asks the backend for `n` values from that key. Each backend derives its
//! streams from the key alone (the CPU: fixed-size chunks, each from its own generator seeded
//! by the key and the chunk number), so a seed reproduces an array on every thread count, and
//! a device backend fills its memory in place instead of copying a host draw up.

use super::Storage;
use crate::cpu::CpuStorage;
use crate::dtype::{DType, Device};
use crate::error::Result;

/// A distribution with its parameters (already validated by the operator).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RandomDist {
    /// Uniform in `[low, high)` (float dtypes).
    Uniform {
        /// Inclusive lower bound.
        low: f64,
        /// Exclusive upper bound.
        high: f64,
    },
    /// Normal with mean `loc` and standard deviation `scale` (float dtypes).
    Normal {
        /// Mean.
        loc: f64,
        /// Standard deviation.
        scale: f64,
    },
    /// Normal with mean 0 and standard deviation 1 (float dtypes).
    StandardNormal,
    /// Exponential with mean `scale` (float dtypes).
    Exponential {
        /// Mean (1 / rate).
        scale: f64,
    },
    /// Gamma with shape `alpha` and scale `beta` (float dtypes).
    Gamma {
        /// Shape.
        alpha: f64,
        /// Scale.
        beta: f64,
    },
    /// Poisson counts with mean `lam` > 0 (any dtype).
    Poisson {
        /// Mean.
        lam: f64,
    },
    /// Integers uniform in `[low, high)`, exact in i64 (any dtype the bounds fit).
    RandInt {
        /// Inclusive lower bound.
        low: i64,
        /// Exclusive upper bound.
        high: i64,
    },
    /// 1 with probability `p` in `[0, 1]`, else 0 (any dtype).
    Bernoulli {
        /// Probability of a 1.
        p: f64,
    },
}

impl RandomDist {
    /// The operator's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RandomDist::Uniform { .. } => "uniform",
            RandomDist::Normal { .. } => "normal",
            RandomDist::StandardNormal => "randn",
            RandomDist::Exponential { .. } => "exponential",
            RandomDist::Gamma { .. } => "gamma",
            RandomDist::Poisson { .. } => "poisson",
            RandomDist::RandInt { .. } => "randint",
            RandomDist::Bernoulli { .. } => "bernoulli",
        }
    }
}

/// What a backend implements for random arrays.
pub(crate) trait RandomOps: Sized {
    /// `n` values of `dtype` drawn from `dist`, determined by `key` alone (the same key gives
    /// the same values however many threads fill them).
    fn random(dist: RandomDist, dtype: DType, n: usize, key: u64) -> Result<Self>;
}

impl Storage {
    /// See [`RandomOps::random`]: the draw made in the memory of `device`.
    pub(crate) fn random_on(
        dist: RandomDist,
        dtype: DType,
        n: usize,
        key: u64,
        device: Device,
    ) -> Result<Storage> {
        match device {
            Device::Cpu => Ok(Storage::from(<CpuStorage as RandomOps>::random(
                dist, dtype, n, key,
            )?)),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => Ok(Storage::from(crate::cuda::CudaStorage::random_on(
                ordinal, dist, dtype, n, key,
            )?)),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Device::unavailable_error(dist.name(), device)),
        }
    }
}
