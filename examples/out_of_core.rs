//! The sparse tutorial's model with a first-layer table larger than memory, kept in a file.
//!
//! `Dense(128, sigmoid) -> Dense(8, sigmoid) -> Dense(1, sigmoid)` over csr batches, the first
//! weight `(features, 128)` f32 with a row_sparse gradient, trained with SGD. With `--dir`, the
//! first weight is created in `DIR/table.npy` (`Parameter::initialize_in_file`: generated a
//! block at a time, then mapped read-write) and the batches touch only `--hot` of its rows, so
//! memory holds those rows' pages and nothing else of the table. With `--in-memory`, the same
//! model has a table of exactly `--hot` rows in memory and the batches use the same rows under
//! their in-memory ids: the comparison the epoch times are for.
//!
//! ```text
//! cargo run --release --example out_of_core -- --dir DIR                 # 64M x 128 f32: 32 GiB
//! cargo run --release --example out_of_core -- --in-memory               # 1M x 128: 512 MiB
//! cargo run --release --example out_of_core -- --dir DIR --features 4000000 --epochs 2
//! ```
//!
//! Hot rows sit 8 to a 4 KiB page (a page of the file is either all hot or all cold), on pages
//! spread over the whole file: resident memory is then the hot rows' bytes, as it is for a
//! table whose frequent features were given neighbouring ids.

use std::path::PathBuf;
use std::time::Instant;

use sparrow::core::{autograd, sys, NDArray, SType};
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Initializer, Sequential};
use sparrow::optim::{Sgd, Trainer};

type BoxError = Box<dyn std::error::Error>;

struct Args {
    dir: Option<PathBuf>,
    features: usize,
    hot: usize,
    batch: usize,
    nnz: usize,
    batches: usize,
    epochs: usize,
}

fn parse() -> Result<Args, BoxError> {
    let mut a = Args {
        dir: None,
        features: 64 << 20,
        hot: 1 << 20,
        batch: 1024,
        nnz: 30,
        batches: 200,
        epochs: 3,
    };
    let mut in_memory = false;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut num = || -> Result<usize, BoxError> {
            Ok(it.next().ok_or(format!("{k} needs a value"))?.parse()?)
        };
        match k.as_str() {
            "--dir" => a.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a folder")?)),
            "--in-memory" => in_memory = true,
            "--features" => a.features = num()?,
            "--hot" => a.hot = num()?,
            "--batch" => a.batch = num()?,
            "--nnz" => a.nnz = num()?,
            "--batches" => a.batches = num()?,
            "--epochs" => a.epochs = num()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if in_memory == a.dir.is_some() {
        return Err("give exactly one of --dir DIR (table in a file) and --in-memory".into());
    }
    if a.hot == 0 || !a.hot.is_multiple_of(8) || a.hot > a.features {
        return Err("--hot must be a positive multiple of 8, at most --features".into());
    }
    if in_memory {
        a.features = a.hot;
    }
    Ok(a)
}

/// SplitMix64: a deterministic stream of well-mixed integers.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The table row of hot row `j`: hot rows come 8 to a page, the pages spread over the table
/// (page `p` of the hot set lands on page `p * stride` of the table).
fn row_of(j: usize, features: usize, hot: usize) -> i64 {
    let stride = features / hot; // pages of the table per hot page
    ((j / 8) * stride * 8 + j % 8) as i64
}

/// `batches` csr batches of `batch` rows with `nnz` hot features each, and 0/1 labels that
/// depend on the features (the sign of a fixed random weight summed over them).
fn make_batches(a: &Args) -> Result<Vec<(NDArray, NDArray)>, BoxError> {
    let mut out = Vec::with_capacity(a.batches);
    let mut s = 0u64;
    for _ in 0..a.batches {
        let mut indices = Vec::with_capacity(a.batch * a.nnz);
        let mut labels = Vec::with_capacity(a.batch);
        for _ in 0..a.batch {
            let mut row: Vec<i64> = Vec::with_capacity(a.nnz);
            let mut score = 0i64;
            while row.len() < a.nnz {
                s += 1;
                let j = (mix(s) % a.hot as u64) as usize;
                let id = row_of(j, a.features, a.hot);
                if !row.contains(&id) {
                    score += if mix(j as u64 ^ 0xABCD) & 1 == 0 {
                        1
                    } else {
                        -1
                    };
                    row.push(id);
                }
            }
            row.sort_unstable();
            indices.extend(row);
            labels.push(if score > 0 { 1.0f32 } else { 0.0 });
        }
        let indptr: Vec<i64> = (0..=a.batch).map(|r| (r * a.nnz) as i64).collect();
        let x = NDArray::csr_from_parts(
            vec![1.0f32; a.batch * a.nnz],
            indices,
            indptr,
            [a.batch, a.features],
        )?;
        out.push((x, NDArray::from_vec(labels, &[a.batch, 1])?));
    }
    Ok(out)
}

fn main() -> Result<(), BoxError> {
    let a = parse()?;
    let table_bytes = a.features as f64 * 128.0 * 4.0;
    let first = Dense::new(128)
        .in_units(a.features)
        .activation("sigmoid")
        .grad_stype(SType::RowSparse);
    let weight = first.weight().clone();
    let mut net = Sequential::new();
    net.add(first);
    net.add(Dense::new(8).in_units(128).activation("sigmoid"));
    net.add(Dense::new(1).in_units(8).activation("sigmoid"));

    let t0 = Instant::now();
    let init = Initializer::Uniform { scale: 0.07 };
    let file = a.dir.as_ref().map(|d| d.join("table.npy"));
    if let Some(f) = &file {
        std::fs::create_dir_all(f.parent().unwrap_or(f))?;
        weight.initialize_in_file(&init, f)?;
    }
    net.initialize(&init, sparrow::core::Device::Cpu)?;
    let init_s = t0.elapsed().as_secs_f64();
    let batches = make_batches(&a)?;
    let params = net.collect_params()?;
    let mut trainer = Trainer::new(params.iter().map(|(_, p)| p.clone()), Sgd::new(0.1))?;
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new().from_sigmoid(true);

    println!(
        "table {} x 128 f32 = {:.2} GB ({}), {} hot rows; {} batches of {} x {} nnz per epoch; \
         created in {init_s:.1} s",
        a.features,
        table_bytes / 1e9,
        file.as_ref()
            .map_or("in memory".to_string(), |f| format!("file {}", f.display())),
        a.hot,
        a.batches,
        a.batch,
        a.nnz
    );
    for epoch in 0..a.epochs {
        let t = Instant::now();
        let mut loss_sum = 0.0;
        for (x, y) in &batches {
            let loss = autograd::record(|| loss_fn.forward(&net.forward(x)?, y))?;
            loss.backward()?;
            loss_sum += loss.mean(None, false)?.item()?;
            trainer.step(a.batch)?;
        }
        let secs = t.elapsed().as_secs_f64();
        let mapped = file
            .as_ref()
            .and_then(|f| sys::mapped_rss_bytes(f))
            .map_or(String::new(), |b| {
                format!(", table pages resident {:.0} MB", b as f64 / 1e6)
            });
        println!(
            "epoch {epoch}: {secs:.3} s ({:.3} ms/step), loss {:.4}, peak RSS {:.0} MB{mapped}",
            secs * 1e3 / a.batches as f64,
            loss_sum / a.batches as f64,
            sys::peak_rss_bytes().unwrap_or(0) as f64 / 1e6
        );
    }
    if file.is_some() {
        let t = Instant::now();
        weight.data()?.flush()?;
        println!(
            "checkpoint (flush in place): {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
