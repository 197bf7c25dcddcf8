//! The CUDA backend's device discovery and explicit copies, and (on a machine with a GPU) the
//! backend's kernels against the CPU's. Built only with the `cuda` feature; on a machine without
//! a driver or a GPU the discovery tests check the errors and the kernel tests print a skip
//! line.
#![cfg(feature = "cuda")]

use sparrow_core::{with_device, DType, Device, Error, NDArray};

/// The CUDA device under test, or `None` after printing why there is none.
fn gpu() -> Option<Device> {
    match Device::cuda_status() {
        Ok(_) => Some(Device::Cuda(0)),
        Err(e) => {
            sparrow_core::testing::skip_line(&format!("CUDA kernel test: {e}"));
            None
        }
    }
}

#[test]
fn discovery_never_panics_and_says_why_there_is_no_gpu() {
    let devices = Device::available();
    assert_eq!(devices[0], Device::Cpu);
    match Device::cuda_status() {
        Ok(n) => {
            assert!(n > 0);
            assert_eq!(devices.len(), 1 + n);
            assert!(Device::Cuda(n - 1).is_available());
            assert!(!Device::Cuda(n).is_available());
        }
        Err(Error::Device { msg, .. }) => {
            assert!(
                msg.contains("no CUDA driver library found") || msg.contains("no GPU found"),
                "unexpected reason: {msg}"
            );
            assert_eq!(devices, vec![Device::Cpu]);
            assert!(!Device::Cuda(0).is_available());
        }
        Err(other) => panic!("cuda_status: not a device error: {other}"),
    }
}

#[test]
fn an_unavailable_gpu_is_an_error_not_a_panic() {
    let n = Device::cuda_status().unwrap_or(0);
    let missing = Device::Cuda(n);
    let x = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let err = x.to_device(missing).unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err}");
    assert!(err.to_string().contains(&format!("{missing:?}")), "{err}");
    assert!(with_device(missing, || ()).is_err());
}

#[test]
fn copies_round_trip_every_dtype_and_storage_type() {
    let Some(dev) = gpu() else { return };
    let x = NDArray::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 7.0, -1.0], &[2, 3]).unwrap();
    for dtype in [DType::F32, DType::F64, DType::I64, DType::I32, DType::U8] {
        let h = x.astype(dtype).unwrap();
        let d = h.to_device(dev).unwrap();
        assert_eq!(d.device(), dev);
        assert_eq!(d.dtype(), dtype);
        let back = d.to_device(Device::Cpu).unwrap();
        assert_eq!(back.to_f64_vec(), h.to_f64_vec(), "{dtype:?}");
        // The cast kernel against the CPU's cast.
        for to in [DType::F32, DType::F64, DType::I64, DType::I32, DType::U8] {
            let on_gpu = d.astype(to).unwrap();
            assert_eq!(on_gpu.device(), dev);
            assert_eq!(
                on_gpu.to_f64_vec(),
                h.astype(to).unwrap().to_f64_vec(),
                "{dtype:?} -> {to:?}"
            );
        }
    }
    let csr = NDArray::csr_from_parts(vec![1.0f32, 2.0, 3.0], vec![0, 2, 1], vec![0, 2, 3], [2, 3])
        .unwrap();
    let d = csr.to_device(dev).unwrap();
    assert_eq!(d.device(), dev);
    assert_eq!(
        d.to_device(Device::Cpu).unwrap().to_f64_vec(),
        csr.to_f64_vec()
    );
}

#[test]
fn kernels_match_the_cpu() {
    let Some(dev) = gpu() else { return };
    let a = sparrow_core::testing::test_array(&[4, 5], -2.0, 2.0, 1);
    let b = sparrow_core::testing::test_array(&[1, 5], 0.5, 2.0, 2);
    let w = sparrow_core::testing::test_array(&[5, 3], -1.0, 1.0, 3);
    let (ga, gb, gw) = (
        a.to_device(dev).unwrap(),
        b.to_device(dev).unwrap(),
        w.to_device(dev).unwrap(),
    );
    let close = |x: &NDArray, y: &NDArray, what: &str| {
        assert_eq!(x.device(), dev, "{what} left the device");
        let (p, q) = (x.to_f64_vec(), y.to_f64_vec());
        assert_eq!(p.len(), q.len(), "{what}");
        for (i, (u, v)) in p.iter().zip(&q).enumerate() {
            assert!(
                (u - v).abs() <= 1e-9 * (1.0 + v.abs()),
                "{what}[{i}]: {u} vs {v}"
            );
        }
    };
    close(&ga.exp().unwrap(), &a.exp().unwrap(), "exp");
    close(&ga.sigmoid().unwrap(), &a.sigmoid().unwrap(), "sigmoid");
    close(
        &ga.add(&gb).unwrap(),
        &a.add(&b).unwrap(),
        "add with broadcasting",
    );
    close(
        &ga.mul(&gb).unwrap(),
        &a.mul(&b).unwrap(),
        "mul with broadcasting",
    );
    close(
        &ga.sum(Some(&[1]), false).unwrap(),
        &a.sum(Some(&[1]), false).unwrap(),
        "sum axis 1",
    );
    close(
        &ga.sum(None, false).unwrap(),
        &a.sum(None, false).unwrap(),
        "sum",
    );
    close(
        &ga.max(Some(&[0]), false).unwrap(),
        &a.max(Some(&[0]), false).unwrap(),
        "max axis 0",
    );
    close(&ga.softmax(1).unwrap(), &a.softmax(1).unwrap(), "softmax");
    close(
        &ga.log_softmax(1).unwrap(),
        &a.log_softmax(1).unwrap(),
        "log_softmax",
    );
    close(
        &ga.argmax(Some(1), false).unwrap(),
        &a.argmax(Some(1), false).unwrap(),
        "argmax",
    );
    close(&ga.dot(&gw).unwrap(), &a.dot(&w).unwrap(), "dot");
}

#[test]
fn an_op_without_a_cuda_kernel_says_so() {
    let Some(dev) = gpu() else { return };
    // csr x csr has no CUDA kernel yet (pooling, the example here before, has one now).
    let csr = |shape: &[usize], seed| {
        sparrow_core::sparse::rand_sparse_seeded(
            shape,
            0.5,
            sparrow_core::SType::Csr,
            sparrow_core::sparse::SparseDist::Uniform,
            seed,
        )
        .unwrap()
        .to_device(dev)
        .unwrap()
    };
    let err = sparrow_core::sparse::dot_csr_csr(&csr(&[4, 6], 1), &csr(&[6, 3], 2)).unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err}");
    assert!(err.to_string().contains("no CUDA kernel"), "{err}");
}

#[test]
fn a_copy_keeps_the_prepared_grouping_and_host_views_name_the_device() {
    let Some(gpu) = gpu() else { return };
    let x = sparrow_core::sparse::rand_sparse_seeded(
        &[8, 50],
        0.1,
        sparrow_core::SType::Csr,
        sparrow_core::sparse::SparseDist::Uniform,
        3,
    )
    .unwrap();
    assert!(x.prepare_csr_transpose());
    let y = x.to_device(gpu).unwrap();
    // The loader's grouping moves with the batch: the weight gradient on the GPU skips the sort.
    assert!(y.csr_column_groups().is_some());
    // A host view of a device array is an error naming the device, not a dtype mismatch.
    let err = y.with_csr::<f32, _>(|c| c.indices.len()).unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err}");
    gpu.synchronize().unwrap();
}
