//! A LibSVMIter batch of 1024 x 10,000,000 (1.024e10 elements as a dense array, which MXNet's
//! LibSVMIter refuses): the batch stays csr, its column ids reach the last feature, and a
//! product with a dense weight reads the right rows of it.

use std::io::Write;

use sparrow_core::{DType, NDArray, SType};
use sparrow_data::libsvm::{LibSVMIter, LibSVMIterParams};

const FEATURES: usize = 10_000_000;
const BATCH: usize = 1024;

#[test]
fn batch_of_1024_by_10_million() {
    let dir = std::env::temp_dir().join(format!("sparrow_wide_batches_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wide.libsvm");
    // Row r has features (r mod 1024) * 9_765 and the last feature, so the first batch spans every
    // column range; values r + 1 and 0.5.
    let rows = BATCH + 7;
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for r in 0..rows {
        writeln!(
            f,
            "{} {}:{} {}:0.5",
            r % 2,
            (r % BATCH) * 9_765,
            r + 1,
            FEATURES - 1
        )
        .unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();

    let mut it = LibSVMIter::new(LibSVMIterParams::new(&path, FEATURES, BATCH)).unwrap();
    let b = it.next().unwrap().unwrap();
    assert_eq!(b.data.stype(), SType::Csr);
    assert_eq!(b.data.shape(), vec![BATCH, FEATURES]);
    assert_eq!(b.data.nnz(), 2 * BATCH);
    b.data
        .with_csr::<f32, _>(|v| {
            let last = BATCH - 1;
            let (s, e) = (v.indptr[last] as usize, v.indptr[last + 1] as usize);
            assert_eq!(
                &v.indices[s..e],
                &[(last * 9_765) as i64, (FEATURES - 1) as i64]
            );
            assert_eq!(&v.values[s..e], &[BATCH as f32, 0.5]);
        })
        .unwrap();
    // dot with a 10,000,000 x 1 weight: w[j] = 1 at the last feature and 2 at row r's first.
    let mut w = vec![0f32; FEATURES];
    w[FEATURES - 1] = 1.0;
    w[(BATCH - 1) * 9_765] = 2.0;
    let w = NDArray::from_vec(w, &[FEATURES, 1]).unwrap();
    let y = b.data.dot(&w).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    let y = y.to_vec::<f32>().unwrap();
    assert_eq!(y[0], 0.5);
    assert_eq!(y[BATCH - 1], 2.0 * BATCH as f32 + 0.5);
    std::fs::remove_dir_all(&dir).ok();
}
