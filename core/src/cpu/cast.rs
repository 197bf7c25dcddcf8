//! Typed views the CPU kernels share: an f32 slice of a generic float slice (the hand-written
//! kernels are f32-only) and a raw output pointer rayon tasks may carry.

use crate::dtype::Float;

/// A raw output pointer that rayon tasks may carry; each task writes a disjoint set of
/// elements through it (here and in the skinny kernels).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: every user has its tasks write disjoint elements, and its parallel loop or scope ends
// before the borrow of the buffer the pointer came from does.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above; tasks only copy the pointer out.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not its field).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// `s` as `&[f32]` when `T` is `f32` (the skinny and small sparse kernels are f32-only).
pub(crate) fn as_f32<T: Float>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32 (checked just above), so the layout is identical.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// Mutable counterpart of [`as_f32`].
#[cfg(target_arch = "x86_64")]
pub(crate) fn as_f32_mut<T: Float>(s: &mut [T]) -> Option<&mut [f32]> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: T is f32 (checked just above), so the layout is identical.
        Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
    } else {
        None
    }
}
