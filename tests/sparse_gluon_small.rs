//! A scaled-down run of the sparse Gluon tutorial (examples/sparse_gluon.rs): synthetic CSR
//! data written to LibSVM, read back with LibSVMIter, and an MLP whose first layer takes the
//! CSR batch with a row_sparse weight gradient. Checks that training lowers the loss and that
//! the first layer's gradient never holds more rows than the batch's distinct features.

use std::collections::BTreeSet;

use sparrow::core::{autograd, Device, NDArray, SType};
use sparrow::data::libsvm::{save_libsvm, LibSVMIter, LibSVMIterParams};
use sparrow::data::synthetic;
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow::nn::{Activation, Block, Dense, Initializer, Sequential};
use sparrow::optim::{Adam, Trainer};

fn distinct_features(x: &NDArray) -> usize {
    x.with_csr::<f32, _>(|c| c.indices.iter().collect::<BTreeSet<_>>().len())
        .expect("LibSVMIter batches are f32 csr")
}

fn epoch_loss(variant_rsp: bool, epochs: usize) -> Vec<f64> {
    let (features, samples) = (20_000, 200);
    let (x, y) = synthetic::tutorial_data(samples, features, 1e-3, 7).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "sparrow-gluon-small-{}-{variant_rsp}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("small.libsvm");
    save_libsvm(&path, &x, &y).unwrap();

    let mut first = Dense::new(16).in_units(features);
    if variant_rsp {
        first = first.grad_stype(SType::RowSparse);
    }
    let mut net = Sequential::new();
    net.add(first);
    net.add(Activation::new("sigmoid").unwrap());
    net.add(Dense::new(8).in_units(16));
    net.add(Activation::new("sigmoid").unwrap());
    net.add(Dense::new(1).in_units(8));
    net.initialize(&Initializer::Uniform { scale: 0.07 }, Device::Cpu)
        .unwrap();
    let params = net.collect_params().unwrap();
    let w0 = params.iter().next().unwrap().1.clone();
    let mut trainer = Trainer::new(params.iter().map(|(_, p)| p.clone()), Adam::new(0.02)).unwrap();
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();

    let mut params_it = LibSVMIterParams::new(&path, features, 10);
    params_it.progress = false;
    let mut it = LibSVMIter::new(params_it).unwrap();
    let mut losses = Vec::new();
    for _ in 0..epochs {
        it.reset();
        let (mut total, mut rows) = (0.0, 0usize);
        for b in it.by_ref() {
            let b = b.unwrap();
            let label = b.label.clone().unwrap();
            let loss =
                autograd::record(|| loss_fn.forward(&net.forward(&b.data)?, &label)).unwrap();
            loss.backward().unwrap();
            let g = w0.grad().unwrap();
            if variant_rsp {
                assert_eq!(g.stype(), SType::RowSparse);
                let rows_held = g.stored_rows();
                assert!(
                    rows_held <= distinct_features(&b.data),
                    "{rows_held} gradient rows"
                );
                assert!(g.nbytes() * 20 < w0.nbytes(), "gradient is not dense-sized");
            } else {
                assert_eq!(g.stype(), SType::Dense);
            }
            trainer.step(10).unwrap();
            total += loss.to_f64_vec().iter().sum::<f64>();
            rows += 10;
        }
        losses.push(total / rows as f64);
    }
    std::fs::remove_dir_all(&dir).ok();
    losses
}

#[test]
fn row_sparse_variant_learns_with_small_gradients() {
    let l = epoch_loss(true, 8);
    assert!(l[l.len() - 1] < l[0] * 0.9, "loss did not decrease: {l:?}");
}

#[test]
fn dense_gradient_variant_learns_too() {
    let l = epoch_loss(false, 8);
    assert!(l[l.len() - 1] < l[0] * 0.9, "loss did not decrease: {l:?}");
}
