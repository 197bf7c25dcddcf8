//! Splitting files into blocks of whole lines, for streaming, partitions and shuffling.
//!
//! The data files are one virtual byte range. Part `p` of `n` owns the bytes
//! `[total*p/n, total*(p+1)/n)`, cut further into blocks of about `block_bytes`. Every cut is
//! moved forward to the next line start by [`align`], a function of the position alone, so two
//! neighbours agree on their shared cut: each line belongs to exactly one block and each block
//! holds whole lines. That is what makes parts disjoint and complete, and it needs no index of
//! the file (memory is O(number of blocks)).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::parse::count_rows;
use crate::error::{DataError, Result};

/// A file with its length.
#[derive(Debug, Clone)]
pub(crate) struct FileInfo {
    pub path: PathBuf,
    pub len: u64,
}

/// A byte range of whole lines in one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub file: usize,
    pub start: u64,
    pub end: u64,
}

/// One unit of streaming: a data span and, with a separate label file, the label span holding
/// the same rows.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub data: Span,
    pub label: Option<Span>,
}

pub(crate) fn file_infos(paths: &[PathBuf]) -> Result<Vec<FileInfo>> {
    paths
        .iter()
        .map(|p| {
            let len = std::fs::metadata(p).map_err(|e| DataError::io(p, e))?.len();
            Ok(FileInfo {
                path: p.clone(),
                len,
            })
        })
        .collect()
}

/// The first line start at or after `pos` (a line starts at 0 and after every newline).
pub(crate) fn align(path: &Path, len: u64, pos: u64) -> Result<u64> {
    if pos == 0 || pos >= len {
        return Ok(pos.min(len));
    }
    let mut f = File::open(path).map_err(|e| DataError::io(path, e))?;
    f.seek(SeekFrom::Start(pos - 1))
        .map_err(|e| DataError::io(path, e))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = pos - 1;
    loop {
        let n = f.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if n == 0 {
            return Ok(len);
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok((at + i as u64 + 1).min(len));
        }
        at += n as u64;
    }
}

/// The blocks of part `part` of `parts`, in file order.
pub(crate) fn plan_part(
    files: &[FileInfo],
    parts: usize,
    part: usize,
    block_bytes: u64,
) -> Result<Vec<Span>> {
    let total: u64 = files.iter().map(|f| f.len).sum();
    let cut = |p: usize| (total as u128 * p as u128 / parts as u128) as u64;
    let (ps, pe) = (cut(part), cut(part + 1));
    let mut spans = Vec::new();
    let mut vo = 0u64;
    for (fi, f) in files.iter().enumerate() {
        let (a, b) = (ps.max(vo), pe.min(vo + f.len));
        if a < b {
            let (a, b) = (a - vo, b - vo);
            let mut cuts = vec![align(&f.path, f.len, a)?];
            let mut x = a + block_bytes.max(1);
            while x < b {
                cuts.push(align(&f.path, f.len, x)?);
                x += block_bytes.max(1);
            }
            cuts.push(align(&f.path, f.len, b)?);
            for w in cuts.windows(2) {
                if w[0] < w[1] {
                    spans.push(Span {
                        file: fi,
                        start: w[0],
                        end: w[1],
                    });
                }
            }
        }
        vo += f.len;
    }
    Ok(spans)
}

/// Read a span into `buf` (cleared first).
pub(crate) fn read_span(files: &[FileInfo], s: Span, buf: &mut Vec<u8>) -> Result<()> {
    let path = &files[s.file].path;
    let mut f = File::open(path).map_err(|e| DataError::io(path, e))?;
    f.seek(SeekFrom::Start(s.start))
        .map_err(|e| DataError::io(path, e))?;
    buf.clear();
    let n = (s.end - s.start) as usize;
    buf.try_reserve(n)
        .map_err(|_| DataError::arg("libsvm", format!("cannot allocate {n} bytes for a block")))?;
    f.take(n as u64)
        .read_to_end(buf)
        .map_err(|e| DataError::io(path, e))?;
    if buf.len() != n {
        return Err(DataError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "file shrank while reading",
            ),
        ));
    }
    Ok(())
}

/// Pair every data span (all parts, in order) with the label-file span holding the same rows.
/// Reads the data once to count rows, and the label file once to find the row boundaries.
pub(crate) fn pair_labels(
    files: &[FileInfo],
    spans: &[Span],
    label: &FileInfo,
) -> Result<Vec<Span>> {
    let mut buf = Vec::new();
    let mut counts = Vec::with_capacity(spans.len());
    for &s in spans {
        read_span(files, s, &mut buf)?;
        counts.push(count_rows(&buf));
    }
    // Row boundaries wanted: cumulative counts.
    let mut want = Vec::with_capacity(spans.len() + 1);
    let mut acc = 0u64;
    want.push(0u64);
    for c in &counts {
        acc += c;
        want.push(acc);
    }
    let data_rows = acc;
    // Scan the label file: the offset just past the r-th row line, for each wanted r.
    let mut offs = Vec::with_capacity(want.len());
    let mut f = File::open(&label.path).map_err(|e| DataError::io(&label.path, e))?;
    let mut chunk = vec![0u8; 4 << 20];
    let mut rows_seen = 0u64;
    let mut wi = 0;
    let push = |rows_seen: u64, at: u64, wi: &mut usize, offs: &mut Vec<u64>| {
        while *wi < want.len() && want[*wi] == rows_seen {
            offs.push(at);
            *wi += 1;
        }
    };
    push(0, 0, &mut wi, &mut offs);
    // Line state: 0 only blanks so far, 1 a row, 2 a comment.
    let mut state = 0u8;
    let mut base = 0u64;
    loop {
        let n = f
            .read(&mut chunk)
            .map_err(|e| DataError::io(&label.path, e))?;
        if n == 0 {
            if state == 1 {
                rows_seen += 1;
                push(rows_seen, base, &mut wi, &mut offs);
            }
            break;
        }
        for (i, &b) in chunk[..n].iter().enumerate() {
            match b {
                b'\n' => {
                    if state == 1 {
                        rows_seen += 1;
                        push(rows_seen, base + i as u64 + 1, &mut wi, &mut offs);
                    }
                    state = 0;
                }
                b' ' | b'\t' | b'\r' => {}
                b'#' if state == 0 => state = 2,
                _ if state == 0 => state = 1,
                _ => {}
            }
        }
        base += n as u64;
    }
    if rows_seen != data_rows {
        return Err(DataError::arg(
            "LibSVMIter",
            format!(
                "label file {} has {rows_seen} rows but the data has {data_rows}",
                label.path.display()
            ),
        ));
    }
    // The last boundary takes the rest of the file (trailing comments/blank lines).
    if let Some(last) = offs.last_mut() {
        *last = label.len;
    }
    Ok(offs
        .windows(2)
        .map(|w| Span {
            file: 0,
            start: w[0],
            end: w[1],
        })
        .collect())
}
