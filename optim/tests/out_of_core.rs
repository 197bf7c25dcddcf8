//! Parameters stored in files: a table created in a `.npy` file (with its optimizer states in
//! files beside it) trains exactly as the same table in memory, writes only the rows a batch
//! touched, and its checkpoint is a flush of the files in place.

use std::path::PathBuf;

use sparrow_core::{autograd, DType, MapMode, NDArray};
use sparrow_nn::{init, Block, Embedding, Initializer};
use sparrow_optim::*;

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("sparrow-ooc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// A batch of ids drawn from the first `hot` rows (deterministic).
fn batch(step: u64, n: usize, hot: u64) -> NDArray {
    let ids: Vec<f32> = (0..n as u64)
        .map(|i| ((step * 7919 + i * 104729) % hot) as f32)
        .collect();
    NDArray::from_vec(ids, &[n]).unwrap()
}

/// Train an embedding table with lazy Adam for `steps` steps on the loss `sum(e^2 * c)`;
/// `file` puts the table in that file.
fn train(file: Option<&std::path::Path>, rows: usize, steps: u64) -> Embedding {
    let emb = Embedding::with_options(rows, 8, true, DType::F32);
    init::seed(42);
    let uniform = Initializer::Uniform { scale: 0.5 };
    match file {
        Some(p) => emb.weight().initialize_in_file(&uniform, p).unwrap(),
        None => emb.weight().initialize(&uniform, None).unwrap(),
    }
    let mut t = Trainer::new(vec![emb.weight().clone()], Adam::new(0.05)).unwrap();
    let c = NDArray::from_vec((0..8).map(|k| k as f32 - 3.5).collect::<Vec<_>>(), &[1, 8]).unwrap();
    for s in 0..steps {
        let x = batch(s, 16, 300);
        let loss = autograd::record(|| {
            let e = emb.forward(&x)?;
            e.mul(&e)?.mul(&c)?.sum(None, false)
        })
        .unwrap();
        loss.backward().unwrap();
        t.step(16).unwrap();
    }
    emb
}

#[test]
fn a_file_backed_table_trains_bit_for_bit_as_in_memory() {
    let d = dir("bits");
    let p = d.0.join("table.npy");
    let rows = 5000;
    let mem = train(None, rows, 25);
    let filed = train(Some(&p), rows, 25);
    let w = filed.weight().data().unwrap();
    assert_eq!(w.backing_file(), Some((p.clone(), MapMode::ReadWrite)));
    let (a, b) = (
        mem.weight().data().unwrap().to_vec::<f32>().unwrap(),
        w.to_vec::<f32>().unwrap(),
    );
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    // Untouched rows (ids stay below 300) keep their initial values; trained ones moved.
    init::seed(42);
    let fresh = Embedding::with_options(rows, 8, true, DType::F32);
    fresh
        .weight()
        .initialize(&Initializer::Uniform { scale: 0.5 }, None)
        .unwrap();
    let f = fresh.weight().data().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&f[300 * 8..], &b[300 * 8..]);
    assert_ne!(&f[..300 * 8], &b[..300 * 8]);

    // The Adam states live in files beside the table, and a checkpoint is a flush in place:
    // reopening the files shows the trained values.
    for s in ["mean", "var"] {
        let sp = d.0.join(format!("table.npy.{s}.npy"));
        assert!(sp.exists(), "{}", sp.display());
    }
    w.flush().unwrap();
    let back = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), b);
}

#[test]
fn generated_files_equal_generated_arrays_and_refuse_what_cannot_be_streamed() {
    let d = dir("gen");
    // Larger than one generation block, not a multiple of it.
    let shape = [init::FILE_BLOCK / 64 + 3, 64 + 1];
    let desc = init::InitDesc::new("w", &shape, false);
    for (k, ini) in [
        Initializer::Uniform { scale: 0.1 },
        Initializer::Normal { sigma: 2.0 },
        Initializer::xavier(),
        Initializer::Constant(0.25),
    ]
    .into_iter()
    .enumerate()
    {
        for dtype in [DType::F32, DType::F64] {
            let p = d.0.join(format!("g{k}{dtype:?}.npy"));
            let a = ini.generate(&desc, dtype, 9).unwrap();
            let f = ini.generate_file(&desc, dtype, 9, &p).unwrap();
            assert_eq!(a.to_f64_vec(), f.to_f64_vec(), "{ini:?} {dtype:?}");
        }
    }
    let orth = Initializer::Orthogonal {
        scale: 1.0,
        rnd_type: init::RndType::Uniform,
    };
    let p = d.0.join("orth.npy");
    assert!(orth.generate_file(&desc, DType::F32, 1, &p).is_err());
    assert!(!p.exists());
    assert!(Initializer::Zero
        .generate_file(&desc, DType::I64, 1, &p)
        .is_err());
}

/// The memory a file-backed table costs is the pages its batches touch: after training on the
/// first 300 rows of a 51 MB table, the table's mappings (weight and both Adam states) hold
/// well under a megabyte each. A change that reads or copies the whole table (a dense
/// gradient, a state made in memory, a full-table initialization through the mapping) makes
/// this fail.
#[test]
fn training_a_file_backed_table_touches_only_the_batch_rows() {
    touches_only_the_batch_rows("rss", 1, 4 << 20);
}

/// The same with the 300 hot rows spread over the whole table (661 rows, 165 KB, apart): each
/// touched row is on a page of its own, so a kernel that maps the pages around each fault
/// (fault-around of the page cache the generated file left behind) or reads ahead would
/// make the table resident where the contiguous rows above would not show it. Measured on
/// Linux 6: ~15 KB resident per touched row with `MADV_RANDOM` (the page cache still reads a
/// folio of a few pages), ~65 KB without it (read-ahead and fault-around: 19 MB here), 51 MB
/// for a change that reads the whole table; the budget sits between.
#[test]
fn training_a_file_backed_table_with_hot_rows_spread_over_the_file_stays_small() {
    touches_only_the_batch_rows("rss_spread", 661, 8 << 20);
}

/// Train 20 lazy-Adam steps on batches of ids from 300 hot rows `stride` rows apart in a
/// 200,000 x 64 f32 table in a file, then check that the table and each of its states have
/// less than `budget` bytes resident.
fn touches_only_the_batch_rows(name: &str, stride: u64, budget: u64) {
    let d = dir(name);
    let p = d.0.join("big.npy");
    let rows = 200_000; // x 64 f32 columns: 51 MB
    let emb = Embedding::with_options(rows, 64, true, DType::F32);
    emb.weight()
        .initialize_in_file(&Initializer::Uniform { scale: 0.1 }, &p)
        .unwrap();
    let mut t = Trainer::new(vec![emb.weight().clone()], Adam::new(0.01)).unwrap();
    for s in 0..20 {
        let x = batch(s, 32, 300).mul_scalar(stride as f64).unwrap();
        let loss = autograd::record(|| emb.forward(&x)?.sum(None, false)).unwrap();
        loss.backward().unwrap();
        t.step(32).unwrap();
    }
    let Some(weight_rss) = sparrow_core::sys::mapped_rss_bytes(&p) else {
        println!("SKIPPED: no /proc/self/smaps on this system");
        return;
    };
    let table = (rows * 64 * 4) as u64;
    // 300 rows of 256 bytes: 19 pages of 4 KiB together, 300 pages (1.2 MB) spread out.
    assert!(
        weight_rss < budget,
        "weight: {weight_rss} of {table} bytes resident"
    );
    for s in ["mean", "var"] {
        let sp = d.0.join(format!("big.npy.{s}.npy"));
        let r = sparrow_core::sys::mapped_rss_bytes(&sp).unwrap();
        assert!(r < budget, "{s}: {r} of {table} bytes resident");
    }
    assert!(weight_rss > 0, "the trained rows are resident");
}
