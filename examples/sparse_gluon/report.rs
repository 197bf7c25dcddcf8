//! The result table (text and JSON) and the machine's copy bandwidth.

use std::time::Instant;

use serde_json::{json, Value};

use crate::args::{Args, Variant};
use crate::train::Data;

/// What one variant measured.
pub struct VariantResult {
    pub variant: Variant,
    /// Per-epoch milliseconds (measured, or scaled from `timed_batches` for (a) and (b)).
    pub epoch_ms: Vec<f64>,
    /// Per-epoch CPU milliseconds of the training thread (same epochs as `epoch_ms`): the work
    /// itself, without time spent descheduled or waiting for the data iterator.
    pub epoch_cpu_ms: Vec<f64>,
    pub timed_batches: usize,
    pub batches_per_epoch: usize,
    /// (c): untimed epochs before the timed ones (whole epochs until `--warmup-ms` passed).
    pub warmup_epochs: usize,
    pub init_ms: f64,
    pub weight_bytes: u64,
    pub grad_bytes: u64,
    pub first_grad_stype: String,
    pub first_grad_rows: usize,
    pub max_grad_rows: usize,
    pub state_bytes: u64,
    pub peak_rss_bytes: u64,
    pub first_loss: f64,
    pub loss: f64,
    pub accuracy: f64,
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let med = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (med, s[0], s[s.len() - 1])
}

impl VariantResult {
    pub fn to_json(&self) -> Value {
        let (med, min, max) = stats(&self.epoch_ms);
        json!({
            "variant": self.variant.name(),
            "description": self.variant.describe(),
            "epoch_ms": {"median": med, "min": min, "max": max, "all": self.epoch_ms},
            "epoch_cpu_ms": {"median": stats(&self.epoch_cpu_ms).0, "all": self.epoch_cpu_ms},
            "timed_batches": self.timed_batches,
            "batches_per_epoch": self.batches_per_epoch,
            "warmup_epochs": self.warmup_epochs,
            "init_ms": self.init_ms,
            "weight_bytes": self.weight_bytes,
            "grad_bytes": self.grad_bytes,
            "first_layer_grad_stype": self.first_grad_stype,
            "first_layer_grad_rows": self.first_grad_rows,
            "max_first_layer_grad_rows": self.max_grad_rows,
            "state_bytes": self.state_bytes,
            "peak_rss_bytes": self.peak_rss_bytes,
            "first_epoch_loss": self.first_loss,
            "loss": self.loss,
            "accuracy": self.accuracy,
        })
    }

    pub fn from_json(v: &Value) -> Result<VariantResult, String> {
        let f = |k: &str| v[k].as_f64().ok_or_else(|| format!("child JSON lacks {k}"));
        let u = |k: &str| v[k].as_u64().ok_or_else(|| format!("child JSON lacks {k}"));
        let variant = match v["variant"].as_str() {
            Some("a") => Variant::Naive,
            Some("b") => Variant::Sparse,
            Some("c") => Variant::RowSparse,
            other => return Err(format!("child JSON has variant {other:?}")),
        };
        let epoch_ms = v["epoch_ms"]["all"]
            .as_array()
            .ok_or("child JSON lacks epoch_ms.all")?
            .iter()
            .filter_map(|x| x.as_f64())
            .collect();
        let epoch_cpu_ms = v["epoch_cpu_ms"]["all"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        Ok(VariantResult {
            variant,
            epoch_ms,
            epoch_cpu_ms,
            timed_batches: u("timed_batches")? as usize,
            batches_per_epoch: u("batches_per_epoch")? as usize,
            warmup_epochs: u("warmup_epochs")? as usize,
            init_ms: f("init_ms")?,
            weight_bytes: u("weight_bytes")?,
            grad_bytes: u("grad_bytes")?,
            first_grad_stype: v["first_layer_grad_stype"]
                .as_str()
                .unwrap_or("?")
                .to_string(),
            first_grad_rows: u("first_layer_grad_rows")? as usize,
            max_grad_rows: u("max_first_layer_grad_rows")? as usize,
            state_bytes: u("state_bytes")?,
            peak_rss_bytes: u("peak_rss_bytes")?,
            first_loss: f("first_epoch_loss").unwrap_or(f64::NAN),
            loss: f("loss").unwrap_or(f64::NAN),
            accuracy: f("accuracy")?,
        })
    }
}

/// Copy bandwidth of this machine in GB/s (bytes read + bytes written per second), from
/// copying a 256 MB buffer a few times; the yardstick for the dense-gradient variants.
pub fn copy_bandwidth_gbs() -> f64 {
    let n = 64 << 20; // f32 elements = 256 MB
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    dst.copy_from_slice(&src); // fault the pages in
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    (2 * n * 4) as f64 / best / 1e9
}

/// Weight-sized memory passes per batch of the dense-gradient variants (what bounds them):
/// (b) writes the dense gradient and SGD reads weight and gradient and writes the weight (4);
/// (a) also reads the weight in the dense forward product (5).
fn dense_passes(v: Variant) -> Option<f64> {
    match v {
        Variant::Naive => Some(5.0),
        Variant::Sparse => Some(4.0),
        Variant::RowSparse => None,
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

pub fn print_table(args: &Args, data: &Data, results: &[VariantResult], copy_gbs: f64) {
    println!();
    println!(
        "sparse Gluon tutorial: {} x {} at density {:e}, batch {}, {} ({} threads)",
        args.samples,
        args.features,
        args.density,
        args.batch_size,
        args.optimizer,
        rayon::current_num_threads()
    );
    println!(
        "data: dense {:.1} MB vs csr {:.3} MB; {} non-zeros; LibSVM file {:.3} MB",
        mb(data.dense_bytes),
        mb(data.csr_bytes),
        data.nnz,
        mb(data.libsvm_bytes)
    );
    println!(
        "{:<30} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}",
        "variant",
        "epoch ms",
        "(min-max)",
        "init ms",
        "weight MB",
        "grad MB",
        "state MB",
        "peak RSS",
        "loss",
        "acc"
    );
    for r in results {
        let (med, min, max) = stats(&r.epoch_ms);
        println!(
            "{:<30} {:>12.2} {:>12} {:>10.1} {:>10.1} {:>10.3} {:>10.1} {:>10.1} {:>9.5} {:>8.3}",
            r.variant.describe(),
            med,
            format!("{min:.1}-{max:.1}"),
            r.init_ms,
            mb(r.weight_bytes),
            mb(r.grad_bytes),
            mb(r.state_bytes),
            mb(r.peak_rss_bytes),
            r.loss,
            r.accuracy
        );
    }
    println!();
    for r in results {
        match dense_passes(r.variant) {
            Some(p) => {
                let (med, _, _) = stats(&r.epoch_ms);
                let per_batch_s = med / 1e3 / r.batches_per_epoch as f64;
                let gbs = p * r.weight_bytes as f64 / per_batch_s / 1e9;
                println!(
                    "{}: timed on {} batches after {} warm-up batches, scaled to {} per epoch; ~{:.1} GB/s of weight-sized traffic ({p} passes per batch) vs {:.1} GB/s measured copy bandwidth",
                    r.variant.describe(),
                    r.timed_batches,
                    crate::train::DENSE_WARMUP,
                    r.batches_per_epoch,
                    gbs,
                    copy_gbs
                );
            }
            None => println!(
                "{}: {} timed epochs of {} batches after {} warm-up epochs (--warmup-ms); loss {:.5} (first warm-up epoch) -> {:.5}; first-layer gradient {}, at most {} rows in any batch (cleared by each step)",
                r.variant.describe(),
                r.epoch_ms.len(),
                r.batches_per_epoch,
                r.warmup_epochs,
                r.first_loss,
                r.loss,
                r.first_grad_stype,
                r.max_grad_rows
            ),
        }
    }
}

pub fn to_json(args: &Args, data: &Data, results: &[VariantResult], copy_gbs: f64) -> Value {
    json!({
        "samples": args.samples,
        "features": args.features,
        "density": args.density,
        "batch_size": args.batch_size,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "threads": rayon::current_num_threads(),
        "data": {
            "nnz": data.nnz,
            "rows": data.rows,
            "positives": data.positives,
            "dense_bytes": data.dense_bytes,
            "csr_bytes": data.csr_bytes,
            "libsvm_bytes": data.libsvm_bytes,
            "generate_ms": data.gen_ms,
            "write_ms": data.write_ms,
        },
        "copy_bandwidth_gbs": copy_gbs,
        "variants": results.iter().map(|r| (r.variant.name().to_string(), r.to_json())).collect::<serde_json::Map<_, _>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parent reads each child's result back from JSON: every field it reports, the
    /// warm-up epoch count included, survives the trip.
    #[test]
    fn a_variant_result_survives_the_json_round_trip() {
        let r = VariantResult {
            variant: Variant::RowSparse,
            epoch_ms: vec![1.5, 1.25],
            epoch_cpu_ms: vec![1.5, 1.0],
            timed_batches: 100,
            batches_per_epoch: 100,
            warmup_epochs: 61,
            init_ms: 120.5,
            weight_bytes: 512,
            grad_bytes: 48,
            first_grad_stype: "RowSparse".into(),
            first_grad_rows: 3,
            max_grad_rows: 9,
            state_bytes: 0,
            peak_rss_bytes: 4096,
            first_loss: 0.75,
            loss: 0.5,
            accuracy: 0.625,
        };
        let back = VariantResult::from_json(&r.to_json()).unwrap();
        assert_eq!(back.to_json(), r.to_json());
        assert_eq!(back.warmup_epochs, 61);
        let mut v = r.to_json();
        v.as_object_mut().unwrap().remove("warmup_epochs");
        let e = VariantResult::from_json(&v).err().unwrap();
        assert!(e.contains("warmup_epochs"), "{e}");
    }
}
