//! Out-of-core matrix product: `A . B` with `A` in a `.npy` file that may be larger than memory
//! and the result written to another file, a block of rows at a time
//! (`NDArray::matmul_to_file`), against the in-memory product where `A` fits.
//!
//! ```text
//! cargo run --release --example out_of_core_matmul -- --dir DIR --rows 60000000 --k 128 --n 64
//! cargo run --release --example out_of_core_matmul -- --dir DIR --rows 4000000 --in-memory
//! ```
//!
//! `A` (`rows x k` f32) is generated into `DIR/a.npy` a block at a time (uniform in [-1, 1)),
//! its pages dropped from the page cache, then multiplied by an in-memory `B` (`k x n`). Prints
//! the time, the GB/s of `A` read, GFLOP/s and peak RSS; `--in-memory` also times `A.dot(B)` with
//! `A` read into memory first.

use std::path::PathBuf;
use std::time::Instant;

use sparrow::core::{fsio, sys, DType, MapMode, NDArray};
use sparrow::nn::init::InitDesc;
use sparrow::nn::Initializer;

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    let mut dir = None;
    let (mut rows, mut k, mut n, mut block, mut in_memory) =
        (60_000_000usize, 128, 64, 65536, false);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut num = || -> Result<usize, BoxError> {
            Ok(it.next().ok_or(format!("{a} needs a value"))?.parse()?)
        };
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(it.next().ok_or("--dir needs a folder")?)),
            "--rows" => rows = num()?,
            "--k" => k = num()?,
            "--n" => n = num()?,
            "--block" => block = num()?,
            "--in-memory" => in_memory = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let dir = dir.ok_or("--dir DIR is required (A and the result go there)")?;
    std::fs::create_dir_all(&dir)?;
    let (ap, cp) = (dir.join("a.npy"), dir.join("c.npy"));
    let a_bytes = rows as f64 * k as f64 * 4.0;

    let t = Instant::now();
    let desc = InitDesc::new("a", &[rows, k], false);
    drop(Initializer::Uniform { scale: 1.0 }.generate_file(&desc, DType::F32, 1, &ap)?);
    fsio::drop_cached_pages(&ap);
    println!(
        "A: {rows} x {k} f32 = {:.2} GB in {}, written in {:.1} s",
        a_bytes / 1e9,
        ap.display(),
        t.elapsed().as_secs_f64()
    );
    let b = Initializer::Uniform { scale: 1.0 }.generate(
        &InitDesc::new("b", &[k, n], false),
        DType::F32,
        2,
    )?;

    let a = NDArray::open_npy(&ap, MapMode::ReadOnly)?;
    let t = Instant::now();
    let c = a.matmul_to_file(&b, &cp, block)?;
    let secs = t.elapsed().as_secs_f64();
    let flops = 2.0 * rows as f64 * k as f64 * n as f64;
    println!(
        "out of core (block {block} rows): {secs:.2} s, A read at {:.2} GB/s, {:.1} GFLOP/s, \
         peak RSS {:.0} MB",
        a_bytes / secs / 1e9,
        flops / secs / 1e9,
        sys::peak_rss_bytes().unwrap_or(0) as f64 / 1e6
    );
    if in_memory {
        // The same product with A read into memory first (the file's pages are cached now).
        let t = Instant::now();
        let am = NDArray::from_vec(a.to_vec::<f32>()?, &[rows, k])?;
        let read = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let cm = am.dot(&b)?;
        let secs_mem = t.elapsed().as_secs_f64();
        let (x, y) = (c.to_vec::<f32>()?, cm.to_vec::<f32>()?);
        let max_diff = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0f32, f32::max);
        println!(
            "in memory: read {read:.2} s, product {secs_mem:.2} s ({:.1} GFLOP/s); out-of-core / \
             in-memory product time {:.2}; max |difference| {max_diff:e}; peak RSS {:.0} MB",
            flops / secs_mem / 1e9,
            secs / secs_mem,
            sys::peak_rss_bytes().unwrap_or(0) as f64 / 1e6
        );
    }
    Ok(())
}
