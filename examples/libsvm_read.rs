//! One full LibSVMIter pass over a LibSVM file: rows, nnz, seconds, MB/s and peak RSS.
//!
//! ```text
//! cargo run --release --example libsvm_read -- FILE --data-shape N --batch-size B [--json]
//!     [--num-parts P --part-index I] [--block-mb M] [--prefetch K] [--dump-values N OUT] [--map]
//! ```
//!
//! `--dump-values N OUT` writes the first N parsed values as little-endian f32 to OUT (used to
//! check correct rounding against an exact reference with scripts/check_libsvm_rounding.py).

use std::time::Instant;

use sparrow::data::libsvm::{LibSVMIter, LibSVMIterParams};
use sparrow::data::LastBatch;

/// Peak resident set size in MB (VmHWM of /proc/self/status), if available.
fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn usage() -> ! {
    eprintln!(
        "usage: libsvm_read FILE --data-shape N --batch-size B [--json] [--num-parts P] \
         [--part-index I] [--block-mb M] [--prefetch K] [--dump-values N OUT] [--map]"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut file = None;
    let (mut shape, mut bs, mut json, mut map) = (None, None, false, false);
    let (mut parts, mut part, mut block_mb, mut prefetch) = (1usize, 0usize, 16usize, 4usize);
    let mut dump: Option<(usize, String)> = None;
    let mut dumped: Vec<u8> = Vec::new();
    let mut i = 0;
    let num = |i: usize| -> usize {
        args.get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage())
    };
    while i < args.len() {
        match args[i].as_str() {
            "--data-shape" => shape = Some(num(i)),
            "--batch-size" => bs = Some(num(i)),
            "--num-parts" => parts = num(i),
            "--part-index" => part = num(i),
            "--block-mb" => block_mb = num(i),
            "--prefetch" => prefetch = num(i),
            "--dump-values" => {
                let out = args.get(i + 2).cloned().unwrap_or_else(|| usage());
                dump = Some((num(i), out));
                i += 3;
                continue;
            }
            "--json" => {
                json = true;
                i += 1;
                continue;
            }
            "--map" => {
                map = true;
                i += 1;
                continue;
            }
            f if !f.starts_with("--") && file.is_none() => {
                file = Some(f.to_string());
                i += 1;
                continue;
            }
            _ => usage(),
        }
        i += 2;
    }
    let (Some(file), Some(shape), Some(bs)) = (file, shape, bs) else {
        usage()
    };
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) as f64;
    let t0 = Instant::now();
    let mut p = LibSVMIterParams::new(&file, shape, bs);
    p.last_batch = LastBatch::Keep;
    p.num_parts = parts;
    p.part_index = part;
    p.block_bytes = block_mb << 20;
    p.prefetch = prefetch;
    p.progress = !json;
    p.map_files = map;
    let it = match LibSVMIter::new(p) {
        Ok(it) => it,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    };
    let (mut rows, mut nnz, mut batches) = (0usize, 0usize, 0usize);
    let mut first = None;
    for b in it {
        let b = match b {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1)
            }
        };
        first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        let (batch_rows, batch_nnz) = b
            .data
            .with_csr::<f32, _>(|c| {
                if let Some((n, _)) = &dump {
                    for v in c.values {
                        if dumped.len() >= n * 4 {
                            break;
                        }
                        dumped.extend_from_slice(&v.to_le_bytes());
                    }
                }
                (c.shape[0], c.values.len())
            })
            .expect("LibSVMIter yields f32 CSR batches");
        rows += batch_rows - b.pad;
        nnz += batch_nnz;
        batches += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    if let Some((_, out)) = &dump {
        if let Err(e) = std::fs::write(out, &dumped) {
            eprintln!("error: {out}: {e}");
            std::process::exit(1)
        }
    }
    let mbps = size / 1e6 / secs;
    let rss = peak_rss_mb().unwrap_or(f64::NAN);
    if json {
        let v = serde_json::json!({
            "file": file, "file_mb": size / 1e6, "rows": rows, "nnz": nnz, "batches": batches,
            "batch_size": bs, "data_shape": shape, "seconds": secs, "MB_per_s": mbps,
            "first_batch_s": first, "peak_rss_mb": rss,
            "threads": rayon_threads(),
        });
        println!("{v}");
    } else {
        println!(
            "rows {rows}  nnz {nnz}  batches {batches}  {secs:.3} s  {mbps:.1} MB/s  \
             peak RSS {rss:.1} MB"
        );
    }
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
