//! Initializer fill speed: a 1,000,000 x 128 f32 weight (the sparse Dense of the tutorial).
//! MXNet 1.9.1 takes 1.2-2.1 s for this (see BENCHMARKS.md); the goal is < 0.3 s.

use criterion::{criterion_group, criterion_main, Criterion};
use sparrow_core::DType;
use sparrow_nn::init::InitDesc;
use sparrow_nn::Initializer;

fn bench_init(c: &mut Criterion) {
    let desc = InitDesc::new("weight", &[1_000_000, 128], true);
    let mut g = c.benchmark_group("init_1m_x_128_f32");
    g.sample_size(10);
    for (name, init) in [
        ("xavier_uniform", Initializer::xavier()),
        ("normal", Initializer::Normal { sigma: 0.01 }),
        ("uniform", Initializer::Uniform { scale: 0.07 }),
        ("zero", Initializer::Zero),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| init.generate(&desc, DType::F32, 7).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench_init);
criterion_main!(benches);
