//! The default-device scope: which device the public constructors make arrays on.
//!
//! MXNet's `with mx.Context(...)` and PyTorch's `torch.set_default_device` in one form:
//! [`with_device`] sets the calling thread's default device for the length of a closure and
//! [`Device::current`] reads it. [`NDArray::from_vec`](crate::NDArray::from_vec),
//! [`NDArray::zeros`](crate::NDArray::zeros) and the other public constructors (and the
//! [`random`](crate::random) fills) build their array on the host and move it to the current
//! device when that is not the CPU. Operators are not affected: their outputs live where their
//! inputs live.
//!
//! The setting is per thread, as MXNet's context stack is: an array made on another thread (a
//! data loader's producer, a rayon worker) starts on the CPU unless that thread sets its own
//! scope.

use std::cell::Cell;

use crate::error::Result;
use crate::Device;

thread_local! {
    /// The calling thread's default device. `const`-initialised, so reading it is one
    /// thread-local load, cheap enough for every constructor call.
    static CURRENT: Cell<Device> = const { Cell::new(Device::Cpu) };
}

impl Device {
    /// The calling thread's default device: where the public constructors make arrays.
    /// [`Device::Cpu`] unless a [`with_device`] scope on this thread set another.
    ///
    /// ```
    /// use sparrow_core::Device;
    /// assert_eq!(Device::current(), Device::Cpu);
    /// ```
    #[inline]
    pub fn current() -> Device {
        CURRENT.with(Cell::get)
    }
}

/// Run `f` with the thread-local `key` set to `value`, and put the previous value back when `f`
/// returns or panics: the restore is a guard's `Drop`, which runs during unwinding too. Generic
/// so that its tests can watch a value with more than one state (the CPU is the only device).
fn scoped<T: Copy + 'static, R>(
    key: &'static std::thread::LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static> {
        key: &'static std::thread::LocalKey<Cell<T>>,
        previous: T,
    }
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.key.with(|c| c.set(self.previous));
        }
    }
    let _restore = Restore {
        key,
        previous: key.with(|c| c.replace(value)),
    };
    f()
}

/// Run `f` with `device` as this thread's default device ([`Device::current`]), then put the
/// previous default back, also when `f` panics. Scopes nest: the innermost wins, and each
/// restores what its caller had.
///
/// An unavailable device ([`Device::is_available`]) is an [`Error::Device`](crate::Error::Device) saying why, and `f`
/// does not run.
///
/// ```
/// use sparrow_core::{with_device, DType, Device, NDArray};
/// let x = with_device(Device::Cpu, || NDArray::zeros(&[2, 3], DType::F32)).unwrap().unwrap();
/// assert_eq!(x.device(), Device::Cpu);
/// ```
pub fn with_device<R>(device: Device, f: impl FnOnce() -> R) -> Result<R> {
    if !device.is_available() {
        return Err(Device::unavailable_error("with_device", device));
    }
    Ok(scoped(&CURRENT, device, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, NDArray};

    thread_local! {
        /// A value with many states for the guard tests: with the CPU as the only device, a
        /// scope that failed to restore `CURRENT` would leave it unchanged and go unseen.
        static PROBE: Cell<u32> = const { Cell::new(0) };
    }

    #[test]
    fn the_default_is_the_cpu() {
        // A fresh thread: nothing this test binary ran before can have left a scope set there.
        let d = std::thread::spawn(Device::current).join().unwrap();
        assert_eq!(d, Device::Cpu);
        assert_eq!(Device::current(), Device::Cpu);
    }

    #[test]
    fn with_device_runs_the_closure_there_and_returns_its_value() {
        let (inside, made, drawn, out) = with_device(Device::Cpu, || {
            // Constructors and random fills make their arrays on the scope's device.
            let a = NDArray::zeros(&[2], DType::F32).unwrap();
            let b = crate::random::uniform(0.0, 1.0, &[3], DType::F64).unwrap();
            (Device::current(), a.device(), b.device(), 7)
        })
        .unwrap();
        assert_eq!(
            (inside, made, drawn, out),
            (Device::Cpu, Device::Cpu, Device::Cpu, 7)
        );
        assert_eq!(Device::current(), Device::Cpu);
        // An unavailable device is an error before the closure runs (no machine has CUDA
        // device 4096; without the `cuda` feature no CUDA device is available at all).
        let mut ran = false;
        assert!(with_device(Device::Cpu, || ran = true).is_ok());
        assert!(ran);
        let mut ran = false;
        let missing = with_device(Device::Cuda(4096), || ran = true);
        assert!(
            matches!(missing, Err(crate::Error::Device { .. })),
            "{missing:?}"
        );
        assert!(!ran);
        assert_eq!(Device::current(), Device::Cpu);
    }

    #[test]
    fn nested_scopes_restore_each_previous_value() {
        PROBE.with(|p| p.set(0));
        let seen = scoped(&PROBE, 1, || {
            let inner = scoped(&PROBE, 2, || PROBE.with(Cell::get));
            (inner, PROBE.with(Cell::get))
        });
        assert_eq!(seen, (2, 1));
        assert_eq!(PROBE.with(Cell::get), 0);
        // The device scope is the same mechanism on `CURRENT`.
        let nested = with_device(Device::Cpu, || {
            with_device(Device::Cpu, Device::current).unwrap()
        });
        assert_eq!(nested, Ok(Device::Cpu));
        assert_eq!(Device::current(), Device::Cpu);
    }

    #[test]
    fn a_panic_inside_the_scope_restores_the_previous_value() {
        PROBE.with(|p| p.set(3));
        let caught = std::panic::catch_unwind(|| {
            scoped(&PROBE, 4, || {
                scoped(&PROBE, 5, || panic!("inside two scopes"));
            })
        });
        assert!(caught.is_err());
        assert_eq!(PROBE.with(Cell::get), 3);
        let caught = std::panic::catch_unwind(|| {
            with_device(Device::Cpu, || panic!("inside the device scope"))
        });
        assert!(caught.is_err());
        assert_eq!(Device::current(), Device::Cpu);
    }
}
