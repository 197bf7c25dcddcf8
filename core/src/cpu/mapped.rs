//! A file mapped into the address space: the memory under a file-backed array.
//!
//! One [`MappedFile`] per open file; each array over it ([`HostBuf`](super::HostBuf)) holds an
//! `Arc` of it and its own byte range, so a safetensors file with many tensors is mapped once
//! and stays mapped until its last array is dropped.
//!
//! A mapping fails loudly in one way no `Result` can catch: touching a page past the end of a
//! file that another process truncated raises `SIGBUS`. The file's length is checked when it
//! is opened and again before every flush ([`MappedFile::check_len`]), which turns the common
//! case (a file replaced or cut between two steps) into an error.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// How a file's pages are mapped into an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMode {
    /// Reads come from the file; the file is never written. Writing to the array first copies
    /// it into memory (the array then no longer follows the file).
    ReadOnly,
    /// Reads come from the file; writes go to private copies of the touched pages and never
    /// reach the file (MAP_PRIVATE).
    CopyOnWrite,
    /// Reads and writes go to the file's pages (MAP_SHARED); `flush` makes them durable.
    ReadWrite,
}

enum Map {
    Read(memmap2::Mmap),
    Write(memmap2::MmapMut),
}

/// An open, mapped file.
pub struct MappedFile {
    map: Map,
    ptr: *mut u8,
    len: usize,
    mode: MapMode,
    path: PathBuf,
    file: File,
    /// The undo journal of a read-write mapping (`None` for the other modes).
    journal: Option<std::sync::Mutex<super::journal::Journal>>,
}

// SAFETY: the mapping is plain memory owned by this value until it drops; `ptr` only gives
// access to it. Writes through it happen via `HostBuf::deref_mut`, which needs `&mut` to the
// one buffer owning each (disjoint) range.
unsafe impl Send for MappedFile {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for MappedFile {}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MappedFile({}, {:?}, {} bytes)",
            self.path.display(),
            self.mode,
            self.len
        )
    }
}

/// Take an exclusive advisory lock (`flock`) on a file about to be mapped read-write, held
/// until the mapping's file handle closes (when the last array of it is dropped). A read-write
/// mapping journals into `<file>.undo`, one path per file: a second read-write open (in this
/// process or another) would journal into the same file, and its open's recovery would replay
/// or remove the first one's records. So it fails here instead, naming the file. Read-only and
/// copy-on-write opens neither journal nor lock. A filesystem without `flock` support leaves
/// the file unlocked. `flock` rather than an `fcntl` record lock: the latter belongs to the
/// process and is dropped when any descriptor of the file closes (a read-only open of the same
/// file, closed, would unlock it); a `flock` belongs to this open and conflicts with others
/// within the process too.
fn lock_exclusive(op: &'static str, path: &Path, file: &File) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns for the duration of the call; it touches no
    // memory.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Err(Error::file(
                op,
                path,
                "already open read-write (in this process or another): one read-write \
                 mapping a file at a time, since both would keep its undo journal; drop the \
                 other array first, or open this one read-only or copy-on-write",
            ));
        }
    }
    Ok(())
}

impl MappedFile {
    /// Map the whole of the existing file at `path`.
    ///
    /// A read-write open first restores what an undo journal beside the file (`<path>.undo`,
    /// see `cpu/journal.rs`) saved: a process that changed the file and died before its next
    /// flush leaves the file as it was at that flush.
    pub fn open(op: &'static str, path: &Path, mode: MapMode) -> Result<Arc<MappedFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(mode == MapMode::ReadWrite)
            .open(path)
            .map_err(|e| Error::file(op, path, format!("cannot open ({mode:?}): {e}")))?;
        if mode == MapMode::ReadWrite {
            lock_exclusive(op, path, &file)?;
            super::journal::recover(op, path, &file)?;
        }
        Self::map(op, path, file, mode)
    }

    fn map(op: &'static str, path: &Path, file: File, mode: MapMode) -> Result<Arc<MappedFile>> {
        let len = file.metadata().map_err(|e| Error::file(op, path, e))?.len();
        let len = usize::try_from(len)
            .map_err(|_| Error::file(op, path, "file larger than the address space"))?;
        if len == 0 {
            return Err(Error::file(op, path, "file is empty"));
        }
        let mapped = |e: std::io::Error| Error::file(op, path, format!("cannot map: {e}"));
        // SAFETY (all three): the mapping stays valid while `MappedFile` owns it; another
        // process changing the file underneath is the documented SIGBUS hazard (module docs),
        // checked at open and at every flush.
        let mut map = match mode {
            MapMode::ReadOnly => Map::Read(unsafe { memmap2::Mmap::map(&file) }.map_err(mapped)?),
            MapMode::CopyOnWrite => {
                Map::Write(unsafe { memmap2::MmapOptions::new().map_copy(&file) }.map_err(mapped)?)
            }
            MapMode::ReadWrite => {
                Map::Write(unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(mapped)?)
            }
        };
        let ptr = match &mut map {
            Map::Read(m) => m.as_ptr() as *mut u8,
            Map::Write(m) => m.as_mut_ptr(),
        };
        let journal = match mode {
            MapMode::ReadWrite => Some(std::sync::Mutex::new(
                super::journal::Journal::new(path, &file).map_err(|e| Error::file(op, path, e))?,
            )),
            _ => None,
        };
        Ok(Arc::new(MappedFile {
            map,
            ptr,
            len,
            mode,
            path: path.to_path_buf(),
            file,
            journal,
        }))
    }

    /// Start of the mapping.
    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Whether arrays may write the mapped pages (read-write or copy-on-write).
    #[inline]
    pub(crate) fn writable(&self) -> bool {
        self.mode != MapMode::ReadOnly
    }
    /// The mode the file was mapped with.
    pub fn mode(&self) -> MapMode {
        self.mode
    }
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The mapped bytes (headers are parsed from here).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is the live mapping.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Check that `count` elements of `size` bytes at byte `offset` lie inside the mapping and
    /// that `offset` is a multiple of `size` (a typed slice needs alignment; the mapping itself
    /// starts on a page).
    pub(crate) fn check_range(
        &self,
        op: &'static str,
        offset: usize,
        count: usize,
        size: usize,
    ) -> Result<()> {
        let end = count
            .checked_mul(size)
            .and_then(|b| b.checked_add(offset))
            .ok_or_else(|| Error::file(op, &self.path, "element range overflows"))?;
        if end > self.len {
            return Err(Error::file(
                op,
                &self.path,
                format!(
                    "file too short: {count} elements of {size} bytes at offset {offset} need \
                     {end} bytes, the file has {}",
                    self.len
                ),
            ));
        }
        if !offset.is_multiple_of(size) {
            return Err(Error::file(
                op,
                &self.path,
                format!("data offset {offset} is not a multiple of the element size {size}"),
            ));
        }
        Ok(())
    }

    /// Tell the kernel how the mapping will be read: `random` (a table read a batch's rows at a
    /// time) turns off read-ahead and fault-around, so touching one row maps that row's page
    /// rather than its 64 KiB neighbourhood; otherwise the default (read-ahead for scans).
    /// A hint: where the kernel refuses it, nothing changes.
    pub fn advise_random(&self, random: bool) {
        use memmap2::Advice;
        let advice = if random {
            Advice::Random
        } else {
            Advice::Normal
        };
        let _ = match &self.map {
            Map::Read(m) => m.advise(advice),
            Map::Write(m) => m.advise(advice),
        };
    }

    /// Start reading byte range `offset..offset + len` from disk in the background
    /// (`MADV_WILLNEED`), so that a later touch finds it cached: a blocked computation asks for
    /// its next block while it computes on the current one. A hint.
    pub fn prefetch(&self, offset: usize, len: usize) {
        let _ = match &self.map {
            Map::Read(m) => m.advise_range(memmap2::Advice::WillNeed, offset, len),
            Map::Write(m) => m.advise_range(memmap2::Advice::WillNeed, offset, len),
        };
    }

    /// Unmap this process's pages of byte range `offset..offset + len` (`MADV_DONTNEED` on a
    /// shared mapping: the data stays in the file and the page cache, which the kernel may
    /// reclaim), so a pass over a file larger than memory keeps its resident set bounded. Only
    /// for read-only mappings and flushed read-write ones: on a private (copy-on-write)
    /// mapping it would discard writes, so it does nothing there.
    pub fn release(&self, offset: usize, len: usize) {
        if self.mode == MapMode::CopyOnWrite {
            return;
        }
        // SAFETY (both): MADV_DONTNEED on a MAP_SHARED file mapping only drops page-table
        // entries; the next access faults the page back in from the file, with the same
        // contents (dirty pages were flushed by the caller or are written back by the kernel).
        let _ = match &self.map {
            Map::Read(m) => unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            },
            Map::Write(m) => unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            },
        };
    }

    /// Error if the file's length on disk is no longer the mapped length (truncated or
    /// extended by someone else since it was mapped).
    pub fn check_len(&self, op: &'static str) -> Result<()> {
        let now = self
            .file
            .metadata()
            .map_err(|e| Error::file(op, &self.path, e))?
            .len();
        if now != self.len as u64 {
            return Err(Error::file(
                op,
                &self.path,
                format!(
                    "file changed size underneath: mapped {} bytes, now {now}",
                    self.len
                ),
            ));
        }
        Ok(())
    }

    /// Write the pages of byte range `offset..offset + len` back to the file and wait for the
    /// device (msync). A read-only mapping has nothing to write; a copy-on-write mapping never
    /// writes its file, so flushing one is an error rather than a silent no-op.
    pub fn flush_range(&self, op: &'static str, offset: usize, len: usize) -> Result<()> {
        self.check_len(op)?;
        match (&self.map, self.mode) {
            (_, MapMode::CopyOnWrite) => Err(Error::file(
                op,
                &self.path,
                "a copy-on-write mapping never writes its file; map it ReadWrite to flush",
            )),
            (Map::Write(m), MapMode::ReadWrite) => m
                .flush_range(offset, len)
                .map_err(|e| Error::file(op, &self.path, format!("flush failed: {e}"))),
            // Read-only: nothing was written.
            _ => Ok(()),
        }
    }

    /// Save byte ranges `(offset, len)` in the undo journal before changing them (a read-write
    /// mapping; nothing for the other modes). Each range is saved once between two flushes.
    pub(crate) fn save_ranges(
        &self,
        op: &'static str,
        ranges: &mut dyn Iterator<Item = (usize, usize)>,
    ) -> Result<()> {
        let Some(j) = &self.journal else {
            return Ok(());
        };
        let mut j = j.lock().unwrap_or_else(|e| e.into_inner());
        j.save(op, self.bytes(), ranges)
    }

    /// Write every changed page back to the file and wait for the device, then empty the undo
    /// journal: the file as it is now is the state a crash returns to. Errors as
    /// [`MappedFile::flush_range`].
    pub fn flush_all(&self, op: &'static str) -> Result<()> {
        self.flush_range(op, 0, self.len)?;
        if let Some(j) = &self.journal {
            j.lock().unwrap_or_else(|e| e.into_inner()).clear(op)?;
        }
        Ok(())
    }
}
