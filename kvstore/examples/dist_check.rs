//! The distributed checks of `dist_sync`, run under MPI by `scripts/dist_check.sh`:
//!
//! ```text
//! mpirun -np 2 target/release/examples/dist_check [check|hung-rank|dead-rank|link-down]
//! ```
//!
//! - `check` (default): for SGD with momentum, Adam (lazy and standard) and FTRL, N ranks each
//!   training on B rows per step end with the parameters of one process training on the
//!   step's N * B rows (max relative difference <= 1e-6), whether the trainers update
//!   (`set_kvstore`) or the store does (`set_kvstore_update`, then with the same bits); a sharded table ends equal to the
//!   replicated one; exchanges with nothing to move (pushes of a rank's own rows only, of
//!   no rows, a pull of no rows) work; a mismatched push (wrong shape on one rank, an unknown key on one rank)
//!   fails on every rank with a message naming the rank, and the store goes on working. Exits
//!   1 on any mismatch.
//! - `hung-rank`: rank 1 stops calling the store; the others' watchdog must end the job
//!   within the timeout (`SPARROW_KV_TIMEOUT_S`, default 60 s; the script sets 3).
//! - `dead-rank`: rank 1 dies (abort); mpirun must end the others.
//! - `link-down`: every rank trains (a dense and a row_sparse key, pushpull per step) until a
//!   call fails; `scripts/dist_netns.sh` runs the ranks in separate network namespaces and
//!   takes their link down mid-run, and every rank's watchdog must end it with its message.
//!   Steps that go on for `LINK_DOWN_LIMIT` without an error fail the check.

#[path = "../tests/common/equivalence.rs"]
mod equivalence;

use equivalence::Update;

use std::time::Duration;

use sparrow_core::{DType, NDArray, Result, SType};
use sparrow_kvstore::mpi::{dist_sync, MpiSession};
use sparrow_kvstore::shard_range;
use sparrow_optim::{KVStore, Sgd};

/// Rows per rank per step.
const B: usize = 4;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    let timeout = match std::env::var("SPARROW_KV_TIMEOUT_S") {
        Err(_) => Duration::from_secs(60),
        Ok(s) => match s.parse::<f64>().map(Duration::try_from_secs_f64) {
            Ok(Ok(t)) => t,
            _ => {
                eprintln!("dist_check: error: SPARROW_KV_TIMEOUT_S={s}: not a number of seconds");
                std::process::exit(2);
            }
        },
    };
    // Stores are made one after another: MPI stays initialized between them.
    let _mpi = match MpiSession::start() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dist_check: error: {e}");
            std::process::exit(1);
        }
    };
    let done = match mode.as_str() {
        "check" => check(timeout),
        "hung-rank" => hung_rank(timeout),
        "dead-rank" => dead_rank(timeout),
        "link-down" => link_down(timeout),
        other => Err(sparrow_core::Error::arg(
            "dist_check",
            format!("unknown mode {other} (check, hung-rank, dead-rank, link-down)"),
        )),
    };
    match done {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("dist_check: error: {e}");
            std::process::exit(1);
        }
    }
}

fn check(timeout: Duration) -> Result<bool> {
    let mut ok = true;
    let mut rank = 0;
    for opt in equivalence::OPTIMIZERS {
        let mut on_worker = Vec::new();
        for update in [Update::OnWorker, Update::OnStore] {
            let kv = dist_sync(timeout)?;
            let (r, n) = (kv.rank(), kv.num_workers());
            rank = r;
            let reference = equivalence::train(opt, None, 0, 1, n * B)?;
            let kv: Box<dyn KVStore> = Box::new(kv);
            let got = equivalence::train_with(opt, Some(kv), update, r, n, B)?;
            let d = equivalence::max_rel_diff(&got, &reference);
            // Updating on the store repeats the worker's arithmetic in the same order.
            let same = update == Update::OnWorker || got == on_worker;
            let pass = d <= 1e-6 && same;
            ok &= pass;
            println!(
                "rank {r}/{n}: {opt:<13} {update:?}: {n} ranks x batch {B} vs 1 x batch {}: \
                 max relative difference {d:.2e}{} {}",
                n * B,
                if update == Update::OnStore {
                    if same {
                        ", the bits of OnWorker"
                    } else {
                        ", NOT the bits of OnWorker"
                    }
                } else {
                    ""
                },
                if pass { "ok" } else { "MISMATCH" }
            );
            on_worker = got;
        }
    }
    ok &= sharded_matches_replicated(timeout)?;
    ok &= trainer_table_matches_one_process(timeout)?;
    ok &= mismatches_fail_everywhere(timeout)?;
    ok &= empty_exchanges_work(timeout)?;
    if ok {
        println!("rank {rank}: all distributed checks passed");
    }
    Ok(ok)
}

/// The check of `tests/local.rs` over MPI: lazy SGD with momentum on a sharded and a
/// replicated 10 x 2 table, pushes that differ per rank and step; both end equal, bit for bit.
fn sharded_matches_replicated(timeout: Duration) -> Result<bool> {
    let mut kv = dist_sync(timeout)?;
    let (r, n) = (kv.rank(), kv.num_workers());
    let rows = 10;
    let full: Vec<f32> = (0..rows * 2).map(|i| i as f32 * 0.1).collect();
    kv.set_optimizer(Box::new(Sgd::with_momentum(0.1, 0.9)))?;
    kv.init(0, &NDArray::from_vec(full.clone(), &[rows, 2])?)?;
    let (lo, hi) = shard_range(rows, r, n);
    kv.init_sharded(
        1,
        &[rows, 2],
        &NDArray::from_vec(full[lo * 2..hi * 2].to_vec(), &[hi - lo, 2])?,
    )?;
    let mut shard_bytes = 0;
    for step in 0..4i64 {
        let mut ids = vec![(r as i64 + step) % 10, (3 * r as i64 + 2 * step + 5) % 10];
        ids.sort_unstable();
        ids.dedup();
        let vals: Vec<f32> = (0..ids.len() * 2)
            .map(|k| (k as f32 + 1.0) * (r as f32 - 1.3) * (step as f32 + 0.5))
            .collect();
        let g = NDArray::row_sparse_from_parts(vals, ids, &[rows, 2])?;
        kv.push(0, std::slice::from_ref(&g))?;
        let before = kv.traffic().bytes;
        kv.push(1, &[g])?;
        shard_bytes += kv.traffic().bytes - before;
    }
    let a = NDArray::zeros(&[rows, 2], DType::F32)?;
    let b = NDArray::zeros(&[rows, 2], DType::F32)?;
    kv.pull(0, std::slice::from_ref(&a))?;
    kv.pull(1, std::slice::from_ref(&b))?;
    let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    let pass = a == b && a != full;
    println!(
        "rank {r}/{n}: sharded table (rows {lo}..{hi} here) vs replicated after 4 lazy SGD \
         steps: {} ({shard_bytes} bytes sent by this rank's sharded pushes)",
        if pass { "equal" } else { "MISMATCH" }
    );
    Ok(pass)
}

/// The checks of `tests/trainer_sharded.rs` over MPI: the equivalence model's first layer as a
/// table of the trainer's store split over the ranks, batch `B` a rank, against one process
/// with an ordinary Dense layer and batch `n * B`; the table made with
/// `Trainer::add_sharded_table` (the loop pulls its rows), then the model's own Dense weight
/// sharded with `Trainer::shard_parameter` (the single-process loop).
fn trainer_table_matches_one_process(timeout: Duration) -> Result<bool> {
    let mut ok = true;
    for (how, what) in [
        ("table", "a table"),
        ("param", "a Dense weight (shard_parameter)"),
    ] {
        for opt in equivalence::OPTIMIZERS {
            let kv = dist_sync(timeout)?;
            let (r, n) = (kv.rank(), kv.num_workers());
            let reference = equivalence::reference_by_role(opt, n * B);
            let got = if how == "table" {
                equivalence::train_sharded(opt, Box::new(kv), r, n, B)?
            } else {
                equivalence::train_sharded_param(opt, Box::new(kv), r, n, B)?
            };
            let d = equivalence::max_rel_diff(&got, &reference);
            let pass = d <= 1e-6;
            ok &= pass;
            println!(
                "rank {r}/{n}: {opt:<13} first layer {what} sharded over {n} ranks x batch {B} \
                 vs 1 x batch {} with a Dense layer: max relative difference {d:.2e} {}",
                n * B,
                if pass { "ok" } else { "MISMATCH" }
            );
        }
    }
    Ok(ok)
}

/// A push of the wrong shape on one rank, then a push of an unknown key on one rank: every
/// rank gets the error, nothing changes, and a correct push then works.
fn mismatches_fail_everywhere(timeout: Duration) -> Result<bool> {
    let mut kv = dist_sync(timeout)?;
    let (r, n) = (kv.rank(), kv.num_workers());
    kv.init(0, &NDArray::from_vec(vec![1.0f32, 2.0], &[2])?)?;
    let last = n - 1;
    let v = if r == last {
        NDArray::from_vec(vec![1.0f32; 3], &[3])?
    } else {
        NDArray::from_vec(vec![1.0f32; 2], &[2])?
    };
    let shape_err = kv.push(0, &[v]).map_err(|e| e.to_string());
    let key = if r == 0 { 5 } else { 0 };
    let key_err = kv
        .push(key, &[NDArray::from_vec(vec![1.0f32; 2], &[2])?])
        .map_err(|e| e.to_string());
    let out = NDArray::zeros(&[2], DType::F32)?;
    kv.pushpull(
        0,
        &[NDArray::from_vec(vec![1.0f32; 2], &[2])?],
        std::slice::from_ref(&out),
    )?;
    let sum = out.to_vec::<f32>()?;
    let shape_ok =
        matches!(&shape_err, Err(e) if e.contains(&format!("worker {last}")) && e.contains("[3]"));
    let key_ok =
        matches!(&key_err, Err(e) if e.contains("worker 0") && e.contains("unknown key 5"));
    let sum_ok = sum == vec![n as f32; 2];
    println!(
        "rank {r}/{n}: wrong shape on rank {last}: {:?}\nrank {r}/{n}: unknown key on rank 0: \
         {:?}\nrank {r}/{n}: then a correct push sums to {sum:?}: {}",
        shape_err.err().unwrap_or_else(|| "NO ERROR".into()),
        key_err.err().unwrap_or_else(|| "NO ERROR".into()),
        if shape_ok && key_ok && sum_ok {
            "ok"
        } else {
            "MISMATCH"
        }
    );
    Ok(shape_ok && key_ok && sum_ok)
}

/// Exchanges with nothing to move: every rank pushes only rows it owns to a sharded table (an
/// all-to-all whose parts for the others are all empty; MPI refuses a receive buffer at the
/// send buffer's address, which two empty vectors share unless the receive one allocates),
/// then an empty gradient, then pulls no rows and then every row: each rank's own row holds
/// its own update, the others are untouched.
fn empty_exchanges_work(timeout: Duration) -> Result<bool> {
    let mut kv = dist_sync(timeout)?;
    let (r, n) = (kv.rank(), kv.num_workers());
    let rows = 3 * n;
    kv.set_optimizer(Box::new(Sgd::new(1.0)))?;
    let (lo, hi) = shard_range(rows, r, n);
    kv.init_sharded(0, &[rows, 2], &NDArray::zeros(&[hi - lo, 2], DType::F32)?)?;
    let own = NDArray::row_sparse_from_parts(vec![1.0f32, 2.0], vec![lo as i64], &[rows, 2])?;
    kv.push(0, &[own])?;
    let empty = NDArray::row_sparse_from_parts(Vec::<f32>::new(), Vec::new(), &[rows, 2])?;
    kv.push(0, &[empty])?;
    let out = NDArray::zeros_stype(&[rows, 2], DType::F32, SType::RowSparse)?;
    kv.row_sparse_pull(0, std::slice::from_ref(&out), &[])?;
    let pulled_none = out.row_ids()?.is_empty();
    let all: Vec<i64> = (0..rows as i64).collect();
    kv.row_sparse_pull(0, std::slice::from_ref(&out), &all)?;
    let got = out.tostype(SType::Dense)?.to_vec::<f32>()?;
    let mut want = vec![0f32; rows * 2];
    for w in 0..n {
        let first = shard_range(rows, w, n).0;
        want[first * 2] = -1.0;
        want[first * 2 + 1] = -2.0;
    }
    let pass = pulled_none && got == want;
    println!(
        "rank {r}/{n}: pushes of own rows only and of no rows, a pull of no rows: {}",
        if pass { "ok" } else { "MISMATCH" }
    );
    Ok(pass)
}

/// Rank 1 stops calling the store; rank 0 waits in a barrier until its watchdog ends the job.
fn hung_rank(timeout: Duration) -> Result<bool> {
    let mut kv = dist_sync(timeout)?;
    kv.barrier()?;
    if kv.rank() == 1 {
        std::thread::sleep(timeout * 20);
        return Ok(false);
    }
    kv.barrier()?;
    println!("rank {}: the barrier returned without rank 1", kv.rank());
    Ok(false)
}

/// Rank 1 dies in the middle of training; mpirun must end the others.
fn dead_rank(timeout: Duration) -> Result<bool> {
    let mut kv = dist_sync(timeout)?;
    kv.barrier()?;
    if kv.rank() == 1 {
        std::process::abort();
    }
    kv.init(0, &NDArray::zeros(&[4], DType::F32)?)?;
    kv.barrier()?;
    println!("rank {}: collectives returned without rank 1", kv.rank());
    Ok(false)
}

/// How long `link-down` trains waiting for the link to go down.
const LINK_DOWN_LIMIT: Duration = Duration::from_secs(120);

/// Train until a collective fails (the harness takes the link down). Each rank prints one
/// line when its first step is done, so the harness knows the job is running before it pulls
/// the link. Returns `Ok(false)` when no call failed within [`LINK_DOWN_LIMIT`].
fn link_down(timeout: Duration) -> Result<bool> {
    use std::io::Write;
    let mut kv = dist_sync(timeout)?;
    let (r, n) = (kv.rank(), kv.num_workers());
    let rows = 1000;
    kv.init(0, &NDArray::zeros(&[256], DType::F32)?)?;
    kv.init(1, &NDArray::zeros(&[rows, 16], DType::F32)?)?;
    let dense = NDArray::from_vec(vec![1.0f32; 256], &[256])?;
    let out = NDArray::zeros(&[256], DType::F32)?;
    let table = NDArray::zeros(&[rows, 16], DType::F32)?;
    let start = std::time::Instant::now();
    let mut step = 0u64;
    while start.elapsed() < LINK_DOWN_LIMIT {
        let mut ids: Vec<i64> = (0..8)
            .map(|k| ((step * 8 + k + r as u64) % rows as u64) as i64)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let g = NDArray::row_sparse_from_parts(vec![0.5f32; ids.len() * 16], ids, &[rows, 16])?;
        kv.pushpull(0, std::slice::from_ref(&dense), std::slice::from_ref(&out))?;
        kv.pushpull(1, std::slice::from_ref(&g), std::slice::from_ref(&table))?;
        if step == 0 {
            println!("rank {r}/{n}: training");
            std::io::stdout().flush().ok();
        }
        step += 1;
        // A few hundred steps a second: enough traffic in flight when the link goes down.
        std::thread::sleep(Duration::from_millis(2));
    }
    println!(
        "rank {r}/{n}: {step} steps in {LINK_DOWN_LIMIT:?} and no call failed (was the link \
         taken down?)"
    );
    Ok(false)
}
