//! The construction pass: one streaming read of each file that counts its rows and keeps, for
//! every `block_rows`-th row, where its line starts (byte offset and line number). Memory is
//! two words per block; the rows themselves are not kept.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::values::is_blank_line;
use crate::error::{DataError, Result};

/// Where a row's line starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    /// Byte offset of the line.
    pub offset: u64,
    /// 1-based line number.
    pub line: u64,
}

/// A file's row count and the start of every `block_rows`-th row.
#[derive(Debug, Clone)]
pub(super) struct FileIndex {
    pub path: PathBuf,
    pub rows: u64,
    /// `marks[j]` is the start of row `j * block_rows`.
    pub marks: Vec<Mark>,
    /// The line after the last one (where a missing row would have been).
    pub end_line: u64,
}

/// Reads the lines of a file from a mark on, skipping blank ones, counting lines.
pub(super) struct LineReader {
    path: PathBuf,
    r: BufReader<File>,
    /// The line number of the next line read.
    line: u64,
    offset: u64,
    pub buf: Vec<u8>,
}

impl LineReader {
    /// Open `path` positioned at `at`.
    pub fn open(path: &Path, at: Mark) -> Result<LineReader> {
        let f = File::open(path).map_err(|e| DataError::io(path, e))?;
        let mut r = BufReader::with_capacity(1 << 16, f);
        if at.offset > 0 {
            r.seek(SeekFrom::Start(at.offset))
                .map_err(|e| DataError::io(path, e))?;
        }
        Ok(LineReader {
            path: path.to_path_buf(),
            r,
            line: at.line,
            offset: at.offset,
            buf: Vec::new(),
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the next row's line into `buf` (newline and a `\r` before it removed) and return
    /// where it starts, or `None` at the end of the file. Blank lines are skipped.
    pub fn next_row(&mut self) -> Result<Option<Mark>> {
        loop {
            self.buf.clear();
            let n = self
                .r
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| DataError::io(&self.path, e))?;
            if n == 0 {
                return Ok(None);
            }
            let mark = Mark {
                offset: self.offset,
                line: self.line,
            };
            self.offset += n as u64;
            self.line += 1;
            if is_blank_line(&self.buf) {
                continue;
            }
            if self.buf.last() == Some(&b'\n') {
                self.buf.pop();
            }
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            return Ok(Some(mark));
        }
    }
}

/// Index one file.
pub(super) fn index_file(path: &Path, block_rows: usize) -> Result<FileIndex> {
    let mut r = LineReader::open(path, Mark { offset: 0, line: 1 })?;
    let mut marks = Vec::new();
    let mut rows = 0u64;
    while let Some(m) = r.next_row()? {
        if rows.is_multiple_of(block_rows as u64) {
            marks.push(m);
        }
        rows += 1;
    }
    Ok(FileIndex {
        path: path.to_path_buf(),
        rows,
        marks,
        end_line: r.line,
    })
}

/// Refuse a label file whose row count differs from the data file's, naming the longer file
/// and the line of its first row without a partner.
pub(super) fn check_same_rows(
    data: &FileIndex,
    label: &FileIndex,
    block_rows: usize,
) -> Result<()> {
    if data.rows == label.rows {
        return Ok(());
    }
    let (long, short) = if data.rows > label.rows {
        (data, label)
    } else {
        (label, data)
    };
    // The first extra row: find its line by reading from the nearest mark.
    let j = (short.rows / block_rows as u64) as usize;
    // The longer file has row `j * block_rows` (at most `short.rows`), so mark `j` exists.
    let from = long
        .marks
        .get(j)
        .copied()
        .unwrap_or(Mark { offset: 0, line: 1 });
    let start = if long.marks.get(j).is_some() {
        j * block_rows
    } else {
        0
    };
    let mut r = LineReader::open(&long.path, from)?;
    let mut line = long.end_line;
    for _ in start as u64..=short.rows {
        if let Some(m) = r.next_row()? {
            line = m.line;
        }
    }
    Err(DataError::Parse {
        file: long.path.clone(),
        line,
        col: 1,
        msg: format!(
            "row {} has no partner: {} has {} rows (ending before its line {}), this file has {}; \
             data and label files need one row each per sample",
            short.rows + 1,
            short.path.display(),
            short.rows,
            short.end_line,
            long.rows
        ),
    })
}
