//! Parameter files: whatever the bytes, `load_params` returns Ok or an error, never panics or
//! allocates what the file merely claims; a load that succeeds leaves every parameter with its
//! shape. The input becomes a file three ways (see `sparrow_fuzz::make_file`), the deepest
//! being a valid file whose metadata (`rows:`, `layout:`, ...) and tensors were rewritten and
//! whose checksums were then recomputed.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sparrow_core::{Device, SType};
use sparrow_nn::{
    load_params, save_params, Block, Dense, Initializer, LoadOptions, SaveOptions, Sequential,
};

/// A model with a row_sparse-gradient Dense (its own file layout and `rows:` metadata) and a
/// plain one.
fn model() -> Sequential {
    let mut net = Sequential::new();
    net.add(Dense::new(4).in_units(3).grad_stype(SType::RowSparse));
    net.add(Dense::new(2).in_units(4));
    net.initialize(&Initializer::Constant(0.5), Device::Cpu)
        .expect("initialize");
    net
}

fn valid() -> &'static [u8] {
    static VALID: OnceLock<Vec<u8>> = OnceLock::new();
    VALID.get_or_init(|| {
        let path = sparrow_fuzz::scratch("params-valid");
        let p = model().collect_params().expect("params");
        save_params(&p, &path, SaveOptions::default()).expect("save");
        std::fs::read(&path).expect("read back")
    })
}

fuzz_target!(|data: &[u8]| {
    let file = sparrow_fuzz::make_file(valid(), data);
    let path = sparrow_fuzz::scratch("params");
    std::fs::write(&path, &file).expect("scratch write");
    let net = model();
    let params = net.collect_params().expect("params");
    let shapes: Vec<Vec<usize>> = params
        .iter()
        .map(|(_, p)| p.data().expect("data").shape())
        .collect();
    for opts in [
        LoadOptions::default(),
        LoadOptions {
            allow_missing: true,
            ignore_extra: true,
        },
    ] {
        if load_params(&params, &path, opts).is_ok() {
            let now: Vec<Vec<usize>> = params
                .iter()
                .map(|(_, p)| p.data().expect("data").shape())
                .collect();
            assert_eq!(now, shapes, "a load changed a parameter's shape");
        }
    }
});
