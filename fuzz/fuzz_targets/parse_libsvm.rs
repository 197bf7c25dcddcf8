//! Feed arbitrary bytes to the LibSVM parser under every option combination: it must return
//! Ok or a positioned error, never panic; on success the CSR parts must be consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sparrow_data::libsvm::{parse_libsvm_bytes, IndexBase, LibSvmOptions};

fuzz_target!(|data: &[u8]| {
    let [flags, flags2, text @ ..] = data else {
        return;
    };
    let (flags, flags2) = (*flags, *flags2);
    let base = match flags % 3 {
        0 => IndexBase::Zero,
        1 => IndexBase::One,
        _ => IndexBase::Auto,
    };
    let opts = LibSvmOptions {
        index_base: base,
        num_features: if flags & 4 != 0 { Some((flags >> 3) as usize * 7) } else { None },
        sort_indices: flags & 128 != 0,
        allow_non_finite: flags & 64 != 0,
        map_file: false,
        multilabel: flags2 & 1 != 0,
        ignore_qid: flags2 & 2 != 0,
        strict: flags2 & 4 != 0,
    };
    match parse_libsvm_bytes(text, "fuzz", &opts) {
        Ok(d) => {
            let r = &d.rows;
            assert_eq!(r.indptr.len(), r.len() + 1);
            assert_eq!(*r.indptr.last().unwrap() as usize, r.indices.len());
            assert_eq!(r.indices.len(), r.values.len());
            for w in 0..r.len() {
                let row = &r.indices[r.indptr[w] as usize..r.indptr[w + 1] as usize];
                assert!(row.windows(2).all(|p| p[0] < p[1]));
                assert!(row.iter().all(|&c| c >= 0 && (c as usize) < d.num_features));
            }
            if !opts.allow_non_finite {
                assert!(r.values.iter().all(|v| v.is_finite()));
            }
            assert_eq!(r.label_ptr.len(), r.len() + 1);
            assert_eq!(r.qids.len(), r.len());
            if !opts.multilabel {
                assert!(r.label_ptr.windows(2).all(|w| w[1] - w[0] == 1));
            }
            if opts.ignore_qid {
                assert!(r.qids.iter().all(Option::is_none));
            }
            let _ = d.csr();
        }
        Err(e) => {
            let (line, col) = e.position().expect("parse errors carry a position");
            assert!(line >= 1 && col >= 1);
        }
    }
});
