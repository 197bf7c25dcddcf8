//! Parameter files under attack and under concurrency (issue #27): crafted metadata, flipped
//! bytes, layouts, many threads saving one path.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use safetensors::tensor::{Dtype, TensorView};
use sparrow_core::fsio::{checksum64, checksum_hex, checksum_pairs};
use sparrow_core::{Device, NDArray, SType};
use sparrow_nn::{Block, BlockIo, Dense, Initializer, SaveOptions, Sequential, SparseEmbedding};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sparrow-nn-iorel-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn values(net: &dyn Block) -> Vec<(String, Vec<f32>)> {
    net.collect_params()
        .unwrap()
        .iter()
        .map(|(n, p)| (n.to_string(), p.data().unwrap().to_vec::<f32>().unwrap()))
        .collect()
}

/// A row_sparse pair file for a `SparseEmbedding(50, 4)` weight (rows 3 and 17 stored) whose
/// tensors carry correct checksums and whose `rows:weight` says `rows`; `v2` adds the version
/// and a correct metadata checksum, as an attacker who knows the format would.
fn crafted_pairs(rows: &str, v2: bool) -> Vec<u8> {
    let idx: Vec<u8> = [3i64, 17].iter().flat_map(|x| x.to_le_bytes()).collect();
    let data: Vec<u8> = (0..8).flat_map(|x| (x as f32).to_le_bytes()).collect();
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "sparrow".to_string());
    meta.insert("stype:weight".to_string(), "row_sparse".to_string());
    meta.insert("rows:weight".to_string(), rows.to_string());
    meta.insert(
        "checksum:weight@indices".to_string(),
        checksum_hex(checksum64(&idx)),
    );
    meta.insert(
        "checksum:weight@data".to_string(),
        checksum_hex(checksum64(&data)),
    );
    if v2 {
        meta.insert("format_version".to_string(), "2".to_string());
        let mc = checksum_hex(checksum_pairs(&meta, "meta_checksum"));
        meta.insert("meta_checksum".to_string(), mc);
    }
    let views = vec![
        (
            "weight@indices",
            TensorView::new(Dtype::I64, vec![2], &idx).unwrap(),
        ),
        (
            "weight@data",
            TensorView::new(Dtype::F32, vec![2, 4], &data).unwrap(),
        ),
    ];
    safetensors::serialize(views, Some(meta)).unwrap()
}

/// `rows:<name>` was outside the checksum and trusted: 2e11 rows made a 3.2 TB allocation that
/// aborted the process, 2^62 rows a size product that wrapped and a slice that panicked.
/// Every such count is now an error naming the file, in files of either version.
#[test]
fn crafted_row_counts_are_errors_not_aborts() {
    let e = SparseEmbedding::new(50, 4);
    e.initialize(&Initializer::One, Device::Cpu).unwrap();
    let before = e.weight().data().unwrap().to_vec::<f32>().unwrap();
    for rows in [
        "200000000000",
        "4611686018427387904",
        "18446744073709551615",
        "-1",
        "x",
    ] {
        for v2 in [false, true] {
            let path = tmp(&format!("rows-{rows}-{v2}.safetensors"));
            std::fs::write(&path, crafted_pairs(rows, v2)).unwrap();
            let r = catch_unwind(AssertUnwindSafe(|| e.load_parameters(&path)));
            let msg = r
                .unwrap_or_else(|_| panic!("rows {rows}: load panicked"))
                .expect_err("a crafted row count must not load")
                .to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains("rows"), "{msg}");
        }
    }
    // The count the model has loads.
    let path = tmp("rows-ok.safetensors");
    std::fs::write(&path, crafted_pairs("50", true)).unwrap();
    e.load_parameters(&path).unwrap();
    let w = e.weight().data().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&w[12..16], &[0., 1., 2., 3.]);
    assert_ne!(w, before);
}

/// The metadata is covered by the checksum: a changed row count (still a number the model
/// might accept) is refused in a version 2 file.
#[test]
fn metadata_checksum_covers_row_counts_and_layouts() {
    let e = SparseEmbedding::new(50, 4);
    e.initialize(&Initializer::One, Device::Cpu).unwrap();
    let path = tmp("meta.safetensors");
    e.save_parameters_with(
        &path,
        SaveOptions {
            row_sparse_as_pairs: true,
        },
    )
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8_lossy(&bytes).to_string();
    assert!(text.contains("\"rows:weight\":\"50\""), "{text}");
    let at = text.find("\"rows:weight\":\"50\"").unwrap() + "\"rows:weight\":\"".len();
    let mut bad = bytes.clone();
    bad[at] = b'6'; // 60 rows
    let p = tmp("meta-bad.safetensors");
    std::fs::write(&p, &bad).unwrap();
    let msg = e.load_parameters(&p).unwrap_err().to_string();
    assert!(msg.contains("metadata checksum mismatch"), "{msg}");
}

/// One flipped bit anywhere in a parameter file (dense, row_sparse pairs, an in_out weight)
/// either is refused or loads exactly what was saved; it never panics and never loads
/// something else.
#[test]
fn every_single_bit_flip_is_refused_or_harmless() {
    let mut net = Sequential::new();
    net.add(Dense::new(3).in_units(2));
    net.add(Dense::new(2).in_units(3).grad_stype(SType::RowSparse));
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let emb = SparseEmbedding::new(6, 2);
    emb.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    emb.weight()
        .data()
        .unwrap()
        .with_slice_mut::<f32, _>(|s| s[4..6].copy_from_slice(&[1.5, -2.0]))
        .unwrap();
    let cases: Vec<(&dyn Block, SaveOptions)> = vec![
        (&net, SaveOptions::default()),
        (
            &emb,
            SaveOptions {
                row_sparse_as_pairs: true,
            },
        ),
    ];
    for (k, (block, opts)) in cases.into_iter().enumerate() {
        let path = tmp(&format!("flip-src-{k}.safetensors"));
        block.save_parameters_with(&path, opts).unwrap();
        let saved = values(block);
        let bytes = std::fs::read(&path).unwrap();
        let flipped = tmp(&format!("flip-{k}.safetensors"));
        for pos in 0..bytes.len() {
            for bit in [0x01u8, 0x10, 0x80] {
                let mut b = bytes.clone();
                b[pos] ^= bit;
                std::fs::write(&flipped, &b).unwrap();
                let r = catch_unwind(AssertUnwindSafe(|| block.load_parameters(&flipped)));
                match r {
                    Err(_) => panic!("byte {pos} ^ {bit:#x}: load panicked"),
                    Ok(Err(_)) => {}
                    Ok(Ok(())) => assert_eq!(
                        values(block),
                        saved,
                        "byte {pos} ^ {bit:#x} loaded different values"
                    ),
                }
                // Restore the saved values for the next flip.
                block.load_parameters(&path).unwrap();
            }
        }
    }
}

/// A weight saved from a row_sparse-gradient Dense (held `(in, out)`, `layout = in_out`)
/// loaded into a plain Dense (held `(out, in)`): it loaded transposed (square weights) or
/// failed on the shape. It is now transposed on load, so both layers compute the same
/// outputs, and the reverse direction too.
#[test]
fn layout_is_honoured_on_load() {
    for (units, ins) in [(4, 4), (3, 5)] {
        let sparse_grad = Dense::new(units).in_units(ins).grad_stype(SType::RowSparse);
        sparse_grad
            .initialize(&Initializer::xavier(), Device::Cpu)
            .unwrap();
        let plain = Dense::new(units).in_units(ins);
        plain.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        let path = tmp(&format!("layout-{units}x{ins}.safetensors"));
        sparse_grad.save_parameters(&path).unwrap();
        plain.load_parameters(&path).unwrap();
        let x = NDArray::from_vec(
            (0..2 * ins).map(|i| i as f32 * 0.25 - 1.0).collect(),
            &[2, ins],
        )
        .unwrap();
        let (a, b) = (sparse_grad.forward(&x).unwrap(), plain.forward(&x).unwrap());
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5, "{a:?} vs {b:?}");
        }
        // And back: the plain layer's file into a fresh row_sparse-gradient layer.
        let back = Dense::new(units).in_units(ins).grad_stype(SType::RowSparse);
        back.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        let path2 = tmp(&format!("layout-back-{units}x{ins}.safetensors"));
        plain.save_parameters(&path2).unwrap();
        back.load_parameters(&path2).unwrap();
        let c = back.forward(&x).unwrap().to_vec::<f32>().unwrap();
        for (p, q) in a.iter().zip(&c) {
            assert!((p - q).abs() < 1e-5, "{a:?} vs {c:?}");
        }
    }
}

/// Many threads saving one path while others load it: with a temporary named after the
/// process id only, saves failed ("cannot rename", "not found") and loads found truncated
/// files. Now every save succeeds and every load sees a complete file from one of them.
#[test]
fn concurrent_saves_of_one_path_never_collide() {
    let path = tmp("concurrent.safetensors");
    let nets: Vec<Dense> = (0..6)
        .map(|k| {
            let d = Dense::new(64).in_units(64);
            d.initialize(&Initializer::Constant(k as f64), Device::Cpu)
                .unwrap();
            d
        })
        .collect();
    nets[0].save_parameters(&path).unwrap();
    std::thread::scope(|s| {
        for net in &nets {
            let path = &path;
            s.spawn(move || {
                for _ in 0..15 {
                    net.save_parameters(path).unwrap();
                }
            });
        }
        for _ in 0..2 {
            let path = &path;
            s.spawn(move || {
                let reader = Dense::new(64).in_units(64);
                for _ in 0..30 {
                    reader.load_parameters(path).unwrap();
                    let w = reader.weight().data().unwrap().to_vec::<f32>().unwrap();
                    assert!(w.iter().all(|&x| x == w[0]), "a mixed file loaded");
                }
            });
        }
    });
    let dir = path.parent().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["concurrent.safetensors".to_string()]);
}
