//! The sparse operators on CUDA: `densify` and `sparsify` (`kernels/sparse.cu`), the merges
//! and sparse-with-dense operators (`sparse_merge.rs`), and `slice_cols`, `retain` and
//! `concat_rows`, whose index work runs on the index arrays' host copies (the CPU's code,
//! `crate::cpu::sparse`'s plans) while the values move on the device; the format checks run
//! on the host copies too. The stored reductions (csr sums, row_sparse square sums) add
//! segments of the values in the CPU's order, one thread per output, the segments planned on
//! the host copies; square_sum's backward is one thread per stored value. The csr x csr
//! product has no CUDA kernel yet: it returns the [`Error::Device`](crate::Error::Device)
//! of [`not_ported`], naming the operation and the device, so a model that reaches one fails
//! with a message instead of copying to the host behind the user's back.

use std::ops::Range;
use std::sync::Arc;

use super::index::CudaIndex;
use cudarc::driver::{CudaSlice, PushKernelArg};

use super::elementwise::float_only;
use super::launch::{driver_err, grid, not_ported};
use super::storage::{with_cuda, CudaElement, CudaStorage};
use crate::dtype::SType;
use crate::error::{Error, Result};
use crate::ops::BinaryOp;
use crate::storage::{
    BackendIndex, Merge, SparseLayout, SparseOps, SparseParts, SquareSumAxis, StoredReduce,
    WithDense,
};

impl BackendIndex for CudaStorage {
    type Index = CudaIndex;
}

impl SparseOps for CudaStorage {
    fn merge(
        &self,
        la: SparseLayout<'_, CudaIndex>,
        b: &Self,
        lb: SparseLayout<'_, CudaIndex>,
        op: Merge,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        super::sparse_merge::merge(self, la, b, lb, op)
    }
    fn csr_product(
        &self,
        _la: SparseLayout<'_, CudaIndex>,
        _b: &Self,
        _lb: SparseLayout<'_, CudaIndex>,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        Err(not_ported("csr x csr", self.ordinal()))
    }
    fn scatter_dense(
        &self,
        l: SparseLayout<'_, CudaIndex>,
        dense: &Self,
        op: BinaryOp,
        sparse_left: bool,
    ) -> Result<Self> {
        super::sparse_merge::scatter_dense(self, l, dense, op, sparse_left)
    }
    fn with_dense(
        &self,
        l: SparseLayout<'_, CudaIndex>,
        dense: &Self,
        op: WithDense,
    ) -> Result<Self> {
        super::sparse_merge::with_dense(self, l, dense, op)
    }
    fn reduce_stored(&self, l: SparseLayout<'_, CudaIndex>, op: StoredReduce) -> Result<Self> {
        let name = match op {
            StoredReduce::Sum(_) => "sum",
            StoredReduce::SquareSum(_) => "square_sum",
        };
        float_only!(self, name, T => reduce_stored_t::<T>(self, l, op))
    }
    fn square_sum_grad(
        &self,
        l: SparseLayout<'_, CudaIndex>,
        g: &Self,
        axis: SquareSumAxis,
    ) -> Result<Self> {
        const OP: &str = "square_sum backward";
        super::elementwise::same_dtype(OP, self, g)?;
        float_only!(self, OP, T => square_sum_grad_t::<T>(self, l, g, axis))
    }
    fn densify(&self, l: SparseLayout<'_, CudaIndex>) -> Result<Self> {
        with_cuda!(&self.buf, s, T => densify_t::<T>(self, s, l))
    }
    fn sparsify(&self, shape: &[usize], to: SType) -> Result<SparseParts<Self, CudaIndex>> {
        with_cuda!(&self.buf, s, T => sparsify_t::<T>(self, s, shape, to))
    }
    fn slice_cols(
        &self,
        l: SparseLayout<'_, CudaIndex>,
        cols: Range<usize>,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        // The index work on the host copies (the CPU's), the values gathered on the device.
        let (indptr, indices, keep) = crate::cpu::sparse::slice_cols_plan(&host_layout(l), &cols)?;
        let ord = self.ordinal();
        Ok(SparseParts {
            indptr: Some(CudaIndex::upload(ord, Arc::new(indptr))?),
            indices: CudaIndex::upload(ord, Arc::new(indices))?,
            values: self.gather(&mut keep.into_iter())?,
        })
    }
    fn retain_stored(
        &self,
        l: SparseLayout<'_, CudaIndex>,
        ids: &[i64],
        search: bool,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        let (kept, at, rl) = crate::cpu::sparse::retain_plan(&host_layout(l), ids, search)?;
        let ord = self.ordinal();
        Ok(SparseParts {
            indptr: None,
            indices: CudaIndex::upload(ord, Arc::new(kept))?,
            values: self.gather(&mut at.iter().flat_map(|&k| k * rl..(k + 1) * rl))?,
        })
    }
    fn concat_csr(
        parts: &[(&Self, SparseLayout<'_, CudaIndex>)],
    ) -> Result<SparseParts<Self, CudaIndex>> {
        const OP: &str = "concat_rows";
        let Some(&(first, _)) = parts.first() else {
            return Err(Error::arg(OP, "needs at least one array"));
        };
        let layouts: Vec<_> = parts.iter().map(|&(_, l)| host_layout(l)).collect();
        let (indptr, indices, ranges) = crate::cpu::sparse::concat_csr_plan(&layouts)?;
        let ord = first.ordinal();
        for &(p, _) in parts {
            if p.ordinal() != ord {
                return Err(Error::device_mismatch(OP, first.device(), p.device()));
            }
        }
        let values = with_cuda!(&first.buf, _s, T => concat_values::<T>(parts, &ranges)?);
        Ok(SparseParts {
            indptr: Some(CudaIndex::upload(ord, Arc::new(indptr))?),
            indices: CudaIndex::upload(ord, Arc::new(indices))?,
            values,
        })
    }
    fn rebase_indptr(indptr: &CudaIndex, start: usize, end: usize) -> Result<(CudaIndex, i64)> {
        // Row pointers are read on the host copy; the slice's are uploaded.
        let base = indptr.host[start];
        let host: Vec<i64> = indptr.host[start..=end].iter().map(|p| p - base).collect();
        Ok((CudaIndex::upload(indptr.ordinal(), Arc::new(host))?, base))
    }
    fn index_range(idx: &CudaIndex, range: Range<usize>) -> Result<CudaIndex> {
        CudaIndex::upload(idx.ordinal(), Arc::new(idx.host[range].to_vec()))
    }
    fn check_csr(l: SparseLayout<'_, CudaIndex>, values_len: usize, full: bool) -> Result<()> {
        // The invariants are checked on the host copies, by the CPU's check.
        let host = host_layout(l);
        crate::cpu::CpuStorage::check_csr(host, values_len, full)
    }
    fn check_row_ids(idx: &CudaIndex, rows: usize) -> Result<()> {
        crate::cpu::CpuStorage::check_row_ids(&idx.host, rows)
    }
}

/// The gradient of a row_sparse square_sum for its stored values, `2 * v * g[sel]` (the CPU's
/// `rsp_square_sum_grad`); the head gradient's positions are checked on the ids' host copy.
fn square_sum_grad_t<T: CudaElement>(
    x: &CudaStorage,
    l: SparseLayout<'_, CudaIndex>,
    g: &CudaStorage,
    axis: SquareSumAxis,
) -> Result<CudaStorage> {
    const OP: &str = "square_sum backward";
    let SparseLayout::RowSparse { shape, indices } = l else {
        return Err(Error::arg(OP, "needs a row_sparse array"));
    };
    let (vs, gs) = (
        super::elementwise::typed::<T>(OP, x)?,
        super::elementwise::typed::<T>(OP, g)?,
    );
    let ids = &indices.host;
    let (k, n): (usize, usize) = (ids.len(), shape[1..].iter().product());
    if vs.len() != k * n {
        return Err(Error::shape(
            OP,
            format!("{} stored values for {k} rows of {n}", vs.len()),
        ));
    }
    // The largest head-gradient position the kernel reads, and the axis code it switches on.
    let (need, code) = match axis {
        SquareSumAxis::StoredRows | SquareSumAxis::Rows => (
            ids.iter()
                .map(|&r| r.max(0) as usize + 1)
                .max()
                .unwrap_or(0),
            0,
        ),
        SquareSumAxis::Cols => (n, 2i32),
        SquareSumAxis::All => (1, 3),
    };
    if ids.iter().any(|&r| r < 0) || (k * n > 0 && gs.len() < need) {
        return Err(Error::shape(
            OP,
            format!("head gradient of {} values, needs {need}", gs.len()),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&x.dev, OP, k * n)?;
    if k * n > 0 {
        let f = x.dev.function(
            "sparse.cu",
            super::elementwise::kname("square_sum_grad", T::SUFFIX),
        )?;
        let (k64, n64) = (k as u64, n as u64);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(indices.dev.as_ref())
            .arg(vs)
            .arg(gs)
            .arg(&mut out)
            .arg(&k64)
            .arg(&n64)
            .arg(&code);
        // SAFETY: values and output hold k x n, the ids k entries; every position of g read
        // (a row id, a column below n, or 0) is below its length (checked above).
        unsafe { l.launch(grid(k * n)) }.map_err(driver_err(OP))?;
    }
    Ok(x.with(out))
}

/// A stored reduction as segments of the value buffer summed in the CPU's order: the host
/// copies of the index arrays give each output its segment (`gptr`), and, where the CPU's
/// order is not the buffer's (a csr column sum, a row_sparse column square sum), the positions
/// in that order (`perm`); `seg_sum_*` in sparse.cu adds each segment in one thread.
fn reduce_stored_t<T: CudaElement>(
    x: &CudaStorage,
    l: SparseLayout<'_, CudaIndex>,
    op: StoredReduce,
) -> Result<CudaStorage> {
    let name = match op {
        StoredReduce::Sum(_) => "sum",
        StoredReduce::SquareSum(_) => "square_sum",
    };
    let vals = super::elementwise::typed::<T>(name, x)?;
    // (value offset, segment pointers, order, output slot per segment, output length, square)
    type Plan = (
        usize,
        Vec<i64>,
        Option<Vec<i64>>,
        Option<Vec<i64>>,
        usize,
        bool,
    );
    let plan: Plan = match (op, l) {
        (
            StoredReduce::Sum(axis),
            SparseLayout::Csr {
                shape: [m, n],
                indptr,
                indices,
                offset,
            },
        ) => {
            let ip = &indptr.host;
            let nnz = ip.last().copied().unwrap_or(0).max(0) as usize;
            let idx = indices.host.get(offset..offset + nnz).ok_or_else(|| {
                Error::shape("sum", format!("{nnz} stored entries from {offset}"))
            })?;
            match axis {
                Some(0) => {
                    // Column groups, each column's entries in buffer order (a counting sort).
                    let mut start = vec![0i64; n + 1];
                    for &j in idx {
                        let j = usize::try_from(j)
                            .ok()
                            .filter(|&j| j < n)
                            .ok_or_else(|| Error::index("sum", format!("column {j} of {n}")))?;
                        start[j + 1] += 1;
                    }
                    for j in 0..n {
                        start[j + 1] += start[j];
                    }
                    let mut next = start.clone();
                    let mut perm = vec![0i64; nnz];
                    for (p, &j) in idx.iter().enumerate() {
                        perm[next[j as usize] as usize] = p as i64;
                        next[j as usize] += 1;
                    }
                    (offset, start, Some(perm), None, n, false)
                }
                Some(_) => (offset, ip.to_vec(), None, None, m, false),
                None => (offset, vec![0, nnz as i64], None, None, 1, false),
            }
        }
        (StoredReduce::SquareSum(axis), SparseLayout::RowSparse { shape, indices }) => {
            let ids = &indices.host;
            let (m, n): (usize, usize) = (shape[0], shape[1..].iter().product());
            let k = ids.len();
            let rows = || (0..=k).map(|r| (r * n) as i64).collect::<Vec<i64>>();
            match axis {
                SquareSumAxis::StoredRows => (0, rows(), None, None, k, true),
                SquareSumAxis::Rows => (0, rows(), None, Some(ids.to_vec()), m, true),
                SquareSumAxis::Cols => {
                    let start = (0..=n).map(|j| (j * k) as i64).collect();
                    let perm = (0..n)
                        .flat_map(|j| (0..k).map(move |r| (r * n + j) as i64))
                        .collect();
                    (0, start, Some(perm), None, n, true)
                }
                SquareSumAxis::All => (0, vec![0, (k * n) as i64], None, None, 1, true),
            }
        }
        _ => return Err(Error::stype(name, "no kernel for these storage types")),
    };
    let (off, gptr, perm, out_at, out_len, square) = plan;
    let used = gptr.last().copied().unwrap_or(0) as usize;
    if off + used > vals.len() {
        return Err(Error::shape(
            name,
            format!("{used} stored values from {off} of {}", vals.len()),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&x.dev, name, out_len)?;
    let groups = gptr.len().saturating_sub(1);
    if groups == 0 || out_len == 0 {
        return Ok(x.with(out));
    }
    let ord = x.ordinal();
    let up = |v: Vec<i64>| CudaIndex::upload(ord, Arc::new(v));
    let gptr = up(gptr)?;
    let perm = perm.map(up).transpose()?;
    let out_at = out_at.map(up).transpose()?;
    // The CPU's loops over outputs (csr sums, the column square sums) start each at +0; the
    // square sums by `Iterator::sum` (stored rows, rows, all) at Rust's float sum's -0.
    let neg = matches!(
        op,
        StoredReduce::SquareSum(
            SquareSumAxis::StoredRows | SquareSumAxis::Rows | SquareSumAxis::All
        )
    );
    let init = T::from_f64(if neg { -0.0 } else { 0.0 });
    let null = 0u64;
    let (groups64, out_len64, sq) = (groups as u64, out_len as u64, i32::from(square));
    let view = vals.slice(off..);
    let f = x
        .dev
        .function("sparse.cu", super::elementwise::kname("seg_sum", T::SUFFIX))?;
    let mut lb = x.dev.stream.launch_builder(&f);
    lb.arg(&view).arg(gptr.dev.as_ref());
    match &perm {
        Some(p) => lb.arg(p.dev.as_ref()),
        None => lb.arg(&null),
    };
    match &out_at {
        Some(p) => lb.arg(p.dev.as_ref()),
        None => lb.arg(&null),
    };
    lb.arg(&mut out)
        .arg(&groups64)
        .arg(&out_len64)
        .arg(&sq)
        .arg(&init);
    // SAFETY: the segments are non-decreasing (`check_csr` / the row_sparse shape) and end at
    // `used`, inside the values from `off` (checked above); `perm` holds positions below
    // `used` (built here from the same index arrays); an output slot outside `0..out_len` is
    // skipped by the kernel.
    unsafe { lb.launch(grid(groups)) }.map_err(driver_err(name))?;
    Ok(x.with(out))
}

/// A layout over the host copies of its index arrays (what the CPU's index code reads).
fn host_layout(l: SparseLayout<'_, CudaIndex>) -> SparseLayout<'_, Arc<Vec<i64>>> {
    match l {
        SparseLayout::Csr {
            shape,
            indptr,
            indices,
            offset,
        } => SparseLayout::Csr {
            shape,
            indptr: &indptr.host,
            indices: &indices.host,
            offset,
        },
        SparseLayout::RowSparse { shape, indices } => SparseLayout::RowSparse {
            shape,
            indices: &indices.host,
        },
    }
}

/// The value ranges `ranges` of the parts' buffers, one after the other, in a new buffer
/// (device-to-device copies; each range checked against its buffer first).
fn concat_values<T: CudaElement>(
    parts: &[(&CudaStorage, SparseLayout<'_, CudaIndex>)],
    ranges: &[Range<usize>],
) -> Result<CudaStorage> {
    const OP: &str = "concat_rows";
    let Some(&(first, _)) = parts.first() else {
        return Err(Error::arg(OP, "needs at least one array"));
    };
    let total: usize = ranges.iter().map(|r| r.len()).sum();
    let mut out = CudaStorage::alloc::<T>(&first.dev, OP, total)?;
    let mut at = 0;
    for (&(p, _), r) in parts.iter().zip(ranges) {
        let src = super::elementwise::typed::<T>(OP, p)?;
        if r.end > src.len() {
            return Err(Error::shape(
                OP,
                format!("values {}..{} of a buffer of {}", r.start, r.end, src.len()),
            ));
        }
        if !r.is_empty() {
            let mut dst = out.slice_mut(at..at + r.len());
            first
                .dev
                .stream
                .memcpy_dtod(&src.slice(r.clone()), &mut dst)
                .map_err(driver_err(OP))?;
        }
        at += r.len();
    }
    Ok(first.with(out))
}

/// A csr or row_sparse array made dense on the device.
fn densify_t<T: CudaElement>(
    x: &CudaStorage,
    vals: &CudaSlice<T>,
    l: SparseLayout<'_, CudaIndex>,
) -> Result<CudaStorage> {
    const OP: &str = "cast_storage";
    let kernel = |base: &'static str| {
        let size = match std::mem::size_of::<T>() {
            1 => "b1",
            4 => "b4",
            _ => "b8",
        };
        x.dev
            .function("sparse.cu", super::elementwise::kname(base, size))
    };
    match l {
        SparseLayout::Csr {
            shape: [rows, cols],
            indptr,
            indices,
            offset,
        } => {
            let nnz = *indptr.host.last().unwrap_or(&0) as usize;
            if indptr.host.len() != rows + 1
                || offset + nnz > indices.host.len()
                || offset + nnz > vals.len()
            {
                return Err(Error::format(
                    SType::Csr,
                    "row pointers do not fit the stored values",
                ));
            }
            let mut out = CudaStorage::alloc::<T>(&x.dev, OP, rows * cols)?;
            if nnz > 0 {
                let f = kernel("densify_csr")?;
                let (off, r64, c64) = (offset as u64, rows as u64, cols as u64);
                let mut b = x.dev.stream.launch_builder(&f);
                b.arg(indptr.dev.as_ref())
                    .arg(indices.dev.as_ref())
                    .arg(vals)
                    .arg(&off);
                b.arg(&mut out).arg(&r64).arg(&c64);
                // SAFETY: a validated csr (`check_csr` when built): column ids below `cols`,
                // row pointers in order up to the stored values (checked above).
                unsafe { b.launch(grid(rows)) }.map_err(driver_err(OP))?;
            }
            Ok(x.with(out))
        }
        SparseLayout::RowSparse { shape, indices } => {
            let rows = shape.first().copied().unwrap_or(0);
            let row_len: usize = shape.iter().skip(1).product();
            let k = indices.host.len();
            if vals.len() != k * row_len
                || indices.host.iter().any(|&i| i < 0 || i as usize >= rows)
            {
                return Err(Error::format(
                    SType::RowSparse,
                    "row ids or values do not fit the shape",
                ));
            }
            let mut out = CudaStorage::alloc::<T>(&x.dev, OP, rows * row_len)?;
            if k * row_len > 0 {
                let f = kernel("densify_rsp")?;
                let (items, rl) = ((k * row_len) as u64, row_len as u64);
                let mut b = x.dev.stream.launch_builder(&f);
                b.arg(indices.dev.as_ref())
                    .arg(vals)
                    .arg(&mut out)
                    .arg(&items)
                    .arg(&rl);
                // SAFETY: every row id was checked above to lie inside the shape's rows.
                unsafe { b.launch(grid(k * row_len)) }.map_err(driver_err(OP))?;
            }
            Ok(x.with(out))
        }
    }
}

/// `x` (dense, `shape`) as csr (2-D; zeros dropped) or row_sparse (the rows holding a
/// non-zero). The per-row counts come back to the host, which makes the row pointers or row
/// ids (an index array keeps its host copy), and a csr's column ids are copied back for the
/// same reason: two device-to-host copies, each a synchronization.
fn sparsify_t<T: CudaElement>(
    x: &CudaStorage,
    v: &CudaSlice<T>,
    shape: &[usize],
    to: SType,
) -> Result<SparseParts<CudaStorage, CudaIndex>> {
    const OP: &str = "cast_storage";
    match to {
        SType::Dense => return Err(Error::stype(OP, "sparsify needs a sparse target")),
        SType::Csr if shape.len() != 2 => {
            return Err(Error::stype(
                OP,
                format!("csr needs a 2-D array, got shape {shape:?}"),
            ))
        }
        SType::RowSparse if shape.is_empty() => {
            return Err(Error::stype(OP, "row_sparse needs at least one dimension"))
        }
        _ => {}
    }
    let rows = shape[0];
    let width: usize = shape[1..].iter().product();
    if rows.checked_mul(width) != Some(v.len()) {
        return Err(Error::shape(
            OP,
            format!("{} values do not make shape {shape:?}", v.len()),
        ));
    }
    let dev = &x.dev;
    let mut counts = CudaStorage::alloc::<i64>(dev, OP, rows)?;
    if rows * width > 0 {
        let f = dev.function("sparse.cu", super::elementwise::kname("row_nnz", T::SUFFIX))?;
        let (r64, w64) = (rows as u64, width as u64);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (rows.min(1 << 20) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = dev.stream.launch_builder(&f);
        b.arg(v).arg(&mut counts).arg(&r64).arg(&w64);
        // SAFETY: x holds rows x width values (checked above); counts holds rows.
        unsafe { b.launch(cfg) }.map_err(driver_err(OP))?;
    }
    let counts: Vec<i64> = if rows > 0 {
        dev.read_to_host(OP, &counts)?
    } else {
        Vec::new()
    };
    if to == SType::RowSparse {
        let ids: Vec<i64> = (0..rows as i64)
            .zip(&counts)
            .filter(|(_, &c)| c > 0)
            .map(|(r, _)| r)
            .collect();
        let ids = CudaIndex::upload(dev.ordinal, Arc::new(ids))?;
        let values = super::sparse_dot::gather_rows_t::<T>(x, v, &ids, width)?;
        return Ok(SparseParts {
            indptr: None,
            indices: ids,
            values,
        });
    }
    let mut indptr = Vec::with_capacity(rows + 1);
    indptr.push(0i64);
    for c in &counts {
        indptr.push(indptr[indptr.len() - 1] + c);
    }
    let nnz = indptr[rows] as usize;
    let indptr = CudaIndex::upload(dev.ordinal, Arc::new(indptr))?;
    let mut idx = CudaStorage::alloc::<i64>(dev, OP, nnz)?;
    let mut vals = CudaStorage::alloc::<T>(dev, OP, nnz)?;
    if nnz > 0 {
        let f = dev.function(
            "sparse.cu",
            super::elementwise::kname("csr_fill", T::SUFFIX),
        )?;
        let (r64, c64) = (rows as u64, width as u64);
        let mut b = dev.stream.launch_builder(&f);
        b.arg(v)
            .arg(indptr.dev.as_ref())
            .arg(&mut idx)
            .arg(&mut vals)
            .arg(&r64)
            .arg(&c64);
        // SAFETY: indptr is the running sum of the counted non-zeros of each row, so row r
        // writes exactly counts[r] entries from indptr[r], all below nnz.
        unsafe { b.launch(grid(rows)) }.map_err(driver_err(OP))?;
    }
    let idx_host: Vec<i64> = if nnz > 0 {
        dev.read_to_host(OP, &idx)?
    } else {
        Vec::new()
    };
    Ok(SparseParts {
        indptr: Some(indptr),
        indices: CudaIndex {
            host: Arc::new(idx_host),
            dev: Arc::new(idx),
            device: dev.clone(),
        },
        values: x.with(vals),
    })
}
