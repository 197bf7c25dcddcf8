//! Placing a parse error of a block in its file: the file's line and the byte column.

use super::load::positioned;
use super::plan::{FileInfo, Span};
use crate::error::{DataError, Result};

/// Position a parse error of a block in its file (counts the newlines before the block).
pub(super) fn locate(files: &[FileInfo], s: Span, buf: &[u8], e: super::BufError) -> DataError {
    let path = &files[s.file].path;
    match count_newlines(path, s.start) {
        Ok(n) => positioned(path, buf, n, e),
        Err(err) => err,
    }
}

fn count_newlines(path: &std::path::Path, upto: u64) -> Result<u64> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut r = f.take(upto);
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if k == 0 {
            return Ok(n);
        }
        n += memchr::memchr_iter(b'\n', &buf[..k]).count() as u64;
    }
}

/// Byte offset of the line holding the `r`-th row of a buffer.
pub(super) fn row_line_start(buf: &[u8], r: usize) -> usize {
    let mut seen = 0;
    let mut start = 0;
    for line in buf.split(|&b| b == b'\n') {
        if super::parse::is_row_line(line) {
            if seen == r {
                return start;
            }
            seen += 1;
        }
        start += line.len() + 1;
    }
    buf.len()
}
