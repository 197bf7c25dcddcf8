//! How a sharded row_sparse table scales to many machines: a cost model whose per-row costs
//! and bytes are measured here, projected to a table and a machine count this machine cannot
//! hold (by default 100 GB over 1-16 machines).
//!
//! ```text
//! cargo run --release -p sparrow-kvstore --example shard_model -- \
//!     [--dim 128] [--batch 1000] [--nnz 100] [--shard-rows 2000000] [--steps 40] \
//!     [--table-gb 100] [--gbit 10] [--latency-us 50]
//! ```
//!
//! Measured, with the store's own code:
//! 1. **Store work per step** on one worker (`local()`): `row_sparse_pull` of a batch's rows
//!    and the `push` of their gradient (encode, route, merge, lazy AdaGrad update) on a shard
//!    of `--shard-rows` rows (large enough that rows come from memory, not cache). An owner
//!    of a sharded table receives, in all, one batch's worth of rows per step whatever the
//!    machine count (each of N workers sends it ~1/N of its rows), so this is its work per
//!    step at any N.
//! 2. **Bytes per step** through the transport with 2 and 4 workers (`local_group`, threads),
//!    checked against the formula the projection uses.
//!
//! Projected: per machine, memory (shard + optimizer state), bytes sent per step, and the
//! step's store + network time (`--gbit` link, `--latency-us` per collective message), for a
//! sharded table against a replicated one exchanged as row_sparse (`dist_sync` without
//! sharding), whose update work and received bytes grow with N. The model's own forward and
//! backward are not included: they do not change with N.

use std::time::{Duration, Instant};

use sparrow_core::{DType, NDArray, Result, SType};
use sparrow_kvstore::{local, local_group, shard_range};
use sparrow_optim::{AdaGrad, KVStore};

struct Args {
    dim: usize,
    batch: usize,
    nnz: usize,
    shard_rows: usize,
    steps: usize,
    table_gb: f64,
    gbit: f64,
    latency_us: f64,
}

fn parse() -> std::result::Result<Args, String> {
    let mut a = Args {
        dim: 128,
        batch: 1000,
        nnz: 100,
        shard_rows: 2_000_000,
        steps: 40,
        table_gb: 100.0,
        gbit: 10.0,
        latency_us: 50.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        let num = |v: &str| v.parse::<usize>().map_err(|e| bad(&e));
        let real = |v: &str| v.parse::<f64>().map_err(|e| bad(&e));
        match flag.as_str() {
            "--dim" => a.dim = num(&v)?,
            "--batch" => a.batch = num(&v)?,
            "--nnz" => a.nnz = num(&v)?,
            "--shard-rows" => a.shard_rows = num(&v)?,
            "--steps" => a.steps = num(&v)?,
            "--table-gb" => a.table_gb = real(&v)?,
            "--gbit" => a.gbit = real(&v)?,
            "--latency-us" => a.latency_us = real(&v)?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.dim == 0 || a.batch == 0 || a.nnz == 0 || a.shard_rows == 0 || a.steps == 0 {
        return Err("--dim, --batch, --nnz, --shard-rows and --steps must be positive".into());
    }
    if !(a.table_gb > 0.0 && a.gbit > 0.0 && a.latency_us >= 0.0) {
        return Err("--table-gb and --gbit must be positive, --latency-us not negative".into());
    }
    // The sizes derived from the flags (a batch's draws, the model's table of 50 batches of
    // rows, the shard's bytes) must be representable.
    let draws = a.batch.checked_mul(a.nnz).and_then(|d| d.checked_mul(50));
    let shard_bytes = a
        .shard_rows
        .checked_mul(a.dim)
        .and_then(|d| d.checked_mul(4));
    if draws.is_none() || shard_bytes.is_none() {
        return Err(format!(
            "--batch {} x --nnz {} x 50 or --shard-rows {} x --dim {} x 4 bytes overflows",
            a.batch, a.nnz, a.shard_rows, a.dim
        ));
    }
    Ok(a)
}

/// A batch's unique row ids: `batch * nnz` uniform draws over `rows` (a small LCG: the model
/// needs ids spread over the table, not statistical quality), sorted and deduplicated.
fn batch_ids(rows: usize, draws: usize, seed: &mut u64) -> Vec<i64> {
    let mut ids: Vec<i64> = (0..draws)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 33) % rows as u64) as i64
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn grad(ids: &[i64], rows: usize, dim: usize) -> Result<NDArray> {
    let vals: Vec<f32> = (0..ids.len() * dim)
        .map(|k| (k % 7) as f32 * 0.01)
        .collect();
    NDArray::row_sparse_from_parts(vals, ids.to_vec(), &[rows, dim])
}

/// Store work per step on one worker: (pull seconds, push seconds, unique rows), medians.
fn store_work(a: &Args) -> Result<(f64, f64, usize)> {
    let mut kv = local();
    kv.set_optimizer(Box::new(AdaGrad::new(0.1)))?;
    let shard = NDArray::zeros(&[a.shard_rows, a.dim], DType::F32)?;
    kv.init_sharded(0, &[a.shard_rows, a.dim], &shard)?;
    let out = NDArray::zeros_stype(&[a.shard_rows, a.dim], DType::F32, SType::RowSparse)?;
    let mut seed = 7u64;
    let (mut pulls, mut pushes, mut uniq) = (Vec::new(), Vec::new(), Vec::new());
    for step in 0..a.steps + 3 {
        let ids = batch_ids(a.shard_rows, a.batch * a.nnz, &mut seed);
        let g = grad(&ids, a.shard_rows, a.dim)?;
        let t = Instant::now();
        kv.row_sparse_pull(0, std::slice::from_ref(&out), &ids)?;
        let pull = t.elapsed().as_secs_f64();
        let t = Instant::now();
        kv.push(0, &[g])?;
        let push = t.elapsed().as_secs_f64();

        if step >= 3 {
            // The first steps create the optimizer state and fault its pages in.
            pulls.push(pull);
            pushes.push(push);
            uniq.push(ids.len());
        }
    }
    Ok((
        median(&mut pulls),
        median(&mut pushes),
        uniq[uniq.len() / 2],
    ))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Bytes worker 0 sends per step (pull + push of one batch's rows) with `n` workers (threads),
/// a table of `rows` rows.
fn bytes_per_step(n: usize, rows: usize, a: &Args) -> Result<(u64, usize)> {
    let stores = local_group(n, Duration::from_secs(60))?;
    let dim = a.dim;
    let draws = a.batch * a.nnz;
    let handles: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(r, mut kv)| {
            std::thread::spawn(move || -> Result<(u64, usize)> {
                kv.set_optimizer(Box::new(AdaGrad::new(0.1)))?;
                let (lo, hi) = shard_range(rows, r, n);
                kv.init_sharded(
                    0,
                    &[rows, dim],
                    &NDArray::zeros(&[hi - lo, dim], DType::F32)?,
                )?;
                let out = NDArray::zeros_stype(&[rows, dim], DType::F32, SType::RowSparse)?;
                let mut seed = 11 + r as u64;
                let ids = batch_ids(rows, draws, &mut seed);
                let g = grad(&ids, rows, dim)?;
                let before = kv.traffic().bytes;
                kv.row_sparse_pull(0, std::slice::from_ref(&out), &ids)?;
                kv.push(0, &[g])?;
                Ok((kv.traffic().bytes - before, ids.len()))
            })
        })
        .collect();
    let mut first = None;
    for h in handles {
        let got = h
            .join()
            .map_err(|_| sparrow_core::Error::arg("shard_model", "a worker thread panicked"))??;
        first.get_or_insert(got);
    }
    Ok(first.expect("at least one worker"))
}

/// Bytes a worker sends per step for `u` unique rows of `row_bytes` each, `n` workers, rows
/// spread evenly: pull (ids out, rows back from owners) + push (ids and rows to owners); the
/// (n-1)/n share crosses the network; plus the small headers (not modelled).
fn model_bytes(u: usize, row_bytes: usize, n: usize) -> f64 {
    let remote = (n - 1) as f64 / n as f64;
    remote * u as f64 * (8.0 + row_bytes as f64 + 8.0 + row_bytes as f64)
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shard_model: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&a) {
        eprintln!("shard_model: error: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<()> {
    let row_bytes = a.dim * 4;
    let (pull, push, u) = store_work(a)?;
    let per_row_us = (pull + push) / u as f64 * 1e6;
    println!(
        "measured: one worker, shard {} x {} f32 ({:.2} GB), AdaGrad, batch {} x {} ids -> {u} \
         unique rows: row_sparse_pull {:.2} ms + push {:.2} ms a step ({per_row_us:.3} us a row)",
        a.shard_rows,
        a.dim,
        (a.shard_rows * row_bytes) as f64 / 1e9,
        a.batch,
        a.nnz,
        pull * 1e3,
        push * 1e3,
    );
    // A table large enough that the batch's rows rarely repeat, as in the 100 GB one.
    let rows = (a.batch * a.nnz * 50).max(1000);
    for n in [2, 4] {
        let (bytes, uu) = bytes_per_step(n, rows, a)?;
        let want = model_bytes(uu, row_bytes, n);
        println!(
            "measured: {n} workers, {uu} unique rows: worker 0 sent {bytes} B a step; model \
             {:.0} B ({:+.1}%, headers and uneven shards)",
            want,
            (bytes as f64 / want - 1.0) * 100.0
        );
    }
    let table_rows = (a.table_gb * 1e9 / row_bytes as f64) as u64;
    let bw = a.gbit * 1e9 / 8.0;
    // Per step: row_sparse_pull = header all_gather + two all_to_all; push = header
    // all_gather + one all_to_all. Each collective is taken as n - 1 messages one after
    // another (a pairwise exchange).
    let collectives = 5.0;
    println!(
        "\nprojected: {:.0} GB table ({table_rows} x {} f32), AdaGrad (one state: the table's \
         size again), batch {} x {} ids (~{u} unique rows a worker), {} Gbit/s, {} us a message; \
         store and network only (the model's compute per step does not change with N)\n",
        a.table_gb, a.dim, a.batch, a.nnz, a.gbit, a.latency_us
    );
    println!(
        "| machines | sharded: GB a machine | sent a step | step (store + net) | samples/s | \
         replicated row_sparse: GB a machine | rows updated a step | step | samples/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let table_gb = table_rows as f64 * row_bytes as f64 / 1e9;
    for n in [1usize, 2, 4, 8, 16] {
        let net_lat = collectives * (n - 1) as f64 * a.latency_us * 1e-6;
        // Sharded: the owner's store work is one batch's rows whatever n; bytes as modelled.
        let sent = model_bytes(u, row_bytes, n);
        let t_shard = pull + push + net_lat + sent / bw;
        // Replicated, row_sparse exchange: every machine receives every other machine's rows
        // and updates all n * u of them; no pull.
        let recv = (n - 1) as f64 * u as f64 * (8.0 + row_bytes as f64);
        let t_rep = push * n as f64 + 2.0 * (n - 1) as f64 * a.latency_us * 1e-6 + recv / bw;
        let samples = (n * a.batch) as f64;
        println!(
            "| {n} | {:.1} | {:.1} MB | {:.1} ms | {:.0} | {:.0} | {} | {:.1} ms | {:.0} |",
            2.0 * table_gb / n as f64,
            sent / 1e6,
            t_shard * 1e3,
            samples / t_shard,
            2.0 * table_gb,
            n * u,
            t_rep * 1e3,
            samples / t_rep,
        );
    }
    Ok(())
}
