//! The sparse tutorial's model (`features -> 128 -> 8 -> 1`, sigmoid, sigmoid BCE; the first
//! layer a csr product with a row_sparse weight gradient) trained data-parallel with
//! `dist_sync`: every rank reads its part of one LibSVM file (`num_parts = num_workers`,
//! `part_index = rank`) and the Trainer sums gradients through the store. The training loop is
//! the single-process one; only the store is new.
//!
//! ```text
//! cargo build --release --features mpi --example dist_train
//! mpirun -np 2 target/release/examples/dist_train -- [--samples 1000] [--features 1000000]
//!     [--density 1e-5] [--batch-size 10] [--epochs 5] [--optimizer sgd|adam|ftrl]
//!     [--first-grad row_sparse|dense|sharded] [--update-on-kvstore] [--max-steps N]
//!     [--data-dir DIR] [--model tutorial|mlp] [--in-memory]
//! ```
//!
//! `--model mlp` trains a dense MLP (784-512-512-10) on synthetic rows instead (`--samples`,
//! `--batch-size`, `--epochs`, `--max-steps` apply), its gradients all-reduced.
//!
//! Prints, from rank 0: samples per second over the timed epochs (all ranks' samples; each
//! rank on one thread: the loop is the only worker of a one-thread rayon pool; the LibSVM
//! reader parses on the global pool's one thread), rank 0's milliseconds a step in forward +
//! backward and in `Trainer::step` (exchange, merge, update), of those the milliseconds inside
//! the store's collectives (`exchange_ms`: moving bytes and waiting for the other ranks,
//! `KVStore::exchange_time`), the bytes this rank handed to
//! MPI per step (the store's count), the minor page faults rank 0 took per step
//! (`/proc/self/stat`), and the bytes the loopback interface carried per step
//! (`/proc/net/dev`, all ranks; meaningful with `--mca btl tcp,self`, where the ranks talk
//! TCP). `--first-grad dense` trains variant (b) of the tutorial: the first layer's 512 MB
//! gradient dense, summed by an all-reduce each step. `--first-grad sharded` keeps the first
//! layer's weight (features x 128) as a table of the trainer's store split by rows
//! (`Trainer::shard_parameter_with`; the store updates, as `--update-on-kvstore`): each rank
//! holds, reads and updates only its block of rows: the layer's forward sends the batch to the
//! owners, which multiply the columns they own and return the products; `step` sends the
//! product's gradient to the owners with the other layers' gradients, and each owner computes
//! and updates its rows' gradient (`KVStore::sharded_dot`, `KVStore::pushpull_with_products`). No rank holds the whole table, and the training loop is the same
//! for every variant.
//! `--in-memory` parses the rank's part once, before the timed epochs, and trains from the
//! batches kept in memory: no reader runs during training, which separates what the LibSVM
//! pipeline costs a step (on a rank's one core) from what the training step costs.
//! `--update-on-kvstore` gives the optimizer to the store (`Trainer::set_kvstore_update`,
//! Gluon's `update_on_kvstore=True`): the store updates each weight in place.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sparrow::core::random::Rng;
use sparrow::core::{autograd, DType, Device, NDArray, SType};
use sparrow::data::libsvm::{save_libsvm, LibSVMIter, LibSVMIterParams};
use sparrow::data::synthetic;
use sparrow::data::{Batch, DataError, LastBatch};
use sparrow::kvstore::mpi::{dist_sync, MpiSession};
use sparrow::kvstore::partition_libsvm;
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Initializer, Parameter, Sequential};
use sparrow::optim::{Adam, Ftrl, KVStore, Optimizer, Sgd, Trainer};

type BoxError = Box<dyn std::error::Error>;

// The tutorial example's allocator (mimalloc): training steps allocate and free gradients and
// messages of a few hundred KB each; the system allocator returns such blocks to the kernel and
// takes them back as fresh pages to be zeroed, step after step, which cost both the single rank
// and the two ranks a large share of a step.
#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;

#[path = "sparse_gluon/alloc.rs"]
#[allow(dead_code)]
mod alloc;

/// mimalloc's `mi_option_purge_delay` (the 16th of its options in the v3 sources that
/// libmimalloc-sys 0.1.49 builds; the crate's bindings name no constant for it).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Never hand memory freed to mimalloc back to the kernel. By default mimalloc returns memory
/// that stayed free past its purge delay (`MADV_DONTNEED`), and a training loop takes it back
/// as fresh pages for a later step's buffers, which the kernel zeroes on first touch. The
/// process keeps its high-water mark instead.
fn keep_freed_memory() {
    // SAFETY: sets a plain integer option, which mimalloc reads when it next considers a
    // purge; -1 is its documented "no purging at all".
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}

struct Args {
    samples: usize,
    features: usize,
    density: f64,
    batch_size: usize,
    epochs: usize,
    optimizer: String,
    dense_grad: bool,
    sharded: bool,
    update_on_kvstore: bool,
    max_steps: Option<usize>,
    data_dir: Option<PathBuf>,
    mlp: bool,
    in_memory: bool,
}

fn parse() -> Result<Args, BoxError> {
    let mut a = Args {
        samples: 1000,
        features: 1_000_000,
        density: 1e-5,
        batch_size: 10,
        epochs: 5,
        optimizer: "sgd".into(),
        dense_grad: false,
        sharded: false,
        update_on_kvstore: false,
        max_steps: None,
        data_dir: None,
        mlp: false,
        in_memory: false,
    };
    let mut it = std::env::args().skip(1).filter(|s| s != "--");
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--samples" => a.samples = val()?.parse()?,
            "--features" => a.features = val()?.parse()?,
            "--density" => a.density = val()?.parse()?,
            "--batch-size" => a.batch_size = val()?.parse()?,
            "--epochs" => a.epochs = val()?.parse()?,
            "--optimizer" => a.optimizer = val()?,
            "--first-grad" => match val()?.as_str() {
                "row_sparse" => {}
                "dense" => a.dense_grad = true,
                "sharded" => a.sharded = true,
                other => {
                    return Err(format!("--first-grad {other}: row_sparse|dense|sharded").into())
                }
            },
            "--update-on-kvstore" => a.update_on_kvstore = true,
            "--in-memory" => a.in_memory = true,
            "--max-steps" => a.max_steps = Some(val()?.parse()?),
            "--data-dir" => a.data_dir = Some(val()?.into()),
            "--model" => match val()?.as_str() {
                "tutorial" => {}
                "mlp" => a.mlp = true,
                other => return Err(format!("--model {other}: tutorial|mlp").into()),
            },
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    // The table's rows are updated by their owners, in the store.
    a.update_on_kvstore |= a.sharded;
    if a.batch_size == 0 || a.epochs == 0 {
        return Err("--batch-size and --epochs must be >= 1".into());
    }
    Ok(a)
}

/// Bytes the loopback interface has sent (`/proc/net/dev`), when readable.
fn loopback_tx_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/dev").ok()?;
    let line = s.lines().find(|l| l.trim_start().starts_with("lo:"))?;
    // "lo: rx_bytes rx_packets ... (8 rx fields) tx_bytes ..."
    line.split(':')
        .nth(1)?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()
}

/// Minor page faults this process has taken (`/proc/self/stat`'s tenth field), when readable:
/// each is a page the kernel mapped (and zeroed) on first touch.
fn minor_faults() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // "pid (comm) state ppid ...": the command may hold spaces, so count after its ')'.
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(7)?
        .parse()
        .ok()
}

/// Where a rank's batches come from: the LibSVM reader each epoch, or kept in memory.
enum Source {
    Stream(LibSVMIter),
    Kept(Vec<Batch>),
}

fn main() {
    // The sharded product's buffers (a step's product, gradients and messages, about a MB
    // each) are freed and taken again every step; memory mimalloc handed back to the kernel
    // in between came back as fresh pages to zero.
    keep_freed_memory();
    if let Err(e) = on_one_thread() {
        eprintln!("dist_train: error: {e}");
        std::process::exit(1);
    }
}

/// One thread per rank (the ranks are the parallelism): the training loop runs as the only
/// worker of a pool of its own, so an operator's parallel loop runs on it inline. Called from
/// a thread outside the pool, each such loop was handed to the pool's thread and the training
/// thread slept until it finished: two thread switches per large operator, on a core the
/// other rank was using. The global pool (one thread) is left to the LibSVM reader's parsing.
fn on_one_thread() -> Result<(), String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .map_err(|e| e.to_string())?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "train".into())
        .build()
        .map_err(|e| e.to_string())?;
    pool.install(|| run().map_err(|e| e.to_string()))
}

fn run() -> Result<(), BoxError> {
    let args = parse()?;
    let _mpi = MpiSession::start()?;
    let mut kv = dist_sync(Duration::from_secs(300))?;
    let (rank, workers) = (kv.rank(), kv.num_workers());
    if args.mlp {
        return run_mlp(&args, Box::new(kv));
    }

    // Rank 0 writes the data set; everyone reads its part of it.
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("sparrow-dist-train"));
    let path = dir.join(format!(
        "tutorial-{}x{}-{:e}.libsvm",
        args.samples, args.features, args.density
    ));
    if rank == 0 && !path.exists() {
        std::fs::create_dir_all(&dir)?;
        let (x, y) = synthetic::tutorial_data(args.samples, args.features, args.density, 42)?;
        let tmp = path.with_extension("tmp");
        save_libsvm(&tmp, &x, &y)?;
        std::fs::rename(&tmp, &path)?;
    }
    kv.barrier()?;
    let mut params = LibSVMIterParams::new(&path, args.features, args.batch_size);
    params.prepare_transpose = !args.dense_grad;
    params.idle_priority = true;
    // Every epoch the same batches: the loop takes the same number of steps each epoch on every
    // rank. (The default `RoundBatch` fills a last batch from the next pass and starts that
    // epoch after the borrowed rows, so a part smaller than one batch gives an empty epoch
    // every other pass.)
    params.last_batch = LastBatch::Pad;
    partition_libsvm(&mut params, &kv);
    let mut iter = LibSVMIter::new(params)?;

    // Ranks' parts may differ by a batch; synchronous steps need the same count everywhere:
    // each rank's count goes into its slot of a vector the store sums.
    let mine = iter.by_ref().count();
    iter.reset();
    let mut counts = vec![0f64; workers];
    counts[rank] = mine as f64;
    const COUNT_KEY: usize = 1 << 40;
    kv.init(
        COUNT_KEY,
        &NDArray::zeros(&[workers], sparrow::core::DType::F64)?,
    )?;
    let all = NDArray::from_vec(counts, &[workers])?;
    kv.pushpull(
        COUNT_KEY,
        std::slice::from_ref(&all),
        std::slice::from_ref(&all),
    )?;
    let mut steps = all.to_vec::<f64>()?.into_iter().fold(f64::MAX, f64::min) as usize;
    if let Some(m) = args.max_steps {
        steps = steps.min(m);
    }

    const UNITS: usize = 128;
    let mut net = Sequential::new();
    let first = Dense::new(UNITS)
        .in_units(args.features)
        .activation("sigmoid");
    let first = if args.dense_grad {
        first
    } else {
        first.grad_stype(SType::RowSparse)
    };
    net.add(first.clone());
    net.add(Dense::new(8).in_units(UNITS).activation("sigmoid"));
    net.add(Dense::new(1).in_units(8).activation("sigmoid"));
    let opt: Box<dyn Optimizer> = match args.optimizer.as_str() {
        "adam" => Box::new(Adam::new(0.01)),
        "ftrl" => Box::new(Ftrl::new(0.1)),
        _ => Box::new(Sgd::new(0.1)),
    };
    let params: Vec<Parameter> = net
        .collect_params()?
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    let trainer = Trainer::with_boxed(params, opt)?;
    let mut trainer = if args.update_on_kvstore {
        trainer.with_kvstore_update(Box::new(kv))?
    } else {
        trainer.with_kvstore(Box::new(kv))?
    };
    if args.sharded {
        // Before the model is initialized: each rank draws only its own block of rows
        // (uniform 0.07, as the Dense layer would), seeded by its rank, so no rank ever holds
        // the whole table; `initialize` then leaves the sharded weight alone.
        trainer.shard_parameter_with(first.weight(), |lo, hi| {
            Rng::new(7 + rank as u64).uniform(-0.07, 0.07, &[hi - lo, UNITS], DType::F32)
        })?;
    }
    net.initialize(&Initializer::Uniform { scale: 0.07 }, Device::Cpu)?;
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();

    let mut timed = Duration::ZERO;
    // Where a timed step goes: forward + backward, and `Trainer::step` (the exchange through
    // the store, merging the workers' gradients, the update); the rest is waiting for the
    // reader's next batch.
    let (mut compute, mut stepping) = (Duration::ZERO, Duration::ZERO);
    let (mut timed_steps, mut loss_sum, mut rows) = (0usize, 0f64, 0usize);
    let mut sent = 0u64;
    let mut lo_bytes = 0u64;
    let mut faults = 0u64;
    // Time inside the store's collectives (moving bytes, waiting for the other ranks).
    let mut exchanging = Duration::ZERO;
    // `--in-memory`: this rank's steps' batches, parsed once; the reader is then dropped, so
    // nothing parses during training.
    let mut source = if args.in_memory {
        iter.reset();
        let kept = iter.by_ref().take(steps).collect::<Result<Vec<_>, _>>()?;
        drop(iter);
        Source::Kept(kept)
    } else {
        Source::Stream(iter)
    };
    for epoch in 0..args.epochs + 1 {
        let batches: Box<dyn Iterator<Item = Result<Batch, DataError>>> = match &mut source {
            Source::Kept(kept) => Box::new(kept.iter().cloned().map(Ok)),
            Source::Stream(iter) => {
                iter.reset();
                Box::new(iter.by_ref().take(steps))
            }
        };
        let bytes = |t: &Trainer| t.kvstore().and_then(|k| k.bytes_sent()).unwrap_or(0);
        let sent0 = bytes(&trainer);
        let in_exchange = |t: &Trainer| {
            t.kvstore()
                .and_then(|k| k.exchange_time())
                .unwrap_or_default()
        };
        let ex0 = in_exchange(&trainer);
        let lo0 = loopback_tx_bytes().unwrap_or(0);
        let faults0 = minor_faults().unwrap_or(0);
        let t0 = Instant::now();
        for batch in batches {
            let batch = batch?;
            let y = batch.label.clone().ok_or("batch without labels")?;
            // The same loop for every variant: a sharded first layer's product and its rows'
            // gradient are computed by the rows' owners, and `step` updates each owner's rows.
            let t_compute = Instant::now();
            let loss = autograd::record(|| loss_fn.forward(&net.forward(&batch.data)?, &y))?;
            loss.backward()?;
            let t_step = Instant::now();
            trainer.step(args.batch_size)?;
            if epoch > 0 {
                compute += t_step - t_compute;
                stepping += t_step.elapsed();
            }
            if epoch == args.epochs {
                loss_sum += loss.to_f64_vec().iter().sum::<f64>();
                rows += args.batch_size;
            }
        }
        // Epoch 0 warms up (first-step key initialization, page faults of the weight).
        if epoch > 0 {
            timed += t0.elapsed();
            timed_steps += steps;
            sent += bytes(&trainer) - sent0;
            exchanging += in_exchange(&trainer).saturating_sub(ex0);
            lo_bytes += loopback_tx_bytes().unwrap_or(0) - lo0;
            faults += minor_faults().unwrap_or(0).saturating_sub(faults0);
        }
    }
    if rank == 0 {
        let samples = (timed_steps * args.batch_size * workers) as f64;
        println!(
            "{{\"ranks\": {workers}, \"batch_per_rank\": {}, \"steps\": {timed_steps}, \
             \"first_grad\": \"{}\", \"in_memory\": {}, \"samples_per_s\": {:.1}, \
             \"ms_per_step\": {:.4}, \
             \"forward_backward_ms\": {:.4}, \"trainer_step_ms\": {:.4}, \"exchange_ms\": {:.4}, \
             \"bytes_sent_per_step_rank0\": {:.0}, \"loopback_bytes_per_step\": {:.0}, \
             \"minor_faults_per_step\": {:.3}, \"last_epoch_loss\": {:.5}}}",
            args.batch_size,
            if args.dense_grad {
                "dense"
            } else if args.sharded {
                "sharded"
            } else {
                "row_sparse"
            },
            args.in_memory,
            samples / timed.as_secs_f64(),
            timed.as_secs_f64() * 1e3 / timed_steps.max(1) as f64,
            compute.as_secs_f64() * 1e3 / timed_steps.max(1) as f64,
            stepping.as_secs_f64() * 1e3 / timed_steps.max(1) as f64,
            exchanging.as_secs_f64() * 1e3 / timed_steps.max(1) as f64,
            sent as f64 / timed_steps.max(1) as f64,
            lo_bytes as f64 / timed_steps.max(1) as f64,
            faults as f64 / timed_steps.max(1) as f64,
            loss_sum / rows.max(1) as f64,
        );
    }
    Ok(())
}

/// `--model mlp`: a dense MLP (784-512-512-10, ReLU, softmax cross-entropy) on synthetic dense
/// data, each rank on its own `samples / ranks` rows, gradients all-reduced through the same
/// store. The data-parallel case where a step's compute grows with the batch and the
/// exchange does not (a fixed 2.7 MB of gradients), beside the sparse tutorial's, where both
/// grow with the rows a batch touches.
fn run_mlp(args: &Args, kv: Box<dyn KVStore>) -> Result<(), BoxError> {
    const IN: usize = 784;
    let (rank, workers) = (kv.rank(), kv.num_workers());
    let b = args.batch_size;
    let steps = (args.samples / workers / b).min(args.max_steps.unwrap_or(usize::MAX));
    if steps == 0 {
        return Err(format!("--samples {} gives no batch of {b} per rank", args.samples).into());
    }
    let mut rng = Rng::new(1000 + rank as u64);
    let batches = (0..steps)
        .map(|_| {
            Ok((
                rng.uniform(0.0, 1.0, &[b, IN], DType::F32)?,
                rng.randint(0, 10, &[b], DType::F32)?,
            ))
        })
        .collect::<sparrow::core::Result<Vec<_>>>()?;
    let mut net = Sequential::new();
    net.add(Dense::new(512).in_units(IN).activation("relu"));
    net.add(Dense::new(512).in_units(512).activation("relu"));
    net.add(Dense::new(10).in_units(512));
    net.initialize(&Initializer::xavier(), Device::Cpu)?;
    let params: Vec<Parameter> = net
        .collect_params()?
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    let mut trainer = Trainer::new(params, Sgd::new(0.05))?.with_kvstore(kv)?;
    let loss_fn = SoftmaxCrossEntropyLoss::new();
    let mut timed = Duration::ZERO;
    let (mut loss_sum, mut sent) = (0f64, 0u64);
    for epoch in 0..args.epochs + 1 {
        let sent0 = trainer.kvstore().and_then(|k| k.bytes_sent()).unwrap_or(0);
        let t0 = Instant::now();
        for (x, y) in &batches {
            let loss = autograd::record(|| loss_fn.forward(&net.forward(x)?, y))?;
            loss.backward()?;
            trainer.step(b)?;
            if epoch == args.epochs {
                loss_sum += loss.to_f64_vec().iter().sum::<f64>();
            }
        }
        // Epoch 0 warms up.
        if epoch > 0 {
            timed += t0.elapsed();
            sent += trainer.kvstore().and_then(|k| k.bytes_sent()).unwrap_or(0) - sent0;
        }
    }
    if rank == 0 {
        let timed_steps = steps * args.epochs;
        println!(
            "{{\"model\": \"mlp\", \"ranks\": {workers}, \"batch_per_rank\": {b}, \"steps\": \
             {timed_steps}, \"samples_per_s\": {:.1}, \"ms_per_step\": {:.4}, \
             \"bytes_sent_per_step_rank0\": {:.0}, \"last_epoch_loss\": {:.5}}}",
            (timed_steps * b * workers) as f64 / timed.as_secs_f64(),
            timed.as_secs_f64() * 1e3 / timed_steps as f64,
            sent as f64 / timed_steps as f64,
            loss_sum / (steps * b) as f64,
        );
    }
    Ok(())
}
