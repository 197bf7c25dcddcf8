//! Element types, storage types and devices.

use crate::cpu::CpuStorage;

/// Element type of an array. `F32` is the default everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DType {
    /// 32-bit float (default).
    #[default]
    F32,
    /// 64-bit float.
    F64,
    /// 64-bit signed integer: the type of every stored index.
    I64,
    /// 32-bit signed integer.
    I32,
    /// 8-bit unsigned integer.
    U8,
    /// IEEE 754 half precision (`half::f16`): stored as 16 bits, computed in f32 on the CPU
    /// (inputs widened, the result rounded once to nearest even).
    F16,
    /// bfloat16 (`half::bf16`): f32's exponent range with an 8-bit mantissa; stored and
    /// computed as [`DType::F16`] is.
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn size_of(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
        }
    }
    /// True for the float types: F32, F64, F16 and BF16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
    /// True for the 16-bit float types (F16, BF16), which the CPU computes on in f32.
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }
    /// Lower-case name as NumPy spells it (`float32`, `int64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::U8 => "uint8",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
        }
    }
}

/// Storage type of an array (MXNet's `stype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SType {
    /// Contiguous row-major buffer.
    #[default]
    Dense,
    /// Compressed sparse rows (2-D only).
    Csr,
    /// A subset of rows stored densely, with their sorted unique row ids.
    RowSparse,
}

/// Where an array lives: host memory, or a CUDA device's memory (cargo feature `cuda`).
/// A new backend adds a variant here, a storage variant and a kernel folder beside
/// `core/src/cpu/` (see ARCHITECTURE.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory, computed with rayon and a GEMM crate.
    #[default]
    Cpu,
    /// CUDA device `ordinal` (0-based, as `nvidia-smi` numbers them): kernels compiled with
    /// NVRTC, products through cuBLAS. Available only in a build with the `cuda` feature on a
    /// machine with an NVIDIA driver and GPU; [`Device::cuda_status`] says why not.
    Cuda(usize),
}

impl Device {
    /// The devices this build can compute on and this machine has: the CPU always, then each
    /// compiled-in backend's devices that are present. Never panics: a build with the `cuda`
    /// feature on a machine without a driver or a GPU lists the CPU alone.
    pub fn available() -> Vec<Device> {
        let mut v = vec![Device::Cpu];
        if let Ok(n) = Device::cuda_status() {
            v.extend((0..n).map(Device::Cuda));
        }
        v
    }

    /// Whether this build can compute on `self` on this machine.
    pub fn is_available(self) -> bool {
        match self {
            Device::Cpu => true,
            Device::Cuda(i) => Device::cuda_status().is_ok_and(|n| i < n),
        }
    }

    /// Wait until every operation queued on this device has finished (a GPU runs kernels
    /// asynchronously; a timer around GPU work stops after this). Nothing to wait for on the
    /// CPU; an unavailable device is an [`Error::Device`](crate::Error::Device).
    pub fn synchronize(self) -> crate::Result<()> {
        match self {
            Device::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => crate::cuda::synchronize(i),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Device::unavailable_error("synchronize", self)),
        }
    }

    /// The number of CUDA devices this build can use, or an [`Error::Device`](crate::Error::Device)
    /// saying why there are none: the build lacks the `cuda` feature, no CUDA driver library
    /// was found, or the driver found no GPU. Looked up once per process; never panics.
    ///
    /// ```
    /// use sparrow_core::Device;
    /// match Device::cuda_status() {
    ///     Ok(n) => assert!(n > 0),
    ///     Err(e) => assert!(e.to_string().contains("cuda")),
    /// }
    /// ```
    pub fn cuda_status() -> crate::Result<usize> {
        #[cfg(feature = "cuda")]
        {
            crate::cuda::cuda_device_count()
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(crate::Error::Device {
                op: "cuda",
                msg: "this build has no CUDA backend (build with the cargo feature `cuda`)".into(),
            })
        }
    }

    /// The error of an operation asked to make an array on a device that is not available.
    pub(crate) fn unavailable_error(op: &'static str, device: Device) -> crate::Error {
        let why = match device {
            Device::Cpu => String::new(),
            Device::Cuda(_) => match Device::cuda_status() {
                Ok(n) => format!(": this machine has {n} CUDA device(s)"),
                Err(e) => format!(": {e}"),
            },
        };
        crate::Error::Device {
            op,
            msg: format!("device {device:?} is not available{why}"),
        }
    }
}

/// A Rust type that can be stored in an [`crate::NDArray`].
pub trait Element:
    crate::cpu::HostElement + Copy + Send + Sync + PartialOrd + Default + std::fmt::Debug + 'static
{
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Lossy conversion to f64 (exact for every value of every supported type but large i64).
    fn to_f64(self) -> f64;
    /// Conversion from f64 (saturating / truncating for integer types, as `as` does).
    fn from_f64(v: f64) -> Self;
}

/// Float element types (f32, f64): the types math operators and autograd work on.
pub trait Float: Element + num_traits::Float + num_traits::FloatConst + std::iter::Sum {
    /// `e^self` through an inlinable kernel where one exists (f32: within 2 ulp, see
    /// `cpu::expf`), so elementwise maps over it vectorize; f64 uses the libm `exp`.
    fn exp_fast(self) -> Self;
    /// [`Float::exp_fast`] for `self <= 0` (or NaN), where f32 skips its overflow handling
    /// (same bits). Other inputs give unspecified results.
    fn exp_fast_nonpos(self) -> Self {
        self.exp_fast()
    }
    /// `tanh` through an inlinable kernel where one exists (f32: `cpu::act_math`, within 3
    /// ulp, vectorizes); f64 uses the libm `tanh`.
    fn tanh_fast(self) -> Self {
        self.tanh()
    }
    /// `e^self - 1` likewise (f32: within 6 ulp); f64 uses the libm `expm1`.
    fn expm1_fast(self) -> Self {
        self.exp_m1()
    }
    /// The standard normal CDF and density at `self`, `(Phi, phi)` (f32: from one exponential and
    /// a fitted `erfc`, `cpu::act_math`, within 2e-6 relative); f64 from libm's `erfc` and `exp`.
    fn normal_cdf_pdf_fast(self) -> (Self, Self);
}
impl Float for f32 {
    #[inline(always)]
    fn exp_fast(self) -> f32 {
        crate::cpu::expf::exp_f32(self)
    }
    #[inline(always)]
    fn exp_fast_nonpos(self) -> f32 {
        crate::cpu::expf::exp_nonpos_f32(self)
    }
    #[inline(always)]
    fn tanh_fast(self) -> f32 {
        crate::cpu::act_math::tanh_f32(self)
    }
    #[inline(always)]
    fn expm1_fast(self) -> f32 {
        crate::cpu::act_math::expm1_f32(self)
    }
    #[inline(always)]
    fn normal_cdf_pdf_fast(self) -> (f32, f32) {
        crate::cpu::act_math::normal_cdf_pdf_f32(self)
    }
}
impl Float for f64 {
    #[inline(always)]
    fn exp_fast(self) -> f64 {
        self.exp()
    }
    #[inline]
    fn normal_cdf_pdf_fast(self) -> (f64, f64) {
        let cdf = 0.5 * libm::erfc(-self * std::f64::consts::FRAC_1_SQRT_2);
        let pdf = (-0.5 * self * self).exp() * 0.398_942_280_401_432_7;
        (cdf, pdf)
    }
}

/// The crate-private `HostElement` half of an element type: its `CpuStorage` variant and its
/// little-endian bytes (the same for every element type, half ones included).
macro_rules! impl_host_element {
    ($t:ty, $variant:ident) => {
        impl crate::cpu::HostElement for $t {
            fn slice(buf: &CpuStorage) -> Option<&[Self]> {
                match buf {
                    CpuStorage::$variant(v) => Some(&v[..]),
                    _ => None,
                }
            }
            fn into_buffer(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(std::sync::Arc::new(crate::cpu::HostBuf::owned(v)))
            }
            fn shared_buffer(v: std::sync::Arc<Vec<Self>>) -> CpuStorage {
                CpuStorage::$variant(std::sync::Arc::new(crate::cpu::HostBuf::shared(v)))
            }
            fn host_buffer(v: crate::cpu::HostBuf<Self>) -> CpuStorage {
                CpuStorage::$variant(std::sync::Arc::new(v))
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn put_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn from_le_slice(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    };
}

macro_rules! impl_element {
    ($t:ty, $variant:ident) => {
        impl_host_element!($t, $variant);
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
impl_element!(f32, F32);
impl_element!(f64, F64);
impl_element!(i64, I64);
impl_element!(i32, I32);
impl_element!(u8, U8);

/// `x` rounded to f32 *to odd*: truncated toward zero, the last bit set when that was inexact.
/// Rounding this to nearest even at a precision at least 2 bits narrower (f16: 11 bits, bf16:
/// 8, against f32's 24) gives the correctly rounded result of `x` itself; `half`'s own f64
/// conversions look at the upper 32 bits of the f64 only, so a value just above a tie whose
/// excess lies in the lower bits rounded down (1 + 2^-11 + 2^-30 became 1 in f16).
fn f64_to_f32_odd(x: f64) -> f32 {
    let r = x as f32;
    if !r.is_finite() || r as f64 == x || r.to_bits() & 1 == 1 {
        // Exact, overflowed (the half types overflow earlier), NaN, or already odd: an odd
        // result of rounding to nearest is also the round-to-odd result (it lies between the
        // same two even neighbours).
        return r;
    }
    // Inexact and even: step one ulp toward `x` (to the odd neighbour on `x`'s side).
    let toward_zero = (r as f64).abs() > x.abs();
    f32::from_bits(if toward_zero {
        r.to_bits() - 1
    } else {
        r.to_bits() + 1
    })
}

/// `Element` for the half types: from f64 through f32 rounded to odd, then `half`'s
/// round-to-nearest-even from f32 (F16C where the CPU has it), so every value is rounded once.
macro_rules! impl_half_element {
    ($t:ty, $variant:ident) => {
        impl_host_element!($t, $variant);
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f32(f64_to_f32_odd(v))
            }
        }
    };
}
impl_half_element!(half::f16, F16);
impl_half_element!(half::bf16, BF16);
