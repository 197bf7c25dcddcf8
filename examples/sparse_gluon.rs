//! sparrow's main job: MXNet's "Sparse NDArrays with Gluon" tutorial, end to end.
//!
//! 1. Generate `samples x features` CSR data at `density` (default 1000 x 1,000,000 at 1e-5);
//!    label = 1 when the row sum is above the mean row sum. Print dense vs CSR bytes.
//! 2. Write it as LibSVM and read it back with `LibSVMIter` (batch size 10).
//! 3. Train `features -> 128 -> 8 -> 1` with sigmoid activations, sigmoid binary cross-entropy
//!    and SGD, in three variants of the first layer:
//!    (a) `naive`: Dense on the densified batch, dense weight gradient;
//!    (b) `sparse`: the sparse product on the CSR batch, dense weight gradient;
//!    (c) `rsp`: the sparse product with a row_sparse weight gradient and lazy SGD.
//! 4. Print a table (or `--json`): epoch time, build+init time, weight/grad/state bytes, peak
//!    RSS, loss and accuracy.
//!
//! Each variant runs in its own child process so its peak RSS is its own. (a) and (b) move a
//! dense 512 MB gradient per batch, so they are timed on `--dense-batches` batches after two
//! warm-up batches and scaled to a full epoch (their per-batch cost does not depend on the data);
//! (c) is timed over `--epochs` full epochs after warm-up epochs (whole epochs until
//! `--warmup-ms`, default 100 ms, of training have passed; at least one).
//!
//! ```text
//! cargo run --release --example sparse_gluon -- [--json] [--variants a,b,c] [--epochs 7]
//!     [--dense-batches 5] [--samples 1000] [--features 1000000] [--density 1e-5]
//!     [--batch-size 10] [--lr 0.1] [--optimizer sgd|adam|adagrad|ftrl] [--threads N] [--seed 42]
//!     [--data-dir DIR] [--loader-priority idle|normal]
//! ```
//!
//! (c)'s LibSVMIter groups each batch's columns ahead (`prepare_transpose`) and runs its
//! producer at idle scheduling priority (`idle_priority`; `--loader-priority normal` turns
//! that off for comparison).

// A 10-row training step allocates and frees a few dozen small arrays; mimalloc's thread-local
// free lists make that churn cheap (glibc's malloc/free and its consolidation were ~14% of an
// epoch of (c)). The library itself does not pick an allocator: binaries choose.
#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;

#[path = "sparse_gluon/alloc.rs"]
mod alloc;
#[path = "sparse_gluon/args.rs"]
mod args;
#[path = "sparse_gluon/report.rs"]
mod report;
#[path = "sparse_gluon/train.rs"]
mod train;

use std::process::Command;

use args::Args;
use report::VariantResult;

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sparse_gluon: {e}\n\n{}", args::USAGE);
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("sparse_gluon: error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()?;
    }
    if let Some(v) = args.child {
        // Child: one variant, result as one JSON line on stdout.
        let res = train::run_variant(args, v)?;
        println!("{}", serde_json::to_string(&res.to_json())?);
        return Ok(());
    }
    let data = train::prepare_data(args, !args.json)?;
    let mut results: Vec<VariantResult> = Vec::new();
    for &v in &args.variants {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(args.child_args(v, &data.path));
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(format!(
                "variant {} failed: {}",
                v.name(),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        if !args.json {
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
        }
        let line = String::from_utf8(out.stdout)?;
        let json: serde_json::Value = serde_json::from_str(line.trim())?;
        results.push(VariantResult::from_json(&json)?);
    }
    let copy_gbs = report::copy_bandwidth_gbs();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::to_json(args, &data, &results, copy_gbs))?
        );
    } else {
        report::print_table(args, &data, &results, copy_gbs);
    }
    Ok(())
}
