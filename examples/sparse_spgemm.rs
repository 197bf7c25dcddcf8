//! Times csr x csr (`dot` of two csr arrays -> csr, the sparse product kernel) on the matrices
//! `scripts/bench_scipy_spgemm.py` builds with the same generator: A csr f32 20,000 x 50,000
//! and B csr f32 50,000 x 20,000, 16 non-zeros per row (columns and values from splitmix64 of
//! a counter; a column drawn twice keeps its first draw).
//!
//! `cargo run --release --example sparse_spgemm -- [--rows R] [--inner K] [--cols N] [--nnz Z]
//! [--reps N]` prints the product's nnz and value sum (compare with the script's) and the
//! median / min / max milliseconds of the product over repeated runs after a warm-up, as JSON,
//! with the process's CPU milliseconds per run (`cpu_ms`, all threads: on a loaded machine it
//! moves less than wall time; the script reports the same measure).

use std::time::Instant;

use sparrow::core::NDArray;

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The script's matrix: row `r` holds the columns `splitmix64(seed * 2^40 + r * nnz + t) %
/// cols` for `t < nnz`, values `(hash >> 40) / 2^24`, a repeated column keeping its first draw.
fn matrix(rows: usize, cols: usize, nnz: usize, seed: u64) -> NDArray {
    let mut indptr = Vec::with_capacity(rows + 1);
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    indptr.push(0i64);
    let mut row: Vec<(i64, f32)> = Vec::with_capacity(nnz);
    for r in 0..rows as u64 {
        row.clear();
        for t in 0..nnz as u64 {
            let h = splitmix64((seed << 40).wrapping_add(r * nnz as u64 + t));
            let c = (h % cols as u64) as i64;
            if !row.iter().any(|&(rc, _)| rc == c) {
                row.push((c, ((h >> 40) as f64 / (1u64 << 24) as f64) as f32));
            }
        }
        row.sort_unstable_by_key(|&(c, _)| c);
        indices.extend(row.iter().map(|&(c, _)| c));
        values.extend(row.iter().map(|&(_, v)| v));
        indptr.push(indices.len() as i64);
    }
    NDArray::csr_from_parts(values, indices, indptr, [rows, cols]).expect("a valid csr matrix")
}

/// CPU time of this process so far (user + system, all threads) in milliseconds, from
/// `/proc/self/stat` (clock ticks of 10 ms: read around many runs); `None` without procfs.
fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at its closing parenthesis;
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10.0)
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} needs a number, got {v}"))
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = arg(&args, "--rows", 20_000);
    let inner = arg(&args, "--inner", 50_000);
    let cols = arg(&args, "--cols", 20_000);
    let nnz = arg(&args, "--nnz", 16);
    let reps = arg(&args, "--reps", 10);
    let a = matrix(rows, inner, nnz, 1);
    let b = matrix(inner, cols, nnz, 2);
    let c = a.dot(&b).expect("csr x csr");
    let (c_nnz, c_sum) = c
        .with_csr::<f32, _>(|v| {
            (
                v.values.len(),
                v.values.iter().map(|&x| x as f64).sum::<f64>(),
            )
        })
        .expect("a csr product");
    for _ in 0..2 {
        std::hint::black_box(a.dot(&b).expect("csr x csr"));
    }
    let cpu0 = process_cpu_ms();
    let mut ts: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(a.dot(&b).expect("csr x csr"));
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let cpu_ms = match (cpu0, process_cpu_ms()) {
        (Some(a), Some(b)) => format!("{:.1}", (b - a) / ts.len() as f64),
        _ => "null".to_string(),
    };
    ts.sort_by(f64::total_cmp);
    println!(
        "{{\"threads\": {}, \"a_nnz\": {}, \"b_nnz\": {}, \"c_nnz\": {c_nnz}, \"c_sum\": {c_sum}, \
         \"csr_x_csr\": {{\"median_ms\": {:.3}, \"min_ms\": {:.3}, \"max_ms\": {:.3}, \"cpu_ms\": {cpu_ms}, \"reps\": {}}}}}",
        rayon::current_num_threads(),
        a.nnz(),
        b.nnz(),
        ts[ts.len() / 2],
        ts[0],
        ts[ts.len() - 1],
        ts.len()
    );
}
