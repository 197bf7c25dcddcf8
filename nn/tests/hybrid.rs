//! Hybridized blocks and losses against eager ones: outputs, losses and gradients (with their
//! storage types) for every covered layer and loss on dense and sparse inputs; signature
//! caching; fallbacks with their messages; export and import. The layer and loss tests run on
//! every test device (the graph's executor runs on the operands' device): bit for bit on the
//! CPU, to 1e-6 of each array's largest magnitude elsewhere (a device's fused kernels may
//! round differently from its eager ones); every call after the tracing one must run out of
//! the memory plan or as one recorded node, none replaying the operators.

use sparrow_core::testing::test_csr;
use sparrow_core::{autograd, device_test, DType, Device, NDArray, SType};
use sparrow_nn::loss::{L2Loss, Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss};
use sparrow_nn::{
    Activation, AvgPool2D, BatchNorm, Block, Conv2D, Conv2DTranspose, Dense, Dropout, Embedding,
    Flatten, GlobalAvgPool2D, HybridBlock, HybridLoss, HybridTrainStep, Hybridize, Initializer,
    MaxPool2D, PReLU, Sequential, SparseEmbedding, Swish, SymbolBlock, ELU, GELU, SELU,
};

mod hybrid_util;
use hybrid_util::same_on_device;

/// A seeded f32 array with values in `[lo, hi)`.
fn arr(shape: &[usize], lo: f64, hi: f64, seed: u64) -> NDArray {
    sparrow_core::testing::test_array(shape, lo, hi, seed)
        .astype(DType::F32)
        .unwrap()
}

/// Same storage type, shape, device and values (`same_on_device`).
fn assert_same(a: &NDArray, b: &NDArray, what: &str) {
    assert_eq!(a.stype(), b.stype(), "{what}: stype");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    assert_eq!(a.device(), b.device(), "{what}: device");
    same_on_device(a, b, what);
}

fn grads(b: &dyn Block) -> Vec<(String, Option<NDArray>)> {
    b.collect_params()
        .unwrap()
        .iter()
        .map(|(n, p)| (n.to_string(), p.grad().map(|g| g.copy())))
        .collect()
}

fn assert_same_grads(a: &[(String, Option<NDArray>)], b: &[(String, Option<NDArray>)]) {
    assert_eq!(a.len(), b.len());
    for ((n, ga), (_, gb)) in a.iter().zip(b) {
        match (ga, gb) {
            (Some(x), Some(y)) => assert_same(x, y, &format!("gradient of {n}")),
            (None, None) => {}
            _ => panic!("gradient of {n}: present on one side only"),
        }
    }
}

/// Eager against hybridized for each batch: inference output (first call traces, second runs
/// the graph), then loss and gradients under autograd, twice again.
fn check<B: Block, L: Loss>(net: HybridBlock<B>, batches: &[NDArray], loss: L, label: &NDArray) {
    net.initialize(&Initializer::xavier(), Device::current())
        .unwrap();
    let hloss = HybridLoss::new("loss", loss);
    for (i, x) in batches.iter().enumerate() {
        let e = autograd::pause(|| net.inner().forward(x)).unwrap();
        for call in 0..2 {
            let h = autograd::pause(|| net.forward(x)).unwrap();
            assert_same(&e, &h, &format!("batch {i} output, call {call}"));
        }
        let le = autograd::record(|| {
            hloss
                .inner()
                .forward(&net.inner().forward(x)?, label)?
                .sum_all()
        })
        .unwrap();
        le.backward().unwrap();
        let ge = grads(&net);
        for call in 0..2 {
            let lh =
                autograd::record(|| hloss.forward(&net.forward(x)?, label)?.sum_all()).unwrap();
            assert_same(&le, &lh, &format!("batch {i} loss, call {call}"));
            lh.backward().unwrap();
            assert_same_grads(&ge, &grads(&net));
        }
    }
    assert!(
        net.fallback_reasons().is_empty(),
        "{:?}",
        net.fallback_reasons()
    );
    assert!(
        hloss.fallback_reasons().is_empty(),
        "{:?}",
        hloss.fallback_reasons()
    );
    assert!(net.graph().is_some());
    // Per batch: one inference call traced, one planned; the two calls under `record` after
    // the one that traced the loss, recorded.
    let (b, l) = (net.run_counts(), hloss.run_counts());
    assert_eq!(b.replayed + l.replayed, 0, "block {b:?}, loss {l:?}");
    assert!(
        b.planned >= batches.len() && b.recorded >= batches.len(),
        "{b:?}"
    );
}

fn labels(n: usize, classes: usize) -> NDArray {
    NDArray::from_vec((0..n).map(|i| (i % classes) as f32).collect(), &[n]).unwrap()
}

fn mlp(grad_stype: SType) -> Sequential {
    let mut s = Sequential::new();
    s.add(Dense::new(6).activation("relu").grad_stype(grad_stype));
    s.add(Dense::new(5).activation("tanh"));
    s.add(Dense::new(4).activation("softrelu"));
    s.add(Activation::new("softsign").unwrap());
    s.add(Dropout::new(0.5).unwrap()); // inference only: training mode is tested below
    s.add(Dense::new(3).activation("sigmoid").use_bias(false));
    s.add(Dense::new(3));
    s
}

device_test! {
    fn dense_layers_and_softmax_ce_on_dense_and_csr_batches() {
        let dense = arr(&[8, 10], -1.0, 1.0, 1);
        let csr = test_csr(8, 10, 0.3, 2, DType::F32);
        // Dropout with p > 0 in training mode does not trace; use an MLP without it for autograd.
        for gs in [SType::Dense, SType::RowSparse] {
            let mut net = Sequential::new();
            net.add(Dense::new(6).activation("relu").grad_stype(gs));
            net.add(Dense::new(5).activation("tanh"));
            net.add(Dense::new(3).activation("softrelu"));
            net.add(Activation::new("softsign").unwrap());
            net.add(Dense::new(3).use_bias(false));
            check(
                net.hybridize(),
                &[dense.clone(), csr.clone()],
                SoftmaxCrossEntropyLoss::new(),
                &labels(8, 3),
            );
            let mut net = Sequential::new();
            net.add(Dense::new(4).grad_stype(gs));
            check(
                net.hybridize(),
                std::slice::from_ref(&csr),
                L2Loss::new(),
                &arr(&[8, 4], -1.0, 1.0, 3),
            );
        }
    }
}

/// Dense layers with each activation of `ops::activation`, and the parametrized layers.
fn activations_net() -> Sequential {
    let mut net = Sequential::new();
    net.add(Dense::new(7).activation("gelu"))
        .add(ELU::new(0.5).unwrap())
        .add(Dense::new(7).activation("selu"))
        .add(Swish::new(1.3).unwrap())
        .add(Dense::new(6).activation("mish"))
        .add(GELU::with_approximation("tanh").unwrap())
        .add(PReLU::with_channels(6))
        .add(Dense::new(5).activation("log_sigmoid"))
        .add(Activation::new("silu").unwrap())
        .add(SELU::new())
        .add(Dense::new(3));
    net
}

device_test! {
    fn activation_layers_hybridize_like_eager() {
        let dense = arr(&[8, 10], -2.0, 2.0, 14);
        let csr = test_csr(8, 10, 0.3, 15, DType::F32);
        check(
            activations_net().hybridize(),
            &[dense, csr],
            SoftmaxCrossEntropyLoss::new(),
            &labels(8, 3),
        );
    }
}

device_test! {
    fn row_sparse_weight_gradient_stays_row_sparse() {
        let csr = test_csr(8, 30, 0.1, 4, DType::F32);
        let mut net = Sequential::new();
        net.add(Dense::new(1).grad_stype(SType::RowSparse));
        let net = net.hybridize();
        net.initialize(&Initializer::xavier(), Device::current())
            .unwrap();
        let loss = HybridLoss::new("bce", SigmoidBinaryCrossEntropyLoss::new());
        let y = labels(8, 2);
        for _ in 0..2 {
            let l = autograd::record(|| loss.forward(&net.forward(&csr)?, &y)?.sum_all()).unwrap();
            l.backward().unwrap();
            let g = net
                .collect_params()
                .unwrap()
                .get("dense0.weight")
                .unwrap()
                .grad()
                .unwrap();
            assert_eq!(g.stype(), SType::RowSparse);
        }
        let g = net.graph().unwrap();
        assert_eq!(
            g.params()
                .iter()
                .find(|p| p.name == "dense0.weight")
                .unwrap()
                .grad_stype,
            SType::RowSparse
        );
    }
}

device_test! {
    fn inference_only_blocks_and_bce_l2() {
        let x = arr(&[8, 2, 3, 2], -1.0, 1.0, 5);
        let mut net = Sequential::new();
        net.add(Flatten);
        net.add(Dense::new(4).flatten(true));
        let net = net.hybridize();
        check(
            net,
            std::slice::from_ref(&x),
            L2Loss::new(),
            &arr(&[8, 4], -1.0, 1.0, 6),
        );
        // Sigmoid BCE: the per-sample fused path ((batch, 1) logits) and the general one.
        let mut net = Sequential::new();
        net.add(Dense::new(1));
        check(
            net.hybridize(),
            std::slice::from_ref(&x),
            SigmoidBinaryCrossEntropyLoss::new(),
            &labels(8, 2),
        );
        let mut net = Sequential::new();
        net.add(Dense::new(3));
        let z = arr(&[8, 3], 0.0, 1.0, 7);
        check(
            net.hybridize(),
            std::slice::from_ref(&x),
            SigmoidBinaryCrossEntropyLoss::new(),
            &z,
        );
        // The MLP with Dropout and every activation, in inference.
        let net = mlp(SType::Dense).hybridize();
        net.initialize(&Initializer::xavier(), Device::current()).unwrap();
        let xs = arr(&[8, 10], -1.0, 1.0, 8);
        let e = autograd::pause(|| net.inner().forward(&xs)).unwrap();
        for _ in 0..2 {
            assert_same(&e, &autograd::pause(|| net.forward(&xs)).unwrap(), "mlp");
        }
        assert!(net.fallback_reasons().is_empty());
    }
}

device_test! {
    fn embeddings_and_batchnorm_in_inference() {
        let ids = NDArray::from_vec(vec![1.0f32, 3.0, 3.0, 7.0, 0.0, 2.0, 9.0, 1.0], &[8]).unwrap();
        for sparse in [false, true] {
            let mut net = Sequential::new();
            if sparse {
                net.add(SparseEmbedding::new(10, 4));
            } else {
                net.add(Embedding::with_options(10, 4, true, DType::F32));
            }
            net.add(Dense::new(3));
            check(
                net.hybridize(),
                std::slice::from_ref(&ids),
                SoftmaxCrossEntropyLoss::new(),
                &labels(8, 3),
            );
        }
        let mut net = Sequential::new();
        net.add(Dense::new(4));
        net.add(BatchNorm::new());
        net.add(Dense::new(2));
        let net = net.hybridize();
        net.initialize(&Initializer::xavier(), Device::current()).unwrap();
        let x = arr(&[6, 5], -1.0, 1.0, 9);
        // Move the running statistics away from 0 / 1 first (eager training step).
        autograd::record(|| net.inner().forward(&x)).unwrap();
        let e = autograd::pause(|| net.inner().forward(&x)).unwrap();
        for _ in 0..2 {
            assert_same(
                &e,
                &autograd::pause(|| net.forward(&x)).unwrap(),
                "batchnorm",
            );
        }
        assert!(net.fallback_reasons().is_empty());
        let g = net.graph().unwrap();
        assert!(g
            .params()
            .iter()
            .any(|p| p.name == "batchnorm0.running_mean"));
    }
}

/// A convolutional net: Conv2D (relu, padded), max pooling (ceil mode), a strided Conv2D,
/// Flatten, Dense.
fn conv_net() -> Sequential {
    let mut net = Sequential::new();
    net.add(Conv2D::new(4, &[3]).padding(&[1]).activation("relu"));
    net.add(MaxPool2D::new(&[2]).strides(&[1]).ceil_mode(true));
    net.add(Conv2D::new(3, &[3]).strides(&[2]));
    net.add(Flatten);
    net.add(Dense::new(3));
    net
}

device_test! {
    fn convolution_and_pooling_layers_trace_and_train_as_eager() {
        let x = arr(&[4, 2, 7, 7], -1.0, 1.0, 31);
        check(conv_net().hybridize(), std::slice::from_ref(&x), SoftmaxCrossEntropyLoss::new(), &labels(4, 3));
        // Grouped, dilated, no bias; then a transposed convolution (strided, output padding,
        // with bias: traced as the transposed convolution and a broadcast add).
        let mut net = Sequential::new();
        net.add(Conv2D::new(4, &[3, 2]).padding(&[1, 0]).dilation(&[2, 1]).groups(2).use_bias(false));
        net.add(Conv2DTranspose::new(3, &[3]).strides(&[2]).padding(&[1]).output_padding(&[1]).activation("tanh"));
        net.add(
            AvgPool2D::new(&[3])
                .strides(&[2])
                .padding(&[1])
                .count_include_pad(false),
        );
        net.add(GlobalAvgPool2D::new());
        net.add(Flatten);
        net.add(Dense::new(2));
        check(net.hybridize(), std::slice::from_ref(&x), L2Loss::new(), &arr(&[4, 2], -1.0, 1.0, 32));
        // One planned training step equals eager's.
        let (a, b) = (conv_net(), conv_net());
        for n in [&a, &b] {
            n.initialize(&Initializer::xavier(), Device::current()).unwrap();
            autograd::pause(|| n.forward(&x)).unwrap();
        }
        let (pa, pb) = (a.collect_params().unwrap(), b.collect_params().unwrap());
        for (name, p) in pa.iter() {
            pb.get(name).unwrap().set_data(&p.data().unwrap().copy()).unwrap();
        }
        let (ce, y) = (SoftmaxCrossEntropyLoss::new(), labels(4, 3));
        let mut step = HybridTrainStep::new(&b, &ce);
        for s in 0..3 {
            let le = autograd::record(|| ce.forward(&a.forward(&x)?, &y)).unwrap();
            le.backward().unwrap();
            let lb = step.step(&x, &y).unwrap();
            assert_same(&le, &lb, &format!("step {s} loss"));
            assert_same_grads(&grads(&a), &grads(&b));
        }
        assert!(step.fallback_reasons().is_empty(), "{:?}", step.fallback_reasons());
    }
}

#[test]
fn convolution_and_pooling_graphs_export_and_import() {
    let dir = tmp("export_conv");
    let (gp, pp) = (dir.join("net.json"), dir.join("net.safetensors"));
    let x = arr(&[2, 2, 7, 7], -1.0, 1.0, 33);
    let net = conv_net().hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let want = autograd::pause(|| net.forward(&x)).unwrap();
    net.export(&gp, &pp).unwrap();
    let imported = SymbolBlock::import(&gp, &pp).unwrap();
    assert_same(
        &want,
        &autograd::pause(|| imported.forward(&x)).unwrap(),
        "imported prediction",
    );
    let names: Vec<&str> = imported
        .graph()
        .nodes()
        .iter()
        .map(|n| n.op.name())
        .collect();
    assert_eq!(
        names.iter().filter(|&&n| n == "convolution").count(),
        2,
        "{names:?}"
    );
    assert!(names.contains(&"pooling"), "{names:?}");
    std::fs::remove_dir_all(&dir).ok();
}

device_test! {
    fn batchnorm_in_training_traces_and_updates_its_running_statistics() {
        let x = arr(&[6, 5], -1.0, 1.0, 41);
        let y = labels(6, 2);
        let make = || {
            let mut net = Sequential::new();
            net.add(Dense::new(4));
            net.add(BatchNorm::new());
            net.add(Dense::new(2));
            net
        };
        let nets = [make(), make(), make()];
        for n in &nets {
            n.initialize(&Initializer::xavier(), Device::current()).unwrap();
            autograd::pause(|| n.forward(&x)).unwrap();
        }
        let first = nets[0].collect_params().unwrap();
        for n in &nets[1..] {
            let ps = n.collect_params().unwrap();
            for (name, p) in first.iter() {
                ps.get(name).unwrap().set_data(&p.data().unwrap().copy()).unwrap();
            }
        }
        let [eager, recorded, stepped] = nets;
        let recorded = recorded.hybridize();
        let ce = SoftmaxCrossEntropyLoss::new();
        let mut step = HybridTrainStep::new(&stepped, &ce);
        let stats = |b: &dyn Block| -> Vec<NDArray> {
            let ps = b.collect_params().unwrap();
            ["batchnorm0.running_mean", "batchnorm0.running_var"]
                .iter()
                .map(|n| ps.get(n).unwrap().data().unwrap().copy())
                .collect()
        };
        for s in 0..3 {
            let le = autograd::record(|| ce.forward(&eager.forward(&x)?, &y)?.sum_all()).unwrap();
            le.backward().unwrap();
            let lr = autograd::record(|| ce.forward(&recorded.forward(&x)?, &y)?.sum_all()).unwrap();
            lr.backward().unwrap();
            let ls = step.step(&x, &y).unwrap().sum_all().unwrap();
            assert_same(&le, &lr, &format!("step {s}: recorded loss"));
            assert_same(&le, &ls, &format!("step {s}: HybridTrainStep loss"));
            assert_same_grads(&grads(&eager), &grads(&recorded));
            assert_same_grads(&grads(&eager), &grads(&stepped));
            for (k, ((e, r), t)) in stats(&eager).iter().zip(stats(&recorded)).zip(stats(&stepped)).enumerate() {
                assert_same(e, &r, &format!("step {s}: running statistic {k}, recorded"));
                assert_same(e, &t, &format!("step {s}: running statistic {k}, step"));
            }
        }
        // The statistics moved, and every recorded call after the trace ran the graph.
        assert_ne!(stats(&eager)[0].to_f64_vec(), vec![0.0; 4]);
        assert!(recorded.fallback_reasons().is_empty(), "{:?}", recorded.fallback_reasons());
        assert!(step.fallback_reasons().is_empty(), "{:?}", step.fallback_reasons());
        let runs = recorded.run_counts();
        assert_eq!((runs.recorded, runs.replayed), (2, 0), "{runs:?}");
    }
}

#[test]
fn untraceable_blocks_fall_back_with_a_message() {
    let x = arr(&[4, 5], -1.0, 1.0, 10);
    // Data-dependent control flow.
    let net = sparrow_nn::layers::Lambda::new(|x| {
        if x.sum_all()?.item()? > 0.0 {
            x.relu()
        } else {
            x.neg()
        }
    })
    .hybridize();
    let y = net.forward(&x).unwrap();
    assert_eq!(y.shape(), vec![4, 5]);
    let r = net.fallback_reasons();
    assert!(
        r[0].contains("block 'lambda'") && r[0].contains("on the host (item)"),
        "{}",
        r[0]
    );
    // A constant made inside the forward.
    let net = sparrow_nn::layers::Lambda::new(|x| x.add(&NDArray::ones(&x.shape(), DType::F32)?))
        .hybridize();
    net.forward(&x).unwrap();
    assert!(net.fallback_reasons()[0].contains("neither an input, a parameter"));
    // An operator without a graph hook, named.
    let net = sparrow_nn::layers::Lambda::new(|x| x.repeat(2, Some(1))?.relu()).hybridize();
    net.forward(&x).unwrap();
    let r = net.fallback_reasons();
    assert!(r[0].contains("operator 'repeat' is not traced"), "{}", r[0]);
}

#[test]
fn signatures_are_cached_and_children_inline() {
    let mut inner = Sequential::new();
    inner.add(Dense::new(4).activation("relu"));
    let mut net = Sequential::new();
    net.add(inner.hybridize());
    net.add(Dense::new(2));
    let net = net.hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    for rows in [3, 5, 3] {
        net.forward(&arr(&[rows, 6], -1.0, 1.0, rows as u64))
            .unwrap();
    }
    assert_eq!(net.cached_signatures(), 2);
    // The child's operators joined the parent's graph.
    assert_eq!(net.graph().unwrap().nodes().len(), 4);
    autograd::record(|| net.forward(&arr(&[3, 6], -1.0, 1.0, 1))).unwrap();
    assert_eq!(net.cached_signatures(), 3); // training mode is its own signature
}

#[test]
fn softmax_ce_validates_labels_through_the_graph() {
    let loss = HybridLoss::new("ce", SoftmaxCrossEntropyLoss::new());
    let pred = arr(&[4, 3], -1.0, 1.0, 11);
    let ok = labels(4, 3);
    loss.forward(&pred, &ok).unwrap();
    loss.forward(&pred, &ok).unwrap();
    assert!(loss.graph().is_some());
    let bad = NDArray::from_vec(vec![0.0f32, 1.0, 5.0, 2.0], &[4]).unwrap();
    let err = loss.forward(&pred, &bad).unwrap_err().to_string();
    assert!(
        err.contains("label 5 at position 2 is not a class in [0, 3)"),
        "{err}"
    );
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sparrow-hybrid-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn export_then_import_predicts_and_fine_tunes_the_same() {
    let dir = tmp("export");
    let (gp, pp) = (dir.join("net.json"), dir.join("net.safetensors"));
    let csr = test_csr(6, 12, 0.3, 12, DType::F32);
    let mut net = Sequential::new();
    net.add(
        Dense::new(5)
            .activation("relu")
            .grad_stype(SType::RowSparse),
    );
    net.add(Dense::new(3).activation("tanh"));
    net.add(Dense::new(2));
    let net = net.hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    assert!(net.export(&gp, &pp).is_err()); // nothing traced yet
    let want = autograd::pause(|| net.forward(&csr)).unwrap();
    net.export(&gp, &pp).unwrap();
    let imported = SymbolBlock::import(&gp, &pp).unwrap();
    assert_same(
        &want,
        &autograd::pause(|| imported.forward(&csr)).unwrap(),
        "imported prediction",
    );
    // Fine-tuning: the same gradients, the first weight's row_sparse.
    let y = labels(6, 2);
    let ce = SoftmaxCrossEntropyLoss::new();
    let l1 = autograd::record(|| ce.forward(&net.forward(&csr)?, &y)?.sum_all()).unwrap();
    l1.backward().unwrap();
    let (out2, l2) = autograd::record(|| {
        let out = imported.forward(&csr)?;
        let l = ce.forward(&out, &y)?.sum_all()?;
        Ok::<_, sparrow_core::Error>((out, l))
    })
    .unwrap();
    // The imported graph trains as one tape node running its backward graph.
    assert_eq!(out2.node().unwrap().op, "hybrid_graph");
    l2.backward().unwrap();
    assert_same(&l1, &l2, "fine-tuning loss");
    assert_same_grads(&grads(&net), &grads(&imported));
    let g = imported
        .collect_params()
        .unwrap()
        .get("dense0.weight")
        .unwrap()
        .grad()
        .unwrap();
    assert_eq!(g.stype(), SType::RowSparse);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn activation_parameters_survive_export_and_import() {
    let dir = tmp("export-act");
    let (gp, pp) = (dir.join("net.json"), dir.join("net.safetensors"));
    let x = arr(&[6, 10], -2.0, 2.0, 16);
    let net = activations_net().hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let want = autograd::pause(|| net.forward(&x)).unwrap();
    net.export(&gp, &pp).unwrap();
    let json = std::fs::read_to_string(&gp).unwrap();
    for op in [
        "\"elu\"",
        "\"swish\"",
        "\"gelu_tanh\"",
        "\"alpha\": 0.5",
        "\"beta\": 1.3",
    ] {
        assert!(json.contains(op), "{op} not in the exported graph");
    }
    let imported = SymbolBlock::import(&gp, &pp).unwrap();
    assert_same(
        &want,
        &autograd::pause(|| imported.forward(&x)).unwrap(),
        "imported prediction",
    );
    // An activation without its parameter is refused, naming it.
    std::fs::write(&gp, json.replace("\"alpha\": 0.5", "\"alphas\": 0.5")).unwrap();
    let e = match SymbolBlock::import(&gp, &pp) {
        Ok(_) => panic!("an elu without its alpha was imported"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("alpha"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn crafted_graph_files_are_rejected() {
    let dir = tmp("crafted");
    let (gp, pp) = (dir.join("net.json"), dir.join("net.safetensors"));
    let mut net = Sequential::new();
    net.add(Dense::new(3).activation("relu"));
    let net = net.hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    net.forward(&arr(&[2, 4], -1.0, 1.0, 13)).unwrap();
    net.export(&gp, &pp).unwrap();
    let good = std::fs::read_to_string(&gp).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&good).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut d = doc.clone();
        f(&mut d);
        serde_json::to_string(&d).unwrap()
    };
    let cases: Vec<(String, &str)> = vec![
        ("{not json".into(), "not valid JSON"),
        (
            edit(&|d| d["format"] = "other".into()),
            "expected 'sparrow-graph'",
        ),
        (
            edit(&|d| d["version"] = 7.into()),
            "version Some(7) is not supported",
        ),
        (
            edit(&|d| d["nodes"][0]["op"] = "launch".into()),
            "unknown operator 'launch'",
        ),
        (
            edit(&|d| d["nodes"][0]["inputs"] = serde_json::json!([0, 99])),
            "before it is defined",
        ),
        (edit(&|d| d["nodes"][1]["output"] = 0.into()), "second time"),
        (
            edit(&|d| d["values"][0]["dtype"] = "float128".into()),
            "unknown dtype 'float128'",
        ),
        (
            edit(&|d| d["values"][0]["shape"] = serde_json::json!([-2, 4])),
            "expected a value id",
        ),
        (
            edit(&|d| d["params"][0]["grad_stype"] = "csr".into()),
            "grad_stype 'csr'",
        ),
        (
            edit(&|d| {
                d["nodes"][0]["attrs"] = serde_json::json!({});
            }),
            "needs attribute 'transpose_a'",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&gp, text).unwrap();
        let err = SymbolBlock::import(&gp, &pp)
            .err()
            .expect("must be rejected")
            .to_string();
        assert!(err.contains(want), "{err} (wanted '{want}')");
    }
    // A graph whose parameter shape disagrees with the file's tensor.
    std::fs::write(
        &gp,
        edit(&|d| {
            let p = d["params"][0]["value"].as_u64().unwrap() as usize;
            d["values"][p]["shape"] = serde_json::json!([7, 4]);
        }),
    )
    .unwrap();
    assert!(SymbolBlock::import(&gp, &pp).is_err());
    // A graph that lies about an intermediate shape fails when run, naming the node.
    std::fs::write(
        &gp,
        edit(&|d| {
            let o = d["nodes"][0]["output"].as_u64().unwrap() as usize;
            d["values"][o]["shape"] = serde_json::json!([2, 5]);
        }),
    )
    .unwrap();
    match SymbolBlock::import(&gp, &pp) {
        Ok(b) => {
            let err = b
                .forward(&arr(&[2, 4], -1.0, 1.0, 13))
                .unwrap_err()
                .to_string();
            // Replayed: "node 0 (dot) produced ..."; out of the plan: "node 0 (dot): ...
            // the planned buffer is [2, 5]".
            assert!(err.contains("node 0 (dot)"), "{err}");
            assert!(err.contains("[2, 5]"), "{err}");
        }
        Err(e) => assert!(e.to_string().contains("shape"), "{e}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}
