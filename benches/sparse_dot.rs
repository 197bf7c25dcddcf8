//! Criterion benchmark of the sparse products of issue 3: X csr 1024 x 1,000,000 with 30
//! non-zeros per row; dot(X, W) with W dense 1,000,000 x 128 and dot(X^T, G) -> row_sparse with
//! G dense 1024 x 128 (f32).

use criterion::{criterion_group, criterion_main, Criterion};
use sparrow::core::random::Rng;
use sparrow::core::sparse::{rand_sparse_seeded, SparseDist};
use sparrow::core::{DType, NDArray, SType};

fn bench(c: &mut Criterion) {
    let (rows, cols) = (1024usize, 1_000_000usize);
    let x = rand_sparse_seeded(
        &[rows, cols],
        30.0 / cols as f64,
        SType::Csr,
        SparseDist::Uniform,
        0,
    )
    .unwrap();
    // Through sparrow's initialiser, as a model's weights are (huge-page backed).
    let w = Rng::new(2)
        .uniform(-1.0, 1.0, &[cols, 128], DType::F32)
        .unwrap();
    let g: Vec<f32> = (0..rows * 128)
        .map(|i| ((i * 40503) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let g = NDArray::from_vec(g, &[rows, 128]).unwrap();
    let mut grp = c.benchmark_group("sparse_dot");
    grp.sample_size(30);
    grp.bench_function("dot(X, W128) csr x dense", |b| {
        b.iter(|| x.dot(&w).unwrap())
    });
    grp.bench_function("dot(X^T, G) -> row_sparse", |b| {
        b.iter(|| x.dot_t(&g, true, false).unwrap())
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
