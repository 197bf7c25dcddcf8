//! File-backed arrays: `.npy`, raw and safetensors files opened with each `MapMode`, written in
//! place and flushed; every operator on them equals the in-memory one; bad files are errors
//! naming the file.

use std::path::PathBuf;

use sparrow_core::testing::test_array;
use sparrow_core::update::{sgd_update, UpdateArgs};
use sparrow_core::{DType, Error, MapMode, NDArray};

/// A fresh folder for one test (removed when dropped).
struct Dir(PathBuf);
impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("sparrow-mapped-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn f32s(a: &NDArray) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn create_write_flush_reopen_in_every_mode() {
    let dir = Dir::new("modes");
    let p = dir.path("w.npy");
    let a = NDArray::create_npy(&p, &[6, 4], DType::F32).unwrap();
    assert_eq!(a.shape(), &[6, 4]);
    assert!(f32s(&a).iter().all(|&x| x == 0.0));
    assert_eq!(a.backing_file(), Some((p.clone(), MapMode::ReadWrite)));
    let rows = test_array(&[2, 4], -1.0, 1.0, 3)
        .astype(DType::F32)
        .unwrap();
    a.write_rows(3, &rows).unwrap();
    a.flush().unwrap();
    let mut want = vec![0.0f32; 24];
    want[12..20].copy_from_slice(&f32s(&rows));
    assert_eq!(f32s(&a), want);
    drop(a);

    // Read-only: the file's values; a write copies the array into memory, never the file.
    let r = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap();
    assert_eq!(f32s(&r), want);
    let ones = NDArray::ones(&[1, 4], DType::F32).unwrap();
    r.write_rows(0, &ones).unwrap();
    assert_eq!(r.backing_file(), None);
    assert_eq!(&f32s(&r)[..4], &[1.0; 4]);
    // Copy-on-write: writes stay private; flushing is an error that says why.
    let c = NDArray::open_npy(&p, MapMode::CopyOnWrite).unwrap();
    c.write_rows(5, &ones).unwrap();
    assert_eq!(c.backing_file(), Some((p.clone(), MapMode::CopyOnWrite)));
    assert_eq!(&f32s(&c)[20..], &[1.0; 4]);
    assert!(matches!(c.flush(), Err(Error::File { .. })));
    // Neither reached the file.
    assert_eq!(
        f32s(&NDArray::open_npy(&p, MapMode::ReadOnly).unwrap()),
        want
    );
    // Read-write: an optimizer update writes the weight's pages in place.
    let w = NDArray::open_npy(&p, MapMode::ReadWrite).unwrap();
    let g = NDArray::ones(&[6, 4], DType::F32).unwrap();
    sgd_update(&w, &g, &UpdateArgs::new(0.5, ())).unwrap();
    w.flush().unwrap();
    let back = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap();
    let stepped: Vec<f32> = want.iter().map(|x| x - 0.5).collect();
    assert_eq!(f32s(&back), stepped);
    assert_eq!(f32s(&w), stepped);
}

#[test]
fn operators_on_mapped_arrays_equal_the_in_memory_ones() {
    let dir = Dir::new("ops");
    let mem = test_array(&[37, 19], -2.0, 2.0, 7)
        .astype(DType::F32)
        .unwrap();
    let p = dir.path("x.npy");
    let m = NDArray::create_npy(&p, &[37, 19], DType::F32).unwrap();
    m.write_rows(0, &mem).unwrap();
    drop(m);
    let m = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap();
    let w = test_array(&[19, 5], -1.0, 1.0, 8)
        .astype(DType::F32)
        .unwrap();
    assert_eq!(f32s(&m.dot(&w).unwrap()), f32s(&mem.dot(&w).unwrap()));
    assert_eq!(
        f32s(&m.sum(Some(&[0]), false).unwrap()),
        f32s(&mem.sum(Some(&[0]), false).unwrap())
    );
    assert_eq!(f32s(&m.exp().unwrap()), f32s(&mem.exp().unwrap()));
    let idx = NDArray::from_vec(vec![3i64, 0, 36], &[3]).unwrap();
    assert_eq!(
        f32s(&m.take(&idx, 0).unwrap()),
        f32s(&mem.take(&idx, 0).unwrap())
    );
    // An operator's output lives in memory.
    assert_eq!(m.exp().unwrap().backing_file(), None);
}

#[test]
fn raw_and_safetensors_files_open_in_place() {
    let dir = Dir::new("raw");
    // Raw: a 16-byte prefix, then i64 values; the file may be longer than the array.
    let p = dir.path("ids.bin");
    let mut bytes = vec![0xABu8; 16];
    for v in [5i64, -3, 9, 1 << 40, 7] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&p, &bytes).unwrap();
    let a = NDArray::open_raw(&p, DType::I64, &[2, 2], 16, MapMode::ReadOnly).unwrap();
    assert_eq!(a.to_vec::<i64>().unwrap(), vec![5, -3, 9, 1 << 40]);
    let short = NDArray::open_raw(&p, DType::I64, &[6], 16, MapMode::ReadOnly).unwrap_err();
    assert!(short.to_string().contains("too short"), "{short}");
    let odd = NDArray::open_raw(&p, DType::I64, &[1], 4, MapMode::ReadOnly).unwrap_err();
    assert!(
        odd.to_string().contains("multiple of the element size"),
        "{odd}"
    );

    // Safetensors: every tensor, over one mapping, in file order.
    use safetensors::tensor::TensorView;
    let w: Vec<u8> = [1.5f32, -2.0, 3.25, 4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let b: Vec<u8> = [7.0f64, 8.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let views = vec![
        (
            "w".to_string(),
            TensorView::new(safetensors::Dtype::F32, vec![2, 2], &w).unwrap(),
        ),
        (
            "b".to_string(),
            TensorView::new(safetensors::Dtype::F64, vec![2], &b).unwrap(),
        ),
    ];
    let st = dir.path("m.safetensors");
    safetensors::serialize_to_file(views, None, &st).unwrap();
    let t = NDArray::open_safetensors(&st, MapMode::ReadOnly).unwrap();
    let get = |n: &str| t.iter().find(|(k, _)| k == n).unwrap().1.clone();
    assert_eq!(
        get("w").to_vec::<f32>().unwrap(),
        vec![1.5, -2.0, 3.25, 4.0]
    );
    assert_eq!(get("w").shape(), &[2, 2]);
    assert_eq!(get("b").to_vec::<f64>().unwrap(), vec![7.0, 8.0]);
    assert!(get("b").backing_file().is_some());

    let h = [0u8; 4];
    let half = vec![(
        "h".to_string(),
        TensorView::new(safetensors::Dtype::F16, vec![2], &h).unwrap(),
    )];
    let hp = dir.path("h.safetensors");
    safetensors::serialize_to_file(half, None, &hp).unwrap();
    let e = NDArray::open_safetensors(&hp, MapMode::ReadOnly).unwrap_err();
    assert!(
        e.to_string().contains("'h'") && e.to_string().contains("F16"),
        "{e}"
    );
}

#[test]
fn bad_files_are_errors_that_name_the_file() {
    let dir = Dir::new("bad");
    let missing = dir.path("nope.npy");
    let e = NDArray::open_npy(&missing, MapMode::ReadOnly).unwrap_err();
    assert!(e.to_string().contains("nope.npy"), "{e}");

    let empty = dir.path("empty.npy");
    std::fs::write(&empty, b"").unwrap();
    assert!(NDArray::open_npy(&empty, MapMode::ReadOnly)
        .unwrap_err()
        .to_string()
        .contains("empty"));

    let text = dir.path("text.npy");
    std::fs::write(&text, b"hello, not numpy").unwrap();
    assert!(NDArray::open_npy(&text, MapMode::ReadOnly)
        .unwrap_err()
        .to_string()
        .contains("magic"));

    // A .npy whose file is shorter than its header's shape.
    let p = dir.path("cut.npy");
    drop(NDArray::create_npy(&p, &[100, 10], DType::F64).unwrap());
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(2000).unwrap();
    let e = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap_err();
    assert!(
        e.to_string().contains("too short") && e.to_string().contains("cut.npy"),
        "{e}"
    );

    // A file that changes size under an open array: flush refuses.
    let p = dir.path("grow.npy");
    let a = NDArray::create_npy(&p, &[8], DType::U8).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let e = a.flush().unwrap_err();
    assert!(e.to_string().contains("changed size"), "{e}");

    // Flushing an array in memory says what is wrong.
    let m = NDArray::zeros(&[2], DType::F32).unwrap();
    assert!(m.flush().unwrap_err().to_string().contains("in memory"));

    // write_rows checks shape, dtype and range.
    let p = dir.path("w.npy");
    let a = NDArray::create_npy(&p, &[4, 3], DType::F32).unwrap();
    let bad_shape = NDArray::zeros(&[1, 2], DType::F32).unwrap();
    assert!(matches!(
        a.write_rows(0, &bad_shape),
        Err(Error::Shape { .. })
    ));
    let bad_dtype = NDArray::zeros(&[1, 3], DType::F64).unwrap();
    assert!(a.write_rows(0, &bad_dtype).is_err());
    let two = NDArray::zeros(&[2, 3], DType::F32).unwrap();
    assert!(matches!(a.write_rows(3, &two), Err(Error::Index { .. })));
    // A write that would silently copy a shared file-backed buffer into memory is refused.
    let view = a.reshape(&[12]).unwrap();
    let e = a.write_rows(0, &two).unwrap_err();
    assert!(e.to_string().contains("shared"), "{e}");
    drop(view);
    a.write_rows(0, &two).unwrap();
}

#[test]
fn shapes_past_2_pow_32_elements_map_sparsely() {
    let dir = Dir::new("v2");
    // Shape past 2^32 elements of u8: the file is sparse, so creating it costs no disk.
    let p = dir.path("big.npy");
    let n = (1usize << 32) + 3;
    let a = NDArray::create_npy(&p, &[n], DType::U8).unwrap();
    let tail = NDArray::from_vec(vec![9u8, 8, 7], &[3]).unwrap();
    a.write_rows(n - 3, &tail).unwrap();
    a.flush().unwrap();
    drop(a);
    let b = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap();
    assert_eq!(b.shape(), &[n]);
    let idx = NDArray::from_vec(vec![(n - 1) as i64, 0], &[2]).unwrap();
    assert_eq!(b.take(&idx, 0).unwrap().to_vec::<u8>().unwrap(), vec![7, 0]);
}

/// A file-backed right operand larger than the panel budget: column panels (the last one
/// narrower) give the in-memory product, `b`'s pages are released after each panel, and a
/// budget smaller than one column still takes one column at a time.
#[test]
fn out_of_core_matmul_with_b_in_a_file_reads_it_in_column_panels() {
    let dir = Dir::new("matmul_b");
    let (m, k, n) = (300usize, 40usize, 50usize);
    let a_mem = test_array(&[m, k], -1.0, 1.0, 21)
        .astype(DType::F32)
        .unwrap();
    let b_mem = test_array(&[k, n], -1.0, 1.0, 22)
        .astype(DType::F32)
        .unwrap();
    let file_of = |name: &str, x: &NDArray| {
        let p = dir.path(name);
        let f = NDArray::create_npy(&p, &x.shape(), DType::F32).unwrap();
        f.write_rows(0, x).unwrap();
        f.flush().unwrap();
        drop(f);
        (p.clone(), NDArray::open_npy(&p, MapMode::ReadOnly).unwrap())
    };
    let (_, a) = file_of("a.npy", &a_mem);
    let (bp, b) = file_of("b.npy", &b_mem);
    let want = a_mem.dot(&b_mem).unwrap().to_f64_vec();
    // 7 columns a panel (8 panels, the last of 1 column); 1 column a panel; one panel.
    for (panel_bytes, block) in [(k * 4 * 7 + 3, 64usize), (1, 1000), (1 << 20, 64)] {
        let out = dir.path(&format!("c{panel_bytes}.npy"));
        let c = a.matmul_to_file_with(&b, &out, block, panel_bytes).unwrap();
        assert_eq!(c.shape(), vec![m, n]);
        for (i, (x, y)) in c.to_f64_vec().iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "panel {panel_bytes}: {i}: {x} vs {y}"
            );
        }
        if panel_bytes < k * n * 4 {
            if let Some(r) = sparrow_core::sys::mapped_rss_bytes(&bp) {
                assert_eq!(r, 0, "b's pages were released after its last panel");
            }
        }
    }
    assert!(matches!(
        a.matmul_to_file_with(&b, dir.path("z.npy"), 8, 0),
        Err(Error::Arg { .. })
    ));
}

#[test]
fn out_of_core_matmul_equals_the_in_memory_product_and_releases_its_blocks() {
    let dir = Dir::new("matmul");
    for (m, k, n, block, dtype) in [
        (1000usize, 300usize, 40usize, 128usize, DType::F32),
        (257, 64, 9, 1000, DType::F64),
        (5, 3, 2, 2, DType::F32),
    ] {
        let a_mem = test_array(&[m, k], -1.0, 1.0, 11).astype(dtype).unwrap();
        let b = test_array(&[k, n], -1.0, 1.0, 12).astype(dtype).unwrap();
        let ap = dir.path(&format!("a{m}.npy"));
        let a = NDArray::create_npy(&ap, &[m, k], dtype).unwrap();
        a.write_rows(0, &a_mem).unwrap();
        a.flush().unwrap();
        drop(a);
        let a = NDArray::open_npy(&ap, MapMode::ReadOnly).unwrap();
        let op = dir.path(&format!("out{m}.npy"));
        let c = a.matmul_to_file(&b, &op, block).unwrap();
        let want = a_mem.dot(&b).unwrap().to_f64_vec();
        let got = c.to_f64_vec();
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{m}x{k}x{n}: {i}: {x} vs {y}"
            );
        }
        // The result is durable: reopening the file gives it.
        assert_eq!(
            NDArray::open_npy(&op, MapMode::ReadOnly)
                .unwrap()
                .to_f64_vec(),
            got
        );
        // Each finished block of the input was released from the resident set.
        if let Some(r) = sparrow_core::sys::mapped_rss_bytes(&ap) {
            let two_blocks = 2 * block.min(m) * k * dtype.size_of() + (1 << 16);
            assert!((r as usize) <= two_blocks, "{r} bytes of A resident");
        }
    }
    // Errors: an operand in memory, shapes that do not chain, an empty block.
    let mem = NDArray::zeros(&[4, 3], DType::F32).unwrap();
    let b = NDArray::zeros(&[3, 2], DType::F32).unwrap();
    let out = dir.path("e.npy");
    assert!(mem
        .matmul_to_file(&b, &out, 2)
        .unwrap_err()
        .to_string()
        .contains("in memory"));
    let ap = dir.path("e_a.npy");
    let a = NDArray::create_npy(&ap, &[4, 3], DType::F32).unwrap();
    let bad = NDArray::zeros(&[2, 2], DType::F32).unwrap();
    assert!(matches!(
        a.matmul_to_file(&bad, &out, 2),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        a.matmul_to_file(&b, &out, 0),
        Err(Error::Arg { .. })
    ));
    // A row view of a file-backed array reads the same rows without a copy.
    a.write_rows(1, &NDArray::ones(&[2, 3], DType::F32).unwrap())
        .unwrap();
    let v = a.mapped_rows(1, 3).unwrap();
    assert_eq!(v.shape(), &[2, 3]);
    assert_eq!(f32s(&v), vec![1.0; 6]);
    assert!(v.backing_file().is_some());
    assert!(a.mapped_rows(3, 5).is_err());
    assert!(mem.mapped_rows(0, 1).is_err());
}

/// `release_pages` drops a file-backed array's pages from the resident set (a pass over a file
/// larger than memory releases each block after use) and changes nothing the array holds.
#[test]
fn release_pages_empties_the_resident_set_and_keeps_the_values() {
    let dir = std::env::temp_dir().join(format!("sparrow-release-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.npy");
    let n = 1 << 21; // 8 MiB of f32
    let a = NDArray::create_npy(&path, &[n / 1024, 1024], DType::F32).unwrap();
    let values = NDArray::arange(0.0, n as f64, 1.0, DType::F32)
        .unwrap()
        .reshape(&[n / 1024, 1024])
        .unwrap();
    a.write_rows(0, &values).unwrap();
    a.flush().unwrap();
    let sum_before = a.sum_all().unwrap().to_vec::<f32>().unwrap();
    if let Some(resident) = sparrow_core::sys::mapped_rss_bytes(&path) {
        assert!(resident >= (n as u64 * 4) / 2, "resident {resident}");
        a.release_pages();
        let after = sparrow_core::sys::mapped_rss_bytes(&path).unwrap();
        assert!(after < 1 << 20, "resident after release {after}");
    } else {
        println!("skipped the resident-set check: no /proc/self/smaps");
        a.release_pages();
    }
    assert_eq!(a.sum_all().unwrap().to_vec::<f32>().unwrap(), sum_before);
    // In memory: nothing to release, nothing changes.
    values.release_pages();
    assert_eq!(values.to_vec::<f32>().unwrap()[5], 5.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file is mapped read-write by one open at a time: both would keep its undo journal (one
/// `<file>.undo`), and the second open's recovery would replay or remove the first one's
/// records. A second read-write open is an error naming the file, the first keeps working
/// (its unflushed change is flushed, not undone), read-only and copy-on-write opens still
/// work, and once the first is dropped the file opens read-write again.
#[test]
fn a_second_read_write_open_of_a_file_is_an_error() {
    let dir = Dir::new("twice");
    let p = dir.path("t.npy");
    let a = NDArray::create_npy(&p, &[4, 2], DType::F32).unwrap();
    let ones = NDArray::ones(&[1, 2], DType::F32).unwrap();
    a.write_rows(1, &ones).unwrap();
    let e = NDArray::open_npy(&p, MapMode::ReadWrite).unwrap_err();
    assert!(matches!(e, Error::File { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("already open read-write") && msg.contains("t.npy"),
        "{msg}"
    );
    a.flush().unwrap();
    let want = vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    let r = NDArray::open_npy(&p, MapMode::ReadOnly).unwrap();
    let c = NDArray::open_npy(&p, MapMode::CopyOnWrite).unwrap();
    assert_eq!(f32s(&r), want);
    assert_eq!(f32s(&c), want);
    drop(a);
    let b = NDArray::open_npy(&p, MapMode::ReadWrite).unwrap();
    assert_eq!(f32s(&b), want);
}
