//! Finding CUDA on this machine, and the state kept per device.
//!
//! cudarc, built with dynamic loading, opens the driver (`libcuda`), NVRTC and cuBLAS on first
//! use and panics when one is missing. Everything here checks first: no driver library is
//! "no CUDA driver library found", a driver without a GPU is "no GPU found", and a missing
//! NVRTC or cuBLAS is named when a device is first opened. The answers are cached: the
//! device harness and `Device::is_available` ask on every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::error::{Error, Result};

/// The device error of the CUDA backend.
pub(crate) fn cuda_error(op: &'static str, msg: impl Into<String>) -> Error {
    Error::Device {
        op,
        msg: msg.into(),
    }
}

/// Run a cudarc call that may panic (a symbol missing from an old driver library) and turn
/// the panic into an error naming `what`.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| cuda_error("cuda", format!("{what}: the CUDA library call failed")))
}

/// How many CUDA devices this machine has, or why it has none: no driver library, a driver
/// that reports no device, or a driver error. Asked once per process.
pub(crate) fn cuda_device_count() -> Result<usize> {
    static COUNT: OnceLock<Result<usize>> = OnceLock::new();
    COUNT
        .get_or_init(|| {
            // SAFETY: loads the driver library by name to see whether it exists; no symbol of
            // it is called here.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(cuda_error(
                    "cuda",
                    "no CUDA driver library found (libcuda.so: is an NVIDIA driver installed?)",
                ));
            }
            match guarded("cuInit", CudaContext::device_count)? {
                Ok(n) if n > 0 => Ok(n as usize),
                Ok(_) => Err(cuda_error(
                    "cuda",
                    "no GPU found (the CUDA driver reports 0 devices)",
                )),
                Err(e) => Err(cuda_error(
                    "cuda",
                    format!("no GPU found (the CUDA driver says {e})"),
                )),
            }
        })
        .clone()
}

/// One CUDA device as the backend uses it: its context, the stream every kernel and copy of
/// this process runs on (one stream keeps the order of operations the order of calls, as on
/// the CPU), the modules compiled for it, and a cuBLAS handle on that stream.
pub(crate) struct CudaDev {
    /// The device's number.
    pub(crate) ordinal: usize,
    /// The primary context.
    pub(crate) ctx: Arc<CudaContext>,
    /// The stream of every launch and copy.
    pub(crate) stream: Arc<CudaStream>,
    /// `compute_XY` of the device, what NVRTC compiles for.
    pub(crate) arch: &'static str,
    /// Compiled modules by kernel file name.
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    /// Loaded functions by kernel file and name.
    functions: Mutex<HashMap<(&'static str, &'static str), CudaFunction>>,
    /// cuBLAS, made at the first product.
    blas: OnceLock<std::result::Result<CudaBlas, String>>,
    /// True while the stream records a CUDA graph (`capture.rs`): a copy to the host then
    /// would not run (the host would read whatever its buffer held), so it is an error.
    pub(crate) capturing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for CudaDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDev({}, {})", self.ordinal, self.arch)
    }
}

/// The architecture NVRTC compiles for on a device of compute capability `major.minor`: its
/// own virtual architecture where NVRTC 12 knows it, else the newest one it does (the driver
/// compiles that PTX for the device).
fn arch_for(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (7, 0) => "compute_70",
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, _) => "compute_90",
        (m, _) if m >= 10 => "compute_90",
        (8, _) => "compute_80",
        _ => "compute_70",
    }
}

/// The environment variable naming a folder of prebuilt PTX (`<stem>.<arch>.ptx`, as
/// `examples/cuda_kernels_check.rs --out` writes them): when set, kernels are loaded from there
/// instead of compiled with NVRTC, for a GPU machine without an NVRTC library
/// (`scripts/gpu_check.sh` ships them).
pub(crate) const PTX_DIR_VAR: &str = "SPARROW_CUDA_PTX_DIR";

/// The prebuilt PTX of kernel file `file` for `arch` from folder `dir`.
fn prebuilt_ptx(dir: &std::ffi::OsStr, file: &str, arch: &str) -> Result<String> {
    let stem = file.trim_end_matches(".cu");
    let path = std::path::Path::new(dir).join(format!("{stem}.{arch}.ptx"));
    std::fs::read_to_string(&path).map_err(|e| {
        cuda_error(
            "cuda",
            format!("{PTX_DIR_VAR}: cannot read {}: {e}", path.display()),
        )
    })
}

impl CudaDev {
    /// The device `ordinal`, opened once per process (later calls share it).
    pub(crate) fn get(ordinal: usize) -> Result<Arc<CudaDev>> {
        static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<CudaDev>>>> = OnceLock::new();
        let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = map.get(&ordinal) {
            return Ok(d.clone());
        }
        let count = cuda_device_count()?;
        if ordinal >= count {
            return Err(cuda_error(
                "cuda",
                format!("no CUDA device {ordinal}: this machine has {count}"),
            ));
        }
        // SAFETY: only loads the library by name to see whether it exists.
        if std::env::var_os(PTX_DIR_VAR).is_none()
            && !unsafe { cudarc::nvrtc::sys::is_culib_present() }
        {
            return Err(cuda_error(
                "cuda",
                "no NVRTC library found (libnvrtc.so.12: install the CUDA toolkit or the \
                 nvidia-cuda-nvrtc-cu12 wheel and put its lib folder on LD_LIBRARY_PATH)",
            ));
        }
        let ctx = guarded("cuCtx", || CudaContext::new(ordinal))?
            .map_err(|e| cuda_error("cuda", format!("opening device {ordinal}: {e}")))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| cuda_error("cuda", format!("device {ordinal}: {e}")))?;
        // SAFETY: every allocation, copy, kernel and cuBLAS call of this backend on this device
        // runs on its one stream (`stream`, below) in call order, so cudarc's per-buffer events
        // for synchronizing several streams are never needed (they cost two event records per
        // launch); called before any buffer of the context exists.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own, not the legacy default stream: only such a stream can be
        // captured into a CUDA graph (`capture.rs`).
        let stream = ctx
            .new_stream()
            .map_err(|e| cuda_error("cuda", format!("a stream on device {ordinal}: {e}")))?;
        let dev = Arc::new(CudaDev {
            ordinal,
            ctx,
            stream,
            arch: arch_for(major, minor),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            blas: OnceLock::new(),
            capturing: std::sync::atomic::AtomicBool::new(false),
        });
        map.insert(ordinal, dev.clone());
        Ok(dev)
    }

    /// The kernel `name` of the source file `file`, compiled for this device at its first use
    /// and kept (per device: a module belongs to one context).
    pub(crate) fn function(&self, file: &'static str, name: &'static str) -> Result<CudaFunction> {
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(file, name))
        {
            return Ok(f.clone());
        }
        let module = {
            let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            match modules.get(file) {
                Some(m) => m.clone(),
                None => {
                    let src = super::compile::kernel_sources()
                        .into_iter()
                        .find(|k| k.file == file)
                        .ok_or_else(|| cuda_error("cuda", format!("no kernel file {file}")))?;
                    let ptx = match std::env::var_os(PTX_DIR_VAR) {
                        Some(dir) => prebuilt_ptx(&dir, file, self.arch)?,
                        None => super::compile::compile_ptx(&src, self.arch)?,
                    };
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
                        .map_err(|e| {
                            cuda_error(
                                "cuda",
                                format!("loading {file} on device {}: {e}", self.ordinal),
                            )
                        })?;
                    modules.insert(file, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(name)
            .map_err(|e| cuda_error("cuda", format!("kernel {name} of {file}: {e}")))?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((file, name), f.clone());
        Ok(f)
    }

    /// `src` copied to the host, after the work queued before it; an error while the stream
    /// records a CUDA graph (the copy would only be recorded, its values not yet there).
    pub(crate) fn read_to_host<T, S>(&self, op: &'static str, src: &S) -> Result<Vec<T>>
    where
        T: cudarc::driver::DeviceRepr,
        S: cudarc::driver::DevicePtr<T>,
    {
        if self.capturing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(cuda_error(
                op,
                "reads device memory on the host, which a step captured as a CUDA graph cannot \
                 do (the read would be recorded, not run)",
            ));
        }
        self.stream
            .clone_dtoh(src)
            .map_err(|e| cuda_error(op, format!("CUDA: {e}")))
    }

    /// The cuBLAS handle on this device's stream (made at first use; a missing cuBLAS library
    /// is an error naming it).
    pub(crate) fn blas(&self) -> Result<&CudaBlas> {
        let made = self.blas.get_or_init(|| {
            // SAFETY: only loads the library by name to see whether it exists.
            if !unsafe { cudarc::cublas::sys::is_culib_present() } {
                return Err("no cuBLAS library found (libcublas.so.12)".to_string());
            }
            CudaBlas::new(self.stream.clone()).map_err(|e| format!("cuBLAS: {e}"))
        });
        made.as_ref().map_err(|e| cuda_error("dot", e.clone()))
    }
}
