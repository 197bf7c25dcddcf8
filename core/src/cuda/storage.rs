//! Device memory of the CUDA backend: one typed buffer on one device.
//!
//! A buffer is an `Arc<CudaSlice<T>>`, shared by clones as `CpuStorage`'s `Arc<Vec<T>>` is
//! (detach, reshape); an in-place write ([`CudaStorage::make_mut`]) copies it first when it is
//! shared, the copy-on-write rule of the CPU backend. Every kernel and copy runs on the
//! device's one stream, so operations happen in the order they are called; a copy to the host
//! waits for the work before it.

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, PushKernelArg, ValidAsZeroBits,
};

use super::driver::{cuda_error, CudaDev};
use super::launch::{driver_err, grid};
use crate::cpu::CpuStorage;
use crate::dtype::{DType, Element};
use crate::error::Result;
use crate::Device;

/// A typed device buffer.
#[derive(Clone)]
pub(crate) enum CudaBuf {
    /// f32 elements.
    F32(Arc<CudaSlice<f32>>),
    /// f64 elements.
    F64(Arc<CudaSlice<f64>>),
    /// i64 elements.
    I64(Arc<CudaSlice<i64>>),
    /// i32 elements.
    I32(Arc<CudaSlice<i32>>),
    /// u8 elements.
    U8(Arc<CudaSlice<u8>>),
}

/// Run `$body` with `$v` bound to the typed `Arc<CudaSlice<T>>` of a [`CudaBuf`], whatever its
/// dtype (`$t` names the element type).
macro_rules! with_cuda {
    ($buf:expr, $v:ident, $t:ident => $body:expr) => {
        match $buf {
            $crate::cuda::storage::CudaBuf::F32($v) => {
                type $t = f32;
                $body
            }
            $crate::cuda::storage::CudaBuf::F64($v) => {
                type $t = f64;
                $body
            }
            $crate::cuda::storage::CudaBuf::I64($v) => {
                type $t = i64;
                $body
            }
            $crate::cuda::storage::CudaBuf::I32($v) => {
                type $t = i32;
                $body
            }
            $crate::cuda::storage::CudaBuf::U8($v) => {
                type $t = u8;
                $body
            }
        }
    };
}
pub(crate) use with_cuda;

/// An element type the CUDA kernels take: its name in kernel names and its [`CudaBuf`]
/// variant.
pub(crate) trait CudaElement: Element + DeviceRepr + ValidAsZeroBits {
    /// The suffix of this type's kernels (`f32`, `i64`, ...).
    const SUFFIX: &'static str;
    /// Wrap a slice of this type.
    fn wrap(s: CudaSlice<Self>) -> CudaBuf;
    /// The slice of a buffer of this type.
    fn unwrap(b: &CudaBuf) -> Option<&Arc<CudaSlice<Self>>>;
    /// The slice of a buffer of this type, mutably.
    fn unwrap_mut(b: &mut CudaBuf) -> Option<&mut Arc<CudaSlice<Self>>>;
}

macro_rules! cuda_element {
    ($t:ty, $variant:ident, $suffix:literal) => {
        impl CudaElement for $t {
            const SUFFIX: &'static str = $suffix;
            fn wrap(s: CudaSlice<Self>) -> CudaBuf {
                CudaBuf::$variant(Arc::new(s))
            }
            fn unwrap(b: &CudaBuf) -> Option<&Arc<CudaSlice<Self>>> {
                match b {
                    CudaBuf::$variant(s) => Some(s),
                    _ => None,
                }
            }
            fn unwrap_mut(b: &mut CudaBuf) -> Option<&mut Arc<CudaSlice<Self>>> {
                match b {
                    CudaBuf::$variant(s) => Some(s),
                    _ => None,
                }
            }
        }
    };
}
cuda_element!(f32, F32, "f32");
cuda_element!(f64, F64, "f64");
cuda_element!(i64, I64, "i64");
cuda_element!(i32, I32, "i32");
cuda_element!(u8, U8, "u8");

/// The error of a half (f16 / bf16) array on a CUDA device: the CUDA backend has no half
/// buffers yet (they need cudarc's `f16` feature and half kernels), so such an array stays on
/// the host; cast it to f32 first to move it.
pub(crate) fn half_not_ported(op: &'static str, ordinal: usize) -> crate::Error {
    cuda_error(
        op,
        format!(
            "no CUDA kernel for {op} of float16 / bfloat16 arrays yet (Cuda({ordinal})); \
             astype(F32) on the host, then to_device"
        ),
    )
}

/// The CUDA backend's storage: a typed buffer and the device that holds it.
#[derive(Clone)]
pub(crate) struct CudaStorage {
    /// The elements.
    pub(crate) buf: CudaBuf,
    /// Their device.
    pub(crate) dev: Arc<CudaDev>,
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaStorage({}, {} x {})",
            self.dev.ordinal,
            self.len(),
            self.dtype().name()
        )
    }
}

impl CudaStorage {
    /// The device's number.
    pub(crate) fn ordinal(&self) -> usize {
        self.dev.ordinal
    }
    /// The device.
    pub(crate) fn device(&self) -> Device {
        Device::Cuda(self.dev.ordinal)
    }
    /// The element type.
    pub(crate) fn dtype(&self) -> DType {
        match &self.buf {
            CudaBuf::F32(_) => DType::F32,
            CudaBuf::F64(_) => DType::F64,
            CudaBuf::I64(_) => DType::I64,
            CudaBuf::I32(_) => DType::I32,
            CudaBuf::U8(_) => DType::U8,
        }
    }
    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        with_cuda!(&self.buf, s, _T => s.len())
    }
    /// The typed slice (`None` when the dtype differs).
    pub(crate) fn slice<T: CudaElement>(&self) -> Option<&Arc<CudaSlice<T>>> {
        T::unwrap(&self.buf)
    }
    /// A new storage of `s` on this storage's device.
    pub(crate) fn with<T: CudaElement>(&self, s: CudaSlice<T>) -> CudaStorage {
        CudaStorage {
            buf: T::wrap(s),
            dev: self.dev.clone(),
        }
    }

    /// `n` elements of `T` on `dev`, not initialized: only for an operator's output whose
    /// kernel writes every element before anything reads it. [`CudaStorage::alloc`] zeroes
    /// its buffer with a memset, one more call on the stream for every operator that
    /// overwrites it anyway.
    pub(crate) fn alloc_overwritten<T: CudaElement>(
        dev: &CudaDev,
        op: &'static str,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        if n == 0 {
            return dev.stream.null::<T>().map_err(driver_err(op));
        }
        // SAFETY: device memory of `n` elements that no host reference sees; the caller's
        // kernel writes all of it before any read (this function's contract), so unset bytes
        // are never observed.
        unsafe { dev.stream.alloc::<T>(n) }.map_err(driver_err(op))
    }

    /// `n` zeros of `T` on `dev` (an empty buffer for `n == 0`, which the driver cannot
    /// allocate).
    pub(crate) fn alloc<T: CudaElement>(
        dev: &CudaDev,
        op: &'static str,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        if n == 0 {
            return dev.stream.null::<T>().map_err(driver_err(op));
        }
        dev.stream.alloc_zeros::<T>(n).map_err(driver_err(op))
    }

    /// `n` zeros of `dtype` on device `ordinal`.
    pub(crate) fn zeros(ordinal: usize, dtype: DType, n: usize) -> Result<CudaStorage> {
        let dev = CudaDev::get(ordinal)?;
        fn z<T: CudaElement>(dev: Arc<CudaDev>, n: usize) -> Result<CudaStorage> {
            let s = CudaStorage::alloc::<T>(&dev, "zeros", n)?;
            Ok(CudaStorage {
                buf: T::wrap(s),
                dev,
            })
        }
        match dtype {
            DType::F32 => z::<f32>(dev, n),
            DType::F64 => z::<f64>(dev, n),
            DType::I64 => z::<i64>(dev, n),
            DType::I32 => z::<i32>(dev, n),
            DType::U8 => z::<u8>(dev, n),
            DType::F16 | DType::BF16 => Err(half_not_ported("zeros", dev.ordinal)),
        }
    }

    /// A copy of host memory on device `ordinal` (the explicit host-to-device copy of
    /// `to_device`).
    pub(crate) fn from_host(ordinal: usize, host: &CpuStorage) -> Result<CudaStorage> {
        let dev = CudaDev::get(ordinal)?;
        fn up<T: CudaElement>(dev: Arc<CudaDev>, v: &[T]) -> Result<CudaStorage> {
            let s = if v.is_empty() {
                CudaStorage::alloc::<T>(&dev, "to_device", 0)?
            } else {
                dev.stream.clone_htod(v).map_err(driver_err("to_device"))?
            };
            Ok(CudaStorage {
                buf: T::wrap(s),
                dev,
            })
        }
        match host {
            CpuStorage::F32(v) => up(dev, v),
            CpuStorage::F64(v) => up(dev, v),
            CpuStorage::I64(v) => up(dev, v),
            CpuStorage::I32(v) => up(dev, v),
            CpuStorage::U8(v) => up(dev, v),
            CpuStorage::F16(_) | CpuStorage::BF16(_) => Err(half_not_ported("to_device", ordinal)),
        }
    }

    /// The elements copied to host memory (waits for the work queued before).
    pub(crate) fn to_host(&self) -> Result<CpuStorage> {
        fn down<T: CudaElement>(dev: &CudaDev, s: &CudaSlice<T>) -> Result<CpuStorage> {
            let v = if s.is_empty() {
                Vec::new()
            } else {
                dev.read_to_host("to_device", s)?
            };
            Ok(crate::cpu::HostElement::into_buffer(v))
        }
        with_cuda!(&self.buf, s, _T => down(&self.dev, s))
    }

    /// Element `i` as f64 (one element copied to the host).
    pub(crate) fn get_f64(&self, i: usize) -> Result<f64> {
        fn one<T: CudaElement>(dev: &CudaDev, s: &CudaSlice<T>, i: usize) -> Result<f64> {
            if i >= s.len() {
                return Err(crate::Error::index(
                    "get",
                    format!("element {i} of a buffer of {}", s.len()),
                ));
            }
            let v = dev.read_to_host("get", &s.slice(i..i + 1))?;
            Ok(v[0].to_f64())
        }
        with_cuda!(&self.buf, s, _T => one(&self.dev, s, i))
    }

    /// The buffer, writable: copied first when another storage shares it (copy-on-write).
    pub(crate) fn make_mut<T: CudaElement>(
        &mut self,
        op: &'static str,
    ) -> Result<&mut CudaSlice<T>> {
        let dev = self.dev.clone();
        let dtype = self.dtype();
        let slot = T::unwrap_mut(&mut self.buf)
            .ok_or_else(|| crate::Error::dtype_mismatch(op, dtype, T::DTYPE))?;
        if Arc::get_mut(slot).is_none() {
            let mut copy = CudaStorage::alloc::<T>(&dev, op, slot.len())?;
            if !slot.is_empty() {
                dev.stream
                    .memcpy_dtod(slot.as_ref(), &mut copy)
                    .map_err(driver_err(op))?;
            }
            *slot = Arc::new(copy);
        }
        Arc::get_mut(slot).ok_or_else(|| cuda_error(op, "buffer still shared after its copy"))
    }

    /// The device address of the buffer (what a captured CUDA graph holds on to: a buffer at
    /// another address is another buffer to it).
    pub(crate) fn address(&self) -> u64 {
        with_cuda!(&self.buf, s, _T => read_ptr(s.as_ref(), &self.dev))
    }

    /// True when no other storage shares this buffer (a write changes no one else's values).
    pub(crate) fn is_unshared(&self) -> bool {
        with_cuda!(&self.buf, s, _T => Arc::strong_count(s) == 1)
    }

    /// `src` copied into this buffer (same dtype and length; a shared buffer is copied first,
    /// as any write does).
    pub(crate) fn copy_from(&mut self, src: &CudaStorage) -> Result<()> {
        const OP: &str = "copy into a planned buffer";
        if src.len() != self.len() || src.dtype() != self.dtype() {
            return Err(crate::Error::shape(
                OP,
                format!(
                    "{} {} values into a buffer of {} {}",
                    src.len(),
                    src.dtype().name(),
                    self.len(),
                    self.dtype().name()
                ),
            ));
        }
        fn run<T: CudaElement>(dst: &mut CudaStorage, src: &CudaStorage) -> Result<()> {
            let dev = dst.dev.clone();
            let from = T::unwrap(&src.buf)
                .ok_or_else(|| crate::Error::dtype_mismatch(OP, src.dtype(), T::DTYPE))?;
            if from.is_empty() {
                return Ok(());
            }
            let to = dst.make_mut::<T>(OP)?;
            dev.stream
                .memcpy_dtod(from.as_ref(), to)
                .map_err(driver_err(OP))
        }
        match self.dtype() {
            DType::F32 => run::<f32>(self, src),
            DType::F64 => run::<f64>(self, src),
            DType::I64 => run::<i64>(self, src),
            DType::I32 => run::<i32>(self, src),
            DType::U8 => run::<u8>(self, src),
            DType::F16 | DType::BF16 => Err(half_not_ported(OP, self.ordinal())),
        }
    }

    /// Every element converted to `dtype` (`as` semantics through f64, as the CPU's cast).
    pub(crate) fn cast(&self, dtype: DType) -> Result<CudaStorage> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        fn run<S: CudaElement, D: CudaElement>(
            x: &CudaStorage,
            s: &CudaSlice<S>,
        ) -> Result<CudaStorage> {
            let n = s.len();
            let mut out = CudaStorage::alloc::<D>(&x.dev, "astype", n)?;
            if n > 0 {
                let name = cast_name(S::SUFFIX, D::SUFFIX);
                let f = x.dev.function("structural.cu", name)?;
                let mut b = x.dev.stream.launch_builder(&f);
                let n64 = n as u64;
                b.arg(s).arg(&mut out).arg(&n64);
                // SAFETY: `cast_S_D(const S*, D*, u64 n)` reads and writes `n` elements of
                // buffers of `n` elements.
                unsafe { b.launch(grid(n)) }.map_err(driver_err("astype"))?;
            }
            Ok(x.with(out))
        }
        with_cuda!(&self.buf, s, S => match dtype {
            DType::F32 => run::<S, f32>(self, s),
            DType::F64 => run::<S, f64>(self, s),
            DType::I64 => run::<S, i64>(self, s),
            DType::I32 => run::<S, i32>(self, s),
            DType::U8 => run::<S, u8>(self, s),
            DType::F16 | DType::BF16 => Err(half_not_ported("astype", self.ordinal())),
        })
    }

    /// The elements at `positions` (each below the length, checked here on the host before
    /// they move to the device), in that order.
    pub(crate) fn gather(&self, positions: &mut dyn Iterator<Item = usize>) -> Result<CudaStorage> {
        let len = self.len();
        let pos: Vec<i64> = positions
            .map(|p| {
                if p < len {
                    Ok(p as i64)
                } else {
                    Err(crate::Error::index(
                        "gather",
                        format!("position {p} of {len}"),
                    ))
                }
            })
            .collect::<Result<_>>()?;
        fn run<T: CudaElement>(
            x: &CudaStorage,
            s: &CudaSlice<T>,
            pos: &[i64],
        ) -> Result<CudaStorage> {
            let n = pos.len();
            let mut out = CudaStorage::alloc::<T>(&x.dev, "gather", n)?;
            if n > 0 {
                let p = x.dev.stream.clone_htod(pos).map_err(driver_err("gather"))?;
                let name = match std::mem::size_of::<T>() {
                    1 => "gather_b1",
                    4 => "gather_b4",
                    _ => "gather_b8",
                };
                let f = x.dev.function("structural.cu", name)?;
                let mut b = x.dev.stream.launch_builder(&f);
                let n64 = n as u64;
                b.arg(s).arg(&p).arg(&mut out).arg(&n64);
                // SAFETY: `gather_bK(const T* x, const i64* pos, T* out, u64 n)` reads `n`
                // positions, each checked above to lie inside `x`, and writes `n` elements.
                unsafe { b.launch(grid(n)) }.map_err(driver_err("gather"))?;
            }
            Ok(x.with(out))
        }
        with_cuda!(&self.buf, s, _T => run(self, s, &pos))
    }
}

/// The device address of `s`, for a kernel that reads it through a raw pointer.
pub(crate) fn read_ptr<T>(s: &CudaSlice<T>, dev: &CudaDev) -> u64 {
    // With event tracking off (see `driver.rs`) the guard waits for nothing.
    let (p, _guard) = s.device_ptr(&dev.stream);
    p
}

/// The device address of `s`, for a kernel that writes it through a raw pointer.
pub(crate) fn write_ptr<T>(s: &mut CudaSlice<T>, dev: &CudaDev) -> u64 {
    let (p, _guard) = s.device_ptr_mut(&dev.stream);
    p
}

/// The kernel name `cast_<from>_<to>` (static: kernels are cached by name).
fn cast_name(from: &str, to: &str) -> &'static str {
    const NAMES: [&str; 5] = ["f32", "f64", "i64", "i32", "u8"];
    const TABLE: [[&str; 5]; 5] = [
        [
            "cast_f32_f32",
            "cast_f32_f64",
            "cast_f32_i64",
            "cast_f32_i32",
            "cast_f32_u8",
        ],
        [
            "cast_f64_f32",
            "cast_f64_f64",
            "cast_f64_i64",
            "cast_f64_i32",
            "cast_f64_u8",
        ],
        [
            "cast_i64_f32",
            "cast_i64_f64",
            "cast_i64_i64",
            "cast_i64_i32",
            "cast_i64_u8",
        ],
        [
            "cast_i32_f32",
            "cast_i32_f64",
            "cast_i32_i64",
            "cast_i32_i32",
            "cast_i32_u8",
        ],
        [
            "cast_u8_f32",
            "cast_u8_f64",
            "cast_u8_i64",
            "cast_u8_i32",
            "cast_u8_u8",
        ],
    ];
    let at = |s: &str| NAMES.iter().position(|n| *n == s).unwrap_or(0);
    TABLE[at(from)][at(to)]
}
