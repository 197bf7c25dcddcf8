//! Convolution and pooling against PyTorch: forward outputs and every gradient, float32, for
//! the fixtures `scripts/conv_fixtures.py` writes into `tests/fixtures/conv` (one file per case:
//! the op, its parameters, inputs, output, head gradient and gradients).

use std::collections::HashMap;
use std::path::PathBuf;

use sparrow_core::ops::{ConvParams, PoolParams, PoolType};
use sparrow_core::testing::for_each_test_device;
use sparrow_core::{autograd, DType, NDArray};

/// One fixture file: the op, integer parameters and named f32 tensors.
struct Fixture {
    op: String,
    params: HashMap<String, Vec<usize>>,
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

fn load(path: &PathBuf) -> Fixture {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut lines = text.lines();
    let mut f = Fixture {
        op: String::new(),
        params: HashMap::new(),
        tensors: HashMap::new(),
    };
    let nums = |s: &str| -> Vec<usize> {
        s.split(',')
            .filter(|t| !t.is_empty())
            .map(|t| t.parse().unwrap())
            .collect()
    };
    while let Some(line) = lines.next() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[0] {
            "op" => f.op = parts[1].to_string(),
            "param" => {
                f.params.insert(parts[1].to_string(), nums(parts[2]));
            }
            "tensor" => {
                let shape = nums(parts[2]);
                let values: Vec<f32> = lines
                    .next()
                    .unwrap()
                    .split(' ')
                    .filter(|t| !t.is_empty())
                    .map(|t| t.parse().unwrap())
                    .collect();
                assert_eq!(
                    values.len(),
                    shape.iter().product::<usize>(),
                    "{path:?} {line}"
                );
                f.tensors.insert(parts[1].to_string(), (shape, values));
            }
            other => panic!("{path:?}: unknown line kind {other}"),
        }
    }
    f
}

impl Fixture {
    fn array(&self, name: &str) -> Option<NDArray> {
        self.tensors
            .get(name)
            .map(|(s, v)| NDArray::from_vec(v.clone(), s).unwrap())
    }
    fn param(&self, name: &str) -> Vec<usize> {
        self.params.get(name).cloned().unwrap_or_default()
    }
    fn flag(&self, name: &str) -> bool {
        self.param(name).first() == Some(&1)
    }
    fn conv_params(&self) -> ConvParams {
        let mut p = ConvParams::new()
            .stride(&self.param("stride"))
            .padding(&self.param("padding"))
            .dilation(&self.param("dilation"))
            .output_padding(&self.param("output_padding"));
        if let Some(&g) = self.param("groups").first() {
            p = p.groups(g);
        }
        p
    }
    fn pool_params(&self) -> PoolParams {
        let kind = if self.param("kind") == [0] {
            PoolType::Max
        } else {
            PoolType::Avg
        };
        let p = if self.flag("global") {
            PoolParams::global(kind)
        } else {
            PoolParams::new(kind, &self.param("kernel"))
                .stride(&self.param("stride"))
                .padding(&self.param("padding"))
                .ceil_mode(self.flag("ceil_mode"))
        };
        p.count_include_pad(self.flag("count_include_pad"))
    }
}

/// The largest `|a - b| / (1 + |b|)` (an absolute error for small values, relative for large).
fn max_err(name: &str, got: &NDArray, want: &NDArray) -> f64 {
    assert_eq!(got.shape(), want.shape(), "{name}: shapes differ");
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
        .fold(0.0, f64::max)
}

#[test]
fn conv_and_pool_match_pytorch_forward_and_backward() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conv");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "fixtures missing in {dir:?}");
    for_each_test_device(|_| {
        for path in &files {
            let f = load(path);
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            let x = f.array("x").unwrap();
            let w = f.array("w");
            let b = f.array("b");
            let mut inputs = vec![("dx", x.clone())];
            inputs.extend(w.clone().map(|w| ("dw", w)));
            inputs.extend(b.clone().map(|b| ("db", b)));
            for (_, a) in &inputs {
                a.attach_grad();
            }
            let y = autograd::record(|| match f.op.as_str() {
                "conv" => x.convolution(w.as_ref().unwrap(), b.as_ref(), &f.conv_params()),
                "conv_transpose" => {
                    x.conv_transpose(w.as_ref().unwrap(), b.as_ref(), &f.conv_params())
                }
                "pool" => x.pool(&f.pool_params()),
                other => panic!("unknown op {other}"),
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(y.dtype(), DType::F32);
            let err = max_err(&format!("{name} y"), &y, &f.array("y").unwrap());
            assert!(err < 1e-5, "{name}: output differs by {err}");
            y.backward_with_grad(&f.array("dy").unwrap()).unwrap();
            for (gname, a) in &inputs {
                let err = max_err(
                    &format!("{name} {gname}"),
                    &a.grad().unwrap(),
                    &f.array(gname).unwrap(),
                );
                assert!(err < 1e-5, "{name}: {gname} differs by {err}");
            }
        }
        Ok::<(), sparrow_core::Error>(())
    })
    .unwrap();
}
