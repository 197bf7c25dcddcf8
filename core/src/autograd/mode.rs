//! Recording and training flags (thread-local, as in Gluon).

use std::cell::Cell;

thread_local! {
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    static TRAINING: Cell<bool> = const { Cell::new(false) };
}

/// True inside a `record` scope (and not paused).
pub fn is_recording() -> bool {
    RECORDING.with(|r| r.get())
}

/// True in training mode (Dropout drops, BatchNorm uses batch statistics).
pub fn is_training() -> bool {
    TRAINING.with(|t| t.get())
}

/// Set the recording flag; returns the previous value.
pub fn set_recording(on: bool) -> bool {
    RECORDING.with(|r| r.replace(on))
}

/// Set the training flag; returns the previous value.
pub fn set_training(on: bool) -> bool {
    TRAINING.with(|t| t.replace(on))
}

/// Restores both flags when dropped. Returned by [`RecordGuard::new`] and [`PauseGuard::new`].
#[must_use = "the scope ends when the guard is dropped"]
pub struct RecordGuard {
    prev_rec: bool,
    prev_train: bool,
}

impl RecordGuard {
    /// Start recording (`train_mode` selects training or predict mode) until the guard drops.
    pub fn new(train_mode: bool) -> RecordGuard {
        RecordGuard {
            prev_rec: set_recording(true),
            prev_train: set_training(train_mode),
        }
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        set_recording(self.prev_rec);
        set_training(self.prev_train);
    }
}

/// Stops recording until dropped (Gluon's `autograd.pause()`).
pub type PauseGuard = RecordGuard;

impl PauseGuard {
    /// Pause recording (`train_mode` sets the training flag meanwhile).
    pub fn pause(train_mode: bool) -> PauseGuard {
        RecordGuard {
            prev_rec: set_recording(false),
            prev_train: set_training(train_mode),
        }
    }
}

/// Run `f` with recording on, in training mode (`with autograd.record():`).
pub fn record<R>(f: impl FnOnce() -> R) -> R {
    record_with(true, f)
}

/// Run `f` with recording on, in training (`true`) or predict mode.
pub fn record_with<R>(train_mode: bool, f: impl FnOnce() -> R) -> R {
    let _g = RecordGuard::new(train_mode);
    f()
}

/// Run `f` with recording off, in predict mode (`with autograd.pause():`).
pub fn pause<R>(f: impl FnOnce() -> R) -> R {
    let _g = PauseGuard::pause(false);
    f()
}

/// Run `f` in training mode without changing recording.
pub fn train_mode<R>(f: impl FnOnce() -> R) -> R {
    let prev = set_training(true);
    let r = f();
    set_training(prev);
    r
}

/// Run `f` in predict mode without changing recording.
pub fn predict_mode<R>(f: impl FnOnce() -> R) -> R {
    let prev = set_training(false);
    let r = f();
    set_training(prev);
    r
}
