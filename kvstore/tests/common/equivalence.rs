//! The data-parallel equivalence check shared by the threads test (`tests/trainer.rs`) and the
//! MPI check (`examples/dist_check.rs`): N workers each training on their B rows of a step
//! must end with the parameters one process gets training on the step's N * B rows.
//!
//! The model is the sparse tutorial's shape, scaled down: a csr batch, `Dense(8, sigmoid)`
//! with a row_sparse weight gradient, `Dense(1, sigmoid)`, sigmoid binary cross-entropy.

// Shared by several test binaries and examples/dist_check, each using a part of it.
#![allow(dead_code)]

use sparrow_core::{autograd, Device, NDArray, Result, SType};
use sparrow_nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow_nn::{Block, Dense, Initializer, Parameter, Sequential};
use sparrow_optim::{Adam, Ftrl, KVStore, Optimizer, Sgd, TableId, Trainer};

/// Features of the synthetic data.
pub const FEATURES: usize = 500;
/// Units of the first layer.
pub const UNITS: usize = 8;
/// Steps trained.
pub const STEPS: usize = 6;

/// The optimizers the check covers, by name.
pub const OPTIMIZERS: [&str; 4] = ["sgd_momentum", "adam_lazy", "adam_standard", "ftrl"];

/// The optimizer named `name` (one of [`OPTIMIZERS`]).
pub fn optimizer(name: &str) -> Box<dyn Optimizer> {
    match name {
        "sgd_momentum" => Box::new(Sgd::with_momentum(0.2, 0.9)),
        "adam_lazy" => Box::new(Adam::new(0.01)),
        "adam_standard" => {
            let mut a = Adam::new(0.01);
            a.opts.lazy_update = false;
            Box::new(a)
        }
        "ftrl" => Box::new(Ftrl::new(0.1)),
        other => panic!("unknown optimizer {other}"),
    }
}

/// A deterministic pseudo-random stream (splitmix64), so every worker and the reference
/// build the same data and weights without sharing a generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn uniform(seed: u64) -> f32 {
    (mix(seed) >> 40) as f32 / (1u64 << 24) as f32
}

/// Rows `start..start + n` of the data set: ~6 non-zeros per row among [`FEATURES`]
/// columns, and a label that depends on them.
pub fn batch(start: usize, n: usize) -> Result<(NDArray, NDArray)> {
    let (mut rows, mut cols, mut vals, mut labels) = (vec![], vec![], vec![], vec![]);
    for (i, row) in (start..start + n).enumerate() {
        let mut c: Vec<i64> = (0..6)
            .map(|k| (mix((row * 16 + k) as u64) % FEATURES as u64) as i64)
            .collect();
        c.sort_unstable();
        c.dedup();
        let mut s = 0.0;
        for &col in &c {
            let v = uniform((row * 7919 + col as usize) as u64) + 0.1;
            rows.push(i as i64);
            cols.push(col);
            vals.push(v);
            s += if col % 2 == 0 { v } else { -v };
        }
        labels.push(if s > 0.0 { 1.0f32 } else { 0.0 });
    }
    let x = NDArray::csr_from_coo(&rows, &cols, &vals, [n, FEATURES])?;
    Ok((x, NDArray::from_vec(labels, &[n, 1])?))
}

/// The model, with deterministic weights (the same on every worker and in the reference).
pub fn model() -> Result<(Sequential, Vec<Parameter>)> {
    let mut net = Sequential::new();
    net.add(
        Dense::new(8)
            .in_units(FEATURES)
            .activation("sigmoid")
            .grad_stype(SType::RowSparse),
    );
    net.add(Dense::new(1).in_units(8).activation("sigmoid"));
    net.initialize(&Initializer::Constant(0.0), Device::Cpu)?;
    let params: Vec<Parameter> = net
        .collect_params()?
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    for (k, p) in params.iter().enumerate() {
        let shape = p.data()?.shape();
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| (uniform((k * 1_000_003 + i) as u64) - 0.5) * 0.2)
            .collect();
        p.set_data(&NDArray::from_vec(v, &shape)?)?;
    }
    Ok((net, params))
}

/// Where a store-backed trainer runs the optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// `Trainer::set_kvstore`: the store sums, the trainer updates.
    OnWorker,
    /// `Trainer::set_kvstore_update`: the store sums and updates, the trainer pulls.
    OnStore,
}

/// Train [`STEPS`] steps as worker `rank` of `workers`, each with `b` rows per step (the
/// reference: `rank = 0`, `workers = 1`, `b = N * B`, no store). Returns the parameters.
pub fn train(
    opt: &str,
    kv: Option<Box<dyn KVStore>>,
    rank: usize,
    workers: usize,
    b: usize,
) -> Result<Vec<Vec<f32>>> {
    train_with(opt, kv, Update::OnWorker, rank, workers, b)
}

/// [`train`], with the optimizer where `update` says when there is a store.
pub fn train_with(
    opt: &str,
    kv: Option<Box<dyn KVStore>>,
    update: Update,
    rank: usize,
    workers: usize,
    b: usize,
) -> Result<Vec<Vec<f32>>> {
    let (net, params) = model()?;
    let mut trainer = Trainer::with_boxed(params.clone(), optimizer(opt))?;
    match (kv, update) {
        (Some(kv), Update::OnWorker) => trainer.set_kvstore(kv)?,
        (Some(kv), Update::OnStore) => trainer.set_kvstore_update(kv)?,
        (None, _) => {}
    }
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    for step in 0..STEPS {
        let (x, y) = batch(step * workers * b + rank * b, b)?;
        let loss = autograd::record(|| loss_fn.forward(&net.forward(&x)?, &y))?;
        loss.backward()?;
        trainer.step(b)?;
    }
    params.iter().map(|p| p.data()?.to_vec::<f32>()).collect()
}

/// Run `f(rank, store)` on `workers` threads, each with its worker of one `local` group (a
/// collective that not every thread reaches fails after `timeout`); the results in rank order.
pub fn on_threads<R: Send + 'static>(
    workers: usize,
    timeout: std::time::Duration,
    f: impl Fn(usize, Box<dyn KVStore>) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let stores = sparrow_kvstore::local_group(workers, timeout).unwrap();
    let handles: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(rank, kv)| {
            let f = f.clone();
            std::thread::spawn(move || f(rank, Box::new(kv)))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The largest difference between `got` and `want`, relative to `want`'s largest magnitude
/// (per parameter; the worst of them).
pub fn max_rel_diff(got: &[Vec<f32>], want: &[Vec<f32>]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let scale = w
                .iter()
                .fold(0f64, |m, &x| m.max((x as f64).abs()))
                .max(1e-12);
            let diff = g
                .iter()
                .zip(w)
                .fold(0f64, |m, (&a, &b)| m.max((a as f64 - b as f64).abs()));
            diff / scale
        })
        .fold(0.0, f64::max)
}

/// The equivalence model's parameters by role (its first weight `[FEATURES, 8]`, first bias,
/// second layer's weight and bias), as values.
pub fn initial() -> Vec<Vec<f32>> {
    let (_, params) = model().unwrap();
    let by_shape = |shape: &[usize]| -> Vec<f32> {
        params
            .iter()
            .find(|p| p.data().unwrap().shape() == shape)
            .unwrap()
            .data()
            .unwrap()
            .to_vec()
            .unwrap()
    };
    vec![
        by_shape(&[FEATURES, UNITS]),
        by_shape(&[UNITS]),
        by_shape(&[UNITS, 1]),
        by_shape(&[1]),
    ]
}

/// One process's parameters after training with batch `b` and no store (an ordinary Dense
/// first layer), in [`initial`]'s order.
pub fn reference_by_role(opt: &str, b: usize) -> Vec<Vec<f32>> {
    let (_, params) = model().unwrap();
    let shapes: Vec<Vec<usize>> = params.iter().map(|p| p.data().unwrap().shape()).collect();
    let trained = train(opt, None, 0, 1, b).unwrap();
    let pick = |shape: &[usize]| trained[shapes.iter().position(|s| s == shape).unwrap()].clone();
    vec![
        pick(&[FEATURES, UNITS]),
        pick(&[UNITS]),
        pick(&[UNITS, 1]),
        pick(&[1]),
    ]
}

/// Worker `rank` of `workers`, batch `b` a step, [`train`]'s model and training loop
/// unchanged, the first layer's weight sharded across the workers
/// (`Trainer::shard_parameter`): its layer pulls the batch's rows in the forward and the step
/// pushes their gradient to their owners. Returns the parameters in [`initial`]'s order (the
/// whole first weight pulled from its owners).
pub fn train_sharded_param(
    opt: &str,
    kv: Box<dyn KVStore>,
    rank: usize,
    workers: usize,
    b: usize,
) -> Result<Vec<Vec<f32>>> {
    let (net, params) = model()?;
    let by_shape = |shape: &[usize]| {
        params
            .iter()
            .find(|p| p.shape() == shape)
            .expect("a parameter of the model")
            .clone()
    };
    let mut trainer =
        Trainer::with_boxed(params.clone(), optimizer(opt))?.with_kvstore_update(kv)?;
    let table = trainer.shard_parameter(&by_shape(&[FEATURES, UNITS]))?;
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    for step in 0..STEPS {
        let (x, y) = batch(step * workers * b + rank * b, b)?;
        let loss = autograd::record(|| loss_fn.forward(&net.forward(&x)?, &y))?;
        loss.backward()?;
        trainer.step(b)?;
    }
    let all: Vec<i64> = (0..FEATURES as i64).collect();
    let (_, first) = trainer.pull_rows(table, &all)?;
    let mut out = vec![first.to_vec::<f32>()?];
    for shape in [&[UNITS][..], &[UNITS, 1], &[1]] {
        out.push(by_shape(shape).data()?.to_vec::<f32>()?);
    }
    Ok(out)
}

/// Worker `rank` of `workers`, batch `b` a step: the first layer's weight a sharded table of the trainer's
/// store, the rest ordinary parameters. Returns the whole table (pulled from its owners) and
/// the other parameters, in [`initial`]'s order.
pub fn train_sharded(
    opt: &str,
    kv: Box<dyn KVStore>,
    rank: usize,
    workers: usize,
    b: usize,
) -> Result<Vec<Vec<f32>>> {
    train_sharded_with(opt, kv, rank, workers, b, &Checkpoint::None)
}

/// Where [`train_sharded_with`] checkpoints: after `at` steps it saves (or, resuming, starts
/// from) this worker's table shard (`Trainer::save_table`), the optimizer states of the
/// replicated parameters and their values, in files of `dir` named by rank.
pub enum Checkpoint<'a> {
    None,
    Save { dir: &'a std::path::Path, at: usize },
    Resume { dir: &'a std::path::Path, at: usize },
}

/// [`train_sharded`], saving or resuming at a step (`ck`).
pub fn train_sharded_with(
    opt: &str,
    kv: Box<dyn KVStore>,
    rank: usize,
    workers: usize,
    b: usize,
    ck: &Checkpoint<'_>,
) -> Result<Vec<Vec<f32>>> {
    let init = initial();
    let bias = Parameter::new("first.bias", &[UNITS]);
    bias.initialize(&Initializer::Zero, Device::Cpu)?;
    bias.set_data(&NDArray::from_vec(init[1].clone(), &[UNITS])?)?;
    let second = Dense::new(1).in_units(UNITS).activation("sigmoid");
    second.initialize(&Initializer::Zero, Device::Cpu)?;
    let second_params: Vec<Parameter> = second
        .collect_params()?
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    for p in &second_params {
        let shape = p.data()?.shape();
        let v = if shape == [UNITS, 1] {
            &init[2]
        } else {
            &init[3]
        };
        p.set_data(&NDArray::from_vec(v.clone(), &shape)?)?;
    }
    let mut params = vec![bias.clone()];
    params.extend(second_params.iter().cloned());
    let mut trainer =
        Trainer::with_boxed(params.clone(), optimizer(opt))?.with_kvstore_update(kv)?;
    let table: TableId =
        trainer.add_sharded_table("first.weight", &[FEATURES, UNITS], |lo, hi| {
            NDArray::from_vec(init[0][lo * UNITS..hi * UNITS].to_vec(), &[hi - lo, UNITS])
        })?;
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    let files_of = |dir: &std::path::Path, rank: usize| {
        (
            dir.join(format!("table.{rank}.safetensors")),
            dir.join(format!("states.{rank}.safetensors")),
            dir.join(format!("params.{rank}.safetensors")),
        )
    };
    let files = |dir: &std::path::Path| files_of(dir, rank);
    let mut first = 0;
    if let Checkpoint::Resume { dir, at } = ck {
        // The replicated parameters and their states are the same on every worker: worker
        // 0's. The table's rows come from every shard file, written by however many workers.
        let (_, states_file, params_file) = files_of(dir, 0);
        for (p, v) in params
            .iter()
            .zip(sparrow_core::io::load_list(&params_file)?)
        {
            p.set_data(&v)?;
        }
        trainer.load_states(&states_file)?;
        let mut shards: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| sparrow_core::Error::arg("resume", e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("table."))
            })
            .collect();
        shards.sort();
        trainer.load_table_from(table, &shards)?;
        first = *at;
    }
    for step in first..STEPS {
        if let Checkpoint::Save { dir, at } = ck {
            if step == *at {
                let (table_file, states_file, params_file) = files(dir);
                trainer.save_table(table, &table_file)?;
                trainer.save_states(&states_file)?;
                let values = params
                    .iter()
                    .map(|p| p.data())
                    .collect::<Result<Vec<_>>>()?;
                sparrow_core::io::save_list(&params_file, &values.iter().collect::<Vec<_>>())?;
            }
        }
        let (x, y) = batch(step * workers * b + rank * b, b)?;
        let (xc, rows) = trainer.pull_rows_for(table, &x)?;
        let bias_now = bias.data()?;
        let loss = autograd::record(|| {
            let h = xc.dot(&rows)?.add(&bias_now)?.sigmoid()?;
            loss_fn.forward(&second.forward(&h)?, &y)
        })?;
        loss.backward()?;
        trainer.step(b)?;
    }
    let all: Vec<i64> = (0..FEATURES as i64).collect();
    let (ids, rows) = trainer.pull_rows(table, &all)?;
    assert_eq!(ids, all);
    let mut out = vec![rows.to_vec::<f32>()?, bias.data()?.to_vec::<f32>()?];
    for p in &second_params {
        out.push(p.data()?.to_vec::<f32>()?);
    }
    if second_params[0].data()?.shape() != [UNITS, 1] {
        out.swap(2, 3);
    }
    Ok(out)
}
