//! The one way sparrow writes a file, and the checksum its file formats carry.
//!
//! Every file sparrow writes (parameter files, optimizer states, checkpoints, LibSVM files)
//! goes through [`write_atomic`], so a reader of `path` sees either the old complete file or
//! the new complete file, never a partial one, even when several threads or processes save
//! the same path at once or the machine crashes mid-write. The file formats are nn's, optim's
//! and data's; they share [`checksum64`] and [`checksum_pairs`] so that one hash detects
//! corrupted bytes everywhere.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes buffered between the caller's writes and the file (large sequential writes).
const BUF_BYTES: usize = 1 << 20;

/// Distinguishes the temporaries of one process: the pid alone let two threads saving the
/// same path pick the same temporary, write into each other's file and rename it twice.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Removes the temporary file when dropped, unless the write reached the rename: covers every
/// early return and a panic inside the caller's closure.
struct TmpGuard {
    path: PathBuf,
    armed: bool,
}

impl Drop for TmpGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The folder holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh temporary beside `path`, created exclusively (`O_EXCL`): its name holds the
/// process id, a process-wide counter and the thread, so no two writers in this process share
/// one, and a name left over from a crashed process with a reused pid is skipped, not reused.
fn create_tmp(path: &Path) -> std::io::Result<(File, TmpGuard)> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("'{}' is not a file path", path.display()),
        )
    })?;
    let dir = parent_dir(path);
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    loop {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(
            ".{}.tmp.{}.{n}.{thread}",
            name.to_string_lossy(),
            std::process::id()
        ));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => {
                return Ok((
                    f,
                    TmpGuard {
                        path: tmp,
                        armed: true,
                    },
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Write a file atomically: `write` fills a unique temporary in `path`'s folder (buffered),
/// which is then flushed, fsynced, renamed over `path`, and the folder fsynced so the rename
/// itself survives a crash. On any error (or a panic in `write`) the temporary is removed and
/// `path` is left as it was. Concurrent writers of one path each rename a complete file of
/// their own, so the last rename wins and a reader never sees a partial file.
///
/// Errors are plain I/O errors; callers add the operation and the path to their message.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("sparrow-fsio-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("hello.txt");
/// sparrow_core::fsio::write_atomic(&path, |w| {
///     use std::io::Write;
///     w.write_all(b"hello")
/// })
/// .unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"hello");
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (file, mut guard) = create_tmp(path)?;
    let mut w = BufWriter::with_capacity(BUF_BYTES, file);
    write(&mut w)?;
    w.flush()?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&guard.path, path)?;
    guard.armed = false;
    sync_dir(&parent_dir(path))
}

/// Ask the kernel to drop the file's pages from its page cache (`posix_fadvise(DONTNEED)`),
/// after a large write whose data will be read back a little at a time through a mapping: a
/// page still cached is mapped by the fault-around of a neighbouring touched page, and would
/// count as the process's resident memory. The file must have been synced (dirty pages are
/// not dropped). A hint: errors are ignored, and nothing happens off Linux.
pub fn drop_cached_pages(path: &Path) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if let Ok(f) = File::open(path) {
            // SAFETY: a valid open descriptor; the advice changes caching only.
            unsafe {
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// Fsync a folder, making a rename into it durable. Only Unix can open a folder for that.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// A 64-bit hash of `bytes` (word-wise multiply-xorshift): detects corrupted data, not
/// deliberate tampering. The value every sparrow file format stores as `checksum:<tensor>`
/// (hex, 16 digits); it must never change, or files written before would stop loading.
pub fn checksum64(bytes: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
    }
    h
}

/// [`checksum64`] of a set of `(key, value)` text pairs (a file's header metadata), in key
/// order, each string length-prefixed so that no two different sets encode alike.
/// `skip` names a key left out (the key that stores this checksum).
pub fn checksum_pairs<'a>(
    pairs: impl IntoIterator<Item = (&'a String, &'a String)>,
    skip: &str,
) -> u64 {
    let sorted: BTreeMap<&str, &str> = pairs
        .into_iter()
        .filter(|(k, _)| k.as_str() != skip)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut buf = Vec::new();
    for (k, v) in sorted {
        for s in [k, v] {
            buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
            buf.extend_from_slice(s.as_bytes());
        }
    }
    checksum64(&buf)
}

/// A checksum as files store it: 16 lowercase hex digits.
pub fn checksum_hex(h: u64) -> String {
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn tmp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sparrow-fsio-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Many threads writing the same path at once: every write succeeds, every read between
    /// them sees one writer's complete content, and no temporary is left behind. With the
    /// pid-only temporary name this failed ("No such file" on rename, or mixed content).
    #[test]
    fn concurrent_writers_of_one_path_never_collide() {
        let dir = tmp_dir("concurrent");
        let path = dir.join("shared.bin");
        let threads = 8;
        let rounds = 40;
        std::thread::scope(|s| {
            for t in 0..threads {
                let path = &path;
                s.spawn(move || {
                    for r in 0..rounds {
                        // Each writer's file is 64 KiB of one byte value, so a torn or mixed
                        // file shows as two values.
                        let b = (t * rounds + r) as u8;
                        write_atomic(path, |w| {
                            for _ in 0..64 {
                                w.write_all(&[b; 1024])?;
                            }
                            Ok(())
                        })
                        .unwrap();
                        let got = std::fs::read(path).unwrap();
                        assert_eq!(got.len(), 64 * 1024);
                        assert!(got.iter().all(|&x| x == got[0]), "mixed content");
                    }
                });
            }
        });
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "temporaries left behind: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A failing (or panicking) writer leaves the old file intact and no temporary.
    #[test]
    fn failed_write_keeps_the_old_file_and_removes_the_temporary() {
        let dir = tmp_dir("fail");
        let path = dir.join("f.txt");
        write_atomic(&path, |w| w.write_all(b"old")).unwrap();
        let e = write_atomic(&path, |w| {
            w.write_all(b"partial")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(e.is_err());
        let p = path.clone();
        let panicked = std::panic::catch_unwind(move || {
            let _ = write_atomic(&p, |_| panic!("writer panicked"));
        });
        assert!(panicked.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        assert!(write_atomic(&dir.join(".."), |_| Ok(())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The hash is the one files already carry (values pinned), and the pair hash depends on
    /// every key and value but not on the skipped key or the map's order.
    #[test]
    fn checksums_are_stable_and_cover_every_pair() {
        assert_eq!(checksum64(b""), 0x243F_6A88_85A3_08D3);
        assert_ne!(checksum64(b"abcdefgh1"), checksum64(b"abcdefgh2"));
        let mut m: HashMap<String, String> = HashMap::new();
        m.insert("rows:w".into(), "10".into());
        m.insert("format".into(), "sparrow".into());
        let h = checksum_pairs(&m, "meta_checksum");
        m.insert("meta_checksum".into(), "x".into());
        assert_eq!(checksum_pairs(&m, "meta_checksum"), h);
        m.insert("rows:w".into(), "11".into());
        assert_ne!(checksum_pairs(&m, "meta_checksum"), h);
        let mut a: HashMap<String, String> = HashMap::new();
        a.insert("ab".into(), "c".into());
        let mut b: HashMap<String, String> = HashMap::new();
        b.insert("a".into(), "bc".into());
        assert_ne!(checksum_pairs(&a, ""), checksum_pairs(&b, ""));
    }
}
