//! Test helpers shared by the crates' tests: the device harness, finite-difference gradient
//! checking and seeded test arrays.
//!
//! Every op test is written once and runs on each available device: the
//! [`device_test!`](crate::device_test) macro, [`for_each_test_device`] (property tests),
//! [`with_test_device`] and [`check_grad_on_devices`] run a test body once per device inside
//! [`with_device`](crate::with_device)`(device, ..)`, the default-device scope. The body's
//! inputs are therefore made on the device under test by the plain constructors
//! (`NDArray::from_vec`, `zeros`, `ones`, `full`, `arange`, `eye`, the [`random`](crate::random)
//! fills, ...) and by [`test_array`]; [`test_device`] is that device. Sparse constructors
//! (`csr_from_parts`, `row_sparse_from_parts`, `sparse::cast_storage`, ...) are not scoped yet:
//! tests move their results with [`NDArray::to_device`]`(`[`test_device`]`())`, as [`test_csr`]
//! does. A backend switches its tests on by adding its devices to [`Device::available`]: with
//! the `cuda` feature on a machine with a GPU every such test also runs on `Device::Cuda(i)`.

use crate::error::{Error, Result};
use crate::{autograd, DType, Device, NDArray};

/// Compare autograd gradients of `f` with central finite differences.
///
/// The scalar checked is `sum(f(inputs) * r)` for a fixed pseudo-random `r`, so every output
/// element's gradient matters. Inputs should be f64 for precision; sparse inputs are perturbed
/// through their dense equivalent by `f` itself. Returns the largest relative error found, or an
/// error naming the input and element that disagree beyond `rtol`/`atol`.
pub fn check_grad<F>(f: F, inputs: &[NDArray], eps: f64, rtol: f64, atol: f64) -> Result<f64>
where
    F: Fn(&[NDArray]) -> Result<NDArray>,
{
    for x in inputs {
        x.attach_grad();
    }
    let out = autograd::record(|| f(inputs))?;
    let n = out.size();
    let mut state = 0x9E3779B97F4A7C15u64;
    let r: Vec<f64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            0.5 + (state % 1000) as f64 / 1000.0
        })
        .collect();
    let r_arr = NDArray::from_vec(r.clone(), &out.shape())?
        .astype(out.dtype())?
        .to_device(out.device())?;
    out.backward_with_grad(&r_arr)?;
    let scalar = |xs: &[NDArray]| -> Result<f64> {
        let y = autograd::pause(|| f(xs))?;
        Ok(y.to_f64_vec().iter().zip(&r).map(|(a, b)| a * b).sum())
    };
    let mut worst = 0.0f64;
    for (i, x) in inputs.iter().enumerate() {
        let analytic = x
            .grad()
            .map(|g| g.to_f64_vec())
            .unwrap_or_else(|| vec![0.0; x.size()]);
        let base = x.to_f64_vec();
        for j in 0..base.len() {
            let probe = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[j] += delta;
                let xs: Vec<NDArray> = inputs
                    .iter()
                    .enumerate()
                    .map(|(k, a)| {
                        if k == i {
                            NDArray::from_vec(v.clone(), &a.shape())
                                .and_then(|t| t.astype(a.dtype()))
                                .and_then(|t| t.to_device(a.device()))
                        } else {
                            Ok(a.detach())
                        }
                    })
                    .collect::<Result<_>>()?;
                scalar(&xs)
            };
            let numeric = (probe(eps)? - probe(-eps)?) / (2.0 * eps);
            let a = analytic[j];
            let err = (a - numeric).abs();
            let rel = err / numeric.abs().max(a.abs()).max(1e-12);
            if err > atol + rtol * numeric.abs() {
                return Err(Error::Autograd(format!(
                    "gradient check failed for input {i} element {j}: analytic {a}, numeric {numeric}"
                )));
            }
            worst = worst.max(rel.min(err));
        }
    }
    Ok(worst)
}

/// The devices op tests run on ([`Device::available`]). A build with a device backend but no
/// device of it (the `cuda` feature on a machine without a GPU) prints one visible skip line,
/// once per test process, saying why, and the tests run on the CPU alone.
pub fn test_devices() -> Vec<Device> {
    #[cfg(feature = "cuda")]
    {
        static SKIP: std::sync::Once = std::sync::Once::new();
        if let Err(e) = Device::cuda_status() {
            SKIP.call_once(|| skip_line(&format!("tests on CUDA devices: {e}")));
        }
    }
    Device::available()
}

/// [`check_grad`] on every test device, the inputs moved to each in turn and `f` run inside
/// that device's default-device scope (so constants `f` makes are made there too). Returns the
/// largest relative error over all devices.
pub fn check_grad_on_devices<F>(
    f: F,
    inputs: &[NDArray],
    eps: f64,
    rtol: f64,
    atol: f64,
) -> Result<f64>
where
    F: Fn(&[NDArray]) -> Result<NDArray>,
{
    let mut worst = 0.0f64;
    for_each_test_device(|device| {
        let xs = inputs
            .iter()
            .map(|x| x.detach().to_device(device))
            .collect::<Result<Vec<_>>>()?;
        let err = check_grad(&f, &xs, eps, rtol, atol)
            .map_err(|e| Error::Autograd(format!("on {device:?}: {e}")))?;
        worst = worst.max(err);
        Ok(())
    })?;
    Ok(worst)
}

/// The device the running test makes its inputs on: the default device
/// ([`Device::current`]), which the harness sets to the device under test.
pub fn test_device() -> Device {
    Device::current()
}

/// Run `f` inside [`with_device`](crate::with_device)`(device, ..)`: the default device, and so
/// [`test_device`] and where the plain constructors make arrays, is `device` until `f` returns
/// (restored afterwards, also when `f` panics).
///
/// # Panics
/// When `device` is not available (a harness error: the test devices come from
/// [`Device::available`]).
pub fn with_test_device<R>(device: Device, f: impl FnOnce() -> R) -> R {
    crate::with_device(device, f).unwrap_or_else(|e| panic!("test device: {e}"))
}

/// Print `SKIPPED: why` to the process's stderr directly: the test harness captures
/// `eprintln!` of passing tests, and a skip must stay visible.
pub fn skip_line(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// The words every "no kernel for this op on this backend yet" error carries
/// (`crate::cuda`'s not-ported error), by which the harness tells a missing kernel from a
/// wrong one.
pub const NOT_PORTED: &str = "no CUDA kernel for";

/// Whether a failure message is a backend's missing kernel (see [`NOT_PORTED`]).
pub fn is_not_ported(msg: &str) -> bool {
    msg.contains(NOT_PORTED)
}

/// The message of a panic payload (`panic!` with a string or a formatted message).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| p.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

/// Run a test body on `device`: on the CPU as it is; on another device, a failure that is a
/// kernel the backend has not ported yet ([`is_not_ported`], a panic or an error) prints one
/// visible `SKIPPED` line naming the test, the device and the op, instead of failing; any
/// other failure fails the test.
pub fn run_on_device<E: std::fmt::Display>(
    name: &str,
    device: Device,
    f: impl FnOnce() -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    if device == Device::Cpu {
        return with_test_device(device, f);
    }
    let run =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| with_test_device(device, f)));
    match run {
        Ok(Err(e)) if is_not_ported(&e.to_string()) => {
            skip_line(&format!("{name} on {device:?}: {e}"));
            Ok(())
        }
        Ok(r) => r,
        Err(p) if is_not_ported(panic_message(p.as_ref())) => {
            skip_line(&format!(
                "{name} on {device:?}: {}",
                panic_message(p.as_ref())
            ));
            Ok(())
        }
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Run `f` once per test device inside that device's default-device scope
/// ([`with_test_device`]); stops at the first error. For property tests, whose bodies return
/// `Result<(), TestCaseError>`. An op without a kernel on a device is a skip line
/// ([`run_on_device`]).
pub fn for_each_test_device<E: std::fmt::Display>(
    mut f: impl FnMut(Device) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    for device in test_devices() {
        run_on_device("test", device, || f(device))?;
    }
    Ok(())
}

/// A test that runs once per test device, inside that device's default-device scope
/// ([`with_test_device`]), so arrays its body makes with the plain constructors are made there:
/// `device_test! { fn name() { ... } }`. Each run prints the device first, so a failure's
/// captured output names it; an op the device has no kernel for yet is a `SKIPPED` line
/// ([`run_on_device`]).
#[macro_export]
macro_rules! device_test {
    ($(#[$meta:meta])* fn $name:ident() $body:block) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            for device in $crate::testing::test_devices() {
                println!("{} on {:?}", stringify!($name), device);
                let _ = $crate::testing::run_on_device::<String>(stringify!($name), device, || {
                    $body;
                    Ok(())
                });
            }
        }
    };
}

/// A deterministic f64 array with values in `[lo, hi)` on the default device (the device under
/// test inside the harness), for tests.
pub fn test_array(shape: &[usize], lo: f64, hi: f64, seed: u64) -> NDArray {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect();
    NDArray::from_vec(v, shape).expect("a valid f64 test array")
}

/// A seeded random csr test array of shape `[rows, cols]` with about `density * rows * cols`
/// uniform non-zeros, cast to `dtype`, on [`test_device`]. (Moved there explicitly: the
/// sparse constructors do not follow the default-device scope yet.)
pub fn test_csr(rows: usize, cols: usize, density: f64, seed: u64, dtype: DType) -> NDArray {
    crate::sparse::rand_sparse_seeded(
        &[rows, cols],
        density,
        crate::SType::Csr,
        crate::sparse::SparseDist::Uniform,
        seed,
    )
    .and_then(|x| x.astype(dtype))
    .and_then(|x| x.to_device(test_device()))
    .expect("a valid random csr array")
}
