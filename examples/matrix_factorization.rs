//! Matrix factorization with two `SparseEmbedding`s, written as a Gluon or PyTorch user writes
//! it: a block with two inputs (`forward(&self, users, items)`), registered with
//! `#[derive(Block)]`, trained with a plain `record` / `backward` / `step` loop. Each step
//! reads and updates only the batch's user and item rows (row_sparse gradients, lazy Adam).
//! The ratings are synthetic: rank-`k` user and item factors plus noise, 90% to train.
//!
//! ```text
//! cargo run --release --example matrix_factorization -- [--users N] [--items N]
//!     [--ratings N] [--dim K] [--epochs N] [--batch N] [--lr F]
//! ```
//!
//! Prints the held-out RMSE per epoch beside the noise floor (the RMSE of the true model) and
//! the RMSE of predicting the mean.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sparrow::prelude::*;

/// `score(u, i) = <user_u, item_i>`.
#[derive(Block)]
#[block(inputs = 2)]
struct MatrixFactorization {
    user: SparseEmbedding,
    item: SparseEmbedding,
}

impl MatrixFactorization {
    fn new(users: usize, items: usize, dim: usize) -> Self {
        MatrixFactorization {
            user: SparseEmbedding::new(users, dim),
            item: SparseEmbedding::new(items, dim),
        }
    }

    fn forward(&self, users: &NDArray, items: &NDArray) -> Result<NDArray> {
        let (u, i) = (self.user.forward(users)?, self.item.forward(items)?);
        u.mul(&i)?.sum(Some(&[1]), false)
    }
}

/// Synthetic ratings: `(user ids, item ids, ratings)`.
type Ratings = (Vec<f32>, Vec<f32>, Vec<f32>);

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let (a, b): (f64, f64) = (rng.random(), rng.random());
    (-2.0 * (1.0 - a).ln()).sqrt() * (std::f64::consts::TAU * b).cos()
}

/// `n` ratings of random (user, item) pairs by rank-`k` factors (entries N(0, 1/sqrt(k)), so a
/// rating has unit variance) plus N(0, noise^2).
fn synthetic(users: usize, items: usize, n: usize, k: usize, noise: f64) -> Ratings {
    let mut rng = StdRng::seed_from_u64(3);
    let sd = 1.0 / (k as f64).sqrt().sqrt();
    let p: Vec<f64> = (0..users * k).map(|_| sd * normal(&mut rng)).collect();
    let q: Vec<f64> = (0..items * k).map(|_| sd * normal(&mut rng)).collect();
    let (mut us, mut is, mut rs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (u, i) = (rng.random_range(0..users), rng.random_range(0..items));
        let dot: f64 = (0..k).map(|j| p[u * k + j] * q[i * k + j]).sum();
        us.push(u as f32);
        is.push(i as f32);
        rs.push((dot + noise * normal(&mut rng)) as f32);
    }
    (us, is, rs)
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|p| args.get(p + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<()> {
    let users = arg("--users", 20_000.0) as usize;
    let items = arg("--items", 5_000.0) as usize;
    let n = arg("--ratings", 1_000_000.0) as usize;
    let dim = arg("--dim", 16.0) as usize;
    let epochs = arg("--epochs", 8.0) as usize;
    let batch = arg("--batch", 256.0) as usize;
    let lr = arg("--lr", 0.01);
    let noise = 0.1;

    let (us, is, rs) = synthetic(users, items, n, 8, noise);
    let cut = n * 9 / 10;
    let test = (
        NDArray::from_vec(us[cut..].to_vec(), &[n - cut])?,
        NDArray::from_vec(is[cut..].to_vec(), &[n - cut])?,
        NDArray::from_vec(rs[cut..].to_vec(), &[n - cut])?,
    );
    let mean = rs[..cut].iter().map(|&r| r as f64).sum::<f64>() / cut as f64;
    let baseline = (rs[cut..]
        .iter()
        .map(|&r| (r as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - cut) as f64)
        .sqrt();

    let model = MatrixFactorization::new(users, items, dim);
    model.initialize(&Initializer::Normal { sigma: 0.1 }, Device::Cpu)?;
    let mut trainer = Trainer::from_params(&model.collect_params()?, Adam::new(lr))?;
    let l2 = loss::L2Loss::new();
    let mut order: Vec<usize> = (0..cut).collect();
    let mut rng = StdRng::seed_from_u64(5);
    for epoch in 0..epochs {
        let t = Instant::now();
        // A new order each epoch (Fisher-Yates).
        for k in (1..order.len()).rev() {
            order.swap(k, rng.random_range(0..=k));
        }
        for chunk in order.chunks(batch) {
            let pick = |v: &[f32]| {
                NDArray::from_vec(chunk.iter().map(|&j| v[j]).collect(), &[chunk.len()])
            };
            let (u, i, r) = (pick(&us)?, pick(&is)?, pick(&rs)?);
            let l = autograd::record(|| l2.forward(&model.forward(&u, &i)?, &r))?;
            l.backward()?;
            trainer.step(chunk.len())?;
        }
        let secs = t.elapsed().as_secs_f64();
        let pred = model.forward(&test.0, &test.1)?;
        let mse = pred.sub(&test.2)?.square()?.mean(None, false)?.to_f64_vec()[0];
        println!(
            "epoch {epoch}: {secs:.2} s ({:.0} ratings/s), held-out RMSE {:.4} (noise floor {noise}, mean predictor {baseline:.4})",
            cut as f64 / secs,
            mse.sqrt()
        );
    }
    Ok(())
}
