//! Allocations of a warm hybridized training step of the sparse tutorial's model together with
//! its lazy update, counted by a global allocator around the system one (on the calling
//! thread only, so other tests running beside this one do not count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sparrow_core::{autograd, DType, Device, NDArray, SType};
use sparrow_nn::loss::SigmoidBinaryCrossEntropyLoss;
use sparrow_nn::{Block, Dense, HybridTrainStep, Initializer, Sequential};
use sparrow_optim::{Sgd, Trainer};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    let _ = ON.try_with(|on| {
        if on.get() {
            COUNT.with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: every call forwards to the system allocator with the same layout; the counter is a
// thread-local cell that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations<R>(f: impl FnOnce() -> R) -> (R, usize) {
    COUNT.with(|c| c.set(0));
    ON.with(|o| o.set(true));
    let r = f();
    ON.with(|o| o.set(false));
    (r, COUNT.with(Cell::get))
}

/// The sparse tutorial's model on a csr batch grouped ahead (as `LibSVMIter` delivers it),
/// trained by a lazy SGD `Trainer`: the graph rewrites last step's row_sparse weight gradient
/// in place and the trainer's reset of the consumed gradient hands back the same empty table,
/// so a warm step and update allocate nothing.
#[test]
fn warm_sparse_step_and_lazy_update_allocate_nothing() {
    let x = sparrow_core::testing::test_csr(10, 5000, 0.005, 7, DType::F32);
    x.prepare_csr_transpose();
    let y = NDArray::from_vec((0..10).map(|i| (i % 2) as f32).collect(), &[10]).unwrap();
    let mut net = Sequential::new();
    net.add(
        Dense::new(32)
            .activation("sigmoid")
            .grad_stype(SType::RowSparse),
    )
    .add(Dense::new(8).activation("sigmoid"))
    .add(Dense::new(1).activation("sigmoid"));
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    autograd::pause(|| net.forward(&x)).unwrap();
    let loss = SigmoidBinaryCrossEntropyLoss::new();
    let mut step = HybridTrainStep::new(&net, &loss);
    let mut trainer = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.1)).unwrap();
    let mut run = || -> usize {
        let (r, n) = allocations(|| {
            step.step(&x, &y)?;
            trainer.step(10)
        });
        r.unwrap();
        n
    };
    for _ in 0..3 {
        run();
    }
    assert_eq!(run(), 0, "allocations in a warm sparse step and update");
    let w = net.collect_params().unwrap();
    let first = w
        .iter()
        .find(|(_, p)| p.grad_stype() == SType::RowSparse)
        .map(|(_, p)| p.clone())
        .expect("a row_sparse weight gradient");
    // The consumed gradient is the empty table again.
    let g = first.grad().unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    assert_eq!(
        g.tostype(SType::Dense)
            .unwrap()
            .to_f64_vec()
            .iter()
            .filter(|v| **v != 0.0)
            .count(),
        0
    );
}
