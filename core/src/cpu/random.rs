//! The CPU's random family ([`RandomOps`]): parallel fills of fixed-size chunks, chunk `c`
//! from its own xoshiro256++ stream seeded by `(key, c)`. The chunking never depends on the
//! thread count, so a key gives the same array on 1 or 64 threads, and a 1,000,000 x 128
//! initialisation runs on every core.

use rand::distr::{Distribution, Uniform};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Exp, Gamma, Normal, Poisson, StandardNormal};
use rayon::prelude::*;

use super::{CpuStorage, HostElement};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::random::CHUNK;
use crate::storage::{RandomDist, RandomOps};

type Core = Xoshiro256PlusPlus;

/// Fill `n` values in parallel, chunk by chunk, each chunk from its own stream of `key`.
fn fill<T, F>(op: &'static str, key: u64, n: usize, draw: F) -> Result<Vec<T>>
where
    T: Copy + Default + Send,
    F: Fn(&mut Core) -> T + Sync,
{
    // Uninitialised and huge-page advised: the draws are the first and only writes, so a
    // large array is neither zero-filled first nor left on 4 KiB pages (which would make
    // every later pass over it pay TLB misses).
    let mut out: Vec<T> = super::alloc::try_uninit_vec(op, n)?;
    let fill_chunk = |(c, dst): (usize, &mut [std::mem::MaybeUninit<T>])| {
        let mut r = chunk_rng(key, c);
        for x in dst.iter_mut() {
            x.write(draw(&mut r));
        }
    };
    let spare = &mut out.spare_capacity_mut()[..n];
    if n > CHUNK {
        spare.par_chunks_mut(CHUNK).enumerate().for_each(fill_chunk);
    } else {
        spare.chunks_mut(CHUNK).enumerate().for_each(fill_chunk);
    }
    // SAFETY: the chunks cover all n slots and each slot was written above; capacity >= n.
    unsafe { out.set_len(n) };
    Ok(out)
}

/// The stream of chunk `c` of a fill from `key` (splitmix inside `seed_from_u64`
/// decorrelates neighbouring chunk seeds).
fn chunk_rng(key: u64, c: usize) -> Core {
    Core::seed_from_u64(key ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// [`fill`] into an existing slice: the same values for the same key and draw, chunk by
/// chunk (a planned buffer's fill, which allocates nothing).
pub(super) fn fill_into<T, F>(key: u64, dst: &mut [T], draw: F)
where
    T: Send,
    F: Fn(&mut Core) -> T + Sync,
{
    let fill_chunk = |(c, d): (usize, &mut [T])| {
        let mut r = chunk_rng(key, c);
        for x in d.iter_mut() {
            *x = draw(&mut r);
        }
    };
    if dst.len() > CHUNK {
        dst.par_chunks_mut(CHUNK).enumerate().for_each(fill_chunk);
    } else {
        dst.chunks_mut(CHUNK).enumerate().for_each(fill_chunk);
    }
}

/// A distribution's parameters refused (the operator checks them first, so this is the
/// backend's own guard).
fn bad(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::arg(op, e.to_string())
}

/// A float draw from `d32` or `d64` by dtype.
fn floats<D32, D64>(
    op: &'static str,
    dtype: DType,
    n: usize,
    key: u64,
    d32: D32,
    d64: D64,
) -> Result<CpuStorage>
where
    D32: Distribution<f32> + Sync,
    D64: Distribution<f64> + Sync,
{
    match dtype {
        DType::F32 => Ok(f32::into_buffer(fill(op, key, n, |r| d32.sample(r))?)),
        DType::F64 => Ok(f64::into_buffer(fill(op, key, n, |r| d64.sample(r))?)),
        // Half draws are the f32 draws rounded: the same stream as F32 for one key.
        DType::F16 | DType::BF16 => {
            Ok(f32::into_buffer(fill(op, key, n, |r| d32.sample(r))?).cast(dtype))
        }
        other => Err(Error::dtype(
            op,
            format!("needs a float dtype, got {}", other.name()),
        )),
    }
}

/// Poisson counts as `T` (counts are exact integers in every dtype).
fn poisson<T: Element>(key: u64, n: usize, d: &Poisson<f64>) -> Result<CpuStorage> {
    Ok(T::into_buffer(fill("poisson", key, n, |r| {
        T::from_f64(d.sample(r))
    })?))
}

impl RandomOps for CpuStorage {
    fn random(dist: RandomDist, dtype: DType, n: usize, key: u64) -> Result<Self> {
        let op = dist.name();
        match dist {
            RandomDist::Uniform { low, high } => {
                let d32 = Uniform::new(low as f32, high as f32).map_err(|e| bad(op, e))?;
                let d64 = Uniform::new(low, high).map_err(|e| bad(op, e))?;
                floats(op, dtype, n, key, d32, d64)
            }
            RandomDist::Normal { loc, scale } => {
                let d32 = Normal::new(loc as f32, scale as f32).map_err(|e| bad(op, e))?;
                let d64 = Normal::new(loc, scale).map_err(|e| bad(op, e))?;
                floats(op, dtype, n, key, d32, d64)
            }
            RandomDist::StandardNormal => floats(op, dtype, n, key, StandardNormal, StandardNormal),
            RandomDist::Exponential { scale } => {
                let d32 = Exp::new(1.0 / scale as f32).map_err(|e| bad(op, e))?;
                let d64 = Exp::new(1.0 / scale).map_err(|e| bad(op, e))?;
                floats(op, dtype, n, key, d32, d64)
            }
            RandomDist::Gamma { alpha, beta } => {
                let d32 = Gamma::new(alpha as f32, beta as f32).map_err(|e| bad(op, e))?;
                let d64 = Gamma::new(alpha, beta).map_err(|e| bad(op, e))?;
                floats(op, dtype, n, key, d32, d64)
            }
            RandomDist::Poisson { lam } => {
                let d = Poisson::new(lam).map_err(|e| bad(op, format!("lam {lam}: {e}")))?;
                Ok(match dtype {
                    DType::F32 => poisson::<f32>(key, n, &d)?,
                    DType::F64 => poisson::<f64>(key, n, &d)?,
                    DType::I64 => poisson::<i64>(key, n, &d)?,
                    DType::I32 => poisson::<i32>(key, n, &d)?,
                    DType::U8 => poisson::<u8>(key, n, &d)?,
                    DType::F16 => poisson::<half::f16>(key, n, &d)?,
                    DType::BF16 => poisson::<half::bf16>(key, n, &d)?,
                })
            }
            RandomDist::RandInt { low, high } => {
                let d = Uniform::new(low, high).map_err(|e| bad(op, e))?;
                Ok(match dtype {
                    DType::I64 => i64::into_buffer(fill(op, key, n, |r| d.sample(r))?),
                    DType::I32 => i32::into_buffer(fill(op, key, n, |r| d.sample(r) as i32)?),
                    DType::U8 => u8::into_buffer(fill(op, key, n, |r| d.sample(r) as u8)?),
                    DType::F32 => f32::into_buffer(fill(op, key, n, |r| d.sample(r) as f32)?),
                    DType::F64 => f64::into_buffer(fill(op, key, n, |r| d.sample(r) as f64)?),
                    DType::F16 | DType::BF16 => {
                        f64::into_buffer(fill(op, key, n, |r| d.sample(r) as f64)?).cast(dtype)
                    }
                })
            }
            RandomDist::Bernoulli { p } => {
                if !(0.0..=1.0).contains(&p) {
                    return Err(bad(op, format!("probability {p} is outside [0, 1]")));
                }
                // Drawn as u8 and converted: the same values in every dtype.
                let v: Vec<u8> = fill(op, key, n, |r| r.random_bool(p) as u8)?;
                Ok(u8::into_buffer(v).cast(dtype))
            }
        }
    }
}
