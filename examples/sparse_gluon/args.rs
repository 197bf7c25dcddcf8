//! Command-line flags of the sparse_gluon example.

use std::path::{Path, PathBuf};

use sparrow::core::Device;

pub const USAGE: &str =
    "usage: sparse_gluon [--json] [--variants a,b,c] [--epochs N] [--dense-batches N]
    [--samples N] [--features N] [--density F] [--batch-size N] [--lr F]
    [--optimizer sgd|adam|adagrad|ftrl] [--threads N] [--seed N] [--data-dir DIR]
    [--loader-priority idle|normal] [--warmup-ms MS] [--device cpu|cuda|cuda:N]
    [--device-budget-mb MB]";

/// `cpu`, `cuda` (device 0) or `cuda:N`.
fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("--device: '{s}' is not cpu, cuda or cuda:N")),
    }
}

/// The flag value naming `d` (what [`parse_device`] reads).
pub fn device_name(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(n) => format!("cuda:{n}"),
    }
}

/// The three ways to train the first layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// (a) Dense layer on the densified batch, dense weight gradient.
    Naive,
    /// (b) Sparse product, dense weight gradient.
    Sparse,
    /// (c) Sparse product, row_sparse weight gradient.
    RowSparse,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Naive => "a",
            Variant::Sparse => "b",
            Variant::RowSparse => "c",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Naive => "(a) dense batch, dense grad",
            Variant::Sparse => "(b) csr dot, dense grad",
            Variant::RowSparse => "(c) csr dot, row_sparse grad",
        }
    }
    fn parse(s: &str) -> Result<Variant, String> {
        match s {
            "a" | "naive" => Ok(Variant::Naive),
            "b" | "sparse" => Ok(Variant::Sparse),
            "c" | "rsp" | "row_sparse" => Ok(Variant::RowSparse),
            other => Err(format!("unknown variant '{other}' (use a, b, c)")),
        }
    }
}

/// Parsed flags.
#[derive(Debug, Clone)]
pub struct Args {
    pub json: bool,
    pub variants: Vec<Variant>,
    pub epochs: usize,
    pub dense_batches: usize,
    pub samples: usize,
    pub features: usize,
    pub density: f64,
    pub batch_size: usize,
    pub lr: f64,
    pub optimizer: String,
    pub threads: Option<usize>,
    pub seed: u64,
    pub data_dir: Option<PathBuf>,
    /// (c)'s loader producer at idle scheduling priority (`--loader-priority idle`, the
    /// default) or at normal priority (`normal`, for comparison).
    pub idle_loader: bool,
    /// (c)'s warm-up: whole epochs until this many milliseconds of training have passed, at
    /// least one (`--warmup-ms`, default 100; 0 = one epoch).
    pub warmup_ms: f64,
    /// Where the model trains (`--device`, default the CPU; `cuda` needs the `cuda` feature):
    /// parameters, gradients and optimizer states live there, and each batch is copied there.
    pub device: Device,
    /// `--device-budget-mb`: the device's memory budget for one parameter; a weight over it
    /// (the first layer's, with (c)'s row_sparse gradient) stays in host memory and each step
    /// moves only the batch's rows to the device.
    pub device_budget_mb: Option<f64>,
    /// Internal: run one variant on an existing LibSVM file and print JSON.
    pub child: Option<Variant>,
    pub data_file: Option<PathBuf>,
}

impl Args {
    pub fn parse(it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            json: false,
            variants: vec![Variant::RowSparse, Variant::Sparse, Variant::Naive],
            epochs: 7,
            dense_batches: 5,
            samples: 1000,
            features: 1_000_000,
            density: 1e-5,
            batch_size: 10,
            lr: 0.1,
            optimizer: "sgd".into(),
            threads: None,
            seed: 42,
            data_dir: None,
            idle_loader: true,
            warmup_ms: 100.0,
            device: Device::Cpu,
            device_budget_mb: None,
            child: None,
            data_file: None,
        };
        let mut it = it.peekable();
        while let Some(flag) = it.next() {
            let mut val = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
            fn num<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String> {
                v.parse()
                    .map_err(|_| format!("{flag}: '{v}' is not a valid number"))
            }
            match flag.as_str() {
                "--json" => a.json = true,
                "--variants" => {
                    a.variants = val("--variants")?
                        .split(',')
                        .map(Variant::parse)
                        .collect::<Result<_, _>>()?
                }
                "--epochs" => a.epochs = num(&flag, val(&flag)?)?,
                "--dense-batches" => a.dense_batches = num(&flag, val(&flag)?)?,
                "--samples" => a.samples = num(&flag, val(&flag)?)?,
                "--features" => a.features = num(&flag, val(&flag)?)?,
                "--density" => a.density = num(&flag, val(&flag)?)?,
                "--batch-size" => a.batch_size = num(&flag, val(&flag)?)?,
                "--lr" => a.lr = num(&flag, val(&flag)?)?,
                "--optimizer" => a.optimizer = val(&flag)?,
                "--threads" => a.threads = Some(num(&flag, val(&flag)?)?),
                "--seed" => a.seed = num(&flag, val(&flag)?)?,
                "--data-dir" => a.data_dir = Some(PathBuf::from(val(&flag)?)),
                "--loader-priority" => {
                    a.idle_loader = match val(&flag)?.as_str() {
                        "idle" => true,
                        "normal" => false,
                        other => {
                            return Err(format!(
                                "--loader-priority: '{other}' is not idle or normal"
                            ))
                        }
                    }
                }
                "--warmup-ms" => a.warmup_ms = num(&flag, val(&flag)?)?,
                "--device" => a.device = parse_device(&val(&flag)?)?,
                "--device-budget-mb" => a.device_budget_mb = Some(num(&flag, val(&flag)?)?),
                "--child" => a.child = Some(Variant::parse(&val(&flag)?)?),
                "--data-file" => a.data_file = Some(PathBuf::from(val(&flag)?)),
                "-h" | "--help" => return Err("help".into()),
                other => return Err(format!("unknown flag '{other}'")),
            }
        }
        if a.epochs == 0
            || a.dense_batches == 0
            || a.batch_size == 0
            || a.samples == 0
            || a.features == 0
        {
            return Err("--epochs, --dense-batches, --batch-size, --samples and --features must be positive".into());
        }
        if !(a.warmup_ms >= 0.0 && a.warmup_ms.is_finite()) {
            return Err(format!(
                "--warmup-ms {} must be a finite number >= 0",
                a.warmup_ms
            ));
        }
        if let Some(mb) = a
            .device_budget_mb
            .filter(|mb| !(*mb >= 0.0 && mb.is_finite()))
        {
            return Err(format!(
                "--device-budget-mb {mb} must be a finite number >= 0"
            ));
        }
        if !(a.density > 0.0 && a.density <= 1.0) {
            return Err(format!("--density {} must be in (0, 1]", a.density));
        }
        if !["sgd", "adam", "adagrad", "ftrl"].contains(&a.optimizer.as_str()) {
            return Err(format!(
                "--optimizer {} is not one of sgd, adam, adagrad, ftrl",
                a.optimizer
            ));
        }
        Ok(a)
    }

    /// Flags for a child process that runs variant `v` on the LibSVM file at `path`.
    pub fn child_args(&self, v: Variant, path: &Path) -> Vec<String> {
        let mut out = vec![
            "--child".to_string(),
            v.name().to_string(),
            "--data-file".into(),
            path.display().to_string(),
        ];
        for (k, val) in [
            ("--epochs", self.epochs.to_string()),
            ("--dense-batches", self.dense_batches.to_string()),
            ("--samples", self.samples.to_string()),
            ("--features", self.features.to_string()),
            ("--density", self.density.to_string()),
            ("--batch-size", self.batch_size.to_string()),
            ("--lr", self.lr.to_string()),
            ("--optimizer", self.optimizer.clone()),
            ("--seed", self.seed.to_string()),
            ("--warmup-ms", self.warmup_ms.to_string()),
            ("--device", device_name(self.device)),
        ] {
            out.push(k.into());
            out.push(val);
        }
        if let Some(t) = self.threads {
            out.push("--threads".into());
            out.push(t.to_string());
        }
        if let Some(mb) = self.device_budget_mb {
            out.push("--device-budget-mb".into());
            out.push(mb.to_string());
        }
        if !self.idle_loader {
            out.push("--loader-priority".into());
            out.push("normal".into());
        }
        if self.json {
            out.push("--json".into());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str]) -> Result<Args, String> {
        Args::parse(flags.iter().map(|s| s.to_string()))
    }

    /// The flags a parent with `a` hands to variant (c)'s child, parsed as the child would.
    fn child_of(a: &Args) -> Args {
        let flags = a.child_args(Variant::RowSparse, Path::new("/tmp/x.libsvm"));
        Args::parse(flags.into_iter()).unwrap()
    }

    #[test]
    fn warmup_ms_defaults_to_100_reaches_the_child_and_rejects_bad_values() {
        assert_eq!(parse(&[]).unwrap().warmup_ms, 100.0);
        let a = parse(&["--warmup-ms", "0"]).unwrap();
        assert_eq!(
            child_of(&a).warmup_ms,
            0.0,
            "the child runs with the parent's setting"
        );
        for bad in ["-1", "inf", "NaN", "x"] {
            let e = parse(&["--warmup-ms", bad]).unwrap_err();
            assert!(e.contains("--warmup-ms"), "{bad}: {e}");
        }
    }

    #[test]
    fn loader_priority_defaults_to_idle_and_reaches_the_child() {
        let path = Path::new("/tmp/x.libsvm");
        let a = parse(&[]).unwrap();
        assert!(a.idle_loader);
        assert!(!a
            .child_args(Variant::RowSparse, path)
            .contains(&"--loader-priority".into()));
        let a = parse(&["--loader-priority", "normal"]).unwrap();
        assert!(!a.idle_loader);
        assert!(
            !child_of(&a).idle_loader,
            "the child runs with the parent's setting"
        );
        assert!(parse(&["--loader-priority", "idle"]).unwrap().idle_loader);
        let e = parse(&["--loader-priority", "high"]).unwrap_err();
        assert!(e.contains("'high' is not idle or normal"), "{e}");
        assert!(parse(&["--loader-priority"]).is_err());
    }
}
