//! Dense CPU throughput: f32 matmul (GFLOP/s) and a large elementwise add (GB/s).
//! Compare with `scripts/bench_numpy_dense.py` run on the same machine; figures in BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sparrow::core::{random::Rng, DType};
use std::hint::black_box;

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul_f32");
    g.sample_size(10);
    let mut rng = Rng::new(0);
    for n in [512usize, 1024, 2048] {
        let a = rng.uniform(-1.0, 1.0, &[n, n], DType::F32).unwrap();
        let b = rng.uniform(-1.0, 1.0, &[n, n], DType::F32).unwrap();
        // 2 n^3 flops; criterion reports "elements" per second, i.e. FLOP/s.
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |bch, _| {
            bch.iter(|| black_box(a.matmul(&b).unwrap()))
        });
    }
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let mut g = c.benchmark_group("elementwise_f32");
    g.sample_size(20);
    let n = 16usize << 20;
    let mut rng = Rng::new(1);
    let a = rng.uniform(-1.0, 1.0, &[n], DType::F32).unwrap();
    let b = rng.uniform(-1.0, 1.0, &[n], DType::F32).unwrap();
    // Bytes moved: read a and b, write the result.
    g.throughput(Throughput::Bytes(3 * 4 * n as u64));
    g.bench_function("add_16M", |bch| bch.iter(|| black_box(a.add(&b).unwrap())));
    g.finish();
}

fn init(c: &mut Criterion) {
    let mut g = c.benchmark_group("random_init");
    g.sample_size(10);
    let mut rng = Rng::new(2);
    g.throughput(Throughput::Elements(1_000_000 * 128));
    g.bench_function("uniform_1Mx128_f32", |bch| {
        bch.iter(|| {
            black_box(
                rng.uniform(-0.07, 0.07, &[1_000_000, 128], DType::F32)
                    .unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, matmul, elementwise, init);
criterion_main!(benches);
