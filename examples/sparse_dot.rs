//! Times the sparse products of issue 3 (the shapes of the MXNet / scipy / PyTorch anchors):
//! X = csr 1024 x 1,000,000 with 30 non-zeros per row, W dense 1,000,000 x {1, 128},
//! G dense 1024 x 128, all f32; and dense . csr, G^T (128 x 1024) . X -> csr, and with dense
//! results: G^T . X (512 MB) and D . X^T for D that 128 x 1,000,000 product.
//!
//! `cargo run --release --example sparse_dot -- [--json]` prints the median (and min / max)
//! milliseconds per op over repeated runs after a warm-up. `--only TEXT` runs just the ops whose
//! name contains TEXT and `--reps N` times each op N times (for profiling one kernel with
//! `perf record`).

use std::time::Instant;

use rayon::prelude::*;
use sparrow::core::random::Rng;
use sparrow::core::sparse::{self, rand_sparse_seeded, SparseDist};
use sparrow::core::{DType, NDArray, SType};

const ROWS: usize = 1024;
const COLS: usize = 1_000_000;
const NNZ_PER_ROW: usize = 30;

/// Deterministic pseudo-random values in [-1, 1), filled in parallel (a 512 MB matrix).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0f32; n];
    v.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(b, chunk)| {
            let mut s = seed ^ (b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for x in chunk {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *x = (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            }
        });
    v
}

fn time(reps: usize, warmup: usize, f: &dyn Fn() -> NDArray) -> (f64, f64, f64) {
    for _ in 0..warmup {
        std::hint::black_box(f());
    }
    let mut ts: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            let out = f();
            let e = t.elapsed().as_secs_f64() * 1e3;
            drop(std::hint::black_box(out));
            e
        })
        .collect();
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (ts[ts.len() / 2], ts[0], ts[ts.len() - 1])
}

fn main() -> sparrow::core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let reps_override = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok());
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let density = NNZ_PER_ROW as f64 / COLS as f64;
    let x = rand_sparse_seeded(&[ROWS, COLS], density, SType::Csr, SparseDist::Uniform, 0)?;
    assert_eq!(x.nnz(), ROWS * NNZ_PER_ROW);
    let w1 = NDArray::from_vec(uniform(COLS, 1), &[COLS, 1])?;
    // W as a model gets it: from sparrow's initialiser, whose big arrays are backed by huge
    // pages (as numpy's, and so scipy's, are). `--plain-pages` builds it from a caller's Vec
    // instead (4 KiB pages: every random row gather is then also a TLB miss).
    let w128 = if args.iter().any(|a| a == "--plain-pages") {
        NDArray::from_vec(uniform(COLS * 128, 2), &[COLS, 128])?
    } else {
        Rng::new(2).uniform(-1.0, 1.0, &[COLS, 128], DType::F32)?
    };
    let g = NDArray::from_vec(uniform(ROWS * 128, 3), &[ROWS, 128])?;

    let mut results: Vec<(&str, (f64, f64, f64))> = Vec::new();
    let mut bench = |name: &'static str, reps: usize, warmup: usize, f: &dyn Fn() -> NDArray| {
        if wanted(name) {
            results.push((name, time(reps_override.unwrap_or(reps).max(1), warmup, f)));
        }
    };
    bench("dot(X, W1) -> dense", 50, 5, &|| x.dot(&w1).unwrap());
    bench("dot(X, W128) -> dense", 30, 3, &|| x.dot(&w128).unwrap());
    let rs = x.dot_t(&g, true, false)?;
    bench("dot(X^T, G) -> row_sparse", 30, 3, &|| {
        x.dot_t(&g, true, false).unwrap()
    });
    bench("dot(X^T, G) -> dense (512 MB)", 5, 1, &|| {
        sparse::dot_csr_t_dense(&x, &g, SType::Dense).unwrap()
    });
    // dense . csr keeps csr (MXNet's stype rule): the result stores X's non-empty columns.
    let gt = g.transpose(None)?;
    bench("dot(G^T, X) -> csr", 30, 3, &|| gt.dot(&x).unwrap());
    // The dense-result kernels of dense . csr: G^T . X as a dense 128 x 1,000,000 (512 MB;
    // SciPy's `GT @ X`), and its gradient's shape, D . X^T with D that dense product
    // (SciPy's `D @ X.T`).
    bench("dot(G^T, X) -> dense (512 MB)", 5, 1, &|| {
        sparse::dot_dense_csr(&gt, &x, false).unwrap()
    });
    if wanted("dot(D, X^T) -> dense") {
        let d = sparse::dot_dense_csr(&gt, &x, false)?;
        bench("dot(D, X^T) -> dense", 10, 2, &|| {
            d.dot_t(&x, false, true).unwrap()
        });
    }
    let out_rows = rs.stored_rows();
    let threads = rayon::current_num_threads();
    if json {
        let ops: Vec<String> = results
            .iter()
            .map(|(name, (med, min, max))| {
                format!(
                    "{{\"op\": \"{name}\", \"median_ms\": {med:.4}, \"min_ms\": {min:.4}, \"max_ms\": {max:.4}}}"
                )
            })
            .collect();
        println!(
            "{{\"threads\": {threads}, \"rows\": {ROWS}, \"cols\": {COLS}, \"nnz_per_row\": {NNZ_PER_ROW}, \"row_sparse_out_rows\": {out_rows}, \"ops\": [{}]}}",
            ops.join(", ")
        );
    } else {
        println!("X: csr {ROWS} x {COLS}, {NNZ_PER_ROW} nnz/row; rayon threads: {threads}");
        for (name, (med, min, max)) in &results {
            println!("{name:32} median {med:8.3} ms  (min {min:.3}, max {max:.3})");
        }
        println!("row_sparse output rows: {out_rows}");
    }
    Ok(())
}
