//! Out-of-core products: `A . B` with `A` and the result in files larger than memory, streamed a
//! block of rows at a time with a bounded working set.

use std::path::Path;

use super::NDArray;
use crate::error::{Error, Result};

impl NDArray {
    /// The most bytes of a file-backed right operand [`NDArray::matmul_to_file`] holds in
    /// memory at once (one column panel of it).
    pub const MATMUL_PANEL_BYTES: usize = 256 << 20;

    /// `self . b` written to a new `.npy` file at `out` (returned as a read-write file-backed
    /// array), for a file-backed `self` (`m x k`, opened with [`NDArray::open_npy`]) that may be
    /// larger than memory. One pass over `self`, `block_rows` rows at a time: while a block is
    /// multiplied the next one is already being read from disk (`MADV_WILLNEED`), and each
    /// finished block of `self` and of the output is released from this process's resident set
    /// once its result is flushed, so memory stays at about two blocks of `self`, one of the
    /// output, and `b`. The result equals `self.dot(b)`.
    ///
    /// `b` (`k x n`) may be in memory or file-backed; a file-backed `b` larger than
    /// [`NDArray::MATMUL_PANEL_BYTES`] is read in column panels of at most that size (see
    /// [`NDArray::matmul_to_file_with`]).
    pub fn matmul_to_file(
        &self,
        b: &NDArray,
        out: impl AsRef<Path>,
        block_rows: usize,
    ) -> Result<NDArray> {
        self.matmul_to_file_with(b, out, block_rows, Self::MATMUL_PANEL_BYTES)
    }

    /// [`NDArray::matmul_to_file`] with a bound on the memory a file-backed `b` takes: when `b`
    /// is file-backed and holds more than `panel_bytes`, each block of rows of `self` is
    /// multiplied by `b`'s column panels in turn (each panel, `k` rows of as many columns as
    /// fit in `panel_bytes`, copied into memory and `b`'s pages released after it), and the
    /// panel results are joined into the block's output rows. `self` is still read once; `b`
    /// is read once per block of rows, so a large `block_rows` makes fewer passes over it.
    /// Memory: two blocks of `self`, one panel of `b`, and one block of output rows.
    pub fn matmul_to_file_with(
        &self,
        b: &NDArray,
        out: impl AsRef<Path>,
        block_rows: usize,
        panel_bytes: usize,
    ) -> Result<NDArray> {
        const OP: &str = "matmul_to_file";
        let (ashape, bshape) = (self.shape(), b.shape());
        if ashape.len() != 2 || bshape.len() != 2 || ashape[1] != bshape[0] {
            return Err(Error::shape(
                OP,
                format!("cannot multiply {ashape:?} by {bshape:?}"),
            ));
        }
        if block_rows == 0 {
            return Err(Error::arg(OP, "block_rows must be positive"));
        }
        if self.dtype() != b.dtype() {
            return Err(Error::dtype_mismatch(OP, self.dtype(), b.dtype()));
        }
        let (a_file, a_offset, _) = self.mapping().ok_or_else(|| {
            Error::arg(
                OP,
                "the left operand is in memory: use dot (or open it with open_npy)",
            )
        })?;
        if panel_bytes == 0 {
            return Err(Error::arg(OP, "panel_bytes must be positive"));
        }
        let (m, k, n) = (ashape[0], ashape[1], bshape[1]);
        let size = self.dtype().size_of();
        // A file-backed `b` larger than the panel budget goes in column panels: (file, byte
        // offset, byte length, columns a panel).
        let b_panels = b.mapping().and_then(|(file, offset, len)| {
            let width = (panel_bytes / (k * size).max(1)).clamp(1, n.max(1));
            (len > panel_bytes && width < n).then_some((file, offset, len, width))
        });
        let result = NDArray::create_npy(out, &[m, n], self.dtype())?;
        let (o_file, o_offset, _) = result
            .mapping()
            .ok_or_else(|| Error::arg(OP, "output is not file-backed"))?;
        let a_bytes = |s: usize, e: usize| (a_offset + s * k * size, (e - s) * k * size);
        let o_bytes = |s: usize, e: usize| (o_offset + s * n * size, (e - s) * n * size);
        let mut start = 0;
        if m > 0 {
            let (off, len) = a_bytes(0, block_rows.min(m));
            a_file.prefetch(off, len);
        }
        while start < m {
            let end = (start + block_rows).min(m);
            let next_end = (end + block_rows).min(m);
            if end < m {
                let (off, len) = a_bytes(end, next_end);
                a_file.prefetch(off, len);
            }
            let rows = self.mapped_rows(start, end)?;
            let block = match &b_panels {
                None => rows.dot(b)?,
                Some((b_file, b_offset, b_len, width)) => {
                    let mut parts = Vec::with_capacity(n.div_ceil(*width));
                    for c0 in (0..n).step_by(*width) {
                        let c1 = (c0 + width).min(n);
                        let panel = b.slice_axis(1, Some(c0 as i64), Some(c1 as i64), 1)?;
                        b_file.release(*b_offset, *b_len);
                        parts.push(rows.dot(&panel)?);
                    }
                    let parts: Vec<&NDArray> = parts.iter().collect();
                    NDArray::concat(&parts, 1)?
                }
            };
            result.write_rows(start, &block)?;
            let (off, len) = o_bytes(start, end);
            o_file.flush_range(OP, off, len)?;
            o_file.release(off, len);
            let (off, len) = a_bytes(start, end);
            a_file.release(off, len);
            start = end;
        }
        Ok(result)
    }
}
