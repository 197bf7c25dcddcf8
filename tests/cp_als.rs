//! The CP-ALS recipe (examples/cp_als) on a memory-mapped tensor: it recovers an exact low-rank
//! tensor, and the file-backed run computes bit for bit what the in-memory run computes.

#[path = "../examples/cp_als/als.rs"]
mod als;

use sparrow::core::{DType, MapMode, NDArray};

#[test]
fn cp_als_recovers_a_low_rank_mapped_tensor_as_in_memory() {
    let dims = [24, 18, 12];
    let (rank, block) = (3, 5); // blocks of 5 slabs: the last one is short
    let dir = std::env::temp_dir().join(format!("sparrow-cp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.npy");
    let shape = [dims[0] * dims[1], dims[2]];
    let truth = als::init(dims, rank, 7).unwrap();
    let file = NDArray::create_npy(&path, &shape, DType::F32).unwrap();
    als::synthesize(&file, &truth, 0.0, block, 11).unwrap();
    file.flush().unwrap();
    drop(file);
    let mapped = NDArray::open_npy(&path, MapMode::ReadOnly).unwrap();
    let memory = NDArray::zeros(&shape, DType::F32).unwrap();
    als::synthesize(&memory, &truth, 0.0, block, 11).unwrap();
    assert_eq!(
        mapped.to_vec::<f32>().unwrap(),
        memory.to_vec::<f32>().unwrap()
    );

    let run = |x: &NDArray| {
        let x_sq = als::norm_sq(x, dims, block).unwrap();
        let mut f = als::init(dims, rank, 1).unwrap();
        let mut fits = Vec::new();
        for _ in 0..150 {
            fits.push(als::sweep(x, dims, &mut f, block, x_sq).unwrap().fit);
        }
        (fits, f.a.to_vec::<f32>().unwrap())
    };
    let (fits_mapped, a_mapped) = run(&mapped);
    let (fits_memory, a_memory) = run(&memory);
    assert_eq!(fits_mapped, fits_memory);
    assert_eq!(a_mapped, a_memory);
    let last = *fits_mapped.last().unwrap();
    assert!(
        last > 0.999,
        "fit {last}, first sweeps {:?}",
        &fits_mapped[..5]
    );
    // ALS never makes the fit worse, up to rounding: near a perfect fit the reported fit
    // (from ||X||^2 + ||X_hat||^2 - 2 <X, X_hat> over f32 products) is noisy by ~1e-4.
    assert!(
        fits_mapped.windows(2).all(|w| w[1] >= w[0] - 1e-3),
        "{fits_mapped:?}"
    );

    let bad = NDArray::zeros(&[10, 12], DType::F32).unwrap();
    assert!(als::check_shape(&bad, dims).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
