//! Seedable, reproducible random arrays (rand + rand_distr).
//!
//! Two ways to draw: the module functions ([`uniform`], [`normal`], ...) use one global
//! generator that [`seed`] resets (MXNet's `mx.random.seed`); an explicit [`Rng`] value gives a
//! private stream that no other code can disturb.
//!
//! Every draw makes its array on the calling thread's default device ([`crate::Device::current`],
//! set by [`crate::with_device`]): the values are drawn in host memory and moved only when that
//! device is not the CPU, so a seed gives the same values on every device.
//!
//! Large arrays are filled in parallel. Every draw takes one 64-bit key from the generator and
//! the array's backend fills it from that key alone (`Storage::random_on`): the CPU fills
//! fixed-size chunks of [`CHUNK`] elements, chunk `c` from its own xoshiro256++ stream seeded by
//! `(key, c)`. The chunking never depends on the thread count, so a seed gives the same array on
//! 1 or 64 threads, and a 1,000,000 x 128 initialisation runs on every core.
//!
//! ```
//! use sparrow_core::{random, DType};
//! random::seed(42);
//! let a = random::uniform(-1.0, 1.0, &[2, 3], DType::F32).unwrap();
//! random::seed(42);
//! let b = random::uniform(-1.0, 1.0, &[2, 3], DType::F32).unwrap();
//! assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
//! ```

use std::sync::Mutex;

use rand::distr::Uniform;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Exp, Gamma, Normal, Poisson};

use crate::dtype::{DType, Device};
use crate::error::{Error, Result};
use crate::storage::{RandomDist, Storage};
use crate::NDArray;

/// Elements per independently seeded chunk of a parallel fill. Fixed so that results do not
/// depend on the number of threads.
pub const CHUNK: usize = 1 << 16;

/// The seed of the global generator before any call to [`seed`] (fixed, so that programs are
/// reproducible by default).
pub const DEFAULT_SEED: u64 = 0;

type Core = Xoshiro256PlusPlus;

/// An explicit random generator. Draws are reproducible for a given seed and call sequence.
#[derive(Debug, Clone)]
pub struct Rng {
    core: Core,
}

static GLOBAL: Mutex<Option<Rng>> = Mutex::new(None);

/// A well-spread 64-bit seed from a base `a` and a counter `b` (SplitMix64's finaliser): the
/// seeds of consecutive counters are unrelated (per-initializer and per-mask seeds).
pub fn mix_seed(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Reset the global generator to `seed`.
pub fn seed(seed: u64) {
    *GLOBAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Rng::new(seed));
}

/// Run `f` with the global generator (created with [`DEFAULT_SEED`] on first use).
pub fn with_global<R>(f: impl FnOnce(&mut Rng) -> R) -> R {
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(|| Rng::new(DEFAULT_SEED)))
}

fn check_shape(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::shape(op, format!("shape {shape:?} is too large")))
}

fn bad(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::arg(op, e.to_string())
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng {
            core: Core::seed_from_u64(seed),
        }
    }

    /// One raw 64-bit draw (e.g. to seed another generator).
    pub fn next_u64(&mut self) -> u64 {
        self.core.random()
    }

    /// `n` values of `dtype` from `dist` as an array of `shape`, from one key of this
    /// generator. The key is drawn only once the operator has accepted every argument, so a
    /// refused call leaves the stream where it was. Arrays are made in host memory: the API
    /// has no device argument yet, and one would be passed on here.
    fn draw(
        &mut self,
        dist: RandomDist,
        shape: &[usize],
        n: usize,
        dtype: DType,
    ) -> Result<NDArray> {
        let key = self.next_u64();
        // On the calling thread's default device, as every public constructor.
        NDArray::from_buffer(
            Storage::random_on(dist, dtype, n, key, Device::current())?,
            shape,
        )
    }

    /// Draw a float array from `dist` (whose parameters the caller checked) as `dtype`.
    fn float_array(&mut self, dist: RandomDist, shape: &[usize], dtype: DType) -> Result<NDArray> {
        let op = dist.name();
        let n = check_shape(op, shape)?;
        if !dtype.is_float() {
            return Err(Error::dtype(
                op,
                format!("needs float32 or float64, got {}", dtype.name()),
            ));
        }
        self.draw(dist, shape, n, dtype)
    }

    /// Uniform values in `[low, high)`.
    pub fn uniform(
        &mut self,
        low: f64,
        high: f64,
        shape: &[usize],
        dtype: DType,
    ) -> Result<NDArray> {
        let op = "uniform";
        let ok = low < high && low.is_finite() && high.is_finite();
        if !ok {
            return Err(Error::arg(
                op,
                format!("needs finite low < high, got [{low}, {high})"),
            ));
        }
        // Constructed here to refuse what rand_distr refuses before a key is drawn (the
        // backend constructs them again to draw).
        Uniform::new(low as f32, high as f32).map_err(|e| bad(op, e))?;
        Uniform::new(low, high).map_err(|e| bad(op, e))?;
        self.float_array(RandomDist::Uniform { low, high }, shape, dtype)
    }

    /// Normal values with mean `loc` and standard deviation `scale`.
    pub fn normal(
        &mut self,
        loc: f64,
        scale: f64,
        shape: &[usize],
        dtype: DType,
    ) -> Result<NDArray> {
        let op = "normal";
        let ok = scale >= 0.0 && loc.is_finite() && scale.is_finite();
        if !ok {
            return Err(Error::arg(
                op,
                format!("needs finite loc and scale >= 0, got {loc}, {scale}"),
            ));
        }
        // Constructed here to refuse what rand_distr refuses before a key is drawn (the
        // backend constructs them again to draw).
        Normal::new(loc as f32, scale as f32).map_err(|e| bad(op, e))?;
        Normal::new(loc, scale).map_err(|e| bad(op, e))?;
        self.float_array(RandomDist::Normal { loc, scale }, shape, dtype)
    }

    /// Standard normal values (mean 0, std 1).
    pub fn randn(&mut self, shape: &[usize], dtype: DType) -> Result<NDArray> {
        self.float_array(RandomDist::StandardNormal, shape, dtype)
    }

    /// Exponential values with mean `scale` (NumPy/MXNet parametrisation, rate = 1/scale).
    pub fn exponential(&mut self, scale: f64, shape: &[usize], dtype: DType) -> Result<NDArray> {
        let op = "exponential";
        let ok = scale > 0.0 && scale.is_finite();
        if !ok {
            return Err(Error::arg(
                op,
                format!("needs finite scale > 0, got {scale}"),
            ));
        }
        // Constructed here to refuse what rand_distr refuses before a key is drawn (the
        // backend constructs them again to draw).
        Exp::new(1.0 / scale as f32).map_err(|e| bad(op, e))?;
        Exp::new(1.0 / scale).map_err(|e| bad(op, e))?;
        self.float_array(RandomDist::Exponential { scale }, shape, dtype)
    }

    /// Gamma values with shape `alpha` and scale `beta` (mean `alpha * beta`).
    pub fn gamma(
        &mut self,
        alpha: f64,
        beta: f64,
        shape: &[usize],
        dtype: DType,
    ) -> Result<NDArray> {
        let op = "gamma";
        let ok = alpha > 0.0 && beta > 0.0 && alpha.is_finite() && beta.is_finite();
        if !ok {
            return Err(Error::arg(
                op,
                format!("needs alpha > 0 and beta > 0, got {alpha}, {beta}"),
            ));
        }
        // Constructed here to refuse what rand_distr refuses before a key is drawn (the
        // backend constructs them again to draw).
        Gamma::new(alpha as f32, beta as f32).map_err(|e| bad(op, e))?;
        Gamma::new(alpha, beta).map_err(|e| bad(op, e))?;
        self.float_array(RandomDist::Gamma { alpha, beta }, shape, dtype)
    }

    /// Poisson counts with mean `lam`, in any dtype (counts are exact integers).
    pub fn poisson(&mut self, lam: f64, shape: &[usize], dtype: DType) -> Result<NDArray> {
        let op = "poisson";
        let n = check_shape(op, shape)?;
        if lam == 0.0 {
            return NDArray::zeros(shape, dtype);
        }
        Poisson::new(lam).map_err(|e| bad(op, format!("lam {lam}: {e}")))?;
        self.draw(RandomDist::Poisson { lam }, shape, n, dtype)
    }

    /// Integers uniform in `[low, high)` (exact i64 arithmetic, bounds past 2^32 are fine),
    /// stored as `dtype`; the bounds must fit the dtype.
    pub fn randint(
        &mut self,
        low: i64,
        high: i64,
        shape: &[usize],
        dtype: DType,
    ) -> Result<NDArray> {
        let op = "randint";
        if low >= high {
            return Err(Error::arg(
                op,
                format!("needs low < high, got [{low}, {high})"),
            ));
        }
        let n = check_shape(op, shape)?;
        let (lo_ok, hi_ok) = match dtype {
            DType::I64 => (i64::MIN, i64::MAX),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64 + 1),
            DType::U8 => (0, 256),
            // Floats hold integers exactly up to 2^24 / 2^53.
            DType::F32 => (-(1 << 24), 1 << 24),
            DType::F64 => (-(1 << 53), 1 << 53),
            // 11- and 8-bit significands.
            DType::F16 => (-(1 << 11), 1 << 11),
            DType::BF16 => (-(1 << 8), 1 << 8),
        };
        if low < lo_ok || high > hi_ok {
            return Err(Error::arg(
                op,
                format!("bounds [{low}, {high}) do not fit dtype {}", dtype.name()),
            ));
        }
        Uniform::new(low, high).map_err(|e| bad(op, e))?;
        self.draw(RandomDist::RandInt { low, high }, shape, n, dtype)
    }

    /// 1 with probability `p`, else 0, in any dtype.
    pub fn bernoulli(&mut self, p: f64, shape: &[usize], dtype: DType) -> Result<NDArray> {
        let op = "bernoulli";
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::arg(op, format!("probability {p} is outside [0, 1]")));
        }
        let n = check_shape(op, shape)?;
        self.draw(RandomDist::Bernoulli { p }, shape, n, dtype)
    }

    /// A random permutation of `0..n` as an i64 array.
    pub fn permutation(&mut self, n: usize) -> Result<NDArray> {
        self.host_permutation(n)?.on_current_device()
    }

    fn host_permutation(&mut self, n: usize) -> Result<NDArray> {
        use rand::seq::SliceRandom;
        let mut idx: Vec<i64> = (0..n as i64).collect();
        idx.shuffle(&mut self.core);
        NDArray::host_vec(idx, &[n])
    }

    /// A copy of `a` with its slices along axis 0 randomly permuted (MXNet's `shuffle`), on
    /// `a`'s device (an operator on `a`, not a constructor: the default device plays no part).
    pub fn shuffle(&mut self, a: &NDArray) -> Result<NDArray> {
        let shape = a.shape();
        if shape.is_empty() {
            return Err(Error::shape("shuffle", "cannot shuffle a 0-D array"));
        }
        let perm = self.host_permutation(shape[0])?.to_device(a.device())?;
        crate::autograd::pause(|| a.take(&perm, 0))
    }
}

macro_rules! global_fn {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $t:ty),*)) => {
        $(#[$doc])*
        ///
        /// Draws from the global generator (see [`seed`]).
        pub fn $name($($arg: $t),*) -> Result<NDArray> {
            with_global(|r| r.$name($($arg),*))
        }
    };
}

global_fn!(
    /// Uniform values in `[low, high)`.
    uniform(low: f64, high: f64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// Normal values with mean `loc` and standard deviation `scale`.
    normal(loc: f64, scale: f64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// Standard normal values.
    randn(shape: &[usize], dtype: DType)
);
global_fn!(
    /// Exponential values with mean `scale`.
    exponential(scale: f64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// Gamma values with shape `alpha` and scale `beta`.
    gamma(alpha: f64, beta: f64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// Poisson counts with mean `lam`.
    poisson(lam: f64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// Integers uniform in `[low, high)` (i64 bounds).
    randint(low: i64, high: i64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// 1 with probability `p`, else 0.
    bernoulli(p: f64, shape: &[usize], dtype: DType)
);
global_fn!(
    /// A random permutation of `0..n` (i64).
    permutation(n: usize)
);
global_fn!(
    /// A copy of `a` with its axis-0 slices randomly permuted.
    shuffle(a: &NDArray)
);
