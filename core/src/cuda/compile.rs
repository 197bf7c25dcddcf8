//! The CUDA C kernels and the one way they are compiled: NVRTC through cudarc, to PTX for a
//! virtual architecture (`compute_XY`), which the driver finishes for the device. The runtime
//! (`CudaDev::function`) and the build check (`examples/cuda_kernels_check.rs`, run by
//! `.ci/run`, which also assembles each PTX with `ptxas`) both call [`compile_ptx`], so a
//! kernel that does not compile fails CI on a machine without a GPU.

use crate::error::{Error, Result};

/// One kernel source file, embedded in the library.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// The file name under `core/src/cuda/kernels/` (also the module's cache key).
    pub file: &'static str,
    /// The CUDA C text.
    pub text: &'static str,
}

/// Every kernel source of the backend.
pub fn kernel_sources() -> Vec<KernelSource> {
    vec![
        KernelSource {
            file: "structural.cu",
            text: include_str!("kernels/structural.cu"),
        },
        KernelSource {
            file: "elementwise.cu",
            text: include_str!("kernels/elementwise.cu"),
        },
        KernelSource {
            file: "reduce.cu",
            text: include_str!("kernels/reduce.cu"),
        },
        KernelSource {
            file: "linalg.cu",
            text: include_str!("kernels/linalg.cu"),
        },
        KernelSource {
            file: "layout.cu",
            text: include_str!("kernels/layout.cu"),
        },
        KernelSource {
            file: "sparse_dot.cu",
            text: include_str!("kernels/sparse_dot.cu"),
        },
        KernelSource {
            file: "sparse.cu",
            text: include_str!("kernels/sparse.cu"),
        },
        KernelSource {
            file: "update.cu",
            text: include_str!("kernels/update.cu"),
        },
        KernelSource {
            file: "conv.cu",
            text: include_str!("kernels/conv.cu"),
        },
        KernelSource {
            file: "rnn.cu",
            text: include_str!("kernels/rnn.cu"),
        },
    ]
}

/// Compile `src` with NVRTC to PTX for `arch` (`compute_80`, `compute_90`, ...). A missing
/// NVRTC library or a compile error is an [`Error::Device`] (the latter with NVRTC's log).
pub fn compile_ptx(src: &KernelSource, arch: &str) -> Result<String> {
    // SAFETY: only loads the library by name to see whether it exists (cudarc would panic on
    // a missing one).
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::Device {
            op: "cuda",
            msg: "no NVRTC library found (libnvrtc.so.12 on LD_LIBRARY_PATH)".into(),
        });
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".into(),
            // Kernels are written for row counts and sizes below 2^63; no fast-math: results
            // must match the CPU's to the tests' tolerances.
            "--fmad=true".into(),
        ],
        name: Some(src.file.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src.text, opts)
        .map(|ptx| ptx.to_src())
        .map_err(|e| {
            let detail = match &e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => other.to_string(),
            };
            Error::Device {
                op: "cuda",
                msg: format!("NVRTC could not compile {} for {arch}:\n{detail}", src.file),
            }
        })
}
