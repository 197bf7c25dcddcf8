//! One Adam step on a 1,000,000 x 128 f32 weight: lazy with a 1,000-row row_sparse gradient,
//! lazy with a 100,000-row gradient, and with a dense gradient. The lazy step should cost time
//! proportional to the gradient's rows (about 100x between the first two), independent of the
//! weight's 1,000,000 rows.
//!
//! `cargo bench -p sparrow-optim --bench lazy_adam`

use criterion::{criterion_group, criterion_main, Criterion};
use sparrow_core::{DType, NDArray};
use sparrow_optim::{Adam, Optimizer};

const ROWS: usize = 1_000_000;
const COLS: usize = 128;

/// `k` evenly spread sorted row ids with deterministic values.
fn rs_grad(k: usize) -> NDArray {
    let stride = ROWS / k;
    let indices: Vec<i64> = (0..k)
        .map(|i| (i * stride + i % stride.max(1)) as i64)
        .collect();
    let data: Vec<f32> = (0..k * COLS)
        .map(|i| ((i % 97) as f32 - 48.0) * 1e-3)
        .collect();
    NDArray::row_sparse_from_parts(data, indices, &[ROWS, COLS]).unwrap()
}

fn bench(c: &mut Criterion) {
    let weight = NDArray::full(&[ROWS, COLS], 0.5, DType::F32).unwrap();
    let mut opt = Adam::new(1e-3);
    let mut state = opt.create_state(0, &weight).unwrap();
    let mut g = c.benchmark_group("adam_step_1Mx128");
    g.sample_size(10);
    for k in [1_000usize, 100_000] {
        let grad = rs_grad(k);
        g.bench_function(format!("lazy_rs_{k}_rows"), |b| {
            b.iter(|| opt.update(0, &weight, &grad, &mut state).unwrap())
        });
    }
    let dense: Vec<f32> = (0..ROWS * COLS)
        .map(|i| ((i % 97) as f32 - 48.0) * 1e-3)
        .collect();
    let dense = NDArray::from_vec(dense, &[ROWS, COLS]).unwrap();
    g.bench_function("dense", |b| {
        b.iter(|| opt.update(0, &weight, &dense, &mut state).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
