//! The streaming `LibSVMIter` against the whole-file loader on the same bytes: with every
//! block size, batch size, index base and sorting choice, the two must agree. When the loader
//! accepts the file and every row has one label, the iterator's batches (last batch kept)
//! hold exactly the loader's rows, labels and values; when the loader refuses it, the
//! iterator reports an error too. Neither may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sparrow_data::libsvm::{load_libsvm, IndexBase, LibSVMIter, LibSVMIterParams, LibSvmOptions};
use sparrow_data::LastBatch;

const FEATURES: usize = 40;

#[derive(Debug, Default, PartialEq)]
struct Rows {
    lens: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<u32>,
    labels: Vec<u32>,
}

fuzz_target!(|data: &[u8]| {
    let [f0, f1, f2, text @ ..] = data else {
        return;
    };
    let base = match f0 % 3 {
        0 => IndexBase::Zero,
        1 => IndexBase::One,
        _ => IndexBase::Auto,
    };
    let sort = f0 & 4 != 0;
    let batch_size = 1 + *f1 as usize % 16;
    let block_bytes = 16 + *f2 as usize * 8;
    let path = sparrow_fuzz::scratch("stream.libsvm");
    std::fs::write(&path, text).expect("scratch write");

    let opts = LibSvmOptions {
        index_base: base,
        num_features: Some(FEATURES),
        sort_indices: sort,
        allow_non_finite: false,
        map_file: f0 & 8 != 0,
        multilabel: false,
        ignore_qid: false,
        strict: f0 & 32 != 0,
    };
    let whole = load_libsvm(&path, &opts);

    let mut p = LibSVMIterParams::new(&path, FEATURES, batch_size);
    p.last_batch = LastBatch::Keep;
    p.index_base = base;
    p.sort_indices = sort;
    p.block_bytes = block_bytes;
    p.map_files = f0 & 16 != 0;
    p.strict = f0 & 32 != 0;
    let mut streamed = Rows::default();
    let mut stream_error = false;
    match LibSVMIter::new(p) {
        Err(_) => stream_error = true,
        Ok(it) => {
            for b in it {
                let Ok(b) = b else {
                    stream_error = true;
                    break;
                };
                assert_eq!(b.pad, 0, "LastBatch::Keep pads nothing");
                b.data
                    .with_csr::<f32, _>(|c| {
                        assert_eq!(c.shape[1], FEATURES);
                        streamed.lens.extend(c.indptr.windows(2).map(|w| w[1] - w[0]));
                        streamed.indices.extend_from_slice(c.indices);
                        streamed.values.extend(c.values.iter().map(|v| v.to_bits()));
                    })
                    .expect("a csr batch");
                let label = b.label.expect("labels").to_vec::<f32>().expect("f32 labels");
                streamed.labels.extend(label.iter().map(|v| v.to_bits()));
            }
        }
    }

    match whole {
        Err(_) => assert!(stream_error, "the loader refused the file, the iterator did not"),
        Ok(d) => {
            let r = &d.rows;
            let one_label = r.label_ptr.windows(2).all(|w| w[1] - w[0] == 1);
            if !one_label {
                return;
            }
            assert!(!stream_error, "the iterator refused a file the loader accepted");
            let want = Rows {
                lens: r.indptr.windows(2).map(|w| w[1] - w[0]).collect(),
                indices: r.indices.clone(),
                values: r.values.iter().map(|v| v.to_bits()).collect(),
                labels: r.labels.iter().map(|v| v.to_bits()).collect(),
            };
            assert_eq!(streamed, want);
        }
    }
});
