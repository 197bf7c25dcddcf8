//! A warm hybridized training step of a small MLP with softmax cross-entropy allocates nothing:
//! every node of the joint graph writes into its planned buffer, the step's lists keep their
//! capacity, and the gradients go to the parameters without a copy. The products are small
//! enough for the single-threaded tiny kernels (the `gemm` crate used for larger ones
//! allocates its packing buffers inside each call).
//!
//! Allocations are counted per thread (only while this test's thread has counting switched
//! on), so the harness's other threads do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sparrow_core::{autograd, DType, Device, NDArray};
use sparrow_nn::loss::{L2Loss, Loss, SoftmaxCrossEntropyLoss};
use sparrow_nn::{Block, Dense, HybridTrainStep, Initializer, Sequential};

struct Counting;

thread_local! {
    /// Counting on this thread.
    static ON: Cell<bool> = const { Cell::new(false) };
    /// Allocations counted on this thread.
    static COUNT: Cell<usize> = const { Cell::new(0) };
    /// Only allocations of at least this many bytes are counted.
    static MIN_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    if ON.with(Cell::get) && bytes >= MIN_BYTES.with(Cell::get) {
        COUNT.with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every call forwards to the system allocator with the same layout; the counters are
// thread-local cells of constant initializers (no allocation of their own).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(n);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations<R>(f: impl FnOnce() -> R) -> (R, usize) {
    allocations_of_at_least(0, f)
}

/// Allocations of at least `min` bytes made on this thread while `f` runs.
fn allocations_of_at_least<R>(min: usize, f: impl FnOnce() -> R) -> (R, usize) {
    MIN_BYTES.with(|m| m.set(min));
    COUNT.with(|c| c.set(0));
    ON.with(|o| o.set(true));
    let r = f();
    ON.with(|o| o.set(false));
    (r, COUNT.with(Cell::get))
}

/// Three graph steps of a small MLP against `loss` (with a Dropout(0.5) in training mode
/// after its first layer when `dropout`), then the allocations of a fourth.
fn warm_step_allocations(loss: &dyn Loss, y: &NDArray, dropout: bool) -> usize {
    let x = sparrow_core::testing::test_array(&[8, 12], -1.0, 1.0, 1)
        .astype(DType::F32)
        .unwrap();
    let mut net = Sequential::new();
    net.add(Dense::new(16).activation("relu"));
    if dropout {
        // Its mask is drawn into a planned buffer at each step.
        net.add(sparrow_nn::Dropout::new(0.5).unwrap());
    }
    net.add(Dense::new(16).activation("tanh"))
        .add(Dense::new(5));
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    autograd::pause(|| net.forward(&x)).unwrap();
    let mut step = HybridTrainStep::new(&net, loss);
    // The first step traces (eager); the next ones run the graph and fill its buffers.
    for _ in 0..3 {
        step.step(&x, y).unwrap();
    }
    let ts = step.train_step().expect("a joint graph");
    assert!(ts.fallback_ops().is_empty(), "{:?}", ts.fallback_ops());
    let (l, n) = allocations(|| step.step(&x, y));
    assert_eq!(l.unwrap().shape(), [8]);
    n
}

#[test]
fn warm_graph_training_step_allocates_nothing() {
    let classes = NDArray::from_vec((0..8).map(|i| (i % 5) as f32).collect(), &[8]).unwrap();
    let n = warm_step_allocations(&SoftmaxCrossEntropyLoss::new(), &classes, false);
    assert_eq!(n, 0, "allocations in a warm softmax cross-entropy step");
    let n = warm_step_allocations(&SoftmaxCrossEntropyLoss::new(), &classes, true);
    assert_eq!(n, 0, "allocations in a warm step with dropout");
    let targets = sparrow_core::testing::test_array(&[8, 5], -1.0, 1.0, 2)
        .astype(DType::F32)
        .unwrap();
    let n = warm_step_allocations(&L2Loss::new(), &targets, false);
    assert_eq!(n, 0, "allocations in a warm L2 step");
}

/// Products large enough for the blocked GEMM (every `m * n * k` of this MLP, forward and
/// backward, is at least 64^3), on the calling thread: their packing buffers are the thread's
/// own, kept from the warm-up, so the step allocates nothing either. Where the CPU lacks
/// AVX2+FMA the products go through matrixmultiply, which allocates its packing per call.
#[test]
fn warm_graph_step_with_blocked_gemm_products_allocates_nothing() {
    #[cfg(target_arch = "x86_64")]
    let blocked =
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let blocked = false;
    if !blocked {
        println!(
            "SKIPPED warm_graph_step_with_blocked_gemm_products_allocates_nothing: no AVX2+FMA"
        );
        return;
    }
    let (batch, inp, hidden) = (64, 96, 128);
    let x = sparrow_core::testing::test_array(&[batch, inp], -1.0, 1.0, 4)
        .astype(DType::F32)
        .unwrap();
    let y = NDArray::from_vec((0..batch).map(|i| (i % 64) as f32).collect(), &[batch]).unwrap();
    let mut net = Sequential::new();
    net.add(Dense::new(hidden).activation("relu"))
        .add(Dense::new(hidden).activation("relu"))
        .add(Dense::new(64));
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    autograd::pause(|| net.forward(&x)).unwrap();
    let loss = SoftmaxCrossEntropyLoss::new();
    let mut step = HybridTrainStep::new(&net, &loss);
    for _ in 0..3 {
        step.step(&x, &y).unwrap();
    }
    let (l, n) = allocations(|| step.step(&x, &y));
    assert_eq!(l.unwrap().shape(), [batch]);
    assert_eq!(n, 0, "allocations in a warm step of GEMM-sized products");
}

#[test]
fn warm_recorded_step_writes_gradients_into_the_same_buffers() {
    // `record` + `backward()` through a hybridized block: the backward graph writes each
    // parameter's gradient where the last one was (the tape node lets go of it first), so a
    // warm step allocates nothing the size of a weight. Products small enough for the tiny
    // kernels (the `gemm` crate allocates packing buffers of its own).
    use sparrow_nn::Hybridize;
    let (batch, inp, hidden) = (4, 80, 96);
    let x = sparrow_core::testing::test_array(&[batch, inp], -1.0, 1.0, 3)
        .astype(DType::F32)
        .unwrap();
    let y = NDArray::from_vec((0..batch).map(|i| (i % 5) as f32).collect(), &[batch]).unwrap();
    let mut net = Sequential::new();
    net.add(Dense::new(hidden).activation("relu"))
        .add(Dense::new(5));
    let net = net.hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let loss = SoftmaxCrossEntropyLoss::new();
    let step = || {
        let l = autograd::record(|| loss.forward(&net.forward(&x)?, &y)).unwrap();
        l.backward().unwrap();
    };
    // The first recorded call traces; the next ones run the split graphs and fill buffers.
    for _ in 0..3 {
        step();
    }
    let weight_bytes = hidden * inp * 4;
    let ((), n) = allocations_of_at_least(weight_bytes, step);
    assert_eq!(
        n, 0,
        "allocations of a weight's size in a warm recorded step"
    );
    assert!(net.fallback_reasons().is_empty());
}
