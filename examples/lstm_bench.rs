//! Times an LSTM layer's forward + backward (issue 28's shape: batch 32, input 256, hidden
//! 256, 100 steps, f32, TNC) and reports milliseconds per time step, the GFLOP/s of its
//! products, and that rate as a fraction of a large GEMM's rate measured in the same run
//! (1024^3 through the same `dot`). `examples/lstm_bench_torch.py` times torch.nn.LSTM the
//! same way.
//!
//! `RAYON_NUM_THREADS=1 cargo run --release --example lstm_bench -- [--reps N] [--steps T]`

use std::time::Instant;

use sparrow::core::{autograd, testing, DType, Device};
use sparrow::nn::{Block, Initializer, LSTM};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a whole number"))
        .unwrap_or(default)
}

fn main() -> sparrow::core::Result<()> {
    let reps = arg("--reps", 10);
    let (t, n, i, h) = (arg("--steps", 100), 32, 256, 256);
    let net = LSTM::new(h).input_size(i);
    net.initialize(&Initializer::Uniform { scale: 0.0625 }, Device::Cpu)?;
    let x = testing::test_array(&[t, n, i], -1.0, 1.0, 1).astype(DType::F32)?;
    let run = || -> sparrow::core::Result<()> {
        let loss = autograd::record(|| net.forward(&x)?.sum_all())?;
        loss.backward()
    };
    run()?; // warm-up: buffers, thread pool
    let mut times = Vec::new();
    for _ in 0..reps {
        let s = Instant::now();
        run()?;
        times.push(s.elapsed().as_secs_f64());
    }
    let secs = median(times);
    // Forward: i2h (T*N, I) x (I, 4H) and h2h T x (N, H) x (H, 4H); backward twice that
    // (input and weight gradients).
    let flops = 3.0 * 2.0 * (t * n * 4 * h * (i + h)) as f64;

    let a = testing::test_array(&[1024, 1024], -1.0, 1.0, 2).astype(DType::F32)?;
    let b = testing::test_array(&[1024, 1024], -1.0, 1.0, 3).astype(DType::F32)?;
    a.dot(&b)?;
    let mut g = Vec::new();
    for _ in 0..5 {
        let s = Instant::now();
        std::hint::black_box(a.dot(&b)?);
        g.push(s.elapsed().as_secs_f64());
    }
    let gemm = 2.0 * 1024f64.powi(3) / median(g) / 1e9;
    let rate = flops / secs / 1e9;
    println!(
        "sparrow LSTM fwd+bwd T={t} N={n} I={i} H={h} threads={}: {:.1} ms total, {:.3} ms/step, \
         {rate:.1} GFLOP/s; GEMM 1024^3 {gemm:.1} GFLOP/s; fraction of GEMM {:.2}",
        rayon::current_num_threads(),
        secs * 1e3,
        secs * 1e3 / t as f64,
        rate / gemm
    );
    Ok(())
}
