//! Out-of-core products: `A . B` with `A` and the result in files larger than memory, streamed a
//! block of rows at a time with a bounded working set.

use std::path::Path;

use super::NDArray;
use crate::error::{Error, Result};

impl NDArray {
    /// `self . b` written to a new `.npy` file at `out` (returned as a read-write file-backed
    /// array), for a file-backed `self` (`m x k`, opened with [`NDArray::open_npy`]) that may be
    /// larger than memory; `b` (`k x n`) is in memory. One pass over `self`, `block_rows` rows
    /// at a time: while a block is multiplied the next one is already being read from disk
    /// (`MADV_WILLNEED`), and each finished block of `self` and of the output is released from
    /// this process's resident set once its result is flushed, so memory stays at about two
    /// blocks of `self`, one of the output, and `b`. The result equals `self.dot(b)`.
    pub fn matmul_to_file(
        &self,
        b: &NDArray,
        out: impl AsRef<Path>,
        block_rows: usize,
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
        let (m, k, n) = (ashape[0], ashape[1], bshape[1]);
        let size = self.dtype().size_of();
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
            let block = self.mapped_rows(start, end)?.dot(b)?;
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
