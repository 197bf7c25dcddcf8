//! Trainer: rescaling, grad_req handling, row_sparse gradients, state files, global-norm
//! clipping; and the Estimator `fit` loop.

use sparrow_core::autograd::GradReq;
use sparrow_core::{device_test, testing::test_device, DType, Device, NDArray, SType};
use sparrow_nn::{Block, Dense, Initializer, Parameter};
use sparrow_optim::*;

fn param(name: &str, vals: Vec<f32>, shape: &[usize]) -> Parameter {
    let p = Parameter::new(name, shape);
    p.initialize(&Initializer::Zero, None).unwrap();
    p.set_data(&NDArray::from_vec(vals, shape).unwrap())
        .unwrap();
    p
}

/// A row_sparse array, unchecked: some tests hand the optimizers invalid row ids on purpose.
/// Moved to the device under test by hand: the sparse constructors do not follow the
/// default-device scope.
fn rs(shape: &[usize], rows: Vec<i64>, data: Vec<f32>) -> NDArray {
    NDArray::row_sparse_unchecked(data, rows, shape)
        .to_device(test_device())
        .unwrap()
}

device_test! {
fn step_rescales_by_batch_and_handles_grad_req() {
    let a = param("a", vec![1.0, 2.0], &[2]);
    let b = param("b", vec![1.0, 2.0], &[2]);
    b.set_grad_req(GradReq::Add);
    let mut t = Trainer::new(vec![a.clone(), b.clone()], Sgd::new(0.5)).unwrap();
    for p in [&a, &b] {
        p.data()
            .unwrap()
            .set_grad(Some(NDArray::from_vec(vec![4.0f32, -8.0], &[2]).unwrap()));
    }
    t.step(4).unwrap();
    // w - lr * g / batch
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 3.0]);
    assert_eq!(b.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 3.0]);
    // Write: consumed (still readable, as in Gluon); Add: kept for the caller to accumulate.
    assert_eq!(a.grad().unwrap().to_vec::<f32>().unwrap(), vec![4.0, -8.0]);
    assert_eq!(b.grad().unwrap().to_vec::<f32>().unwrap(), vec![4.0, -8.0]);
    // A second step without a new gradient is an error (a stale gradient, as in Gluon) that
    // names the parameters and changes nothing.
    let e = t.step(4).unwrap_err().to_string();
    assert!(e.contains("'a', 'b'") && e.contains("set_ignore_stale_grad"), "{e}");
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 3.0]);
    assert_eq!(b.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 3.0]);
    // Ignoring stale gradients skips those parameters; a fresh one is still applied.
    t.set_ignore_stale_grad(true);
    b.data()
        .unwrap()
        .set_grad(Some(NDArray::from_vec(vec![4.0f32, -8.0], &[2]).unwrap()));
    t.step(4).unwrap();
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 3.0]);
    assert_eq!(b.data().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 4.0]);
    t.set_ignore_stale_grad(false);
    // New gradients (new arrays, as every backward makes) are applied normally.
    for p in [&a, &b] {
        p.data()
            .unwrap()
            .set_grad(Some(NDArray::from_vec(vec![4.0f32, -8.0], &[2]).unwrap()));
    }
    t.step(4).unwrap();
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 4.0]);
    assert_eq!(b.data().unwrap().to_vec::<f32>().unwrap(), vec![-0.5, 5.0]);
    b.set_data(&NDArray::from_vec(vec![0.5f32, 3.0], &[2]).unwrap())
        .unwrap();
    b.data()
        .unwrap()
        .set_grad(Some(NDArray::from_vec(vec![4.0f32, -8.0], &[2]).unwrap()));
    a.set_data(&NDArray::from_vec(vec![0.5f32, 3.0], &[2]).unwrap())
        .unwrap();
    assert_eq!(t.learning_rate(), 0.5);
    t.set_learning_rate(0.1).unwrap();
    assert_eq!(t.learning_rate(), 0.1);
    let e = t.step(0).unwrap_err().to_string();
    assert!(e.contains("batch_size"), "{e}");
    assert!(Trainer::new(vec![a.clone(), a.clone()], Sgd::new(0.1)).is_err());
}
}

device_test! {
fn lr_and_wd_mult_come_from_parameters() {
    let a = param("a", vec![1.0], &[1])
        .with_lr_mult(2.0)
        .with_wd_mult(0.0);
    let mut opt = Sgd::new(0.1);
    opt.opts.wd = 0.5;
    let mut t = Trainer::new(vec![a.clone()], opt).unwrap();
    a.data()
        .unwrap()
        .set_grad(Some(NDArray::from_vec(vec![1.0f32], &[1]).unwrap()));
    t.step(1).unwrap();
    // lr 0.2, wd 0: 1 - 0.2
    assert!((a.data().unwrap().to_vec::<f32>().unwrap()[0] - 0.8).abs() < 1e-7);
}
}

device_test! {
fn row_sparse_grads_update_only_their_rows() {
    let e = param("e", vec![1.0; 8], &[4, 2]).with_grad_stype(SType::RowSparse);
    let mut t = Trainer::new(vec![e.clone()], Adam::new(0.1)).unwrap();
    e.data()
        .unwrap()
        .set_grad(Some(rs(&[4, 2], vec![1, 3], vec![1.0, 1.0, -1.0, -1.0])));
    t.step(1).unwrap();
    let w = e.data().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&w[0..2], &[1.0, 1.0]);
    assert_eq!(&w[4..6], &[1.0, 1.0]);
    assert!(w[2] < 1.0 && w[6] > 1.0);
}
}

device_test! {
fn save_and_load_states_resume_bit_identically() {
    let dir = std::env::temp_dir().join(format!("sparrow-optim-states-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("adam.states");
    let grad = |k: f32| NDArray::from_vec(vec![0.3 * k, -0.7, 1.1 * k, 0.2], &[2, 2]).unwrap();
    let a = param("w", vec![0.1, 0.2, 0.3, 0.4], &[2, 2]);
    let mut ta = Trainer::new(vec![a.clone()], Nadam::new(0.01)).unwrap();
    for k in 0..3 {
        a.data().unwrap().set_grad(Some(grad(k as f32)));
        ta.step(2).unwrap();
    }
    ta.save_states(&path).unwrap();
    let b = param("w", a.data().unwrap().to_vec::<f32>().unwrap(), &[2, 2]);
    let mut tb = Trainer::new(vec![b.clone()], Nadam::new(0.01)).unwrap();
    tb.load_states(&path).unwrap();
    assert_eq!(tb.state(0).unwrap().t, 3);
    for (p, t) in [(&a, &mut ta), (&b, &mut tb)] {
        p.data().unwrap().set_grad(Some(grad(5.0)));
        t.step(2).unwrap();
    }
    let (wa, wb) = (
        a.data().unwrap().to_vec::<f32>().unwrap(),
        b.data().unwrap().to_vec::<f32>().unwrap(),
    );
    assert_eq!(
        wa.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        wb.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    // Wrong optimizer, wrong names, garbage file: clear errors.
    let mut tc = Trainer::new(vec![b.clone()], Adam::new(0.01)).unwrap();
    assert!(tc
        .load_states(&path)
        .unwrap_err()
        .to_string()
        .contains("nadam"));
    let mut td = Trainer::new(
        vec![param("other", vec![0.0; 4], &[2, 2])],
        Nadam::new(0.01),
    )
    .unwrap();
    assert!(td.load_states(&path).is_err());
    std::fs::write(dir.join("junk"), b"not a safetensors file").unwrap();
    assert!(tb.load_states(dir.join("junk")).is_err());
    assert!(tb.load_states(dir.join("missing")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
}

device_test! {
fn clip_global_norm_counts_row_sparse_values() {
    let d = NDArray::from_vec(vec![3.0f32, 0.0], &[2]).unwrap();
    let r = rs(&[5, 2], vec![4], vec![0.0, 4.0]);
    let norm = clip_global_norm(&[d.clone(), r.clone()], 1.0).unwrap();
    assert!((norm - 5.0).abs() < 1e-12);
    let dv = d.to_vec::<f32>().unwrap();
    assert!((dv[0] - 0.6).abs() < 1e-6);
    // Row 4, column 1 of the dense view; the array stays row_sparse with its one row.
    let rv = r.to_vec::<f32>().unwrap();
    assert!((rv[9] - 0.8).abs() < 1e-6);
    assert_eq!(r.stype(), SType::RowSparse);
    assert_eq!(r.nnz(), 2);
    // Below the limit: untouched.
    assert!((clip_global_norm(std::slice::from_ref(&d), 10.0).unwrap() - 0.6).abs() < 1e-6);
    assert!(clip_global_norm(&[d], -1.0).is_err());
}
}

device_test! {
fn optimizer_rejects_bad_inputs_without_panicking() {
    let w = NDArray::from_vec(vec![1.0f32; 6], &[3, 2]).unwrap();
    let mut opt = Adam::new(0.1);
    let mut st = opt.create_state(0, &w).unwrap();
    let bad_shape = NDArray::from_vec(vec![1.0f32; 4], &[2, 2]).unwrap();
    assert!(opt.update(0, &w, &bad_shape, &mut st).is_err());
    let bad_dtype = NDArray::from_vec(vec![1.0f64; 6], &[3, 2]).unwrap();
    assert!(opt.update(0, &w, &bad_dtype, &mut st).is_err());
    for rows in [vec![3i64], vec![1, 1], vec![2, 0], vec![-1]] {
        let g = rs(&[3, 2], rows.clone(), vec![1.0; rows.len() * 2]);
        assert!(opt.update(0, &w, &g, &mut st).is_err(), "rows {rows:?}");
    }
    assert!(opt.update(0, &w, &w, &mut st).is_err());
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0; 6]);
    // The messages name what is wrong.
    let msg = |g: &NDArray, w: &NDArray, st: &mut State| {
        Adam::new(0.1).update(0, w, g, st).unwrap_err().to_string()
    };
    let m = msg(&bad_shape, &w, &mut st);
    assert!(m.contains("weight [3, 2] vs gradient [2, 2]"), "{m}");
    let m = msg(&w.tostype(SType::Csr).unwrap().copy(), &w, &mut st);
    assert!(m.contains("csr gradients are not supported"), "{m}");
    let wi = NDArray::from_vec(vec![1i64; 6], &[3, 2]).unwrap();
    let m = msg(
        &NDArray::from_vec(vec![1i64; 6], &[3, 2]).unwrap(),
        &wi,
        &mut st,
    );
    assert!(m.contains("weight must be float32 or float64"), "{m}");
    let m = msg(&bad_dtype, &w, &mut st);
    assert!(m.contains("F32 and F64"), "{m}");
    let other = NDArray::from_vec(vec![1.0f32; 4], &[2, 2]).unwrap();
    let mut st_other = Adam::new(0.1).create_state(0, &other).unwrap();
    let m = msg(&w.copy(), &w, &mut st_other);
    assert!(m.contains("state") && m.contains("[2, 2]"), "{m}");
}
}

device_test! {
fn f64_weights_are_updated_in_f64() {
    let w = NDArray::from_vec(vec![1.0f64, 2.0], &[2]).unwrap();
    let g = NDArray::from_vec(vec![0.5f64, -0.5], &[2]).unwrap();
    let mut opt = Sgd::with_momentum(0.1, 0.9);
    let mut st = opt.create_state(0, &w).unwrap();
    opt.update(0, &w, &g, &mut st).unwrap();
    opt.update(0, &w, &g, &mut st).unwrap();
    let got = w.to_vec::<f64>().unwrap();
    // m1 = -0.05, w1 = 0.95; m2 = -0.045 - 0.05 = -0.095, w2 = 0.855
    assert!((got[0] - 0.855).abs() < 1e-15);
    assert_eq!(st.array("momentum").unwrap().dtype(), DType::F64);
}
}

device_test! {
fn fit_trains_checkpoints_and_stops_early() {
    // y = 1 when x0 + x1 > 0: linearly separable.
    let n = 64;
    let xs: Vec<f32> = (0..n * 2)
        .map(|i| (((i * 37) % 23) as f32 - 11.0) / 11.0)
        .collect();
    let ys: Vec<f32> = (0..n)
        .map(|i| (xs[2 * i] + xs[2 * i + 1] > 0.0) as u8 as f32)
        .collect();
    let batches = move || -> Box<dyn Iterator<Item = sparrow_core::Result<(NDArray, NDArray)>>> {
        let (xs, ys) = (xs.clone(), ys.clone());
        Box::new((0..n / 16).map(move |b| {
            Ok((
                NDArray::from_vec(xs[b * 32..(b + 1) * 32].to_vec(), &[16, 2])?,
                NDArray::from_vec(ys[b * 16..(b + 1) * 16].to_vec(), &[16, 1])?,
            ))
        }))
    };
    let net = Dense::new(1).in_units(2);
    net.initialize(&Initializer::Constant(0.0), Device::current())
        .unwrap();
    let mut trainer = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.5)).unwrap();
    let dir = std::env::temp_dir().join(format!("sparrow-fit-{}", std::process::id()));
    struct Count(usize);
    impl EventHandler for &mut Count {
        fn epoch_end(&mut self, _s: &EpochStats) -> sparrow_core::Result<bool> {
            self.0 += 1;
            Ok(true)
        }
    }
    let mut count = Count(0);
    let history = {
        let mut est = Estimator::new(
            &net,
            |p: &NDArray, l: &NDArray| p.sub(l)?.square(),
            &mut trainer,
        )
        .metric(Accuracy::new())
        .handler(&mut count);
        let opts = FitOptions {
            epochs: 40,
            checkpoint_every: Some(2),
            checkpoint_dir: dir.clone(),
            early_stopping: Some(EarlyStopping {
                monitor: "val_accuracy".into(),
                higher_is_better: true,
                patience: 2,
                min_delta: 0.0,
            }),
            ..FitOptions::default()
        };
        let (mut train, mut val) = (batches.clone(), batches);
        est.fit(&mut train, Some(&mut val), &opts).unwrap()
    };
    assert!(history.len() < 40, "early stopping should end the run");
    assert_eq!(count.0, history.len());
    let first = history[0].get("loss").unwrap();
    let last = history.last().unwrap();
    assert!(last.get("loss").unwrap() < first);
    assert!(last.get("val_accuracy").unwrap() >= 0.9, "{last:?}");
    assert!(dir.join("model-epoch2.params").exists());
    assert!(dir.join("model-epoch2.states").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
}

device_test! {
fn step_called_directly_rejects_gradient_rows_of_another_length() {
    // Optimizer::step skips update()'s bookkeeping; a row_sparse gradient whose rows are longer
    // than the weight's must still be an error from the core operator, not writes past the
    // weight (stateless SGD takes the small-update path, Adam the span driver with states).
    let w = NDArray::from_vec(vec![1.0f32; 6], &[3, 2]).unwrap();
    let g = rs(&[3, 4], vec![2], vec![1.0; 4]);
    let sgd = Sgd::new(0.1);
    let mut st = sgd.create_state(0, &w).unwrap();
    let ctx = sgd.options().step_ctx(0, 1);
    assert!(ctx.lazy_update);
    let e = sgd.step(&ctx, &w, &g, &mut st).unwrap_err().to_string();
    assert!(e.contains("weight [3, 2] vs gradient [3, 4]"), "{e}");
    let adam = Adam::new(0.1);
    let mut st = adam.create_state(0, &w).unwrap();
    let ctx = adam.options().step_ctx(0, 1);
    let e = adam.step(&ctx, &w, &g, &mut st).unwrap_err().to_string();
    assert!(e.contains("weight [3, 2] vs gradient [3, 4]"), "{e}");
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0; 6]);
}
}

device_test! {
fn step_reports_unusable_parameters_before_changing_any_weight() {
    let grad_of = |p: &Parameter, v: Vec<f32>, shape: &[usize]| {
        p.data()
            .unwrap()
            .set_grad(Some(NDArray::from_vec(v, shape).unwrap()));
    };
    let first = || {
        let a = param("a", vec![1.0, 2.0], &[2]);
        grad_of(&a, vec![1.0, 1.0], &[2]);
        a
    };
    // An uninitialized parameter: the message says why, and `a` (listed first) is unchanged.
    let a = first();
    let late = Parameter::new("late", &[2]);
    let mut t = Trainer::new(vec![a.clone(), late], Sgd::new(0.5)).unwrap();
    let e = t.step(1).unwrap_err().to_string();
    assert!(e.contains("'late'") && e.contains("initialize"), "{e}");
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    // A weight whose gradient buffer was removed.
    let a = first();
    let bare = param("bare", vec![0.0, 0.0], &[2]);
    bare.data().unwrap().set_grad(None);
    let mut t = Trainer::new(vec![a.clone(), bare], Sgd::new(0.5)).unwrap();
    let e = t.step(1).unwrap_err().to_string();
    assert!(e.contains("'bare' has no gradient"), "{e}");
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    // A gradient of another shape.
    let a = first();
    let odd = param("odd", vec![0.0, 0.0], &[2]);
    grad_of(&odd, vec![1.0; 3], &[3]);
    let mut t = Trainer::new(vec![a.clone(), odd], Sgd::new(0.5)).unwrap();
    let e = t.step(1).unwrap_err().to_string();
    assert!(e.contains("gradient of 'odd' has shape [3]"), "{e}");
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    // All fine: the step goes through.
    t = Trainer::new(vec![a.clone()], Sgd::new(0.5)).unwrap();
    t.step(1).unwrap();
    assert_eq!(a.data().unwrap().to_vec::<f32>().unwrap(), vec![0.5, 1.5]);
}
}

device_test! {
fn cocob_finds_a_minimum_without_a_learning_rate_and_updates_only_its_rows() {
    // Minimize sum((w - target)^2) for targets 3 and -200 (two scales): the gradient is
    // 2 (w - target); COCOB's bet adapts to each coordinate's scale with no rate to tune.
    let target = [3.0f32, -200.0];
    let w = param("w", vec![0.0, 0.0], &[2]);
    let mut t = Trainer::new(vec![w.clone()], Cocob::new()).unwrap();
    for _ in 0..400 {
        let cur = w.data().unwrap().to_vec::<f32>().unwrap();
        let g: Vec<f32> = cur.iter().zip(target).map(|(w, t)| 2.0 * (w - t)).collect();
        let g = NDArray::from_vec(g, &[2]).unwrap().to_device(test_device()).unwrap();
        w.data().unwrap().set_grad(Some(g));
        t.step(1).unwrap();
    }
    let end = w.data().unwrap().to_vec::<f32>().unwrap();
    assert!((end[0] - 3.0).abs() < 0.3, "{end:?}");
    assert!((end[1] + 200.0).abs() < 20.0, "{end:?}");
    // Lazy: rows absent from a row_sparse gradient keep their values.
    let e = param("e", vec![1.0; 8], &[4, 2]).with_grad_stype(SType::RowSparse);
    let mut t = Trainer::new(vec![e.clone()], Cocob::new()).unwrap();
    e.data()
        .unwrap()
        .set_grad(Some(rs(&[4, 2], vec![1, 3], vec![1.0, 1.0, -1.0, -1.0])));
    t.step(1).unwrap();
    let w = e.data().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&w[0..2], &[1.0, 1.0]);
    assert_eq!(&w[4..6], &[1.0, 1.0]);
    assert!(w[2] < 1.0 && w[6] > 1.0, "{w:?}");
}
}

device_test! {
fn group_adagrad_reduces_an_embedding_loss_lazily_and_its_row_states_round_trip() {
    // An embedding table of 6 rows x 4, pulled toward targets by the rows a "batch" touches:
    // loss = 0.5 * sum over touched rows of |w[r] - target[r]|^2, gradient w[r] - target[r]
    // as a row_sparse array (what an embedding's backward makes).
    let (rows, dim) = (6usize, 4usize);
    let target: Vec<f32> = (0..rows * dim).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let e = param("e", vec![0.0; rows * dim], &[rows, dim]).with_grad_stype(SType::RowSparse);
    let mut t = Trainer::new(vec![e.clone()], GroupAdaGrad::new(0.5)).unwrap();
    let touched = [1i64, 2, 4];
    let loss_and_grad = |w: &[f32]| {
        let mut loss = 0.0f32;
        let mut g = Vec::new();
        for &r in &touched {
            for j in 0..dim {
                let d = w[r as usize * dim + j] - target[r as usize * dim + j];
                loss += 0.5 * d * d;
                g.push(d);
            }
        }
        (loss, g)
    };
    let (first, _) = loss_and_grad(&e.data().unwrap().to_vec::<f32>().unwrap());
    let step = |t: &mut Trainer| {
        let w = e.data().unwrap().to_vec::<f32>().unwrap();
        let (_, g) = loss_and_grad(&w);
        e.data()
            .unwrap()
            .set_grad(Some(rs(&[rows, dim], touched.to_vec(), g)));
        t.step(1).unwrap();
    };
    for _ in 0..100 {
        step(&mut t);
    }
    let w = e.data().unwrap().to_vec::<f32>().unwrap();
    let (last, _) = loss_and_grad(&w);
    assert!(last < 0.05 * first, "loss {first} -> {last}");
    // Lazy: rows no gradient touched are still zero.
    for r in [0usize, 3, 5] {
        assert_eq!(&w[r * dim..(r + 1) * dim], &[0.0; 4], "row {r}");
    }
    // The state is one value per row; it saves, loads back into a fresh trainer (whose shape
    // check expects (rows, 1), not the weight's shape) and the next steps continue from it.
    let path = std::env::temp_dir().join(format!(
        "sparrow-optim-group-adagrad-{}-{:?}.states",
        std::process::id(),
        test_device()
    ));
    t.save_states(&path).unwrap();
    let mut t2 = Trainer::new(vec![e.clone()], GroupAdaGrad::new(0.5)).unwrap();
    t2.load_states(&path).unwrap();
    let saved = safetensors_shape(&path);
    assert_eq!(saved, vec![rows, 1]);
    std::fs::remove_file(&path).ok();
    step(&mut t2);
    let (after, _) = loss_and_grad(&e.data().unwrap().to_vec::<f32>().unwrap());
    assert!(after <= last, "{last} -> {after}");
    // Weight decay is refused, naming the operator, and nothing changes.
    let before = e.data().unwrap().to_vec::<f32>().unwrap();
    let mut opt = GroupAdaGrad::new(0.5);
    opt.opts.wd = 1e-4;
    let mut t3 = Trainer::new(vec![e.clone()], opt).unwrap();
    let (_, g) = loss_and_grad(&before);
    e.data()
        .unwrap()
        .set_grad(Some(rs(&[rows, dim], touched.to_vec(), g)));
    let err = t3.step(1).unwrap_err().to_string();
    assert!(err.contains("group_adagrad_update") && err.contains("weight decay"), "{err}");
    assert_eq!(e.data().unwrap().to_vec::<f32>().unwrap(), before);
}
}

/// The shape of the one state tensor of a state file of one parameter.
fn safetensors_shape(path: &std::path::Path) -> Vec<usize> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let names = st.names();
    assert_eq!(names.len(), 1, "{names:?}");
    st.tensor(names[0]).unwrap().shape().to_vec()
}
