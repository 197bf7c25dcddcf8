//! A Trainer driving a table sharded across the workers (`add_sharded_table`, `pull_rows_for`,
//! `step`; or `shard_parameter`, the model's own loop): the first layer of the equivalence
//! model kept as a table split by rows over 2 threads of a `local` store, each thread training
//! on its 4 rows of a step, ends with the weights one trainer gets on the step's 8 rows with
//! an ordinary Dense layer (no store), for SGD with momentum, Adam (lazy and standard) and
//! FTRL.

#[path = "common/equivalence.rs"]
mod equivalence;

use std::time::Duration;

use equivalence::{
    initial, max_rel_diff, on_threads, reference_by_role, train_sharded, train_sharded_param,
    train_sharded_with, Checkpoint, OPTIMIZERS, STEPS,
};
use sparrow_core::{autograd, DType, Device, NDArray, SType};
use sparrow_kvstore::local_group;
use sparrow_nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow_nn::{Block, Dense, Embedding, Hybridize, Initializer, Parameter, Sequential};
use sparrow_optim::{Adam, Sgd, Trainer};

const WORKERS: usize = 2;
const B: usize = 4;

fn run_workers(opt: &str, workers: usize) -> Vec<Vec<Vec<f32>>> {
    let opt = opt.to_string();
    on_threads(workers, Duration::from_secs(60), move |rank, kv| {
        train_sharded(&opt, kv, rank, workers, B).unwrap()
    })
}

#[test]
fn a_sharded_first_layer_matches_one_process_with_a_dense_layer() {
    let init = initial();
    for opt in OPTIMIZERS {
        let want = reference_by_role(opt, WORKERS * B);
        assert!(
            max_rel_diff(&want, &init) > 1e-3,
            "{opt}: weights did not move"
        );
        // Worker order: the table's rows come from their owners, the rest is replicated.
        let got = run_workers(opt, WORKERS);
        for (rank, w) in got.iter().enumerate() {
            let d = max_rel_diff(w, &want);
            assert!(
                d <= 1e-6,
                "{opt}: worker {rank} of {WORKERS} (sharded first layer) differs from one \
                 process with batch {} by {d:e}",
                WORKERS * B
            );
        }
        assert_eq!(got[0], got[1], "{opt}: workers disagree");
    }
}

/// A run saved after half its steps (each worker's table shard with its rows' optimizer
/// state, the other parameters' states and values) and resumed by fresh trainers and stores
/// from those files ends with the uninterrupted run's weights, bit for bit; resumed by 1 or 4
/// workers (the rows re-cut from the 2 files) it ends where one process does; a shard file
/// that does not hold a worker's rows is an error naming both.
#[test]
fn a_sharded_table_resumes_from_its_saved_shards() {
    let dir = std::env::temp_dir().join(format!("sparrow-table-ck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for opt in OPTIMIZERS {
        let at = STEPS / 2;
        let run = |ck: &'static str| {
            let (opt, dir) = (opt.to_string(), dir.clone());
            on_threads(WORKERS, Duration::from_secs(60), move |rank, kv| {
                let ck = match ck {
                    "save" => Checkpoint::Save { dir: &dir, at },
                    _ => Checkpoint::Resume { dir: &dir, at },
                };
                train_sharded_with(&opt, kv, rank, WORKERS, B, &ck).unwrap()
            })
        };
        let whole = run("save");
        let resumed = run("resume");
        assert_eq!(whole, resumed, "{opt}: the resumed run differs");
        assert_eq!(
            whole[0],
            run_workers(opt, WORKERS)[0],
            "{opt}: saving changed the run"
        );
        // Resumed by 1 and by 4 workers (the same 8 rows a step): each takes its rows from
        // the files that hold them, and ends where one process with batch 8 does.
        let want = reference_by_role(opt, WORKERS * B);
        for workers in [1, 4] {
            let (name, dir) = (opt.to_string(), dir.clone());
            let got = on_threads(workers, Duration::from_secs(60), move |rank, kv| {
                let ck = Checkpoint::Resume { dir: &dir, at };
                train_sharded_with(&name, kv, rank, workers, WORKERS * B / workers, &ck).unwrap()
            });
            for (rank, w) in got.iter().enumerate() {
                let d = max_rel_diff(w, &want);
                assert!(
                    d <= 1e-6,
                    "{opt}: resumed by {workers} workers, worker {rank}: {d:e}"
                );
            }
        }
    }
    // Worker 0's file holds rows 0..250; worker 1 owns 250..500.
    let err = on_threads(WORKERS, Duration::from_secs(60), {
        let dir = dir.clone();
        move |rank, kv| {
            // The files left are the last optimizer's.
            let last = equivalence::optimizer(OPTIMIZERS[OPTIMIZERS.len() - 1]);
            let mut t = Trainer::with_boxed(Vec::<Parameter>::new(), last)
                .unwrap()
                .with_kvstore_update(kv)
                .unwrap();
            let table = t
                .add_sharded_table("first.weight", &[500, 8], |lo, hi| {
                    NDArray::zeros(&[hi - lo, 8], sparrow_core::DType::F32)
                })
                .unwrap();
            t.load_table(table, dir.join("table.0.safetensors"))
                .map_err(|e| e.to_string())
                .err()
                .map(|e| (rank, e))
        }
    });
    assert_eq!(err[0], None, "worker 0 loads its own shard");
    let (_, e) = err[1].clone().expect("worker 1 refuses worker 0's rows");
    assert!(
        e.contains("rows 0..250") && e.contains("250..500") && e.contains("worker 1 of 2"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sharded_tables_refuse_misuse() {
    // Without update on the store: the owners could not update.
    let mut t = Trainer::new(Vec::<Parameter>::new(), Sgd::new(0.1)).unwrap();
    let err = t
        .add_sharded_table("w", &[4, 2], |lo, hi| {
            NDArray::zeros(&[hi - lo, 2], sparrow_core::DType::F32)
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("set_kvstore_update"), "{err}");

    let kv = local_group(1, Duration::from_secs(10))
        .unwrap()
        .pop()
        .unwrap();
    let p = Parameter::new("p", &[1]);
    p.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut t = Trainer::new(vec![p.clone()], Sgd::new(0.1))
        .unwrap()
        .with_kvstore_update(Box::new(kv))
        .unwrap();
    // A shard of the wrong shape names the table.
    let err = t
        .add_sharded_table("bad", &[4, 2], |_, _| {
            NDArray::zeros(&[3, 2], sparrow_core::DType::F32)
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("'bad'") && err.contains("[4, 2]"), "{err}");
    let table = t
        .add_sharded_table("w", &[4, 2], |lo, hi| {
            NDArray::from_vec(vec![1f32; (hi - lo) * 2], &[hi - lo, 2])
        })
        .unwrap();
    // Rows out of range, a batch of the wrong width.
    assert!(t.pull_rows(table, &[4]).is_err());
    let x = NDArray::csr_from_coo(&[0], &[1], &[1f32], [1, 5]).unwrap();
    let err = t.pull_rows_for(table, &x).unwrap_err().to_string();
    assert!(err.contains("4 columns"), "{err}");
    let (ids, rows) = t.pull_rows(table, &[3, 1, 3]).unwrap();
    assert_eq!(ids, vec![1, 3]);
    assert_eq!(rows.shape(), vec![2, 2]);
    // Rows pulled but no backward: the step says so (after pushing nothing).
    let loss = autograd::record(|| p.data()?.sum_all()).unwrap();
    loss.backward().unwrap();
    let err = t.step(1).unwrap_err().to_string();
    assert!(err.contains("no gradient"), "{err}");
    // The table is unchanged, and the next step works.
    let (_, rows) = t.pull_rows(table, &[0, 1, 2, 3]).unwrap();
    assert_eq!(rows.to_vec::<f32>().unwrap(), vec![1f32; 8]);
    let loss = autograd::record(|| rows.sum_all()).unwrap();
    loss.backward().unwrap();
    let loss2 = autograd::record(|| p.data()?.sum_all()).unwrap();
    loss2.backward().unwrap();
    t.step(1).unwrap();
    let (_, rows) = t.pull_rows(table, &[0, 1, 2, 3]).unwrap();
    for v in rows.to_vec::<f32>().unwrap() {
        assert!((v - 0.9).abs() < 1e-6, "{v}");
    }
    // Tables live in the store: the trainer cannot change stores.
    let other = local_group(1, Duration::from_secs(10))
        .unwrap()
        .pop()
        .unwrap();
    assert!(t.set_kvstore_update(Box::new(other)).is_err());
}

#[test]
fn a_worker_that_fails_before_a_collective_fails_every_worker() {
    // Worker 1's rows cannot be made; then worker 1 asks for a row out of range. Both calls
    // are collective: worker 0 must get the error too, not wait for worker 1.
    let got = on_threads(2, Duration::from_secs(30), |rank, kv| {
        let started = std::time::Instant::now();
        let mut t = Trainer::new(Vec::<Parameter>::new(), Sgd::new(0.1))
            .unwrap()
            .with_kvstore_update(kv)
            .unwrap();
        let bad = t
            .add_sharded_table("t", &[6, 2], |lo, hi| {
                if rank == 1 {
                    Err(sparrow_core::Error::arg("test", "no rows here"))
                } else {
                    NDArray::zeros(&[hi - lo, 2], sparrow_core::DType::F32)
                }
            })
            .unwrap_err()
            .to_string();
        let table = t
            .add_sharded_table("u", &[6, 2], |lo, hi| {
                NDArray::zeros(&[hi - lo, 2], sparrow_core::DType::F32)
            })
            .unwrap();
        let ids: Vec<i64> = if rank == 1 { vec![1, 6] } else { vec![1, 4] };
        let pull = t.pull_rows(table, &ids).unwrap_err().to_string();
        // The next pull works on both.
        let (got, _) = t.pull_rows(table, &[5, 0]).unwrap();
        assert_eq!(got, vec![0, 5]);
        (bad, pull, started.elapsed())
    });
    for (rank, (bad, pull, took)) in got.into_iter().enumerate() {
        if rank == 1 {
            assert!(bad.contains("no rows here"), "{bad}");
        } else {
            assert!(bad.contains("failed on 1 of 2 workers"), "{bad}");
        }
        assert!(
            pull.contains("failed on 1 of 2 workers") && pull.contains("row id 6"),
            "worker {rank}: {pull}"
        );
        assert!(
            took < Duration::from_secs(20),
            "worker {rank} waited {took:?}"
        );
    }
}

/// `Trainer::shard_parameter`: the equivalence model's own training loop (`net.forward` on the
/// csr batch, backward, step), its first Dense weight sharded over 2 workers, ends where one
/// process with an ordinary Dense layer does, for every optimizer of the check.
#[test]
fn a_sharded_parameter_trains_with_the_single_process_loop() {
    for opt in OPTIMIZERS {
        let want = reference_by_role(opt, WORKERS * B);
        let name = opt.to_string();
        let got = on_threads(WORKERS, Duration::from_secs(60), move |rank, kv| {
            train_sharded_param(&name, kv, rank, WORKERS, B).unwrap()
        });
        for (rank, w) in got.iter().enumerate() {
            let d = max_rel_diff(w, &want);
            assert!(
                d <= 1e-6,
                "{opt}: worker {rank} of {WORKERS} (sharded parameter) differs from one \
                 process with batch {} by {d:e}",
                WORKERS * B
            );
        }
        assert_eq!(got[0], got[1], "{opt}: workers disagree");
    }
}

/// A sharded table read twice in one recorded step (an Embedding applied to two id arrays)
/// pushes the sum of both reads' gradients; a forward outside `record` (evaluation) pulls
/// rows without leaving a gradient to push. Two workers end where one process with an
/// ordinary Embedding does.
#[test]
fn a_sharded_embedding_read_twice_a_step_pushes_both_gradients() {
    const ROWS: usize = 40;
    const DIM: usize = 3;
    let table: Vec<f32> = (0..ROWS * DIM).map(|i| (i as f32 * 0.37).sin()).collect();
    let ids = |step: usize, rank: usize| -> (NDArray, NDArray) {
        let a: Vec<f32> = (0..4)
            .map(|k| ((step * 13 + rank * 7 + k * 5) % ROWS) as f32)
            .collect();
        let b: Vec<f32> = (0..4)
            .map(|k| ((step * 3 + rank * 11 + k * 9) % ROWS) as f32)
            .collect();
        (
            NDArray::from_vec(a, &[4]).unwrap(),
            NDArray::from_vec(b, &[4]).unwrap(),
        )
    };
    // One step's loss: both reads, weighted differently so a lost read shows.
    let loss_of = |emb: &Embedding, a: &NDArray, b: &NDArray| {
        let ya = emb.forward(a)?.sum_all()?;
        let yb = emb.forward(b)?.square()?.sum_all()?;
        ya.add(&yb)
    };
    let make = move || {
        // A row_sparse gradient in the reference, so its Adam is lazy as the owners' is.
        let emb = Embedding::with_options(ROWS, DIM, true, DType::F32);
        emb.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        emb.weight()
            .set_data(&NDArray::from_vec(table.clone(), &[ROWS, DIM]).unwrap())
            .unwrap();
        emb
    };
    // One process, both workers' ids each step.
    let emb = make();
    let mut trainer = Trainer::new(vec![emb.weight().clone()], Adam::new(0.05)).unwrap();
    for step in 0..4 {
        let loss = autograd::record(|| {
            let (a0, b0) = ids(step, 0);
            let (a1, b1) = ids(step, 1);
            loss_of(&emb, &a0, &b0)?.add(&loss_of(&emb, &a1, &b1)?)
        })
        .unwrap();
        loss.backward().unwrap();
        trainer.step(2).unwrap();
    }
    let want = emb.weight().data().unwrap().to_vec::<f32>().unwrap();
    let got = on_threads(WORKERS, Duration::from_secs(60), move |rank, kv| {
        let emb = make();
        let mut t = Trainer::new(vec![emb.weight().clone()], Adam::new(0.05))
            .unwrap()
            .with_kvstore_update(kv)
            .unwrap();
        let table = t.shard_parameter(emb.weight()).unwrap();
        for step in 0..4 {
            // An evaluation forward first: plain rows, nothing to push (rows kept for a
            // gradient would get none, and the step would fail on them as stale).
            let (a, b) = ids(step, rank);
            assert_eq!(emb.forward(&a).unwrap().shape(), vec![4, DIM]);
            let loss = autograd::record(|| loss_of(&emb, &a, &b)).unwrap();
            loss.backward().unwrap();
            t.step(1).unwrap();
        }
        let all: Vec<i64> = (0..ROWS as i64).collect();
        t.pull_rows(table, &all).unwrap().1.to_vec::<f32>().unwrap()
    });
    for (rank, w) in got.iter().enumerate() {
        let d = max_rel_diff(std::slice::from_ref(w), std::slice::from_ref(&want));
        assert!(d <= 1e-6, "worker {rank}: {d:e}");
    }
}

/// What a sharded parameter refuses, each with a message naming it.
#[test]
fn a_sharded_parameter_refuses_whole_weight_access() {
    let dense = || {
        let d = Dense::new(2).in_units(6).grad_stype(SType::RowSparse);
        d.initialize(&Initializer::Constant(0.5), Device::Cpu)
            .unwrap();
        d
    };
    // Without update on the store.
    let d = dense();
    let mut t = Trainer::from_params(&d.collect_params().unwrap(), Sgd::new(0.1)).unwrap();
    let err = t.shard_parameter(d.weight()).unwrap_err().to_string();
    assert!(err.contains("set_kvstore_update"), "{err}");
    // A 1-d parameter, and one of unknown shape, cannot be tables.
    let kv = local_group(1, Duration::from_secs(10))
        .unwrap()
        .pop()
        .unwrap();
    let mut t = Trainer::from_params(&d.collect_params().unwrap(), Sgd::new(0.1))
        .unwrap()
        .with_kvstore_update(Box::new(kv))
        .unwrap();
    let bias = d.bias().unwrap().clone();
    let err = t.shard_parameter(&bias).unwrap_err().to_string();
    assert!(err.contains("at least 2-d"), "{err}");
    let lazy = Parameter::new("lazy", &[0, 4]);
    let err = t
        .shard_parameter_with(&lazy, |lo, hi| NDArray::zeros(&[hi - lo, 4], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(err.contains("'lazy'") && err.contains("[0, 4]"), "{err}");
    // Rows of the wrong dtype.
    let other = Parameter::new("other", &[4, 2]);
    let err = t
        .shard_parameter_with(&other, |lo, hi| NDArray::zeros(&[hi - lo, 2], DType::F64))
        .unwrap_err()
        .to_string();
    assert!(err.contains("'other'") && err.contains("float64"), "{err}");
    // Sharded: it leaves the replicated list, and the whole weight is gone.
    assert_eq!(t.params().len(), 2);
    t.shard_parameter(d.weight()).unwrap();
    assert_eq!(t.params().len(), 1);
    assert!(d.weight().is_sharded() && d.weight().stages_rows());
    for err in [
        d.weight().data().unwrap_err().to_string(),
        d.weight()
            .set_data(&NDArray::zeros(&[6, 2], DType::F32).unwrap())
            .unwrap_err()
            .to_string(),
        d.weight()
            .reinitialize(&Initializer::Zero)
            .unwrap_err()
            .to_string(),
    ] {
        assert!(err.contains("'weight'") && err.contains("sharded"), "{err}");
    }
    // Its rows are still read by row_sparse_data (pulled from the store).
    let r = d.weight().row_sparse_data(&[4, 0, 4]).unwrap();
    assert_eq!(r.row_ids().unwrap(), vec![0, 4]);
    assert_eq!(r.shape(), vec![6, 2]);
    assert_eq!(r.nnz(), 4);
    // Initializing the model again leaves it sharded; sharding it twice is an error.
    d.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    assert!(d.weight().is_sharded());
    let err = t.shard_parameter_with(d.weight(), |lo, hi| {
        NDArray::zeros(&[hi - lo, 2], DType::F32)
    });
    assert!(err.unwrap_err().to_string().contains("already sharded"));
    // A dense input cannot read a table a batch's rows at a time; a csr one of the wrong
    // width names the table's rows.
    let err = d
        .forward(&NDArray::zeros(&[1, 6], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("csr") && err.contains("sharded"), "{err}");
    let x = NDArray::csr_from_coo(&[0], &[1], &[1f32], [1, 7]).unwrap();
    let err = d.forward(&x).unwrap_err().to_string();
    assert!(
        err.contains("'weight'") && err.contains("6 rows") && err.contains("[1, 7]"),
        "{err}"
    );
    // The layer computes with the pulled rows: 0.5 * (x[0,1] = 2) for each unit.
    let x = NDArray::csr_from_coo(&[0], &[1], &[2f32], [1, 6]).unwrap();
    assert_eq!(
        d.forward(&x).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 1.0]
    );
    // An ordinary model around it trains (the bias is replicated, the weight a table).
    let mut net = Sequential::new();
    net.add(d.clone());
    let loss = autograd::record(|| {
        SigmoidBinaryCrossEntropyLoss::new().forward(
            &net.forward(&x)?,
            &NDArray::from_vec(vec![1f32, 0.0], &[1, 2])?,
        )
    })
    .unwrap();
    loss.backward().unwrap();
    t.step(1).unwrap();
}

/// `Parameter::row_sparse_data` of a sharded factor table (the factorization-machine
/// pattern: `sum((x . V_batch)^2)` with `V_batch = v.row_sparse_data(cols)`), the model code
/// unchanged: 2 workers with lazy Adam end where one process does on both workers' rows.
#[test]
fn row_sparse_data_of_a_sharded_parameter_trains_like_one_process() {
    const VOCAB: usize = 30;
    const K: usize = 3;
    let batch = |step: usize, rank: usize| -> (NDArray, Vec<i64>) {
        let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
        for i in 0..3 {
            for j in 0..2 {
                r.push(i as i64);
                c.push(((step * 7 + rank * 13 + i * 5 + j * 11) % VOCAB) as i64);
                v.push(0.5 + (i + j) as f32 * 0.25);
            }
        }
        let x = NDArray::csr_from_coo(&r, &c, &v, [3, VOCAB]).unwrap();
        (x, c)
    };
    let make = || {
        let v = Parameter::new("v", &[VOCAB, K]).with_grad_stype(SType::RowSparse);
        v.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        let init: Vec<f32> = (0..VOCAB * K)
            .map(|i| (i as f32 * 0.71).cos() * 0.3)
            .collect();
        v.set_data(&NDArray::from_vec(init, &[VOCAB, K]).unwrap())
            .unwrap();
        v
    };
    let loss_of = |v: &Parameter, x: &NDArray, cols: &[i64]| {
        let vb = v.row_sparse_data(cols)?;
        x.dot(&vb)?.square()?.sum_all()
    };
    let v = make();
    let mut trainer = Trainer::new(vec![v.clone()], Adam::new(0.05)).unwrap();
    for step in 0..4 {
        let loss = autograd::record(|| {
            let (x0, c0) = batch(step, 0);
            let (x1, c1) = batch(step, 1);
            loss_of(&v, &x0, &c0)?.add(&loss_of(&v, &x1, &c1)?)
        })
        .unwrap();
        loss.backward().unwrap();
        trainer.step(2).unwrap();
    }
    let want = v.data().unwrap().to_vec::<f32>().unwrap();
    let start = make().data().unwrap().to_vec::<f32>().unwrap();
    assert!(
        max_rel_diff(std::slice::from_ref(&want), &[start]) > 1e-3,
        "weights did not move"
    );
    let got = on_threads(WORKERS, Duration::from_secs(60), move |rank, kv| {
        let v = make();
        let mut t = Trainer::new(vec![v.clone()], Adam::new(0.05))
            .unwrap()
            .with_kvstore_update(kv)
            .unwrap();
        let table = t.shard_parameter(&v).unwrap();
        for step in 0..4 {
            let (x, cols) = batch(step, rank);
            let loss = autograd::record(|| loss_of(&v, &x, &cols)).unwrap();
            loss.backward().unwrap();
            t.step(1).unwrap();
        }
        let all: Vec<i64> = (0..VOCAB as i64).collect();
        t.pull_rows(table, &all).unwrap().1.to_vec::<f32>().unwrap()
    });
    for (rank, w) in got.iter().enumerate() {
        let d = max_rel_diff(std::slice::from_ref(w), std::slice::from_ref(&want));
        assert!(d <= 1e-6, "worker {rank}: {d:e}");
    }
}

/// A hybridized model with a sharded layer cannot be a graph (its rows are pulled from the
/// store each forward): it runs eagerly, with a message saying why, and gives the eager
/// model's outputs batch after batch (never the first batch's rows again).
#[test]
fn a_hybridized_model_with_a_sharded_layer_runs_it_eagerly() {
    let kv = local_group(1, Duration::from_secs(10))
        .unwrap()
        .pop()
        .unwrap();
    let first = Dense::new(3).in_units(20).activation("tanh");
    let second = Dense::new(2).in_units(3);
    // Two models over the same layers (and parameters): one eager, one hybridized.
    let model = || {
        let mut net = Sequential::new();
        net.add(first.clone());
        net.add(second.clone());
        net
    };
    let net = model();
    net.initialize(&Initializer::Uniform { scale: 0.5 }, Device::Cpu)
        .unwrap();
    let mut t = Trainer::from_params(&net.collect_params().unwrap(), Sgd::new(0.1))
        .unwrap()
        .with_kvstore_update(Box::new(kv))
        .unwrap();
    t.shard_parameter(first.weight()).unwrap();
    let hyb = model().hybridize();
    for seed in 0..3usize {
        let cols: Vec<i64> = (0..4).map(|k| ((seed * 7 + k * 3) % 20) as i64).collect();
        let x =
            NDArray::csr_from_coo(&[0, 0, 1, 1], &cols, &[1f32, 2.0, 3.0, 4.0], [2, 20]).unwrap();
        let want = net.forward(&x).unwrap().to_vec::<f32>().unwrap();
        let got = hyb.forward(&x).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(got, want, "batch {seed}");
    }
    let why = hyb.fallback_reasons();
    assert!(
        why.len() == 1 && why[0].contains("'weight'") && why[0].contains("sharded"),
        "{why:?}"
    );
}

/// An id out of range on one worker of a sharded Embedding fails the pull on every worker at
/// once (the store's collective error naming it), instead of that worker leaving the pull
/// and the others waiting for it.
#[test]
fn a_bad_id_on_one_worker_fails_a_sharded_layer_on_every_worker() {
    let got = on_threads(WORKERS, Duration::from_secs(30), |rank, kv| {
        let started = std::time::Instant::now();
        let emb = Embedding::new(10, 2);
        emb.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        let mut t = Trainer::new(vec![emb.weight().clone()], Sgd::new(0.1))
            .unwrap()
            .with_kvstore_update(kv)
            .unwrap();
        t.shard_parameter(emb.weight()).unwrap();
        let id = if rank == 1 { 10f32 } else { 3.0 };
        let ids = NDArray::from_vec(vec![1f32, id], &[2]).unwrap();
        let err = emb.forward(&ids).unwrap_err().to_string();
        (err, started.elapsed())
    });
    for (rank, (err, took)) in got.into_iter().enumerate() {
        assert!(err.contains("row id 10"), "worker {rank}: {err}");
        assert!(
            took < Duration::from_secs(20),
            "worker {rank} waited {took:?}"
        );
    }
}

#[test]
fn a_batch_of_the_wrong_width_on_one_worker_fails_a_sharded_dense_on_every_worker() {
    // The sharded Dense's product is computed by the rows' owners: worker 1's batch of 7
    // columns (the table has 10 rows) fails the collective on both workers at once.
    let got = on_threads(WORKERS, Duration::from_secs(30), |rank, kv| {
        let started = std::time::Instant::now();
        let dense = Dense::new(3).in_units(10).grad_stype(SType::RowSparse);
        dense
            .initialize(&Initializer::Uniform { scale: 0.1 }, Device::Cpu)
            .unwrap();
        let mut t = Trainer::new(vec![dense.weight().clone()], Sgd::new(0.1))
            .unwrap()
            .with_kvstore_update(kv)
            .unwrap();
        t.shard_parameter(dense.weight()).unwrap();
        let cols = if rank == 1 { 7 } else { 10 };
        let mut v = vec![0f32; cols];
        v[2] = 1.0;
        let x = NDArray::from_vec(v, &[1, cols])
            .unwrap()
            .tostype(SType::Csr)
            .unwrap();
        let err = dense.forward(&x).unwrap_err().to_string();
        (err, started.elapsed())
    });
    for (rank, (err, took)) in got.into_iter().enumerate() {
        assert!(
            err.contains("failed on 1 of 2 workers") && err.contains("10 columns"),
            "worker {rank}: {err}"
        );
        assert!(
            took < Duration::from_secs(20),
            "worker {rank} waited {took:?}"
        );
    }
}
