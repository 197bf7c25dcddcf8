//! Array files (`sparrow_core::io`): whatever the bytes, `io::load` returns Ok or an error,
//! never panics or allocates what the file merely claims; arrays that load pass the full
//! format check and can be read. The first byte picks the file to start from (safetensors,
//! stored npz, deflated npz, SciPy's single-array npz); the rest becomes a file three ways
//! (see `sparrow_fuzz::make_file`: raw bytes, bytes flipped, or for safetensors metadata and
//! tensors rewritten with the checksums recomputed).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sparrow_core::io::{self, SaveOptions};
use sparrow_core::{DType, NDArray, SType};

/// Valid files of each kind: a dense, a csr and a row_sparse array.
fn valid() -> &'static [(&'static str, Vec<u8>)] {
    static VALID: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    VALID.get_or_init(|| {
        let d = NDArray::from_vec(vec![1.0f32, 0.0, 2.5, 0.0, 0.0, 4.0], &[2, 3]).expect("dense");
        let c = d.astype(DType::F64).and_then(|a| a.tostype(SType::Csr)).expect("csr");
        let r = NDArray::row_sparse_from_parts(vec![1i64, 2, 3, 4], vec![1, 3], &[5, 2])
            .expect("row_sparse");
        let dict = [("d", &d), ("c", &c), ("r", &r)];
        let mut out = Vec::new();
        for (ext, deflate, single) in [
            ("safetensors", false, false),
            ("npz", false, false),
            ("npz", true, false),
            ("npz", true, true),
        ] {
            let path = sparrow_fuzz::scratch(&format!("arrays-valid.{ext}"));
            let opts = SaveOptions {
                npz_deflate: deflate,
            };
            if single {
                io::save_list_with(&path, &[&c], opts).expect("save");
            } else {
                io::save_with(&path, &dict, opts).expect("save");
            }
            out.push((ext, std::fs::read(&path).expect("read back")));
        }
        out
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let kinds = valid();
    let (ext, bytes) = &kinds[pick as usize % kinds.len()];
    let file = sparrow_fuzz::make_file(bytes, rest);
    let path = sparrow_fuzz::scratch(&format!("arrays.{ext}"));
    std::fs::write(&path, &file).expect("scratch write");
    if let Ok(arrays) = io::load(&path) {
        for (_, a) in arrays {
            a.check_format(true).expect("a loaded array passes check_format");
            let _ = a.to_f64_vec();
        }
    }
});
