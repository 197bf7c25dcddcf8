//! `sparrow_core::io`: dense, csr and row_sparse arrays of every dtype round-trip through
//! safetensors and `.npz` (dicts and lists, empty and zero-nnz arrays, random inputs); the
//! single-array `.npz` is SciPy's `save_npz` layout; SciPy- and NumPy-written fixtures load;
//! and every corrupted or inconsistent file (flipped byte, truncation, bad indptr, out-of-range
//! or unsorted index, wrong shape) is an `Error::File` naming the file, never a panic.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sparrow_core::fsio::{checksum64, checksum_hex, checksum_pairs};
use sparrow_core::io::{self, SaveOptions};
use sparrow_core::{npy, DType, Error, NDArray, SType};

/// A fresh folder for one test (removed when dropped).
struct Dir(PathBuf);
impl Dir {
    fn new(name: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("sparrow-save-load-{name}-{}", std::process::id()));
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

const DTYPES: [DType; 5] = [DType::F32, DType::F64, DType::I64, DType::I32, DType::U8];
const STYPES: [SType; 3] = [SType::Dense, SType::Csr, SType::RowSparse];

/// The three ways to write a file: safetensors, stored npz, deflated npz.
fn formats() -> [(&'static str, SaveOptions); 3] {
    [
        ("safetensors", SaveOptions::default()),
        ("npz", SaveOptions::default()),
        ("npz", SaveOptions { npz_deflate: true }),
    ]
}

/// A deterministic `rows x cols` matrix with about half its entries zero (and some all-zero
/// rows), values that every dtype holds exactly (0..=200 in steps of 1, halves for floats).
fn matrix(rows: usize, cols: usize, seed: u64, dtype: DType, stype: SType) -> NDArray {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as u32
    };
    let mut v = vec![0.0f64; rows * cols];
    for r in 0..rows {
        if next() % 4 == 0 {
            continue; // an empty row
        }
        for c in 0..cols {
            if next() % 2 == 0 {
                let x = (next() % 200 + 1) as f64;
                v[r * cols + c] = if dtype.is_float() { x / 2.0 } else { x };
            }
        }
    }
    NDArray::from_vec(v, &[rows, cols])
        .unwrap()
        .astype(dtype)
        .unwrap()
        .tostype(stype)
        .unwrap()
}

/// A csr array's structure, whatever its dtype.
fn csr_structure(a: &NDArray) -> (Vec<i64>, Vec<i64>) {
    fn get<T: sparrow_core::Element>(a: &NDArray) -> (Vec<i64>, Vec<i64>) {
        a.with_csr::<T, _>(|c| (c.indptr.to_vec(), c.indices.to_vec()))
            .unwrap()
    }
    match a.dtype() {
        DType::F32 => get::<f32>(a),
        DType::F64 => get::<f64>(a),
        DType::I64 => get::<i64>(a),
        DType::I32 => get::<i32>(a),
        DType::U8 => get::<u8>(a),
        DType::F16 => get::<sparrow_core::f16>(a),
        DType::BF16 => get::<sparrow_core::bf16>(a),
    }
}

/// `b` is `a`: storage type, dtype, shape, stored structure and every value.
fn assert_same(a: &NDArray, b: &NDArray, what: &str) {
    assert_eq!(a.stype(), b.stype(), "{what}: stype");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    assert_eq!(a.nnz(), b.nnz(), "{what}: nnz");
    assert_eq!(a.to_f64_vec(), b.to_f64_vec(), "{what}: values");
    b.check_format(true).unwrap();
    match a.stype() {
        SType::Csr => assert_eq!(csr_structure(a), csr_structure(b), "{what}: csr structure"),
        SType::RowSparse => assert_eq!(
            a.row_ids().unwrap(),
            b.row_ids().unwrap(),
            "{what}: row ids"
        ),
        SType::Dense => {}
    }
}

fn save_load(path: &Path, arrays: &[(&str, &NDArray)], opts: SaveOptions) {
    io::save_with(path, arrays, opts).unwrap();
    let back = io::load(path).unwrap();
    let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<&str> = arrays.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, want, "{}: names in order", path.display());
    for ((n, a), (_, b)) in arrays.iter().zip(&back) {
        assert_same(a, b, &format!("{}: {n}", path.display()));
    }
}

#[test]
fn every_stype_and_dtype_round_trips_as_dict_and_list() {
    let dir = Dir::new("all");
    for (i, (ext, opts)) in formats().into_iter().enumerate() {
        let mut owned = Vec::new();
        for (d, &dtype) in DTYPES.iter().enumerate() {
            for (s, &stype) in STYPES.iter().enumerate() {
                let a = matrix(7, 5, (d * 3 + s) as u64, dtype, stype);
                owned.push((format!("{}_{stype:?}", dtype.name()), a));
            }
        }
        let arrays: Vec<(&str, &NDArray)> = owned.iter().map(|(n, a)| (n.as_str(), a)).collect();
        save_load(&dir.path(&format!("dict{i}.{ext}")), &arrays, opts);

        let list: Vec<&NDArray> = owned.iter().map(|(_, a)| a).collect();
        let p = dir.path(&format!("list{i}.{ext}"));
        io::save_list_with(&p, &list, opts).unwrap();
        let back = io::load_list(&p).unwrap();
        assert_eq!(back.len(), list.len());
        for (a, b) in list.iter().zip(&back) {
            assert_same(a, b, &p.display().to_string());
        }
        // A list file read as a dict: NumPy's names.
        assert_eq!(io::load(&p).unwrap()[2].0, "arr_2");
    }
}

#[test]
fn one_array_lists_round_trip_and_a_sparse_one_is_scipys_file() {
    let dir = Dir::new("single");
    for (i, (ext, opts)) in formats().into_iter().enumerate() {
        for &dtype in &DTYPES {
            for &stype in &STYPES {
                let a = matrix(6, 4, 9, dtype, stype);
                let p = dir.path(&format!("one{i}.{ext}"));
                io::save_list_with(&p, &[&a], opts).unwrap();
                let back = io::load_list(&p).unwrap();
                assert_eq!(back.len(), 1);
                assert_same(&a, &back[0], &format!("{dtype:?} {stype:?} {ext}"));
            }
        }
    }
    // The members of SciPy's `save_npz`, in its order, and `format` is the byte string b'csr'.
    let p = dir.path("scipy.npz");
    io::save_list(&p, &[&matrix(3, 4, 1, DType::F64, SType::Csr)]).unwrap();
    let mut z = zip::ZipArchive::new(std::fs::File::open(&p).unwrap()).unwrap();
    let names: Vec<String> = (0..z.len())
        .map(|i| z.by_index(i).unwrap().name().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "indices.npy",
            "indptr.npy",
            "format.npy",
            "shape.npy",
            "data.npy"
        ]
    );
    let mut format = Vec::new();
    std::io::Read::read_to_end(&mut z.by_name("format.npy").unwrap(), &mut format).unwrap();
    let h = npy::parse_raw_header(&format).unwrap();
    assert_eq!((h.descr.as_str(), h.shape.len()), ("|S3", 0));
    assert_eq!(&format[h.data_offset..], b"csr");
    // A row_sparse one is bsr with one-row blocks (plus its shape when not 2-D).
    let r = NDArray::row_sparse_from_parts(vec![1.0f32; 12], vec![0, 3], &[4, 2, 3]).unwrap();
    io::save_list(&p, &[&r]).unwrap();
    let z = zip::ZipArchive::new(std::fs::File::open(&p).unwrap()).unwrap();
    let mut names: Vec<&str> = z.file_names().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "data.npy",
            "format.npy",
            "indices.npy",
            "indptr.npy",
            "shape.npy",
            "sparrow_shape.npy"
        ]
    );
    assert_same(&r, &io::load_list(&p).unwrap()[0], "3-D row_sparse");
}

#[test]
fn empty_and_zero_nnz_arrays_round_trip() {
    let dir = Dir::new("empty");
    let arrays = [
        ("scalar", NDArray::scalar(2.5f64)),
        ("no_rows", NDArray::zeros(&[0, 5], DType::F32).unwrap()),
        ("no_cols", NDArray::zeros(&[3, 0], DType::I64).unwrap()),
        ("empty_1d", NDArray::zeros(&[0], DType::U8).unwrap()),
        (
            "csr_zero",
            NDArray::zeros_stype(&[4, 6], DType::F32, SType::Csr).unwrap(),
        ),
        (
            "csr_0x0",
            NDArray::zeros_stype(&[0, 0], DType::F64, SType::Csr).unwrap(),
        ),
        (
            "csr_3x0",
            NDArray::zeros_stype(&[3, 0], DType::I32, SType::Csr).unwrap(),
        ),
        (
            "rsp_zero",
            NDArray::zeros_stype(&[5, 2], DType::F64, SType::RowSparse).unwrap(),
        ),
        (
            "rsp_0",
            NDArray::zeros_stype(&[0, 2], DType::U8, SType::RowSparse).unwrap(),
        ),
        (
            "rsp_1d",
            NDArray::row_sparse_from_parts(vec![7i64, 9], vec![1, 4], &[6]).unwrap(),
        ),
        (
            "rsp_no_cols",
            NDArray::row_sparse_from_parts(Vec::<f32>::new(), vec![], &[4, 0]).unwrap(),
        ),
    ];
    let refs: Vec<(&str, &NDArray)> = arrays.iter().map(|(n, a)| (*n, a)).collect();
    for (i, (ext, opts)) in formats().into_iter().enumerate() {
        save_load(&dir.path(&format!("e{i}.{ext}")), &refs, opts);
        // Each alone too: a single sparse array takes SciPy's layout.
        for (n, a) in &arrays {
            let p = dir.path(&format!("{n}{i}.{ext}"));
            io::save_list_with(&p, &[a], opts).unwrap();
            assert_same(a, &io::load_list(&p).unwrap()[0], n);
        }
    }
    // An empty dict.
    for ext in ["safetensors", "npz"] {
        let p = dir.path(&format!("nothing.{ext}"));
        io::save(&p, &[]).unwrap();
        assert!(io::load(&p).unwrap().is_empty());
    }
}

/// A random array: a dtype, a storage type, a shape and a seed.
fn any_array() -> impl Strategy<Value = NDArray> {
    (0usize..5, 0usize..3, 0usize..9, 0usize..7, any::<u64>())
        .prop_map(|(d, s, r, c, seed)| matrix(r, c, seed, DTYPES[d], STYPES[s]))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_arrays_round_trip(arrays in prop::collection::vec(any_array(), 0..5), f in 0usize..3) {
        let dir = Dir::new("prop");
        let (ext, opts) = formats()[f];
        let names: Vec<String> = (0..arrays.len()).map(|i| format!("layer{i}.w")).collect();
        let refs: Vec<(&str, &NDArray)> =
            names.iter().map(String::as_str).zip(arrays.iter()).collect();
        save_load(&dir.path(&format!("p.{ext}")), &refs, opts);
    }
}

#[test]
fn saving_replaces_the_file_and_leaves_no_temporary() {
    let dir = Dir::new("replace");
    for ext in ["safetensors", "npz"] {
        let p = dir.path(&format!("a.{ext}"));
        let a = matrix(5, 5, 1, DType::F32, SType::Csr);
        let b = matrix(2, 2, 2, DType::F64, SType::Dense);
        io::save(&p, &[("a", &a)]).unwrap();
        io::save(&p, &[("b", &b)]).unwrap();
        let back = io::load(&p).unwrap();
        assert_eq!(back.len(), 1);
        assert_same(&b, &back[0].1, "replaced");
    }
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 2);
}

sparrow_core::device_test! {
/// Arrays on the device under test save (copied to the host, as MXNet's `nd.save` copies a
/// GPU array) and load back in host memory with the same value.
fn arrays_on_any_device_save_and_load_in_host_memory() {
    let dir = Dir::new(&format!("device-{:?}", sparrow_core::testing::test_device()));
    let dev = sparrow_core::testing::test_device();
    let host: Vec<(String, NDArray)> = STYPES
        .iter()
        .map(|&s| {
            let a = sparrow_core::with_device(sparrow_core::Device::Cpu, || {
                matrix(4, 3, 5, DType::F32, s)
            })
            .unwrap();
            (format!("{s:?}"), a)
        })
        .collect();
    let on_dev: Vec<NDArray> = host.iter().map(|(_, a)| a.to_device(dev).unwrap()).collect();
    let refs: Vec<(&str, &NDArray)> =
        host.iter().map(|(n, _)| n.as_str()).zip(on_dev.iter()).collect();
    for ext in ["safetensors", "npz"] {
        let p = dir.path(&format!("d.{ext}"));
        io::save(&p, &refs).unwrap();
        for ((_, a), (_, b)) in host.iter().zip(&io::load(&p).unwrap()) {
            assert_eq!(b.device(), sparrow_core::Device::Cpu);
            assert_same(a, b, ext);
        }
    }
}
}

/// The message of an error that must be an `Error::File` about `path`.
fn file_error(e: Error, path: &Path) -> String {
    let msg = e.to_string();
    match e {
        Error::File { path: p, .. } => assert_eq!(p, path.display().to_string(), "{msg}"),
        other => panic!("expected a file error, got {other:?}"),
    }
    msg
}

fn expect_load_error(path: &Path, want: &str) {
    let msg = file_error(io::load(path).unwrap_err(), path);
    assert!(msg.contains(want), "expected {want:?} in: {msg}");
}

#[test]
fn bad_names_and_extensions_are_errors() {
    let dir = Dir::new("names");
    let a = matrix(3, 3, 1, DType::F32, SType::Dense);
    let c = matrix(3, 3, 1, DType::F32, SType::Csr);
    for ext in ["safetensors", "npz"] {
        let p = dir.path(&format!("n.{ext}"));
        for (arrays, want) in [
            (vec![("", &a)], "empty"),
            (vec![("a\nb", &a)], "control"),
            (vec![("__metadata__", &a)], "reserved"),
            (vec![("w", &a), ("w", &c)], "two arrays are named 'w'"),
            (vec![("w", &c), ("w/data", &a)], "w/data"),
        ] {
            let msg = file_error(io::save(&p, &arrays).unwrap_err(), &p);
            assert!(msg.contains(want), "{ext}: expected {want:?} in: {msg}");
        }
        assert!(!p.exists(), "a refused save wrote {}", p.display());
    }
    // An array that breaks its format is refused, not written.
    let unsorted =
        NDArray::csr_unchecked(vec![1.0f32, 2.0], vec![2, 0], vec![0, 2, 2], [2, 3]).unwrap();
    let bad_rows = NDArray::row_sparse_unchecked(vec![1.0f32; 4], vec![1, 0], &[3, 2]);
    for (ext, bad) in [("safetensors", &unsorted), ("npz", &bad_rows)] {
        let p = dir.path(&format!("bad.{ext}"));
        let msg = file_error(io::save(&p, &[("bad", bad)]).unwrap_err(), &p);
        assert!(
            msg.contains("array 'bad'") && msg.contains("invalid"),
            "{msg}"
        );
        assert!(!p.exists());
    }
    let p = dir.path("n.npz");
    let msg = file_error(io::save(&p, &[("x/format", &a)]).unwrap_err(), &p);
    assert!(msg.contains("x/format"), "{msg}");
    for bad in ["n.npy", "n", "n.safetensor"] {
        let p = dir.path(bad);
        assert!(file_error(io::save(&p, &[("a", &a)]).unwrap_err(), &p).contains("extension"));
        assert!(file_error(io::load(&p).unwrap_err(), &p).contains("extension"));
    }
    expect_load_error(&dir.path("missing.npz"), "cannot read");
    // A dict is not a list.
    let p = dir.path("dict.safetensors");
    io::save(&p, &[("a", &a), ("arr_1", &c)]).unwrap();
    let msg = file_error(io::load_list(&p).unwrap_err(), &p);
    assert!(msg.contains("not a list"), "{msg}");
}

/// Every single-byte corruption of a safetensors file is an error: the tensors and the
/// metadata are checksummed, and the header's structure is checked by safetensors.
#[test]
fn every_flipped_byte_of_a_safetensors_file_is_an_error() {
    let dir = Dir::new("flip-st");
    let p = dir.path("a.safetensors");
    let (d, c, r) = (
        matrix(3, 4, 1, DType::F32, SType::Dense),
        matrix(4, 5, 2, DType::F64, SType::Csr),
        matrix(5, 3, 3, DType::I32, SType::RowSparse),
    );
    io::save(&p, &[("d", &d), ("c", &c), ("r", &r)]).unwrap();
    let good = std::fs::read(&p).unwrap();
    let q = dir.path("bad.safetensors");
    for i in 0..good.len() {
        for mask in [0x01u8, 0x80] {
            let mut b = good.clone();
            b[i] ^= mask;
            std::fs::write(&q, &b).unwrap();
            match io::load(&q) {
                Err(e) => {
                    file_error(e, &q);
                }
                Ok(_) => panic!(
                    "flipping bit {mask:#x} of byte {i} of {} went unnoticed",
                    good.len()
                ),
            }
        }
    }
    for n in 0..good.len() {
        std::fs::write(&q, &good[..n]).unwrap();
        file_error(io::load(&q).unwrap_err(), &q);
    }
}

/// Every single-byte corruption of an npz file is an error, or leaves what is loaded exactly
/// as saved (zip fields that do not describe the data: timestamps, attributes); every byte of
/// every member's data is covered by its CRC-32. Truncation at any length is an error.
#[test]
fn flipped_bytes_and_truncation_of_an_npz_file_never_load_wrong_arrays() {
    let dir = Dir::new("flip-npz");
    let (d, c, r) = (
        matrix(3, 4, 1, DType::F32, SType::Dense),
        matrix(4, 5, 2, DType::F64, SType::Csr),
        matrix(5, 3, 3, DType::I32, SType::RowSparse),
    );
    for deflate in [false, true] {
        let p = dir.path("a.npz");
        io::save_with(
            &p,
            &[("d", &d), ("c", &c), ("r", &r)],
            SaveOptions {
                npz_deflate: deflate,
            },
        )
        .unwrap();
        let good = std::fs::read(&p).unwrap();
        let want = io::load(&p).unwrap();
        let mut data_bytes = vec![false; good.len()];
        let mut z = zip::ZipArchive::new(std::io::Cursor::new(&good)).unwrap();
        for i in 0..z.len() {
            let f = z.by_index(i).unwrap();
            let start = f.data_start() as usize;
            data_bytes[start..start + f.compressed_size() as usize].fill(true);
        }
        let q = dir.path("bad.npz");
        let mut unnoticed = 0;
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x01;
            std::fs::write(&q, &b).unwrap();
            match io::load(&q) {
                Err(e) => {
                    file_error(e, &q);
                }
                Ok(got) => {
                    assert!(
                        !data_bytes[i],
                        "a flip in member data at byte {i} went unnoticed"
                    );
                    assert_eq!(got.len(), want.len(), "byte {i}");
                    for ((n1, a), (n2, b)) in want.iter().zip(&got) {
                        assert_eq!(n1, n2, "flip at byte {i} renamed an array");
                        assert_same(a, b, &format!("flip at byte {i}"));
                    }
                    unnoticed += 1;
                }
            }
        }
        assert!(
            unnoticed < good.len() / 4,
            "{unnoticed} of {} flips unnoticed",
            good.len()
        );
        for n in 0..good.len() {
            std::fs::write(&q, &good[..n]).unwrap();
            file_error(io::load(&q).unwrap_err(), &q);
        }
    }
}

// ---- Files with valid checksums whose contents are inconsistent ----

/// A safetensors tensor for [`write_st`]: dtype, shape, bytes.
type Raw = (safetensors::Dtype, Vec<usize>, Vec<u8>);

fn t_i64(v: &[i64]) -> Raw {
    (
        safetensors::Dtype::I64,
        vec![v.len()],
        v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    )
}
fn t_f32(v: &[f32], shape: &[usize]) -> Raw {
    (
        safetensors::Dtype::F32,
        shape.to_vec(),
        v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    )
}

/// Write a safetensors file in sparrow's layout with correct checksums, so that a load gets
/// past the integrity checks to the checks of the contents.
fn write_st(path: &Path, names: &[&str], meta: &[(&str, &str)], tensors: &[(&str, Raw)]) {
    let mut m: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    m.insert("format".into(), "sparrow-ndarrays".into());
    m.insert("format_version".into(), "1".into());
    m.insert("names".into(), serde_json_list(names));
    for (k, v) in meta {
        m.insert(k.to_string(), v.to_string());
    }
    let mut views = BTreeMap::new();
    for (n, (dt, shape, bytes)) in tensors {
        m.insert(format!("checksum:{n}"), checksum_hex(checksum64(bytes)));
        views.insert(
            n.to_string(),
            safetensors::tensor::TensorView::new(*dt, shape.clone(), bytes).unwrap(),
        );
    }
    let mc = checksum_hex(checksum_pairs(&m, "meta_checksum"));
    m.insert("meta_checksum".into(), mc);
    let bytes = safetensors::serialize(views, Some(m)).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn serde_json_list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("[{}]", quoted.join(","))
}

#[test]
fn inconsistent_safetensors_contents_are_errors_naming_the_array() {
    let dir = Dir::new("st-bad");
    let p = dir.path("x.safetensors");
    // A valid csr [[1, 0, 2], [0, 0, 0], [0, 3, 0]] first, then one thing broken at a time.
    let csr = |indices: &[i64], indptr: &[i64], data: &[f32], shape: &str| {
        write_st(
            &p,
            &["x"],
            &[("stype:x", "csr"), ("shape:x", shape)],
            &[
                ("x/data", t_f32(data, &[data.len()])),
                ("x/indices", t_i64(indices)),
                ("x/indptr", t_i64(indptr)),
            ],
        );
    };
    csr(&[0, 2, 1], &[0, 2, 2, 3], &[1., 2., 3.], "[3, 3]");
    assert_eq!(
        io::load(&p).unwrap()[0].1.to_vec::<f32>().unwrap(),
        [1., 0., 2., 0., 0., 0., 0., 3., 0.]
    );
    for (indices, indptr, data, shape, want) in [
        (
            &[0i64, 2, 1][..],
            &[0i64, 2, 1, 3][..],
            &[1f32, 2., 3.][..],
            "[3, 3]",
            "indptr",
        ),
        (&[0, 2, 1], &[1, 2, 2, 3], &[1., 2., 3.], "[3, 3]", "indptr"),
        (&[0, 2, 1], &[0, 2, 2, 4], &[1., 2., 3.], "[3, 3]", "indptr"),
        (
            &[0, 2, 1],
            &[0, 2, 3],
            &[1., 2., 3.],
            "[3, 3]",
            "indptr has 3 entries",
        ),
        (&[0, 2, 1], &[0, 2, 2, 2], &[1., 2., 3.], "[3, 3]", "x"),
        (&[0, 3, 1], &[0, 2, 2, 3], &[1., 2., 3.], "[3, 3]", "x"),
        (&[0, -1, 1], &[0, 2, 2, 3], &[1., 2., 3.], "[3, 3]", "x"),
        (&[2, 0, 1], &[0, 2, 2, 3], &[1., 2., 3.], "[3, 3]", "x"),
        (&[2, 2, 1], &[0, 2, 2, 3], &[1., 2., 3.], "[3, 3]", "x"),
        (
            &[0, 2, 1],
            &[0, 2, 2, 3],
            &[1., 2.],
            "[3, 3]",
            "data has shape",
        ),
        (&[0, 2, 1], &[0, 2, 2, 3], &[1., 2., 3.], "[3, 3, 1]", "2-D"),
        (&[0, 2, 1], &[0, 2, 2, 3], &[1., 2., 3.], "three", "shape"),
    ] {
        csr(indices, indptr, data, shape);
        let msg = file_error(io::load(&p).unwrap_err(), &p);
        assert!(
            msg.contains("array 'x'") && msg.contains(want),
            "expected {want:?} in: {msg}"
        );
    }
    // row_sparse: unsorted, duplicate and out-of-range row ids, values of the wrong shape.
    for (ids, rows, want) in [
        (&[2i64, 1][..], 2usize, "x"),
        (&[1, 1][..], 2, "x"),
        (&[1, 4][..], 2, "x"),
        (&[1, 2][..], 3, "values of shape"),
    ] {
        write_st(
            &p,
            &["x"],
            &[("stype:x", "row_sparse"), ("shape:x", "[4, 2]")],
            &[
                ("x/data", t_f32(&vec![1.0; rows * 2], &[rows, 2])),
                ("x/indices", t_i64(ids)),
            ],
        );
        let msg = file_error(io::load(&p).unwrap_err(), &p);
        assert!(
            msg.contains("array 'x'") && msg.contains(want),
            "expected {want:?} in: {msg}"
        );
    }
    // Missing, extra and mistyped tensors; a dense tensor whose shape disagrees.
    let dense = |meta: &[(&str, &str)], tensors: &[(&str, Raw)]| {
        write_st(&p, &["x"], meta, tensors);
        file_error(io::load(&p).unwrap_err(), &p)
    };
    let m = [("stype:x", "default"), ("shape:x", "[2]")];
    assert!(dense(&m, &[("y", t_f32(&[1., 2.], &[2]))]).contains("missing"));
    assert!(
        dense(&m, &[("x", t_f32(&[1., 2.], &[2])), ("y", t_i64(&[1]))])
            .contains("belong to no array")
    );
    assert!(dense(&m, &[("x", t_f32(&[1., 2., 3.], &[3]))]).contains("metadata says"));
    assert!(dense(
        &[("stype:x", "coo"), ("shape:x", "[2]")],
        &[("x", t_f32(&[1., 2.], &[2]))]
    )
    .contains("unknown stype"));
    let msg = dense(
        &[("stype:x", "row_sparse"), ("shape:x", "[4, 1]")],
        &[
            ("x/data", t_f32(&[1.], &[1, 1])),
            ("x/indices", t_f32(&[1.], &[1])),
        ],
    );
    assert!(msg.contains("int64 or int32"), "{msg}");
    // A file of another tool: every tensor dense, in file order.
    let mut views = BTreeMap::new();
    let b = [1.0f32, 2.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect::<Vec<u8>>();
    let i = [7i64]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect::<Vec<u8>>();
    views.insert(
        "w".to_string(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &b).unwrap(),
    );
    views.insert(
        "n".to_string(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![], &i).unwrap(),
    );
    std::fs::write(&p, safetensors::serialize(views, None).unwrap()).unwrap();
    let got = io::load(&p).unwrap();
    let mut names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["n", "w"]);
    for (n, a) in &got {
        let want: &[f64] = if n == "w" { &[1.0, 2.0] } else { &[7.0] };
        assert_eq!(a.to_f64_vec(), want);
    }
}

/// An `.npz` written member by member (stored), for crafted files.
fn write_npz(path: &Path, members: &[(&str, Vec<u8>)]) {
    let f = std::fs::File::create(path).unwrap();
    let mut z = zip::ZipWriter::new(f);
    for (name, bytes) in members {
        z.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
}

fn npy_i64(v: &[i64]) -> Vec<u8> {
    let mut b = npy::header_bytes(&[v.len()], DType::I64).unwrap();
    b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    b
}
fn npy_f32(v: &[f32], shape: &[usize]) -> Vec<u8> {
    let mut b = npy::header_bytes(shape, DType::F32).unwrap();
    b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    b
}
fn npy_text(s: &str) -> Vec<u8> {
    let mut b = npy::header_bytes_descr(&[], &format!("|S{}", s.len()));
    b.extend_from_slice(s.as_bytes());
    b
}

/// SciPy's member layout of a 3 x 3 matrix in `format`, with the given parts.
fn scipy_members(
    format: &str,
    data: Vec<u8>,
    indices: &[i64],
    indptr: &[i64],
) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("indices.npy", npy_i64(indices)),
        ("indptr.npy", npy_i64(indptr)),
        ("format.npy", npy_text(format)),
        ("shape.npy", npy_i64(&[3, 3])),
        ("data.npy", data),
    ]
}

#[test]
fn inconsistent_npz_contents_are_errors_naming_the_array() {
    let dir = Dir::new("npz-bad");
    let p = dir.path("x.npz");
    let d3 = || npy_f32(&[1., 2., 3.], &[3]);
    write_npz(&p, &scipy_members("csr", d3(), &[0, 2, 1], &[0, 2, 2, 3]));
    assert_eq!(
        io::load_list(&p).unwrap()[0].to_vec::<f32>().unwrap(),
        [1., 0., 2., 0., 0., 0., 0., 3., 0.]
    );
    for (indices, indptr, want) in [
        (&[0i64, 2, 1][..], &[0i64, 2, 1, 3][..], "indptr"),
        (&[0, 2, 1], &[0, 2, 2, 4], "indptr"),
        (&[0, 3, 1], &[0, 2, 2, 3], "arr_0"),
        (&[2, 0, 1], &[0, 2, 2, 3], "arr_0"),
        (&[0, 0, 1], &[0, 2, 2, 3], "arr_0"),
    ] {
        write_npz(&p, &scipy_members("csr", d3(), indices, indptr));
        let msg = file_error(io::load(&p).unwrap_err(), &p);
        assert!(
            msg.contains("array 'arr_0'") && msg.contains(want),
            "expected {want:?} in: {msg}"
        );
    }
    let bsr = |data: Vec<u8>, indices: &[i64], indptr: &[i64]| {
        write_npz(&p, &scipy_members("bsr", data, indices, indptr));
        io::load(&p)
    };
    // Rows 0 and 2 stored: a row_sparse array.
    let ok = bsr(npy_f32(&[1.; 6], &[2, 1, 3]), &[0, 0], &[0, 1, 1, 2]).unwrap();
    assert_eq!(ok[0].1.row_ids().unwrap(), [0, 2]);
    for (data, indices, indptr, want) in [
        (
            npy_f32(&[1.; 6], &[2, 1, 3]),
            &[0i64, 0][..],
            &[0i64, 2, 2, 2][..],
            "0 or 1 block",
        ),
        (
            npy_f32(&[1.; 6], &[2, 1, 3]),
            &[0, 1],
            &[0, 1, 1, 2],
            "zeros",
        ),
        (
            npy_f32(&[1.; 6], &[2, 1, 3]),
            &[0, 0],
            &[0, 1, 1, 3],
            "entries from 0 to 2",
        ),
        (
            npy_f32(&[1.; 6], &[3, 2, 1]),
            &[0, 0, 0],
            &[0, 1, 2, 3],
            "blocksize (1, ncols)",
        ),
        (
            npy_f32(&[1.; 6], &[2, 3]),
            &[0, 0],
            &[0, 1, 1, 2],
            "blocksize (1, ncols)",
        ),
    ] {
        let msg = file_error(bsr(data, indices, indptr).unwrap_err(), &p);
        assert!(msg.contains(want), "expected {want:?} in: {msg}");
    }
    // Formats, members and dtypes sparrow does not read.
    write_npz(&p, &scipy_members("coo", d3(), &[0, 2, 1], &[0, 2, 2, 3]));
    expect_load_error(&p, "sparse format 'coo'");
    let mut m = scipy_members("csr", d3(), &[0, 2, 1], &[0, 2, 2, 3]);
    m.remove(1);
    write_npz(&p, &m);
    expect_load_error(&p, "indptr.npy' is missing");
    let mut m = scipy_members("csr", d3(), &[0, 2, 1], &[0, 2, 2, 3]);
    m.push(("extra.npy", npy_i64(&[1])));
    write_npz(&p, &m);
    expect_load_error(&p, "unexpected member 'extra.npy'");
    // complex64: f16 (`<f2`) is read since half precision exists.
    let mut complex = npy::header_bytes_descr(&[2], "<c8");
    complex.extend_from_slice(&[0; 16]);
    write_npz(&p, &[("h.npy", complex)]);
    expect_load_error(&p, "not supported");
    write_npz(&p, &[("a.npy", npy_f32(&[1., 2.], &[3]))]);
    expect_load_error(&p, "cannot hold shape");
    write_npz(&p, &[("a.txt", b"hello".to_vec())]);
    expect_load_error(&p, "not a .npy");
    std::fs::write(&p, b"PK\x03\x04 not really a zip").unwrap();
    expect_load_error(&p, "not a valid .npz");
    // A dict member of a sparse array, broken the same way, names the array.
    write_npz(
        &p,
        &[
            ("w.npy", npy_f32(&[1.], &[1])),
            ("g/indices.npy", npy_i64(&[0, 5, 1])),
            ("g/indptr.npy", npy_i64(&[0, 2, 2, 3])),
            ("g/format.npy", npy_text("csr")),
            ("g/shape.npy", npy_i64(&[3, 3])),
            ("g/data.npy", d3()),
        ],
    );
    expect_load_error(&p, "array 'g'");
}

// ---- Files written by NumPy and SciPy, and files for them ----

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sparse_files")
        .join(name)
}

/// The matrix `scripts/check_sparse_files.py` writes and expects:
/// `[[1, 0, 2, 0], [0, 0, 0, 0], [0, 3, 0, 4.5]]`.
const KNOWN: [f64; 12] = [1., 0., 2., 0., 0., 0., 0., 0., 0., 3., 0., 4.5];

/// Files `scipy.sparse.save_npz` (compressed and not, int32 indices) and `np.savez_compressed`
/// wrote (`scripts/check_sparse_files.py --write-fixtures`) load with their values.
#[test]
fn scipy_and_numpy_written_files_load() {
    for (file, dtype) in [
        ("scipy_csr_compressed.npz", DType::F64),
        ("scipy_csr_stored_f32.npz", DType::F32),
    ] {
        let a = io::load_list(fixture(file)).unwrap().remove(0);
        assert_eq!(
            (a.stype(), a.dtype(), a.shape()),
            (SType::Csr, dtype, vec![3, 4]),
            "{file}"
        );
        assert_eq!(a.to_f64_vec(), KNOWN, "{file}");
        assert_eq!(
            csr_structure(&a),
            (vec![0, 2, 2, 4], vec![0, 2, 1, 3]),
            "{file}"
        );
    }
    let r = io::load_list(fixture("scipy_bsr_rows.npz"))
        .unwrap()
        .remove(0);
    assert_eq!((r.stype(), r.shape()), (SType::RowSparse, vec![4, 3]));
    assert_eq!(r.row_ids().unwrap(), [1, 3]);
    assert_eq!(
        r.to_f64_vec(),
        [0., 0., 0., 1., 2., 3., 0., 0., 0., 4., 5., 6.]
    );
    let d = io::load(fixture("numpy_savez_compressed.npz")).unwrap();
    let names: Vec<&str> = d.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ids", "w"]);
    assert_eq!(
        (d[0].1.dtype(), d[0].1.to_f64_vec()),
        (DType::I64, vec![0., 1., 2., 3., 4., 5.])
    );
    assert_eq!((d[1].1.dtype(), d[1].1.shape()), (DType::F32, vec![2, 2]));
    assert_eq!(d[1].1.to_f64_vec(), [0.5, -1.0, 2.0, 8.0]);
}

/// Writes the files `scripts/check_sparse_files.py` reads with SciPy, NumPy and
/// `safetensors` (folder in SPARROW_SPARSE_FILES_OUT, or the test target's tmp folder), and
/// checks they load back here.
#[test]
fn writes_files_for_python_check() {
    let out = std::env::var("SPARROW_SPARSE_FILES_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_TARGET_TMPDIR")).join("sparrow_sparse_files"));
    std::fs::create_dir_all(&out).unwrap();
    let csr = NDArray::from_vec(KNOWN.to_vec(), &[3, 4])
        .unwrap()
        .tostype(SType::Csr)
        .unwrap();
    let rsp = NDArray::row_sparse_from_parts(vec![1.0f32, 2., 3., 4., 5., 6.], vec![1, 3], &[4, 3])
        .unwrap();
    let w = NDArray::arange_i64(0, 6, 1)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap();
    io::save_list(out.join("csr.npz"), &[&csr]).unwrap();
    io::save_list_with(
        out.join("csr_deflate.npz"),
        &[&csr],
        SaveOptions { npz_deflate: true },
    )
    .unwrap();
    io::save_list(out.join("rsp.npz"), &[&rsp]).unwrap();
    let dict = [("w", &w), ("x", &csr), ("g", &rsp)];
    io::save(out.join("dict.npz"), &dict).unwrap();
    io::save(out.join("dict.safetensors"), &dict).unwrap();
    // Half precision: an f16 csr as SciPy's file, an f16 dense array as safetensors.
    let csr16 = csr.astype(DType::F16).unwrap();
    io::save_list(out.join("csr_f16.npz"), &[&csr16]).unwrap();
    let rows16 = rsp
        .tostype(SType::Dense)
        .unwrap()
        .astype(DType::F16)
        .unwrap();
    io::save(out.join("half.safetensors"), &[("h", &rows16)]).unwrap();
    assert_same(
        &csr16,
        &io::load_list(out.join("csr_f16.npz")).unwrap()[0],
        "csr_f16.npz",
    );
    for f in ["dict.npz", "dict.safetensors"] {
        let back = io::load(out.join(f)).unwrap();
        for ((_, a), (_, b)) in dict.iter().zip(&back) {
            assert_same(a, b, f);
        }
    }
}
