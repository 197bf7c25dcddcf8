//! Compile every CUDA kernel of sparrow-core with NVRTC, through the same function the runtime
//! uses (`sparrow_core::cuda::compile_ptx`), for each target architecture, and assemble each
//! PTX with `ptxas`: a syntax, type or resource error in a kernel fails this check on a machine
//! without a GPU (CI runs it; see `.ci/run`).
//!
//! ```text
//! cargo run --release --features cuda --example cuda_kernels_check -- \
//!     --ptxas PATH/TO/ptxas --out DIR [--arch 80 --arch 90]
//! ```
//! NVRTC is loaded from `LD_LIBRARY_PATH` (`libnvrtc.so.12`). Without `--ptxas` the PTX is
//! compiled but not assembled. Prints one line per kernel file and architecture and exits
//! non-zero on the first failure.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("cuda_kernels_check: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut ptxas: Option<PathBuf> = None;
    let mut out = std::env::temp_dir().join("sparrow-cuda-ptx");
    let mut archs: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--ptxas" => ptxas = Some(PathBuf::from(value()?)),
            "--out" => out = PathBuf::from(value()?),
            "--arch" => archs.push(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if archs.is_empty() {
        archs = vec!["80".into(), "90".into()];
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let started = Instant::now();
    let mut count = 0;
    for src in sparrow::core::cuda::kernel_sources() {
        for arch in &archs {
            let t = Instant::now();
            let ptx = sparrow::core::cuda::compile_ptx(&src, &format!("compute_{arch}"))
                .map_err(|e| e.to_string())?;
            let stem = src.file.trim_end_matches(".cu");
            let path = out.join(format!("{stem}.compute_{arch}.ptx"));
            std::fs::write(&path, &ptx).map_err(|e| format!("{}: {e}", path.display()))?;
            let nvrtc_ms = t.elapsed().as_secs_f64() * 1e3;
            let mut line = format!(
                "{:<16} sm_{arch}: NVRTC {nvrtc_ms:7.1} ms, {:>7} bytes of PTX",
                src.file,
                ptx.len()
            );
            if let Some(p) = &ptxas {
                let t = Instant::now();
                let cubin = out.join(format!("{stem}.sm_{arch}.cubin"));
                let o = Command::new(p)
                    .arg(format!("-arch=sm_{arch}"))
                    .arg(&path)
                    .arg("-o")
                    .arg(&cubin)
                    .output()
                    .map_err(|e| format!("running {}: {e}", p.display()))?;
                if !o.status.success() {
                    return Err(format!(
                        "ptxas -arch=sm_{arch} {} failed:\n{}",
                        path.display(),
                        String::from_utf8_lossy(&o.stderr)
                    ));
                }
                line += &format!(", ptxas {:7.1} ms", t.elapsed().as_secs_f64() * 1e3);
            }
            println!("{line}");
            count += 1;
        }
    }
    println!(
        "{count} kernel builds ({} files x {} archs) in {:.1} s",
        count / archs.len(),
        archs.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
