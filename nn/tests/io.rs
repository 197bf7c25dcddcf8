//! Parameter files: round trip, row_sparse pairs, atomicity, every failure leaves the model
//! unchanged, and the file the Python check script reads.

use sparrow_core::{autograd, device_test, DType, Device, NDArray, SType};
use sparrow_nn::{
    Block, BlockIo, Dense, Embedding, Initializer, LoadOptions, SaveOptions, Sequential,
    SparseEmbedding,
};

fn model() -> Sequential {
    let mut net = Sequential::new();
    net.add(Dense::new(6).in_units(4).activation("relu"));
    net.add(Dense::new(3).in_units(6).grad_stype(SType::RowSparse));
    net
}

fn values(net: &dyn Block) -> Vec<(String, Vec<f32>)> {
    net.collect_params()
        .unwrap()
        .iter()
        .map(|(n, p)| (n.to_string(), p.data().unwrap().to_vec::<f32>().unwrap()))
        .collect()
}

fn tmp(name: &str) -> std::path::PathBuf {
    // One folder per file: tests run in parallel and the round trip checks its folder is clean.
    let d = std::env::temp_dir().join(format!("sparrow-nn-io-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

device_test! {
fn round_trip_gives_identical_outputs() {
    let a = model();
    a.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let path = tmp("roundtrip.safetensors");
    a.save_parameters(&path).unwrap();
    let b = model();
    b.initialize(&Initializer::Zero, Device::current()).unwrap();
    b.load_parameters(&path).unwrap();
    let x = NDArray::from_vec((0..8).map(|i| i as f32 * 0.3 - 1.0).collect(), &[2, 4]).unwrap();
    let (ya, yb) = (a.forward(&x).unwrap(), b.forward(&x).unwrap());
    assert_eq!(ya.to_vec::<f32>().unwrap(), yb.to_vec::<f32>().unwrap());
    // A model that was never initialized takes the values (and shapes) from the file.
    let c = model();
    c.load_parameters(&path).unwrap();
    assert_eq!(values(&a), values(&c));
    // No temporary file is left behind.
    let leftovers = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp.")
        })
        .count();
    assert_eq!(leftovers, 0);
}
}

device_test! {
fn row_sparse_weights_as_pairs_round_trip_to_same_stype() {
    let e = SparseEmbedding::new(50, 4);
    e.initialize(&Initializer::Zero, Device::current()).unwrap();
    let w = e.weight().data().unwrap();
    // Rows 3, 17 and 49 set on the host, then copied to the weight's device.
    let mut host = vec![0f32; 50 * 4];
    for r in [3usize, 17, 49] {
        for j in 0..4 {
            host[r * 4 + j] = (r * 10 + j) as f32;
        }
    }
    let value = sparrow_core::NDArray::from_vec(host, &[50, 4])
        .unwrap()
        .to_device(w.device())
        .unwrap();
    w.assign(&value);
    let path = tmp("pairs.safetensors");
    e.save_parameters_with(
        &path,
        SaveOptions {
            row_sparse_as_pairs: true,
        },
    )
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    assert_eq!(names, vec!["weight@data", "weight@indices"]);
    assert_eq!(st.tensor("weight@data").unwrap().shape(), &[3, 4]);
    let f = SparseEmbedding::new(50, 4);
    f.initialize(&Initializer::One, Device::current()).unwrap();
    f.load_parameters(&path).unwrap();
    assert_eq!(f.weight().stype(), SType::RowSparse);
    assert_eq!(
        f.weight().data().unwrap().to_vec::<f32>().unwrap(),
        w.to_vec::<f32>().unwrap()
    );
}
}

device_test! {
fn failures_are_clear_and_leave_the_model_unchanged() {
    let a = model();
    a.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let path = tmp("good.safetensors");
    a.save_parameters(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();

    let b = model();
    b.initialize(&Initializer::Constant(7.0), Device::current())
        .unwrap();
    let before = values(&b);

    // Truncated.
    let trunc = tmp("trunc.safetensors");
    std::fs::write(&trunc, &bytes[..bytes.len() - 10]).unwrap();
    let e = b.load_parameters(&trunc).unwrap_err().to_string();
    assert!(e.contains("truncated or corrupted"), "{e}");
    assert_eq!(values(&b), before);

    // Corrupted header and corrupted data (caught by the checksums).
    let mut bad = bytes.clone();
    bad[9] ^= 0x5A;
    let p = tmp("badheader.safetensors");
    std::fs::write(&p, &bad).unwrap();
    assert!(b.load_parameters(&p).is_err());
    let mut bad = bytes.clone();
    let n = bad.len();
    bad[n - 3] ^= 0x01;
    let p = tmp("baddata.safetensors");
    std::fs::write(&p, &bad).unwrap();
    let e = b.load_parameters(&p).unwrap_err().to_string();
    assert!(e.contains("checksum mismatch"), "{e}");
    assert_eq!(values(&b), before);

    // Shape mismatch: every problem is listed, nothing assigned.
    let mut other = Sequential::new();
    other.add(Dense::new(5).in_units(4));
    other.add(Dense::new(3).in_units(5).grad_stype(SType::RowSparse));
    other.initialize(&Initializer::One, Device::current()).unwrap();
    let p = tmp("othershape.safetensors");
    other.save_parameters(&p).unwrap();
    let e = b.load_parameters(&p).unwrap_err().to_string();
    assert!(
        e.contains("dense0.weight") && e.contains("dense0.bias") && e.contains("dense1.weight"),
        "{e}"
    );
    assert!(e.contains("3 problem(s)"), "{e}");
    assert_eq!(values(&b), before);

    // dtype mismatch.
    let mut f64net = Sequential::new();
    f64net.add(Dense::new(6).in_units(4).dtype(DType::F64));
    f64net.initialize(&Initializer::One, Device::current()).unwrap();
    let p = tmp("f64.safetensors");
    f64net.save_parameters(&p).unwrap();
    let e = b
        .load_parameters_with(
            &p,
            LoadOptions {
                allow_missing: true,
                ignore_extra: false,
            },
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("dtype float32 in the model, float64 in the file"),
        "{e}"
    );

    // Missing / extra names, and the options that allow them.
    let mut small = Sequential::new();
    small.add(Dense::new(6).in_units(4).activation("relu"));
    small.initialize(&Initializer::One, Device::current()).unwrap();
    let e = small.load_parameters(&path).unwrap_err().to_string();
    assert!(
        e.contains("'dense1.weight' in the file matches no parameter"),
        "{e}"
    );
    small
        .load_parameters_with(
            &path,
            LoadOptions {
                allow_missing: false,
                ignore_extra: true,
            },
        )
        .unwrap();
    let e = b
        .load_parameters(tmp("f64.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
    assert!(b
        .load_parameters(tmp("does-not-exist.safetensors"))
        .is_err());
    assert_eq!(values(&b), before);
}
}

device_test! {
/// Writes the file `scripts/check_safetensors.py` reads (path in SPARROW_SAFETENSORS_OUT, or
/// target/sparrow_nn_check.safetensors), with a dense MLP, a row_sparse Dense and an embedding.
fn writes_file_for_python_check() {
    let mut net = Sequential::new();
    net.add(Embedding::new(100, 8));
    net.add(Dense::new(16).activation("relu"));
    net.add(Dense::new(2).in_units(16).grad_stype(SType::RowSparse));
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let x = NDArray::from_vec(vec![1.0f32, 5.0, 7.0, 99.0], &[2, 2]).unwrap();
    autograd::pause(|| net.forward(&x)).unwrap();
    let out = std::env::var("SPARROW_SAFETENSORS_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sparrow_nn_check.safetensors")
        });
    net.save_parameters(&out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("embedding0.weight").unwrap().shape(), &[100, 8]);
    assert_eq!(st.tensor("dense0.weight").unwrap().shape(), &[16, 16]);
    assert_eq!(st.tensor("dense1.weight").unwrap().shape(), &[16, 2]);
}
}
