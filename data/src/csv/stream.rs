//! The rows of one epoch of one part, in epoch order, read one block at a time.
//!
//! A part's rows `r0..r1` are cut at multiples of `block_rows` (the rows whose line starts the
//! construction pass kept), so every block is read by seeking to a kept line start and
//! skipping at most one block's rows. With shuffling, the blocks come in a seeded order and
//! each block's rows are permuted after it is read.

use std::sync::Arc;

use super::index::{FileIndex, LineReader};
use super::params::CSVIterParams;
use super::values::Values;
use crate::error::{DataError, Result};
use crate::ndarray_iter::row_order;

/// What every stream of one iterator reads.
#[derive(Debug)]
pub(super) struct Source {
    pub p: CSVIterParams,
    pub data: FileIndex,
    pub label: Option<FileIndex>,
    pub data_width: usize,
    pub label_width: usize,
    /// This part's rows.
    pub r0: u64,
    pub r1: u64,
}

impl Source {
    /// Rows in this part.
    pub fn rows(&self) -> u64 {
        self.r1 - self.r0
    }

    /// This part's blocks as global row ranges, in file order.
    fn blocks(&self) -> Vec<(u64, u64)> {
        let b = self.p.block_rows as u64;
        let mut out = Vec::new();
        let mut s = self.r0;
        while s < self.r1 {
            let e = ((s / b + 1) * b).min(self.r1);
            out.push((s, e));
            s = e;
        }
        out
    }

    /// Read rows `s..e` of `file` into `out`.
    fn read(
        &self,
        file: &FileIndex,
        width: usize,
        shape: &str,
        s: u64,
        e: u64,
        out: &mut Values,
    ) -> Result<()> {
        let b = self.p.block_rows as u64;
        let j = s / b;
        let mark = *file.marks.get(j as usize).ok_or_else(|| {
            DataError::arg(
                "CSVIter",
                format!("{} changed since it was indexed", file.path.display()),
            )
        })?;
        let mut r = LineReader::open(&file.path, mark)?;
        for row in j * b..e {
            let Some(m) = r.next_row()? else {
                return Err(DataError::Parse {
                    file: r.path().to_path_buf(),
                    line: file.end_line,
                    col: 1,
                    msg: format!("the file ended at row {row}: it changed since it was indexed"),
                });
            };
            if row < s {
                continue;
            }
            out.push_line(&r.buf, width, shape, self.p.allow_non_finite)
                .map_err(|(col, msg)| DataError::Parse {
                    file: r.path().to_path_buf(),
                    line: m.line,
                    col,
                    msg,
                })?;
        }
        Ok(())
    }
}

/// Seed of the row permutation of block `j` (distinct from the block order's stream).
fn block_seed(seed: u64, j: u64) -> u64 {
    seed ^ (j.wrapping_add(1)).wrapping_mul(0xD1B5_4A32_D192_ED03)
}

/// One epoch's rows, in order.
pub(super) struct EpochStream {
    src: Arc<Source>,
    epoch: u64,
    /// Block ranges in this epoch's order.
    order: Vec<(u64, u64)>,
    next_block: usize,
    data: Values,
    label: Values,
    rows: usize,
    cursor: usize,
}

impl EpochStream {
    /// The rows of epoch `epoch`, the first `skip` of them left out.
    pub fn new(src: &Arc<Source>, epoch: u64, skip: usize) -> Result<EpochStream> {
        let blocks = src.blocks();
        let p = &src.p;
        let order = row_order(blocks.len(), p.shuffle, p.seed, epoch)
            .into_iter()
            .map(|i| blocks[i])
            .collect();
        let mut st = EpochStream {
            src: Arc::clone(src),
            epoch,
            order,
            next_block: 0,
            data: Values::new(p.dtype),
            label: Values::new(p.dtype),
            rows: 0,
            cursor: 0,
        };
        let (mut d, mut l) = (Values::new(p.dtype), Values::new(p.dtype));
        st.take(skip, &mut d, &mut l)?;
        Ok(st)
    }

    fn load_next(&mut self) -> Result<bool> {
        let Some(&(s, e)) = self.order.get(self.next_block) else {
            return Ok(false);
        };
        self.next_block += 1;
        let src = Arc::clone(&self.src);
        let p = &src.p;
        let mut data = Values::new(p.dtype);
        let data_shape = format!("data_shape {:?}", p.data_shape);
        src.read(&src.data, src.data_width, &data_shape, s, e, &mut data)?;
        let mut label = Values::new(p.dtype);
        match &src.label {
            Some(lf) => {
                let label_shape = format!("label_shape {:?}", p.label_shape);
                src.read(lf, src.label_width, &label_shape, s, e, &mut label)?
            }
            None => label.push_zeros((e - s) as usize * src.label_width),
        }
        let n = (e - s) as usize;
        if p.shuffle {
            let perm = row_order(
                n,
                true,
                block_seed(p.seed, s / p.block_rows as u64),
                self.epoch,
            );
            data = data.permuted(&perm, src.data_width);
            label = label.permuted(&perm, src.label_width);
        }
        self.data = data;
        self.label = label;
        self.rows = n;
        self.cursor = 0;
        Ok(true)
    }

    /// Append up to `want` rows to `data` and `label`; fewer only at the end of the epoch.
    /// Returns the number appended.
    pub fn take(&mut self, want: usize, data: &mut Values, label: &mut Values) -> Result<usize> {
        let (dw, lw) = (self.src.data_width, self.src.label_width);
        let mut got = 0;
        while got < want {
            if self.cursor == self.rows && !self.load_next()? {
                break;
            }
            let k = (want - got).min(self.rows - self.cursor);
            let (a, b) = (self.cursor, self.cursor + k);
            data.extend_from(&self.data, a * dw, b * dw);
            label.extend_from(&self.label, a * lw, b * lw);
            self.cursor = b;
            got += k;
        }
        Ok(got)
    }
}
