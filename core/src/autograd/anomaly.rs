//! Anomaly detection (PyTorch's `detect_anomaly`): find the first operator that turned finite
//! values into NaN or infinity.
//!
//! A NaN in one batch spreads to every weight it touches within a step or two, and by then
//! every array downstream is NaN too, so the question a user has is which operator made the
//! first one. With detection on (a thread-local flag, like recording), every recorded
//! operator checks its output: the first whose inputs were all finite and whose output is not
//! is remembered, and the next `backward` fails naming it. During `backward`, each operator's
//! gradients are checked the same way, and the first backward that makes a non-finite
//! gradient from a finite one fails naming the operator. Checking reads every value of every
//! recorded output and gradient, so it is meant for debugging, not for training runs.

use std::cell::{Cell, RefCell};

use crate::error::{Error, Result};
use crate::NDArray;

thread_local! {
    static DETECT: Cell<bool> = const { Cell::new(false) };
    static FIRST_FORWARD: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// True while anomaly detection is on for this thread.
pub fn is_detecting_anomaly() -> bool {
    DETECT.with(|d| d.get())
}

/// Turn anomaly detection on or off for this thread; returns the previous value. Turning it
/// on forgets an anomaly found before.
pub fn set_detect_anomaly(on: bool) -> bool {
    if on {
        FIRST_FORWARD.with(|f| f.borrow_mut().take());
    }
    DETECT.with(|d| d.replace(on))
}

/// Run `f` with anomaly detection on, restoring the previous setting afterwards.
///
/// ```
/// use sparrow_core::{autograd, NDArray};
/// let x = NDArray::from_vec(vec![1.0f32, 0.0], &[2]).unwrap();
/// x.attach_grad();
/// let err = autograd::detect_anomaly(|| {
///     let y = autograd::record(|| x.log()?.sum_all())?;
///     y.backward()
/// })
/// .unwrap_err();
/// assert!(err.to_string().contains("`log`"), "{err}");
/// ```
pub fn detect_anomaly<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DETECT.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(set_detect_anomaly(true));
    f()
}

/// Whether `a` holds a NaN or an infinity among its stored values (integer arrays never do).
/// Read through the sum of squares in f64, which stays finite for every finite f32 value (and
/// every f64 value below ~1e154).
fn non_finite(a: &NDArray) -> bool {
    if !a.dtype().is_float() {
        return false;
    }
    crate::update::stored_sum_sq(a).is_ok_and(|s| !s.is_finite())
}

fn describe(a: &NDArray) -> String {
    format!("{:?} {:?} {}", a.shape(), a.stype(), a.dtype().name())
}

/// Called for each recorded operator while detection is on: remember the first whose output
/// is not finite although its inputs are.
pub(crate) fn check_forward(op: &'static str, out: &NDArray, inputs: &[&NDArray]) {
    let known = FIRST_FORWARD.with(|f| f.borrow().is_some());
    if known || !non_finite(out) || inputs.iter().any(|x| non_finite(x)) {
        return;
    }
    let ins: Vec<String> = inputs.iter().map(|x| describe(x)).collect();
    let msg = format!(
        "anomaly: forward operator `{op}` produced NaN or infinity (output {}) from finite \
         inputs [{}]",
        describe(out),
        ins.join(", ")
    );
    FIRST_FORWARD.with(|f| *f.borrow_mut() = Some(msg));
}

/// Called at the start of `backward` while detection is on: the forward anomaly found since
/// detection was turned on, as an error (and forgotten).
pub(crate) fn forward_error() -> Result<()> {
    match FIRST_FORWARD.with(|f| f.borrow_mut().take()) {
        Some(msg) => Err(Error::Autograd(msg)),
        None => Ok(()),
    }
}

/// Called after each operator's backward while detection is on: an error naming `op` when a
/// gradient it made is not finite although the gradient it received is.
pub(crate) fn check_backward(
    op: &'static str,
    g: &NDArray,
    in_grads: &[Option<NDArray>],
) -> Result<()> {
    if non_finite(g) {
        return Ok(());
    }
    for (i, gx) in in_grads.iter().enumerate() {
        if let Some(gx) = gx.as_ref().filter(|gx| non_finite(gx)) {
            return Err(Error::Autograd(format!(
                "anomaly: backward of operator `{op}` produced NaN or infinity in the gradient \
                 of its input {i} ({}) from a finite output gradient ({})",
                describe(gx),
                describe(g)
            )));
        }
    }
    Ok(())
}
