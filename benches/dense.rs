//! Dense CPU throughput: f32 matmul (GFLOP/s), a large elementwise add (GB/s), and the
//! softmax cross-entropy's forward + backward, fused against the general operators.
//! Compare with `scripts/bench_numpy_dense.py` and `scripts/bench_torch_loss.py` run on the same
//! machine; figures in BENCHMARKS.md.

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

/// Softmax cross-entropy against one-hot targets, forward and backward under a head gradient
/// of ones: the fused op (`softmax_ce_logits`) against log_softmax, product, sum and negation,
/// and the Gluon loss from class ids.
fn softmax_ce(c: &mut Criterion) {
    use sparrow::core::{autograd, ops::fused::softmax_ce_logits, NDArray};
    use sparrow::nn::loss::{Loss, SoftmaxCrossEntropyLoss};
    let mut g = c.benchmark_group("softmax_ce_f32");
    g.sample_size(20);
    let mut rng = Rng::new(3);
    for (rows, classes) in [(256usize, 10usize), (256, 10_000)] {
        let x = rng
            .uniform(-3.0, 3.0, &[rows, classes], DType::F32)
            .unwrap();
        let ids: Vec<f32> = (0..rows).map(|r| ((r * 7919) % classes) as f32).collect();
        let t = NDArray::from_vec(ids, &[rows])
            .unwrap()
            .one_hot(classes, 1.0, 0.0, DType::F32)
            .unwrap();
        let head = NDArray::ones(&[rows, 1], DType::F32).unwrap();
        x.attach_grad();
        let step = |fused: bool| {
            let l = autograd::record(|| {
                if fused {
                    softmax_ce_logits(&x, &t).map(|l| l.expect("fused case"))
                } else {
                    x.log_softmax(-1)?.mul(&t)?.sum(Some(&[-1]), true)?.neg()
                }
            })
            .unwrap();
            l.backward_with_grad(&head).unwrap();
            black_box(x.grad().unwrap());
        };
        let id = format!("{rows}x{classes}");
        g.bench_function(BenchmarkId::new("fused", &id), |b| b.iter(|| step(true)));
        g.bench_function(BenchmarkId::new("composite", &id), |b| {
            b.iter(|| step(false))
        });
        // The whole loss from class ids (their check and one-hot included), as a user calls
        // it: PyTorch's `cross_entropy(x, ids)` is the anchor (scripts/bench_torch_loss.py).
        // Float ids of the logits' dtype, as Gluon's labels are (others take the one-hot path).
        let ids = t
            .argmax(Some(-1), false)
            .unwrap()
            .astype(DType::F32)
            .unwrap();
        let loss = SoftmaxCrossEntropyLoss::new();
        let ones = NDArray::ones(&[rows], DType::F32).unwrap();
        g.bench_function(BenchmarkId::new("loss_from_ids", &id), |b| {
            b.iter(|| {
                let l = autograd::record(|| loss.forward(&x, &ids)).unwrap();
                l.backward_with_grad(&ones).unwrap();
                black_box(x.grad().unwrap());
            })
        });
    }
    g.finish();
}

/// Activations forward + backward on a (256, 4096) float32 array under a head gradient of
/// ones: the fused kernels of `ops::activation` against the operators a user would otherwise
/// compose (where the library has them: there is no erf operator), and PyTorch's `F.gelu`,
/// `F.silu`, `F.mish`, `F.elu` as the anchor (scripts/bench_torch_act.py).
fn activation(c: &mut Criterion) {
    use sparrow::core::{autograd, ops::ActFn, NDArray, Result};
    type Composite = fn(&NDArray) -> Result<NDArray>;
    let mut g = c.benchmark_group("activation_f32");
    g.sample_size(20);
    let x = Rng::new(4)
        .uniform(-3.0, 3.0, &[256, 4096], DType::F32)
        .unwrap();
    let head = NDArray::ones(&[256, 4096], DType::F32).unwrap();
    x.attach_grad();
    let step = |f: &dyn Fn(&NDArray) -> Result<NDArray>| {
        let y = autograd::record(|| f(&x)).unwrap();
        y.backward_with_grad(&head).unwrap();
        black_box(x.grad().unwrap());
    };
    let cases: [(&str, ActFn, Option<Composite>); 5] = [
        ("gelu", ActFn::Gelu, None),
        (
            "gelu_tanh",
            ActFn::GeluTanh,
            Some(|x| {
                let u = x.pow_scalar(3.0)?.mul_scalar(0.044715)?.add(x)?;
                let t = u.mul_scalar(0.7978845608028654)?.tanh()?.add_scalar(1.0)?;
                x.mul(&t)?.mul_scalar(0.5)
            }),
        ),
        ("silu", ActFn::Swish(1.0), Some(|x| x.mul(&x.sigmoid()?))),
        ("mish", ActFn::Mish, Some(|x| x.mul(&x.softrelu()?.tanh()?))),
        ("elu", ActFn::Elu(1.0), None),
    ];
    for (name, f, composite) in cases {
        g.bench_function(BenchmarkId::new("fused", name), |b| {
            b.iter(|| step(&|x| x.activation(f)))
        });
        if let Some(comp) = composite {
            g.bench_function(BenchmarkId::new("composite", name), |b| {
                b.iter(|| step(&comp))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, matmul, elementwise, init, softmax_ce, activation);
criterion_main!(benches);
