//! Times Conv2D forward + backward on a ResNet-style 3x3 layer: batch 32, 64 -> 64 channels,
//! 56x56, padding 1, bias, f32, the input requiring a gradient (a layer inside a network), so
//! one step computes y, dx, dw and db. `scripts/bench_torch_conv.py` times the same step in
//! PyTorch.
//!
//! `RAYON_NUM_THREADS=1 cargo run --release --example conv_bench -- [--reps N] [--batch N]`
//! prints the median (min, max) milliseconds of the forward, of the backward and of the
//! whole step over N steps after two warm-up steps, the process CPU time per step (all
//! threads: on a shared machine the figure other processes do not inflate), the step's GFLOP/s
//! (`3 * 2 * N * Cout * Cin * 9 * H * W` FLOPs) and that as a fraction of the GEMM peak: the
//! best GFLOP/s of sparrow's `dot` at the same thread count on the convolution's per-entry
//! product (64 x 576 by 576 x 3136) or on 1024^3. Since the layer runs through Winograd
//! (4/9 of those multiply-adds), it also prints the rate and fraction of the work really done.

use std::time::Instant;

use sparrow::core::ops::ConvParams;
use sparrow::core::random::Rng;
use sparrow::core::{autograd, DType, Result};

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system, all threads) this process has used, from `/proc/self/stat`
/// (clock ticks of 10 ms; `None` where that file does not exist). On a shared machine this,
/// unlike wall time, does not count the time other processes ran instead of this one.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// (median, min, max) of `v`.
fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// GFLOP/s of sparrow's 2-D `dot` (the GEMM path every dense product takes, split over the
/// threads) on an `(m x k) . (k x n)` f32 product: best of `reps`.
fn gemm_gflops(m: usize, k: usize, n: usize, reps: usize) -> Result<f64> {
    let a = Rng::new(7).uniform(-1.0, 1.0, &[m, k], DType::F32)?;
    let b = Rng::new(8).uniform(-1.0, 1.0, &[k, n], DType::F32)?;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        std::hint::black_box(a.dot(&b)?);
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(2.0 * (m * k * n) as f64 / best / 1e9)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let reps = arg(&args, "--reps", 10);
    let batch = arg(&args, "--batch", 32);
    let (c, hw) = (64, 56);
    let threads = rayon::current_num_threads();
    let x = Rng::new(1).uniform(-1.0, 1.0, &[batch, c, hw, hw], DType::F32)?;
    let w = Rng::new(2).uniform(-0.05, 0.05, &[c, c, 3, 3], DType::F32)?;
    let b = Rng::new(3).uniform(-0.1, 0.1, &[c], DType::F32)?;
    let dy = Rng::new(4).uniform(-1.0, 1.0, &[batch, c, hw, hw], DType::F32)?;
    for a in [&x, &w, &b] {
        a.attach_grad();
    }
    let p = ConvParams::new().padding(&[1]);
    let (mut fwd, mut bwd, mut step) = (Vec::new(), Vec::new(), Vec::new());
    let mut cpu_start = None;
    for i in 0..reps + 2 {
        if i == 2 {
            cpu_start = cpu_seconds();
        }
        let t0 = Instant::now();
        let y = autograd::record(|| x.convolution(&w, Some(&b), &p))?;
        let t1 = Instant::now();
        y.backward_with_grad(&dy)?;
        let t2 = Instant::now();
        std::hint::black_box(x.grad().unwrap());
        if i >= 2 {
            fwd.push((t1 - t0).as_secs_f64() * 1e3);
            bwd.push((t2 - t1).as_secs_f64() * 1e3);
            step.push((t2 - t0).as_secs_f64() * 1e3);
        }
    }
    let cpu_ms = cpu_seconds()
        .zip(cpu_start)
        .map(|(end, start)| (end - start) * 1e3 / reps as f64);
    let flops = 3.0 * 2.0 * (batch * c * c * 9 * hw * hw) as f64;
    let (f, b_, s) = (stats(fwd), stats(bwd), stats(step));
    let gflops = flops / (s.0 / 1e3) / 1e9;
    // The GEMM peak: the faster of the conv's own product shape and a large square one.
    let peak = gemm_gflops(c, c * 9, hw * hw, 5)?.max(gemm_gflops(1024, 1024, 1024, 3)?);
    println!(
        "conv2d 3x3 batch {batch} {c}->{c} {hw}x{hw} pad 1, f32, {threads} thread(s), {reps} steps"
    );
    println!(
        "forward   median {:8.1} ms (min {:.1}, max {:.1})",
        f.0, f.1, f.2
    );
    println!(
        "backward  median {:8.1} ms (min {:.1}, max {:.1})",
        b_.0, b_.1, b_.2
    );
    println!(
        "step      median {:8.1} ms (min {:.1}, max {:.1})",
        s.0, s.1, s.2
    );
    if let Some(c) = cpu_ms {
        println!("step CPU time (all threads) {c:.1} ms");
    }
    println!(
        "step {gflops:.1} GFLOP/s; GEMM peak {peak:.1} GFLOP/s; fraction {:.2}",
        gflops / peak
    );
    // The CPU backend computes this 3x3 stride-1 layer by Winograd (forward and data gradient
    // F(2x2, 3x3), weight gradient F(3x3, 2x2)): its GEMMs do 16 of the direct 36 multiplies
    // per 2x2 tile, so the multiply-adds actually run are 4/9 of the direct count.
    let wino = gflops * 16.0 / 36.0;
    println!(
        "Winograd GEMM work {:.1} GFLOP/step: {wino:.1} GFLOP/s, fraction {:.2} of the GEMM peak",
        flops * 16.0 / 36.0 / 1e9,
        wino / peak
    );
    Ok(())
}
