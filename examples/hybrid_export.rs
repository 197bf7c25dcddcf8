//! Export a hybridized model and import it in a second process that has none of the model's
//! code (Gluon's `export` and `SymbolBlock.imports`), then check both predict the same.
//!
//! ```text
//! cargo run --release --example hybrid_export -- [DIR]
//! ```
//!
//! The parent trains a small sparse model (Dense with a row_sparse weight gradient on a csr
//! batch, then two dense layers) for a few steps, hybridizes it, predicts, and exports
//! `DIR/model.json` (the graph) and `DIR/model.safetensors` (its parameters); `DIR` defaults
//! to a fresh folder under the system's temporary directory. It then runs itself as
//! `hybrid_export import DIR`: the child rebuilds the same input batch from its seed, imports
//! the files with `SymbolBlock::import` and prints its predictions' bits, which the parent
//! compares with its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use sparrow::core::{autograd, DType, Device, NDArray, SType};
use sparrow::nn::loss::{Loss, SoftmaxCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Hybridize, Initializer, Sequential, SymbolBlock};
use sparrow::optim::{Sgd, Trainer};

type BoxError = Box<dyn std::error::Error>;

/// The batch both processes predict on: 16 rows of 1000 features, 5% non-zero.
fn batch() -> NDArray {
    sparrow::core::testing::test_csr(16, 1000, 0.05, 7, DType::F32)
}

fn bits(a: &NDArray) -> Result<Vec<u32>, BoxError> {
    Ok(a.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect())
}

fn files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("model.json"), dir.join("model.safetensors"))
}

fn import(dir: &Path) -> Result<(), BoxError> {
    let (g, p) = files(dir);
    let net = SymbolBlock::import(&g, &p)?;
    let pred = autograd::pause(|| net.forward(&batch()))?;
    let b: Vec<String> = bits(&pred)?.iter().map(|b| b.to_string()).collect();
    println!("{}", b.join(" "));
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("import") {
        let dir = args.get(1).ok_or("usage: hybrid_export import DIR")?;
        return import(Path::new(dir));
    }
    let dir = match args.first() {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("sparrow-hybrid-export-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;

    let mut net = Sequential::new();
    net.add(
        Dense::new(32)
            .activation("relu")
            .grad_stype(SType::RowSparse),
    );
    net.add(Dense::new(16).activation("tanh"));
    net.add(Dense::new(4));
    let net = net.hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu)?;
    let x = batch();
    let y = NDArray::from_vec((0..16).map(|i| (i % 4) as f32).collect(), &[16])?;
    let loss = SoftmaxCrossEntropyLoss::new();
    let mut trainer = Trainer::from_params(&net.collect_params()?, Sgd::new(0.1))?;
    for step in 0..20 {
        let l = autograd::record(|| loss.forward(&net.forward(&x)?, &y)?.mean(None, false))?;
        l.backward()?;
        trainer.step(1)?;
        if step % 5 == 0 {
            println!("step {step:2}: loss {:.4}", l.item()?);
        }
    }
    let pred = autograd::pause(|| net.forward(&x))?;
    let (g, p) = files(&dir);
    net.export(&g, &p)?;
    println!(
        "exported {} ({} nodes) and {}",
        g.display(),
        net.graph().map(|g| g.nodes().len()).unwrap_or(0),
        p.display()
    );

    let out = Command::new(std::env::current_exe()?)
        .arg("import")
        .arg(&dir)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "import process failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let theirs: Vec<u32> = String::from_utf8(out.stdout)?
        .split_whitespace()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let ours = bits(&pred)?;
    if theirs != ours {
        return Err(format!(
            "the importing process predicted differently ({} of {} values differ)",
            ours.iter().zip(&theirs).filter(|(a, b)| a != b).count(),
            ours.len()
        )
        .into());
    }
    println!(
        "a second process imported the files and predicted the same {} values (bit for bit)",
        ours.len()
    );
    Ok(())
}
