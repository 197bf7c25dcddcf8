//! A weight over its device's memory budget stays in host memory and trains a batch's rows at
//! a time (issue #21's over-budget table): the same parameters, step for step, as the same
//! model with the weight on the device, for a csr Dense layer and an Embedding, with lazy SGD,
//! Adam and AdaGrad. On a machine without a GPU the CPU runs it with a budget set on the CPU,
//! which takes the same staged path within host memory.

use std::sync::Mutex;

use sparrow_core::{
    autograd, device_test, sparse, testing::test_device, DType, Device, NDArray, SType,
};
use sparrow_nn::loss::{L2Loss, Loss};
use sparrow_nn::{Block, Dense, Embedding, Initializer, Sequential};
use sparrow_optim::*;

/// Budgets are process-wide: the tests of this file set them one at a time.
static BUDGET: Mutex<()> = Mutex::new(());

/// `f` with `device`'s budget at `bytes`, the previous (unset) budget put back after.
fn with_budget<R>(device: Device, bytes: usize, f: impl FnOnce() -> R) -> R {
    device.set_memory_budget(Some(bytes));
    let r = f();
    device.set_memory_budget(None);
    r
}

fn csr_net(features: usize) -> Sequential {
    let mut net = Sequential::new();
    net.add(
        Dense::new(4)
            .in_units(features)
            .activation("sigmoid")
            .grad_stype(SType::RowSparse),
    );
    net.add(Dense::new(1).in_units(4));
    net
}

/// Copy `from`'s parameter values into `to` (same architecture).
fn copy_params(from: &dyn Block, to: &dyn Block) {
    let a = from.collect_params().unwrap();
    let b = to.collect_params().unwrap();
    for ((_, p), (_, q)) in a.iter().zip(b.iter()) {
        q.set_data(&p.data().unwrap()).unwrap();
    }
}

/// The optimizers each test runs, by name.
const OPTIMIZERS: [&str; 3] = ["sgd", "adam", "adagrad"];

fn make(name: &str) -> Box<dyn Optimizer> {
    match name {
        "sgd" => Box::new(Sgd::new(0.5)),
        "adam" => Box::new(Adam::new(0.05)),
        _ => Box::new(AdaGrad::new(0.3)),
    }
}

fn assert_close(a: &dyn Block, b: &dyn Block, what: &str) {
    let pa = a.collect_params().unwrap();
    let pb = b.collect_params().unwrap();
    for ((name, p), (_, q)) in pa.iter().zip(pb.iter()) {
        let (x, y) = (
            p.data().unwrap().to_f64_vec(),
            q.data().unwrap().to_f64_vec(),
        );
        for (i, (u, v)) in x.iter().zip(&y).enumerate() {
            assert!(
                (u - v).abs() <= 1e-6 * (1.0 + u.abs()),
                "{what}: {name}[{i}] resident {u} vs host-resident {v}"
            );
        }
    }
}

device_test! {
fn a_csr_dense_weight_over_budget_trains_like_a_resident_one() {
    let _g = BUDGET.lock().unwrap_or_else(|e| e.into_inner());
    let device = test_device();
    let features = 300;
    for name in OPTIMIZERS {
        let resident = csr_net(features);
        resident.initialize(&Initializer::Uniform { scale: 0.3 }, device).unwrap();
        // The first weight is 4800 bytes, the others under 20: only it leaves the device.
        let staged = csr_net(features);
        with_budget(device, 1000, || staged.initialize(&Initializer::Zero, device)).unwrap();
        let params = staged.collect_params().unwrap();
        let first = params.iter().next().unwrap().1.clone();
        assert!(first.host_resident(), "{name}: the 300 x 4 weight is over 1000 bytes");
        assert_eq!(first.data().unwrap().device(), Device::Cpu);
        assert_eq!(first.device(), device);
        assert!(params.iter().skip(1).all(|(_, p)| !p.host_resident()));
        copy_params(&resident, &staged);
        let mut tr = Trainer::with_boxed(resident.collect_params().unwrap().iter().map(|(_, p)| p.clone()), make(name)).unwrap();
        let mut ts = Trainer::with_boxed(staged.collect_params().unwrap().iter().map(|(_, p)| p.clone()), make(name)).unwrap();
        let loss = L2Loss::new();
        for step in 0..6u64 {
            let x = sparse::rand_sparse_seeded(&[8, features], 0.02, SType::Csr, sparse::SparseDist::Uniform, 40 + step)
                .unwrap();
            if step % 2 == 0 {
                // A loader's prepared grouping is reused by the staging.
                x.prepare_csr_transpose();
            }
            let x = x.to_device(device).unwrap();
            let y = NDArray::from_vec((0..8).map(|i| (i % 3) as f32 - 1.0).collect(), &[8, 1])
                .unwrap()
                .to_device(device)
                .unwrap();
            for (net, tr) in [(&resident, &mut tr), (&staged, &mut ts)] {
                let l = autograd::record(|| loss.forward(&net.forward(&x)?, &y)?.sum_all()).unwrap();
                l.backward().unwrap();
                tr.step(8).unwrap();
            }
            let g = first.grad().unwrap();
            assert_eq!(g.stype(), SType::RowSparse);
            assert_eq!(g.device(), Device::Cpu);
        }
        assert_close(&resident, &staged, name);
    }
    // A dense input cannot read a host-resident weight a batch's rows at a time.
    let staged = csr_net(features);
    with_budget(device, 1000, || staged.initialize(&Initializer::Zero, device)).unwrap();
    let dense = NDArray::zeros(&[2, features], DType::F32).unwrap().to_device(device).unwrap();
    let e = staged.forward(&dense).unwrap_err().to_string();
    assert!(e.contains("host memory") && e.contains("csr"), "{e}");
}
}

device_test! {
fn an_embedding_over_budget_trains_like_a_resident_one() {
    let _g = BUDGET.lock().unwrap_or_else(|e| e.into_inner());
    let device = test_device();
    for name in OPTIMIZERS {
        let build = || Embedding::with_options(500, 3, true, DType::F32);
        let resident = build();
        resident.initialize(&Initializer::Uniform { scale: 0.5 }, device).unwrap();
        let staged = build();
        with_budget(device, 1000, || staged.initialize(&Initializer::Zero, device)).unwrap();
        assert!(staged.weight().host_resident());
        copy_params(&resident, &staged);
        let mut tr = Trainer::with_boxed(vec![resident.weight().clone()], make(name)).unwrap();
        let mut ts = Trainer::with_boxed(vec![staged.weight().clone()], make(name)).unwrap();
        for step in 0..5usize {
            // Ids with repeats, as a batch of tokens has.
            let ids: Vec<f32> = (0..12).map(|i| ((i * 37 + step * 101) % 60 * 7) as f32).collect();
            let ids = NDArray::from_vec(ids, &[3, 4]).unwrap().to_device(device).unwrap();
            for (net, tr) in [(&resident, &mut tr), (&staged, &mut ts)] {
                let l = autograd::record(|| net.forward(&ids)?.square()?.sum_all()).unwrap();
                l.backward().unwrap();
                tr.step(12).unwrap();
            }
        }
        assert_close(&resident, &staged, name);
    }
}
}

/// A weight over the budget whose gradient is dense cannot stay in host memory: an error
/// that names the parameter, its bytes and the budget.
#[test]
fn a_dense_gradient_weight_over_budget_is_refused() {
    let _g = BUDGET.lock().unwrap_or_else(|e| e.into_inner());
    let net = Dense::new(4).in_units(300);
    let e = with_budget(Device::Cpu, 1000, || {
        net.initialize(&Initializer::Zero, Device::Cpu)
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("'weight'")
            && e.contains("4800 bytes")
            && e.contains("1000")
            && e.contains("row_sparse"),
        "{e}"
    );
}
