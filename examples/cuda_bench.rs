//! The CUDA backend against the CPU, in one run on one machine: the two sparse products of the
//! sparse tutorial's first layer (X = csr 1024 x 1,000,000 with 30 non-zeros per row, W dense
//! 1,000,000 x 128, G dense 1024 x 128, f32) and a dense 1024^3 f32 product (cuBLAS).
//!
//! ```text
//! cargo run --release --features cuda --example cuda_bench -- [--json] [--reps N]
//! ```
//! Prints the median milliseconds per op on each device (GPU times wait for the device's
//! stream: `sparrow::core::cuda::synchronize`). Without a GPU it times the CPU and says why
//! the GPU is missing.

use std::time::Instant;

use sparrow::core::random::Rng;
use sparrow::core::sparse::{rand_sparse_seeded, SparseDist};
use sparrow::core::{DType, Device, NDArray, Result, SType};

const ROWS: usize = 1024;
const COLS: usize = 1_000_000;
const NNZ_PER_ROW: usize = 30;

/// Median, min and max milliseconds of `reps` runs of `f` after `warmup` runs; each run ends
/// when the device is idle.
fn time(
    device: Device,
    reps: usize,
    warmup: usize,
    f: &dyn Fn() -> Result<NDArray>,
) -> Result<(f64, f64, f64)> {
    let sync = || -> Result<()> {
        match device {
            Device::Cuda(i) => sparrow::core::cuda::synchronize(i),
            Device::Cpu => Ok(()),
        }
    };
    for _ in 0..warmup {
        std::hint::black_box(f()?);
    }
    sync()?;
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let out = f()?;
        sync()?;
        ts.push(t.elapsed().as_secs_f64() * 1e3);
        drop(std::hint::black_box(out));
    }
    ts.sort_by(|a, b| a.total_cmp(b));
    Ok((ts[ts.len() / 2], ts[0], ts[ts.len() - 1]))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok())
        .unwrap_or(20)
        .max(1);
    let mut devices = vec![Device::Cpu];
    match Device::cuda_status() {
        Ok(_) => devices.push(Device::Cuda(0)),
        Err(e) => eprintln!("no GPU timings: {e}"),
    }
    let density = NNZ_PER_ROW as f64 / COLS as f64;
    let x = rand_sparse_seeded(&[ROWS, COLS], density, SType::Csr, SparseDist::Uniform, 0)?;
    let mut rng = Rng::new(2);
    let w = rng.uniform(-1.0, 1.0, &[COLS, 128], DType::F32)?;
    let g = rng.uniform(-1.0, 1.0, &[ROWS, 128], DType::F32)?;
    let a = rng.uniform(-1.0, 1.0, &[1024, 1024], DType::F32)?;
    let b = rng.uniform(-1.0, 1.0, &[1024, 1024], DType::F32)?;
    let mut rows: Vec<(String, Device, (f64, f64, f64))> = Vec::new();
    for &device in &devices {
        let t = Instant::now();
        let (x, w, g, a, b) = (
            x.to_device(device)?,
            w.to_device(device)?,
            g.to_device(device)?,
            a.to_device(device)?,
            b.to_device(device)?,
        );
        if let Device::Cuda(i) = device {
            sparrow::core::cuda::synchronize(i)?;
            eprintln!(
                "copied the operands to {device:?} in {:.1} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        // The column grouping of X^T . G is prepared ahead, as the data loader does.
        x.prepare_csr_transpose();
        let mut bench = |name: &str, f: &dyn Fn() -> Result<NDArray>| -> Result<()> {
            rows.push((name.to_string(), device, time(device, reps, 3, f)?));
            Ok(())
        };
        bench("dot(X, W128) -> dense", &|| x.dot(&w))?;
        bench("dot(X^T, G) -> row_sparse", &|| x.dot_t(&g, true, false))?;
        bench("dot(A, B) 1024^3 f32", &|| a.dot(&b))?;
    }
    if json {
        let ops: Vec<String> = rows
            .iter()
            .map(|(name, d, (med, min, max))| {
                format!("{{\"op\": \"{name}\", \"device\": \"{d:?}\", \"median_ms\": {med:.4}, \"min_ms\": {min:.4}, \"max_ms\": {max:.4}}}")
            })
            .collect();
        println!("{{\"reps\": {reps}, \"ops\": [{}]}}", ops.join(", "));
    } else {
        for (name, d, (med, min, max)) in &rows {
            println!(
                "{name:28} {:10} median {med:9.3} ms  (min {min:.3}, max {max:.3})",
                format!("{d:?}")
            );
        }
    }
    Ok(())
}
