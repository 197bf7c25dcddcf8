//! CP decomposition by alternating least squares of a 3-D tensor stored in a memory-mapped
//! `.npy` file, streamed a block of slabs at a time (see `als.rs`).
//!
//! ```text
//! cargo run --release --example cp_als -- --dir DIR --dims 1000,800,600 --rank 10 --iters 20
//! cargo run --release --example cp_als -- --dims 400,300,200 --in-memory
//! ```
//!
//! A rank-`R` tensor (random factors, plus `--noise` times uniform noise) is generated into
//! `DIR/tensor.npy` (`I*J x K` f32), its pages dropped from the page cache, then opened
//! read-only and decomposed from a different random start. Prints the fit per sweep, the time
//! per sweep, peak RSS and the tensor's size; `--in-memory` keeps the tensor in RAM instead (the
//! same arithmetic, for comparison). `--check F` exits with an error when the final fit is
//! below `F`.

mod als;

use std::path::PathBuf;
use std::time::Instant;

use sparrow::core::{fsio, sys, DType, MapMode, NDArray};

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    let mut dir = None;
    let (mut dims, mut rank, mut iters, mut block) = ([400usize, 300, 200], 8usize, 25usize, 16);
    let (mut noise, mut in_memory, mut check) = (0.0f64, false, None::<f64>);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(val()?)),
            "--dims" => {
                let v: Vec<usize> = val()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
                dims = v.try_into().map_err(|_| "--dims takes I,J,K")?;
            }
            "--rank" => rank = val()?.parse()?,
            "--iters" => iters = val()?.parse()?,
            "--block" => block = val()?.parse()?,
            "--noise" => noise = val()?.parse()?,
            "--check" => check = Some(val()?.parse()?),
            "--in-memory" => in_memory = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if dims.contains(&0) || rank == 0 || block == 0 {
        return Err("dims, rank and block must be positive".into());
    }
    let shape = [dims[0] * dims[1], dims[2]];
    let bytes = (shape[0] * shape[1] * 4) as f64;
    let truth = als::init(dims, rank, 7)?;
    let t0 = Instant::now();
    let x = if in_memory {
        let x = NDArray::zeros(&shape, DType::F32)?;
        als::synthesize(&x, &truth, noise, block, 11)?;
        x
    } else {
        let dir = dir.ok_or("--dir DIR (or --in-memory)")?;
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("tensor.npy");
        let x = NDArray::create_npy(&path, &shape, DType::F32)?;
        als::synthesize(&x, &truth, noise, block, 11)?;
        x.flush()?;
        drop(x);
        fsio::drop_cached_pages(&path);
        NDArray::open_npy(&path, MapMode::ReadOnly)?
    };
    println!(
        "tensor {}x{}x{} ({:.2} GB, {}), rank {rank}, {} slabs per block; made in {:.1} s",
        dims[0],
        dims[1],
        dims[2],
        bytes / 1e9,
        if in_memory {
            "in memory"
        } else {
            "memory-mapped"
        },
        block,
        t0.elapsed().as_secs_f64()
    );
    als::check_shape(&x, dims)?;
    let t = Instant::now();
    let x_sq = als::norm_sq(&x, dims, block)?;
    println!("||X||^2 in {:.2} s", t.elapsed().as_secs_f64());
    let hwm_before = sys::peak_rss_bytes().unwrap_or(0);
    let mut f = als::init(dims, rank, 1)?;
    let mut fit = 0.0;
    let t_all = Instant::now();
    for s in 0..iters {
        let t = Instant::now();
        fit = als::sweep(&x, dims, &mut f, block, x_sq)?.fit;
        let secs = t.elapsed().as_secs_f64();
        let mapped = if in_memory {
            String::new()
        } else {
            let p = x.backing_file().map(|(p, _)| p);
            let mb = p.and_then(|p| sys::mapped_rss_bytes(&p)).unwrap_or(0) as f64 / 1e6;
            format!(", tensor resident {mb:.0} MB")
        };
        println!(
            "sweep {s:>3}: fit {fit:.6}, {secs:.2} s ({:.2} GB/s of tensor read{mapped})",
            3.0 * bytes / 1e9 / secs
        );
    }
    println!(
        "{iters} sweeps in {:.1} s; final fit {fit:.6}; peak RSS {:.0} MB (before the sweeps {:.0} MB)",
        t_all.elapsed().as_secs_f64(),
        sys::peak_rss_bytes().unwrap_or(0) as f64 / 1e6,
        hwm_before as f64 / 1e6
    );
    if let Some(want) = check {
        if fit.is_nan() || fit < want {
            return Err(format!("final fit {fit} below --check {want}").into());
        }
    }
    Ok(())
}
