//! Initializers (MXNet/Gluon definitions) with a fast, parallel, seeded fill.
//!
//! Random fills split the array into fixed chunks of [`CHUNK`] elements; chunk `i` draws from
//! its own generator seeded with `random::mix_seed(seed, i)`. The result depends only on the seed, never on
//! the number of threads, and a 1,000,000 x 128 f32 weight fills in parallel at memory speed.
//!
//! Seeds: every `initialize` call takes the next seed of a per-thread sequence started by
//! [`seed`] (default start: a fixed constant), so building and initializing the same model
//! after the same `seed(s)` gives the same weights.

use std::cell::Cell;
use std::io::Write;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, RngExt, SeedableRng};
use rand_distr::StandardNormal;
use rayon::prelude::*;
use sparrow_core::{DType, Error, NDArray, Result};

/// Elements per independently seeded chunk.
pub const CHUNK: usize = 1 << 16;
/// Elements generated at a time by [`Initializer::generate_file`] (a multiple of [`CHUNK`]:
/// 64 MiB of f32).
pub const FILE_BLOCK: usize = CHUNK << 8;

thread_local! {
    static SEED: Cell<(u64, u64)> = const { Cell::new((0x5EED_5A11, 0)) };
}

/// Restart this thread's seed sequence: the following initializations are reproducible.
pub fn seed(s: u64) {
    SEED.with(|c| c.set((s, 0)));
}

/// The next seed of this thread's sequence.
pub fn next_seed() -> u64 {
    SEED.with(|c| {
        let (base, n) = c.get();
        c.set((base, n + 1));
        sparrow_core::random::mix_seed(base, n)
    })
}

/// How Xavier draws: uniform in `[-s, s]` or normal with deviation `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndType {
    /// Uniform.
    Uniform,
    /// Gaussian.
    Gaussian,
}

/// Which fan Xavier divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactorType {
    /// (fan_in + fan_out) / 2.
    Avg,
    /// fan_in.
    In,
    /// fan_out.
    Out,
}

/// A weight initializer (MXNet's `mx.init.*`).
#[derive(Debug, Clone, PartialEq)]
pub enum Initializer {
    /// All zeros.
    Zero,
    /// All ones.
    One,
    /// All `value`.
    Constant(f64),
    /// Uniform in `[-scale, scale]` (Gluon's default with scale 0.07).
    Uniform {
        /// Half-width.
        scale: f64,
    },
    /// Normal with mean 0 and deviation `sigma`.
    Normal {
        /// Standard deviation.
        sigma: f64,
    },
    /// Xavier/Glorot: `scale = sqrt(magnitude / factor)`.
    Xavier {
        /// Uniform or Gaussian.
        rnd_type: RndType,
        /// Fan used as `factor`.
        factor_type: FactorType,
        /// Magnitude (3 for the classic uniform Glorot).
        magnitude: f64,
    },
    /// He/MSRA for PReLU: Xavier(Gaussian, factor_type, 2 / (1 + slope^2)).
    MsraPrelu {
        /// Fan used as `factor`.
        factor_type: FactorType,
        /// Negative slope of the PReLU.
        slope: f64,
    },
    /// Orthogonal rows (or columns) scaled by `scale`, from a uniform or normal matrix.
    Orthogonal {
        /// Scale (MXNet's default 1.414).
        scale: f64,
        /// Distribution of the matrix that is orthogonalized.
        rnd_type: RndType,
    },
}

impl Default for Initializer {
    /// Gluon's default: `Uniform(0.07)`.
    fn default() -> Self {
        Initializer::Uniform { scale: 0.07 }
    }
}

/// What an initializer knows about the array it fills.
#[derive(Debug, Clone)]
pub struct InitDesc {
    /// Parameter name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Fan-in (inputs per output unit).
    pub fan_in: usize,
    /// Fan-out.
    pub fan_out: usize,
}

impl InitDesc {
    /// Fans as MXNet computes them (`shape[1] * hw`, `shape[0] * hw`), swapped when the weight
    /// is stored as `(in, out)`.
    pub fn new(name: &str, shape: &[usize], fan_in_first: bool) -> InitDesc {
        let hw: usize = shape.iter().skip(2).product();
        let (a, b) = (
            shape.first().copied().unwrap_or(1),
            shape.get(1).copied().unwrap_or(1),
        );
        let (fan_in, fan_out) = if fan_in_first {
            (a * hw, b * hw)
        } else {
            (b * hw, a * hw)
        };
        InitDesc {
            name: name.to_string(),
            shape: shape.to_vec(),
            fan_in,
            fan_out,
        }
    }
}

impl Initializer {
    /// Xavier with MXNet's defaults (uniform, avg, magnitude 3).
    pub fn xavier() -> Initializer {
        Initializer::Xavier {
            rnd_type: RndType::Uniform,
            factor_type: FactorType::Avg,
            magnitude: 3.0,
        }
    }

    /// A new array of `desc.shape` and `dtype` (f32 or f64; f16 and bf16 as the f32 values
    /// rounded) filled by this initializer.
    pub fn generate(&self, desc: &InitDesc, dtype: DType, seed: u64) -> Result<NDArray> {
        // A shape past what memory can address is an error naming the parameter (a wrapped
        // product would make a wrong array, an unchecked one a capacity-overflow panic).
        let n = desc
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|n| {
                n.checked_mul(dtype.size_of())
                    .is_some_and(|b| b <= isize::MAX as usize)
            })
            .ok_or_else(|| {
                Error::shape(
                    "Initializer",
                    format!(
                        "parameter '{}' of shape {:?} has more elements than memory can hold",
                        desc.name, desc.shape
                    ),
                )
            })?;
        let out = match dtype {
            DType::F32 => {
                let mut v = vec![0.0f32; n];
                advise_huge(&mut v);
                self.fill(desc, &mut v, seed)?;
                NDArray::from_vec(v, &desc.shape)?
            }
            DType::F64 => {
                let mut v = vec![0.0f64; n];
                advise_huge(&mut v);
                self.fill(desc, &mut v, seed)?;
                NDArray::from_vec(v, &desc.shape)?
            }
            // Half parameters: the f32 draw rounded to nearest even.
            DType::F16 | DType::BF16 => self.generate(desc, DType::F32, seed)?.astype(dtype)?,
            other => {
                return Err(Error::dtype(
                    "Initializer",
                    format!(
                        "parameter '{}' has dtype {}; initializers fill float32/float64",
                        desc.name,
                        other.name()
                    ),
                ))
            }
        };
        Ok(out)
    }

    /// A new `.npy` file at `path` holding this initializer's values for `desc` and `seed` (bit
    /// for bit those of [`Initializer::generate`]), opened read-write as a file-backed array.
    /// The values are generated and written a block of [`FILE_BLOCK`] elements at a time, so a
    /// weight larger than memory is created with one block in memory; the file is written
    /// atomically (a temporary renamed over `path`).
    pub fn generate_file(
        &self,
        desc: &InitDesc,
        dtype: DType,
        seed: u64,
        path: &std::path::Path,
    ) -> Result<NDArray> {
        fn write_blocks<T: FillFloat>(
            init: &Initializer,
            desc: &InitDesc,
            seed: u64,
            n: usize,
            w: &mut dyn std::io::Write,
            to_le: fn(T, &mut Vec<u8>),
        ) -> std::io::Result<Result<()>> {
            let mut block = vec![T::from_f64(0.0); FILE_BLOCK.min(n)];
            let mut bytes = Vec::with_capacity(block.len() * std::mem::size_of::<T>());
            let mut start = 0;
            while start < n {
                let part = &mut block[..FILE_BLOCK.min(n - start)];
                if let Err(e) = init.fill_part(desc, part, seed, start) {
                    return Ok(Err(e));
                }
                bytes.clear();
                for &x in part.iter() {
                    to_le(x, &mut bytes);
                }
                w.write_all(&bytes)?;
                start += part.len();
            }
            Ok(Ok(()))
        }
        let n = desc
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                Error::shape(
                    "Initializer::generate_file",
                    format!(
                        "parameter '{}': shape {:?} overflows",
                        desc.name, desc.shape
                    ),
                )
            })?;
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(Error::dtype(
                "Initializer::generate_file",
                format!("parameter '{}': initializers make f32 or f64", desc.name),
            ));
        }
        if matches!(self, Initializer::Orthogonal { .. }) {
            return Err(Error::arg(
                "Initializer::generate_file",
                format!(
                    "parameter '{}': Orthogonal needs the whole matrix in memory",
                    desc.name
                ),
            ));
        }
        let header = sparrow_core::npy::header_bytes(&desc.shape, dtype)
            .map_err(|e| Error::arg("Initializer::generate_file", e))?;
        let mut inner = Ok(());
        sparrow_core::fsio::write_atomic(path, |w| {
            w.write_all(&header)?;
            inner = match dtype {
                DType::F64 => write_blocks::<f64>(self, desc, seed, n, w, |x, b| {
                    b.extend_from_slice(&x.to_le_bytes())
                })?,
                _ => write_blocks::<f32>(self, desc, seed, n, w, |x, b| {
                    b.extend_from_slice(&x.to_le_bytes())
                })?,
            };
            match &inner {
                Ok(()) => Ok(()),
                // Abandon the temporary: `path` is left as it was.
                Err(e) => Err(std::io::Error::other(e.to_string())),
            }
        })
        .map_err(|e| match &inner {
            Err(inner) => inner.clone(),
            Ok(()) => Error::file("Initializer::generate_file", path, e),
        })?;
        // The file was synced by write_atomic; its freshly written pages leave the page
        // cache, so mapping it costs memory only for the pages training touches.
        sparrow_core::fsio::drop_cached_pages(path);
        NDArray::open_npy(path, sparrow_core::MapMode::ReadWrite)
    }

    /// Fill `out` (laid out as `desc.shape`) in place.
    pub fn fill<T: FillFloat>(&self, desc: &InitDesc, out: &mut [T], seed: u64) -> Result<()> {
        self.fill_part(desc, out, seed, 0)
    }

    /// Fill `out` with elements `start..start + out.len()` of what [`Initializer::fill`]
    /// writes for the whole parameter `desc` with `seed`, bit for bit, so a weight too large
    /// for memory can be generated a block at a time. `start` must be a multiple of [`CHUNK`]
    /// (the seeding unit). Orthogonal needs the whole matrix at once and is an error here
    /// unless `out` is the whole parameter.
    pub fn fill_part<T: FillFloat>(
        &self,
        desc: &InitDesc,
        out: &mut [T],
        seed: u64,
        start: usize,
    ) -> Result<()> {
        if !start.is_multiple_of(CHUNK) {
            return Err(Error::arg(
                "Initializer::fill_part",
                format!("start {start} is not a multiple of the seeding chunk {CHUNK}"),
            ));
        }
        let first = start / CHUNK;
        match *self {
            Initializer::Zero => fill_const(out, T::from_f64(0.0)),
            Initializer::One => fill_const(out, T::from_f64(1.0)),
            Initializer::Constant(v) => fill_const(out, T::from_f64(v)),
            Initializer::Uniform { scale } => uniform_at(out, -scale, scale, seed, first),
            Initializer::Normal { sigma } => normal_at(out, sigma, seed, first),
            Initializer::Xavier {
                rnd_type,
                factor_type,
                magnitude,
            } => {
                let s = xavier_scale(desc, factor_type, magnitude)?;
                match rnd_type {
                    RndType::Uniform => uniform_at(out, -s, s, seed, first),
                    RndType::Gaussian => normal_at(out, s, seed, first),
                }
            }
            Initializer::MsraPrelu { factor_type, slope } => {
                let s = xavier_scale(desc, factor_type, 2.0 / (1.0 + slope * slope))?;
                normal_at(out, s, seed, first)
            }
            Initializer::Orthogonal { scale, rnd_type } => {
                let whole: usize = desc.shape.iter().product();
                if start != 0 || out.len() != whole {
                    return Err(Error::arg(
                        "Initializer::fill_part",
                        format!(
                            "parameter '{}': Orthogonal needs the whole matrix at once",
                            desc.name
                        ),
                    ));
                }
                orthogonal(desc, out, scale, rnd_type, seed)?
            }
        }
        Ok(())
    }
}

/// Large weights (the tutorial's 1,000,000 x 128 embedding-like layer) are read and updated a
/// few random rows at a time; with 4 KiB pages every such row costs a TLB miss and a page walk.
/// `vec![0; n]` of this size comes from fresh untouched pages (calloc/mmap), so the hint given
/// here, before the fill touches them, lets the kernel back the weight with 2 MiB pages. It also
/// makes the fill itself cheaper (512x fewer page faults).
fn advise_huge<T>(v: &mut [T]) {
    sparrow_core::sys::advise_huge_pages(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v));
}

fn xavier_scale(desc: &InitDesc, factor_type: FactorType, magnitude: f64) -> Result<f64> {
    if desc.shape.len() < 2 {
        return Err(Error::shape(
            "Xavier",
            format!(
                "parameter '{}' of shape {:?}: Xavier needs at least 2 dims (set a 1-D \
                 parameter's own initializer, e.g. Zero)",
                desc.name, desc.shape
            ),
        ));
    }
    let factor = match factor_type {
        FactorType::Avg => (desc.fan_in + desc.fan_out) as f64 / 2.0,
        FactorType::In => desc.fan_in as f64,
        FactorType::Out => desc.fan_out as f64,
    };
    Ok((magnitude / factor.max(1.0)).sqrt())
}

/// f32/f64 with the conversions the fills need.
pub trait FillFloat: Copy + Send + Sync + 'static {
    /// From f64.
    fn from_f64(v: f64) -> Self;
    /// Uniform in `[0, 1)` from 64 random bits.
    fn unit(bits: u64) -> Self;
    /// A standard normal draw.
    fn normal(rng: &mut Xoshiro256PlusPlus) -> Self;
    /// `a + (b - a) * u`.
    fn lerp(a: Self, b: Self, u: Self) -> Self;
    /// `x * s`.
    fn scale(x: Self, s: Self) -> Self;
}

impl FillFloat for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn unit(bits: u64) -> Self {
        (bits >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
    fn normal(rng: &mut Xoshiro256PlusPlus) -> Self {
        rng.sample(StandardNormal)
    }
    fn lerp(a: Self, b: Self, u: Self) -> Self {
        a + (b - a) * u
    }
    fn scale(x: Self, s: Self) -> Self {
        x * s
    }
}

impl FillFloat for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
    fn unit(bits: u64) -> Self {
        (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    fn normal(rng: &mut Xoshiro256PlusPlus) -> Self {
        rng.sample(StandardNormal)
    }
    fn lerp(a: Self, b: Self, u: Self) -> Self {
        a + (b - a) * u
    }
    fn scale(x: Self, s: Self) -> Self {
        x * s
    }
}

fn fill_const<T: FillFloat>(out: &mut [T], v: T) {
    out.par_chunks_mut(CHUNK).for_each(|c| c.fill(v));
}

/// Run `f(rng, chunk)` over [`CHUNK`]-sized chunks in parallel, chunk `i` (counted from
/// `first`: `out` starts at chunk `first` of the whole array) seeded by `(seed, i)`.
fn par_seeded<T: Send>(
    out: &mut [T],
    seed: u64,
    first: usize,
    f: impl Fn(&mut Xoshiro256PlusPlus, &mut [T]) + Sync,
) {
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(sparrow_core::random::mix_seed(
            seed,
            (first + i) as u64,
        ));
        f(&mut rng, c)
    });
}

/// Uniform in `[lo, hi)`.
pub fn fill_uniform<T: FillFloat>(out: &mut [T], lo: f64, hi: f64, seed: u64) {
    uniform_at(out, lo, hi, seed, 0)
}

/// [`fill_uniform`] of the part of an array starting at chunk `first`.
fn uniform_at<T: FillFloat>(out: &mut [T], lo: f64, hi: f64, seed: u64, first: usize) {
    let (lo, hi) = (T::from_f64(lo), T::from_f64(hi));
    par_seeded(out, seed, first, |rng, c| {
        for x in c.iter_mut() {
            *x = T::lerp(lo, hi, T::unit(rng.next_u64()));
        }
    });
}

/// Normal with mean 0 and deviation `sigma`.
pub fn fill_normal<T: FillFloat>(out: &mut [T], sigma: f64, seed: u64) {
    normal_at(out, sigma, seed, 0)
}

/// [`fill_normal`] of the part of an array starting at chunk `first`.
fn normal_at<T: FillFloat>(out: &mut [T], sigma: f64, seed: u64, first: usize) {
    let s = T::from_f64(sigma);
    par_seeded(out, seed, first, |rng, c| {
        for x in c.iter_mut() {
            *x = T::scale(T::normal(rng), s);
        }
    });
}

/// MXNet's Orthogonal: a random `(nout, nin)` matrix whose rows (nout <= nin) or columns are
/// made orthonormal (modified Gram-Schmidt in f64, equivalent to the SVD factor MXNet keeps),
/// times `scale`.
fn orthogonal<T: FillFloat>(
    desc: &InitDesc,
    out: &mut [T],
    scale: f64,
    rnd_type: RndType,
    seed: u64,
) -> Result<()> {
    if desc.shape.len() < 2 {
        return Err(Error::shape(
            "Orthogonal",
            format!(
                "parameter '{}' of shape {:?} needs at least 2 dims",
                desc.name, desc.shape
            ),
        ));
    }
    let nout = desc.shape[0];
    let nin: usize = desc.shape[1..].iter().product();
    let mut m = vec![0.0f64; nout * nin];
    match rnd_type {
        RndType::Uniform => fill_uniform(&mut m, -1.0, 1.0, seed),
        RndType::Gaussian => fill_normal(&mut m, 1.0, seed),
    }
    // Orthonormalize the shorter side: vectors v_k of length `len`, element j at
    // m[k * ks + j * js].
    let (count, len, ks, js) = if nout <= nin {
        (nout, nin, nin, 1)
    } else {
        (nin, nout, 1, nin)
    };
    for k in 0..count {
        for p in 0..k {
            let dot: f64 = (0..len)
                .map(|j| m[k * ks + j * js] * m[p * ks + j * js])
                .sum();
            for j in 0..len {
                m[k * ks + j * js] -= dot * m[p * ks + j * js];
            }
        }
        let norm = (0..len)
            .map(|j| m[k * ks + j * js].powi(2))
            .sum::<f64>()
            .sqrt()
            .max(1e-300);
        for j in 0..len {
            m[k * ks + j * js] /= norm;
        }
    }
    for (o, v) in out.iter_mut().zip(&m) {
        *o = T::from_f64(v * scale);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var)
    }

    sparrow_core::device_test! {
    fn xavier_uniform_statistics() {
        // (200, 300): scale = sqrt(3 / 250); uniform variance = scale^2 / 3 = 1/250.
        let d = InitDesc::new("w", &[200, 300], false);
        let a = Initializer::xavier().generate(&d, DType::F32, 1).unwrap();
        // Generated where the default device is: the device under test.
        assert_eq!(a.device(), sparrow_core::testing::test_device());
        let v = a.to_vec::<f32>().unwrap();
        let (m, var) = stats(&v);
        let s = (3.0f64 / 250.0).sqrt();
        // Standard error of the mean: sqrt(1/250) / sqrt(60000) ~ 2.6e-4; allow 4 of them.
        assert!(m.abs() < 1.1e-3, "mean {m}");
        assert!((var - 1.0 / 250.0).abs() < 0.02 / 250.0 * 3.0, "var {var}");
        assert!(v.iter().all(|&x| (x as f64).abs() <= s));
    }
    }

    sparrow_core::device_test! {
    fn xavier_gaussian_in_and_normal_statistics() {
        let d = InitDesc::new("w", &[100, 400], false);
        let x = Initializer::Xavier {
            rnd_type: RndType::Gaussian,
            factor_type: FactorType::In,
            magnitude: 2.0,
        };
        let (m, var) = stats(&x.generate(&d, DType::F32, 2).unwrap().to_vec().unwrap());
        assert!(m.abs() < 1e-3, "mean {m}");
        assert!((var / (2.0 / 400.0) - 1.0).abs() < 0.03, "var {var}");
        let n = Initializer::Normal { sigma: 0.5 };
        let (m, var) = stats(&n.generate(&d, DType::F32, 3).unwrap().to_vec().unwrap());
        assert!(m.abs() < 0.01, "mean {m}");
        assert!((var.sqrt() - 0.5).abs() < 0.01, "sd {}", var.sqrt());
    }
    }

    #[test]
    fn fill_independent_of_thread_count_and_seeded() {
        let mut a = vec![0.0f32; 3 * CHUNK + 17];
        let mut b = a.clone();
        fill_uniform(&mut a, -1.0, 1.0, 9);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| fill_uniform(&mut b, -1.0, 1.0, 9));
        assert_eq!(a, b);
        let mut c = a.clone();
        fill_uniform(&mut c, -1.0, 1.0, 10);
        assert_ne!(a, c);
        seed(5);
        let s1 = (next_seed(), next_seed());
        seed(5);
        assert_eq!(s1, (next_seed(), next_seed()));
    }

    sparrow_core::device_test! {
    fn orthogonal_rows_are_orthonormal() {
        for shape in [[4usize, 6], [6, 4]] {
            let d = InitDesc::new("w", &shape, false);
            let init = Initializer::Orthogonal {
                scale: 1.0,
                rnd_type: RndType::Gaussian,
            };
            let m = init
                .generate(&d, DType::F64, 4)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let (r, c) = (shape[0], shape[1]);
            let (cnt, len, ks, js) = if r <= c { (r, c, c, 1) } else { (c, r, 1, c) };
            for a in 0..cnt {
                for b in 0..cnt {
                    let dot: f64 = (0..len)
                        .map(|j| m[a * ks + j * js] * m[b * ks + j * js])
                        .sum();
                    let want = if a == b { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-9, "{shape:?} {a} {b} {dot}");
                }
            }
        }
    }
    }

    sparrow_core::device_test! {
    fn msra_and_constants() {
        let d = InitDesc::new("w", &[50, 800], false);
        let x = Initializer::MsraPrelu {
            factor_type: FactorType::In,
            slope: 0.0,
        };
        let (_, var) = stats(&x.generate(&d, DType::F32, 6).unwrap().to_vec().unwrap());
        assert!((var / (2.0 / 800.0) - 1.0).abs() < 0.05, "var {var}");
        let c = Initializer::Constant(3.0)
            .generate(&d, DType::F64, 0)
            .unwrap();
        assert!(c.to_vec::<f64>().unwrap().iter().all(|&v| v == 3.0));
        assert!(Initializer::xavier()
            .generate(&InitDesc::new("b", &[5], false), DType::F32, 0)
            .is_err());
    }
    }
}
