//! The undo journal of a read-write mapped file: what makes `flush` a checkpoint that a crash
//! cannot spoil.
//!
//! Training a file-backed table changes its pages in place, and the kernel writes dirty pages
//! back whenever it likes, also after the process is killed. Without a journal, a process
//! killed between two flushes leaves a file holding part of the steps since the last flush:
//! neither that checkpoint nor any later state. So before an update (or `write_rows`) first
//! changes a range of the file after a flush, the range's old bytes are appended to
//! `<file>.undo`; a flush writes the file back (msync) and then empties the journal. Opening
//! the file read-write again finds a non-empty journal only after a crash, and writes the
//! old bytes back: the file is the last flushed checkpoint again.
//!
//! Records: `offset u64, len u64, checksum u64, len bytes` (little-endian), the checksum over
//! the offset, the length and the bytes. A record is written before the range changes, so a
//! record torn by the crash belongs to a range that never changed: recovery stops at the first
//! record that does not check. The header ties the journal to one file (device, inode, length),
//! so a stale journal is never applied to a new file created at the same path.
//!
//! The journal survives a killed process (the page cache keeps what both files were sent). A
//! power loss is another matter: that needs the journal on disk before the data page it guards,
//! an fsync per step; `flush` itself is durable.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsio::checksum64;

const MAGIC: &[u8; 8] = b"SPRUNDO1";
const HEADER: usize = 8 + 3 * 8;
const RECORD_HEAD: usize = 3 * 8;

/// The journal path of the data file at `path`: `<path>.undo`.
pub(crate) fn journal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".undo");
    PathBuf::from(p)
}

/// Identity of a data file: device, inode and length.
fn identity(file: &File) -> std::io::Result<[u64; 3]> {
    let m = file.metadata()?;
    Ok([m.dev(), m.ino(), m.len()])
}

fn record_sum(offset: u64, bytes: &[u8]) -> u64 {
    checksum64(bytes) ^ offset.rotate_left(17) ^ (bytes.len() as u64).rotate_left(41)
}

/// Write back what the journal beside `data` holds, if it belongs to this file, and remove the
/// journal. Returns how many bytes were restored. `op` and `path` name errors.
pub(crate) fn recover(op: &'static str, path: &Path, data: &File) -> Result<u64> {
    let jpath = journal_path(path);
    let mut raw = Vec::new();
    match File::open(&jpath) {
        Ok(mut f) => f
            .read_to_end(&mut raw)
            .map_err(|e| Error::file(op, &jpath, format!("cannot read the undo journal: {e}")))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::file(op, &jpath, format!("cannot open: {e}"))),
    };
    let id = identity(data).map_err(|e| Error::file(op, path, e))?;
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let ours = raw.len() >= HEADER
        && &raw[..8] == MAGIC
        && [word(&raw, 8), word(&raw, 16), word(&raw, 24)] == id;
    let mut restored = 0u64;
    if ours {
        // Collected first, applied newest first: ranges may overlap (a row saved alone, later
        // inside a whole-array range), and the oldest bytes of a place must be written last.
        let mut records: Vec<(u64, &[u8])> = Vec::new();
        let mut at = HEADER;
        while raw.len() - at >= RECORD_HEAD {
            let (offset, len, sum) = (word(&raw, at), word(&raw, at + 8), word(&raw, at + 16));
            let start = at + RECORD_HEAD;
            let fits = usize::try_from(len)
                .ok()
                .and_then(|l| start.checked_add(l))
                .filter(|&end| end <= raw.len())
                .filter(|_| offset.checked_add(len).is_some_and(|e| e <= id[2]));
            let Some(end) = fits else { break };
            let bytes = &raw[start..end];
            if record_sum(offset, bytes) != sum {
                break;
            }
            records.push((offset, bytes));
            at = end;
        }
        for &(offset, bytes) in records.iter().rev() {
            data.write_all_at(bytes, offset).map_err(|e| {
                Error::file(
                    op,
                    path,
                    format!("cannot restore from the undo journal: {e}"),
                )
            })?;
            restored += bytes.len() as u64;
        }
        data.sync_all()
            .map_err(|e| Error::file(op, path, format!("cannot sync after recovery: {e}")))?;
    }
    std::fs::remove_file(&jpath)
        .map_err(|e| Error::file(op, &jpath, format!("cannot remove the undo journal: {e}")))?;
    Ok(restored)
}

/// The open journal of one read-write mapping.
pub(crate) struct Journal {
    path: PathBuf,
    /// Opened at the first record after a flush.
    file: Option<File>,
    /// Header of the journal: the data file's identity.
    id: [u64; 3],
    /// The ranges `(offset, len)` saved since the last flush (each is saved once).
    saved: HashSet<(u64, u64)>,
    /// Records waiting for one write.
    pending: Vec<u8>,
}

impl Journal {
    /// The journal of `data` (at `path`), empty.
    pub(crate) fn new(path: &Path, data: &File) -> std::io::Result<Journal> {
        Ok(Journal {
            path: journal_path(path),
            file: None,
            id: identity(data)?,
            saved: HashSet::new(),
            pending: Vec::new(),
        })
    }

    /// Save the current bytes of each range `(offset, len)` of `mapped` not saved since the
    /// last flush, before the caller changes them.
    pub(crate) fn save(
        &mut self,
        op: &'static str,
        mapped: &[u8],
        ranges: &mut dyn Iterator<Item = (usize, usize)>,
    ) -> Result<()> {
        for (offset, len) in ranges {
            if len == 0 || !self.saved.insert((offset as u64, len as u64)) {
                continue;
            }
            let Some(bytes) = offset.checked_add(len).and_then(|e| mapped.get(offset..e)) else {
                return Err(Error::file(
                    op,
                    &self.path,
                    format!("range {offset}+{len} is outside the mapping"),
                ));
            };
            self.pending
                .extend_from_slice(&(offset as u64).to_le_bytes());
            self.pending.extend_from_slice(&(len as u64).to_le_bytes());
            self.pending
                .extend_from_slice(&record_sum(offset as u64, bytes).to_le_bytes());
            self.pending.extend_from_slice(bytes);
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let err = |e: std::io::Error| {
            Error::file(
                op,
                &self.path,
                format!("cannot write the undo journal: {e}"),
            )
        };
        if self.file.is_none() {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&self.path)
                .map_err(err)?;
            let mut head = Vec::with_capacity(HEADER);
            head.extend_from_slice(MAGIC);
            for w in self.id {
                head.extend_from_slice(&w.to_le_bytes());
            }
            f.write_all(&head).map_err(err)?;
            self.file = Some(f);
        }
        let f = self.file.as_mut().expect("opened above");
        let r = f.write_all(&self.pending).map_err(err);
        self.pending.clear();
        r
    }

    /// After a flush made the file durable: the journal is no longer needed.
    pub(crate) fn clear(&mut self, op: &'static str) -> Result<()> {
        self.saved.clear();
        self.pending.clear();
        if self.file.take().is_some() {
            std::fs::remove_file(&self.path).map_err(|e| {
                Error::file(
                    op,
                    &self.path,
                    format!("cannot remove the undo journal: {e}"),
                )
            })?;
        }
        Ok(())
    }
}
