//! How an element type meets host memory: the crate-private half of [`crate::Element`].
//!
//! `Element` is public (users name `f32`, `i64`, ... as array element types), but the storage
//! it converts to is not: these methods live in a supertrait that code outside core cannot
//! name, so `Element` stays implementable only here and exposes no storage type.

use super::CpuStorage;

/// Conversions between an element type and the CPU backend's storage.
pub trait HostElement: Sized + Copy + Send + Sync + 'static {
    /// Borrow the typed slice of a storage, if it holds this type.
    fn slice(buf: &CpuStorage) -> Option<&[Self]>;
    /// Wrap a vector into a storage.
    fn into_buffer(v: Vec<Self>) -> CpuStorage;
    /// Wrap a shared vector into a storage (no copy).
    fn shared_buffer(v: std::sync::Arc<Vec<Self>>) -> CpuStorage;
    /// Wrap host memory of any owner (a mapped file's range) into a storage.
    fn host_buffer(v: super::HostBuf<Self>) -> CpuStorage;
    /// Append the little-endian bytes of `self`.
    fn write_le(self, out: &mut Vec<u8>);
    /// Write its little-endian bytes into `out` (exactly `size_of::<Self>()` bytes).
    fn put_le(self, out: &mut [u8]);
    /// The value of `size_of::<Self>()` little-endian bytes.
    fn from_le_slice(b: &[u8]) -> Self;
}
