//! `CSVIter` against a plain reference parse of the same bytes: with any row width, batch size
//! and block size, the iterator (last batch kept) yields exactly the reference's values, bit
//! for bit, or an error when the reference refuses the file. It may not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sparrow_data::csv::{CSVIter, CSVIterParams};
use sparrow_data::LastBatch;

/// Lines holding a row (not only blanks), each split at commas, each value trimmed of blanks
/// and parsed by the standard library; `None` for anything the iterator must refuse.
fn reference(text: &[u8], width: usize) -> Option<Vec<u32>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut out = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != width {
            return None;
        }
        for f in fields {
            let v: f32 = f.trim_matches(|c| matches!(c, ' ' | '\t' | '\r')).parse().ok()?;
            if !v.is_finite() {
                return None;
            }
            out.push(v.to_bits());
        }
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let [f0, f1, f2, text @ ..] = data else {
        return;
    };
    let width = 1 + *f0 as usize % 4;
    let batch_size = 1 + *f1 as usize % 8;
    let block_rows = 1 + *f2 as usize % 8;
    let path = sparrow_fuzz::scratch("iter.csv");
    std::fs::write(&path, text).expect("scratch write");
    let mut p = CSVIterParams::new(&path, &[width], batch_size);
    p.last_batch = LastBatch::Keep;
    p.block_rows = block_rows;
    let mut got = Vec::new();
    let mut error = false;
    match CSVIter::new(p) {
        Err(_) => error = true,
        Ok(it) => {
            for b in it {
                let Ok(b) = b else {
                    error = true;
                    break;
                };
                assert_eq!(b.data.shape()[1], width);
                let v = b.data.to_vec::<f32>().expect("f32 batch");
                got.extend(v.iter().map(|v| v.to_bits()));
            }
        }
    }
    match reference(text, width) {
        None => assert!(error, "the reference refused the file, the iterator did not"),
        Some(want) => {
            assert!(!error, "the iterator refused a file the reference accepts");
            assert_eq!(got, want);
        }
    }
});
