//! One typed run of host memory, whoever owns it: a vector of this process, a vector shared
//! with the caller that made it, or pages of a memory-mapped file.
//!
//! Kernels see a `[T]` either way (`Deref`); only the owner differs, so a file-backed array
//! runs every CPU kernel unchanged. Writes go through `DerefMut`: an owned vector and a
//! writable mapping are written in place; memory this buffer may not write (a vector shared
//! with its creator, a read-only mapping) is first copied into an owned vector, which is what
//! copy-on-write means for an array.
//!
//! Large owned vectors go back to the [recycle](crate::recycle) pool when dropped, so a loop
//! that makes and drops outputs of the same size reuses memory that is already faulted in
//! instead of paying the kernel's page faults again (or depending on glibc's moving mmap
//! threshold for whether it does).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::mapped::MappedFile;

/// Host memory holding `len` elements of `T`.
///
/// The start and length are kept beside the owner, so reading the elements is two loads with no
/// match on who owns them: kernels index these slices in their innermost loops.
pub struct HostBuf<T: Copy + Send + Sync + 'static> {
    ptr: *mut T,
    len: usize,
    repr: Repr<T>,
}

// SAFETY: `ptr` points into memory owned by `repr` (a vector, a shared vector or a mapping),
// which is Send and Sync for the plain element types; writes need `&mut HostBuf`.
unsafe impl<T: Copy + Send + Sync + 'static> Send for HostBuf<T> {}
// SAFETY: as above; `&HostBuf` only reads.
unsafe impl<T: Copy + Send + Sync + 'static> Sync for HostBuf<T> {}

enum Repr<T> {
    /// A vector this buffer owns.
    Owned(Vec<T>),
    /// A vector shared with whoever built the array (a data loader's batch values): read here,
    /// copied before a write.
    Shared(Arc<Vec<T>>),
    /// Elements at byte `offset` of a mapped file.
    Mapped {
        file: Arc<MappedFile>,
        offset: usize,
    },
}

impl<T: Copy + Send + Sync + 'static> HostBuf<T> {
    /// A buffer owning `v`.
    pub fn owned(mut v: Vec<T>) -> Self {
        // The vector is never grown again, so its heap pointer stays valid while it is owned
        // here (moving the `Vec` does not move its elements).
        HostBuf {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            repr: Repr::Owned(v),
        }
    }
    /// A buffer reading `v`, which others may also hold (copied on the first write).
    pub fn shared(v: Arc<Vec<T>>) -> Self {
        HostBuf {
            ptr: v.as_ptr() as *mut T,
            len: v.len(),
            repr: Repr::Shared(v),
        }
    }
    /// `len` elements at byte `offset` of `file`. The caller has checked that the range lies in
    /// the mapping and that `offset` is aligned for `T` ([`MappedFile::check_range`]).
    pub(crate) fn mapped(file: Arc<MappedFile>, offset: usize, len: usize) -> Self {
        // SAFETY: `offset` lies inside the mapping (checked by the caller).
        let ptr = unsafe { file.ptr().add(offset) } as *mut T;
        HostBuf {
            ptr,
            len,
            repr: Repr::Mapped { file, offset },
        }
    }
    /// The elements (the same as `&*self`; kernels written for vectors call it).
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        self
    }
    /// Make the buffer's elements the first `n` of the vector it owns (a planned buffer that
    /// values of several sizes take in turn: the memory stays, the view changes). `false`, and
    /// nothing changed, where the buffer is not an owned vector of at least `n` elements.
    pub(crate) fn set_view_len(&mut self, n: usize) -> bool {
        match &self.repr {
            Repr::Owned(v) if n <= v.len() => {
                // `ptr` is the vector's start (set at construction, never grown), and the first
                // `n <= v.len()` elements are initialized.
                self.len = n;
                true
            }
            _ => false,
        }
    }
    /// The mapped file holding the elements, if they live in one.
    pub(crate) fn mapped_file(&self) -> Option<(&Arc<MappedFile>, usize)> {
        match &self.repr {
            Repr::Mapped { file, offset } => Some((file, *offset)),
            _ => None,
        }
    }
}

/// The elements of `buf` for writing in place: a buffer shared with other arrays is copied
/// first (`Arc::make_mut`), unless it is a mapped file's pages, where that copy would be the
/// whole file read into memory and the write would no longer reach the file: that is an error
/// naming `op`.
pub(crate) fn unique_mut<'a, T: Copy + Send + Sync + 'static>(
    op: &'static str,
    buf: &'a mut Arc<HostBuf<T>>,
) -> crate::Result<&'a mut HostBuf<T>> {
    if Arc::get_mut(buf).is_none() {
        if let Some((file, _)) = buf.mapped_file() {
            return Err(crate::Error::file(
                op,
                file.path(),
                "the file-backed array is shared with another array (a clone, view or saved \
                 input); writing it would copy the file into memory, so drop the other handle \
                 first",
            ));
        }
    }
    Ok(Arc::make_mut(buf))
}

impl<T: Copy + Send + Sync + 'static> Deref for HostBuf<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr..ptr + len` is memory `repr` keeps alive (a vector's elements, a
        // mapping's range checked at construction), initialized, aligned for T, and every bit
        // pattern is a valid T for the element types (plain numbers).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Copy + Send + Sync + 'static> DerefMut for HostBuf<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        let writable = match &mut self.repr {
            Repr::Owned(_) => true,
            Repr::Shared(a) => Arc::get_mut(a).is_some(),
            Repr::Mapped { file, .. } => file.writable(),
        };
        if !writable {
            *self = HostBuf::owned(self.to_vec());
        }
        // SAFETY: as in `deref`, and the memory is writable: an owned vector, a shared vector
        // with no other holder, or a writable (shared or private) mapping. `&mut self` is the
        // only handle to this buffer, and buffers over one file never overlap (each array has
        // its own range), so no other slice aliases these elements.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Copy + Send + Sync + 'static> Clone for HostBuf<T> {
    /// A clone is about to be written (`Arc::make_mut` clones only a shared buffer), so shared
    /// and mapped memory is copied into an owned vector here rather than at that write.
    fn clone(&self) -> Self {
        HostBuf::owned(self.to_vec())
    }
}

impl<T: Copy + Send + Sync + 'static> Drop for HostBuf<T> {
    fn drop(&mut self) {
        if let Repr::Owned(v) = &mut self.repr {
            crate::recycle::recycle(std::mem::take(v));
        }
    }
}

impl<T: Copy + Send + Sync + std::fmt::Debug + 'static> std::fmt::Debug for HostBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = match &self.repr {
            Repr::Owned(_) => "owned",
            Repr::Shared(_) => "shared",
            Repr::Mapped { .. } => "mapped",
        };
        write!(f, "{owner} ")?;
        f.debug_list().entries(self.iter().take(8)).finish()?;
        if self.len() > 8 {
            write!(f, " .. {} elements", self.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_len_stays_within_the_owned_vector() {
        let mut b = HostBuf::owned(vec![1.0f32, 2.0, 3.0, 4.0]);
        let p = b.as_ptr();
        assert!(b.set_view_len(2));
        assert_eq!(&*b, &[1.0, 2.0]);
        b[1] = 7.0;
        assert!(b.set_view_len(4));
        assert_eq!(&*b, &[1.0, 7.0, 3.0, 4.0]);
        assert_eq!(b.as_ptr(), p);
        assert!(!b.set_view_len(5));
        assert_eq!(b.len(), 4);
        // A clone copies the view only.
        b.set_view_len(3);
        assert_eq!(&*b.clone(), &[1.0, 7.0, 3.0]);
        let mut s = HostBuf::shared(Arc::new(vec![1u8, 2]));
        assert!(!s.set_view_len(1));
    }

    #[test]
    fn shared_is_copied_before_a_write_and_owned_is_not() {
        let a = Arc::new(vec![1.0f32, 2.0]);
        let mut b = HostBuf::shared(a.clone());
        b[0] = 5.0;
        assert_eq!(&*a, &[1.0, 2.0]);
        assert_eq!(&*b, &[5.0, 2.0]);
        let mut o = HostBuf::owned(vec![1i64, 2]);
        let p = o.as_ptr();
        o[1] = 3;
        assert_eq!(o.as_ptr(), p);
        assert_eq!(&*o, &[1, 3]);
        // A sole shared owner is written in place.
        let mut s = HostBuf::shared(Arc::new(vec![1u8]));
        let p = s.as_ptr();
        s[0] = 2;
        assert_eq!(s.as_ptr(), p);
    }
}
