//! The CUDA sparse-product family ([`SparseDotOps`]): `kernels/sparse_dot.cu`. csr . dense,
//! csr^T . dense as row_sparse (over the column grouping, uploaded per call), csr . W^T and its
//! weight gradient, csr . row_sparse (each non-zero's stored row found once by a binary search
//! on the device), dense . csr (atomics; with the csr transposed, a gather), and the
//! embedding's gather and segment sum. dense . csr = csr has no CUDA kernel (nor in MXNet).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::elementwise::{float_only, kname, same_dtype, typed};
use super::index::CudaIndex;
use super::launch::{driver_err, grid, not_ported};
use super::storage::{with_cuda, CudaElement, CudaStorage};
use crate::cpu::CpuStorage;
use crate::error::{Error, Result};
use crate::sparse::ColumnGroups;
use crate::storage::{CsrView, SparseDotOps};
use crate::Device;

type Csr<'a> = CsrView<'a, CudaIndex>;

/// The csr's non-zero count, checked against its column ids and values.
fn nnz_of(op: &'static str, x: &Csr<'_>, values: usize) -> Result<usize> {
    let nnz = *x.indptr.host.last().unwrap_or(&0) as usize;
    if x.offset + nnz > x.indices.host.len() || x.offset + nnz > values {
        return Err(Error::format(
            crate::SType::Csr,
            format!(
                "{op}: {nnz} non-zeros from {} past the stored ones",
                x.offset
            ),
        ));
    }
    Ok(nnz)
}

/// Host positions as a device array (the column grouping's parts).
fn upload(
    x: &CudaStorage,
    op: &'static str,
    v: impl Iterator<Item = usize>,
) -> Result<CudaSlice<i64>> {
    let v: Vec<i64> = v.map(|p| p as i64).collect();
    if v.is_empty() {
        return CudaStorage::alloc::<i64>(&x.dev, op, 0);
    }
    x.dev.stream.clone_htod(&v).map_err(driver_err(op))
}

fn csr_dense_t<T: CudaElement>(
    v: &CudaStorage,
    x: Csr<'_>,
    w: &CudaStorage,
    n: usize,
) -> Result<CudaStorage> {
    const OP: &str = "dot";
    let (vs, ws) = (typed::<T>(OP, v)?, typed::<T>(OP, w)?);
    nnz_of(OP, &x, vs.len())?;
    let [m, k] = x.shape;
    if ws.len() != k * n {
        return Err(Error::shape(
            OP,
            format!("weight of {} values, not {k} x {n}", ws.len()),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&v.dev, OP, m * n)?;
    if m * n > 0 {
        let f = v
            .dev
            .function("sparse_dot.cu", kname("csr_dense", T::SUFFIX))?;
        let (off, m64, n64) = (x.offset as u64, m as u64, n as u64);
        let mut l = v.dev.stream.launch_builder(&f);
        l.arg(x.indptr.dev.as_ref())
            .arg(x.indices.dev.as_ref())
            .arg(vs)
            .arg(&off)
            .arg(ws);
        l.arg(&mut out).arg(&m64).arg(&n64);
        // SAFETY: the csr was validated when built (`check_csr`: row pointers in order, column
        // ids below k, nnz values from the offset, checked again above); w holds k x n.
        unsafe { l.launch(grid(m * n)) }.map_err(driver_err(OP))?;
    }
    Ok(v.with(out))
}

/// A column grouping on a device: its starts, order and rows, one after another.
struct DeviceGroups(CudaSlice<i64>);

fn csr_t_dense_t<T: CudaElement>(
    v: &CudaStorage,
    x: Csr<'_>,
    g: &CudaStorage,
    n: usize,
    groups: &ColumnGroups,
) -> Result<CudaStorage> {
    const OP: &str = "dot";
    let (vs, gs) = (typed::<T>(OP, v)?, typed::<T>(OP, g)?);
    let nnz = nnz_of(OP, &x, vs.len())?;
    let m = x.shape[0];
    let count = groups.uniq.len();
    if gs.len() != m * n
        || groups.starts.len() != count + 1
        || groups.order.len() != nnz
        || groups.rows.len() != nnz
    {
        return Err(Error::shape(
            OP,
            "gradient or column grouping does not fit the csr",
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&v.dev, OP, count * n)?;
    if count * n > 0 {
        // One copy of the grouping per device, kept with it: a batch prepared ahead
        // (`prepare_csr_transpose`) pays the upload once, at its first product.
        let dev_groups = groups.upload_for(Device::Cuda(v.dev.ordinal), || {
            let packed = groups
                .starts
                .iter()
                .chain(groups.order.iter())
                .chain(groups.rows.iter())
                .copied();
            upload(v, OP, packed).map(DeviceGroups)
        })?;
        let parts = &dev_groups.0;
        let (s_end, o_end) = (count + 1, count + 1 + nnz);
        let (starts, order, rows) = (
            parts.slice(..s_end),
            parts.slice(s_end..o_end),
            parts.slice(o_end..),
        );
        let f = v
            .dev
            .function("sparse_dot.cu", kname("csr_t_dense", T::SUFFIX))?;
        let (off, c64, n64) = (x.offset as u64, count as u64, n as u64);
        let mut l = v.dev.stream.launch_builder(&f);
        l.arg(&starts)
            .arg(&order)
            .arg(&rows)
            .arg(vs)
            .arg(&off)
            .arg(gs);
        l.arg(&mut out).arg(&c64).arg(&n64);
        // SAFETY: the grouping was computed from this csr (`ColumnGroups::matches`): group
        // starts index `order`, whose entries index the nnz values and `rows`, whose rows are
        // below m (g holds m x n).
        unsafe { l.launch(grid(count * n)) }.map_err(driver_err(OP))?;
    }
    Ok(v.with(out))
}

/// `csr_dense_t` (`grad = false`) or its weight gradient (`grad = true`).
fn csr_w_t<T: CudaElement>(
    v: &CudaStorage,
    x: Csr<'_>,
    other: &CudaStorage,
    units: usize,
    grad: bool,
) -> Result<CudaStorage> {
    let op = if grad {
        "dot_csr_dense_t backward"
    } else {
        "dot_csr_dense_t"
    };
    let (vs, os) = (typed::<T>(op, v)?, typed::<T>(op, other)?);
    nnz_of(op, &x, vs.len())?;
    let [rows, feats] = x.shape;
    let (need, out_len) = if grad {
        (rows * units, units * feats)
    } else {
        (units * feats, rows * units)
    };
    if os.len() != need {
        return Err(Error::shape(
            op,
            format!("operand of {} values, expected {need}", os.len()),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&v.dev, op, out_len)?;
    if rows * units > 0 {
        let base = if grad {
            "csr_dense_t_grad"
        } else {
            "csr_dense_t"
        };
        let f = v.dev.function("sparse_dot.cu", kname(base, T::SUFFIX))?;
        let (off, r64, u64_, f64_) = (x.offset as u64, rows as u64, units as u64, feats as u64);
        let mut l = v.dev.stream.launch_builder(&f);
        l.arg(x.indptr.dev.as_ref())
            .arg(x.indices.dev.as_ref())
            .arg(vs)
            .arg(&off)
            .arg(os);
        l.arg(&mut out).arg(&r64).arg(&u64_).arg(&f64_);
        // SAFETY: as `csr_dense_t`: a validated csr with column ids below feats; the dense
        // operand holds `need` values and the output `out_len`.
        unsafe { l.launch(grid(rows * units)) }.map_err(driver_err(op))?;
    }
    Ok(v.with(out))
}

fn csr_rsp_t<T: CudaElement>(
    v: &CudaStorage,
    x: Csr<'_>,
    w: &CudaStorage,
    w_rows: &CudaIndex,
    n: usize,
) -> Result<CudaStorage> {
    const OP: &str = "dot";
    let (vs, ws) = (typed::<T>(OP, v)?, typed::<T>(OP, w)?);
    let nnz = nnz_of(OP, &x, vs.len())?;
    let m = x.shape[0];
    let nrows = w_rows.host.len();
    if ws.len() != nrows * n {
        return Err(Error::shape(
            OP,
            format!(
                "row_sparse weight of {} values, not {nrows} x {n}",
                ws.len()
            ),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&v.dev, OP, m * n)?;
    if m * n == 0 || nnz == 0 {
        return Ok(v.with(out));
    }
    // Each non-zero's stored row of w (or -1), found once on the device, not once per column.
    let mut pos = CudaStorage::alloc::<i64>(&v.dev, OP, nnz)?;
    let (off, nr64, nnz64) = (x.offset as u64, nrows as u64, nnz as u64);
    let f = v
        .dev
        .function("sparse_dot.cu", kname("rsp_pos", T::SUFFIX))?;
    let mut l = v.dev.stream.launch_builder(&f);
    l.arg(x.indices.dev.as_ref())
        .arg(&off)
        .arg(w_rows.dev.as_ref())
        .arg(&nr64)
        .arg(&mut pos)
        .arg(&nnz64);
    // SAFETY: nnz column ids from the offset exist (checked by nnz_of); the search reads the
    // nrows stored row ids only; pos holds nnz entries.
    unsafe { l.launch(grid(nnz)) }.map_err(driver_err(OP))?;
    let f = v
        .dev
        .function("sparse_dot.cu", kname("csr_rsp", T::SUFFIX))?;
    let (m64, n64) = (m as u64, n as u64);
    let mut l = v.dev.stream.launch_builder(&f);
    l.arg(x.indptr.dev.as_ref())
        .arg(&pos)
        .arg(vs)
        .arg(&off)
        .arg(ws);
    l.arg(&mut out).arg(&m64).arg(&n64);
    // SAFETY: the row pointers of a validated csr run from 0 to nnz (pos's length); each pos
    // is -1 or a stored row below nrows, and w holds nrows x n values (checked above).
    unsafe { l.launch(grid(m * n)) }.map_err(driver_err(OP))?;
    Ok(v.with(out))
}

fn dense_csr_t<T: CudaElement>(
    v: &CudaStorage,
    x: Csr<'_>,
    a: &CudaStorage,
    m: usize,
    tb: bool,
) -> Result<CudaStorage> {
    const OP: &str = "dot";
    let (vs, as_) = (typed::<T>(OP, v)?, typed::<T>(OP, a)?);
    nnz_of(OP, &x, vs.len())?;
    let [cr, cc] = x.shape;
    let (k, n) = if tb { (cc, cr) } else { (cr, cc) };
    if as_.len() != m * k {
        return Err(Error::shape(
            OP,
            format!("dense operand of {} values, not {m} x {k}", as_.len()),
        ));
    }
    // Zeros: the plain form adds into it.
    let mut out = CudaStorage::alloc::<T>(&v.dev, OP, m * n)?;
    let work = if tb { m * n } else { m * k };
    if m * n == 0 || work == 0 {
        return Ok(v.with(out));
    }
    let name = if tb { "dense_csr_t" } else { "dense_csr" };
    let f = v.dev.function("sparse_dot.cu", kname(name, T::SUFFIX))?;
    let (off, m64, k64, n64) = (x.offset as u64, m as u64, k as u64, n as u64);
    let mut l = v.dev.stream.launch_builder(&f);
    l.arg(x.indptr.dev.as_ref())
        .arg(x.indices.dev.as_ref())
        .arg(vs)
        .arg(&off)
        .arg(as_);
    l.arg(&mut out).arg(&m64).arg(&k64).arg(&n64);
    // SAFETY: a validated csr (`check_csr`: column ids below its column count, nnz values from
    // the offset, checked again above): without tb its rows are a's k columns and its column
    // ids the output's n columns; with tb its rows are the output's n columns and its column
    // ids a's k columns. a holds m x k values, the output m x n.
    unsafe { l.launch(grid(work)) }.map_err(driver_err(OP))?;
    Ok(v.with(out))
}

fn segment_sum_t<T: CudaElement>(
    g: &CudaStorage,
    ids: &CudaIndex,
    dim: usize,
) -> Result<(CudaIndex, CudaStorage)> {
    const OP: &str = "embedding backward";
    let gs = typed::<T>(OP, g)?;
    let count = ids.host.len();
    if gs.len() != count * dim {
        return Err(Error::shape(
            OP,
            format!("{} values for {count} rows of {dim}", gs.len()),
        ));
    }
    // The sorted unique ids and each row's slot among them, on the host copy of the ids.
    let mut uniq: Vec<i64> = ids.host.to_vec();
    uniq.sort_unstable();
    uniq.dedup();
    let slot = ids.host.iter().map(|i| uniq.binary_search(i).unwrap_or(0));
    let slots = upload(g, OP, slot)?;
    let mut out = CudaStorage::alloc::<T>(&g.dev, OP, uniq.len() * dim)?;
    if count * dim > 0 {
        let f = g
            .dev
            .function("sparse_dot.cu", kname("segment_sum", T::SUFFIX))?;
        let (c64, d64) = (count as u64, dim as u64);
        let mut l = g.dev.stream.launch_builder(&f);
        l.arg(&slots).arg(gs).arg(&mut out).arg(&c64).arg(&d64);
        // SAFETY: every slot is below uniq.len() (found by the search above), the output
        // holds uniq.len() rows of dim, the gradient count rows of dim.
        unsafe { l.launch(grid(count * dim)) }.map_err(driver_err(OP))?;
    }
    let uniq = CudaIndex::upload(g.ordinal(), Arc::new(uniq))?;
    Ok((uniq, g.with(out)))
}

pub(super) fn gather_rows_t<T: CudaElement>(
    t: &CudaStorage,
    s: &CudaSlice<T>,
    ids: &CudaIndex,
    dim: usize,
) -> Result<CudaStorage> {
    const OP: &str = "embedding";
    let count = ids.host.len();
    let rows = s.len().checked_div(dim).unwrap_or(0);
    if let Some(&bad) = ids.host.iter().find(|&&i| i < 0 || i as usize >= rows) {
        return Err(Error::index(
            OP,
            format!("id {bad} out of range for {rows} rows"),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&t.dev, OP, count * dim)?;
    if count * dim > 0 {
        let name = match std::mem::size_of::<T>() {
            1 => "gather_rows_b1",
            4 => "gather_rows_b4",
            _ => "gather_rows_b8",
        };
        let f = t.dev.function("sparse_dot.cu", name)?;
        let (c64, d64) = (count as u64, dim as u64);
        let mut l = t.dev.stream.launch_builder(&f);
        l.arg(s)
            .arg(ids.dev.as_ref())
            .arg(&mut out)
            .arg(&c64)
            .arg(&d64);
        // SAFETY: every id was checked above to be a row of the table.
        unsafe { l.launch(grid(count * dim)) }.map_err(driver_err(OP))?;
    }
    Ok(t.with(out))
}

impl SparseDotOps for CudaStorage {
    fn csr_dense(&self, x: Csr<'_>, w: &Self, n: usize) -> Result<Self> {
        same_dtype("dot", self, w)?;
        float_only!(self, "dot", T => csr_dense_t::<T>(self, x, w, n))
    }
    fn csr_t_dense(&self, x: Csr<'_>, g: &Self, n: usize, groups: &ColumnGroups) -> Result<Self> {
        same_dtype("dot", self, g)?;
        float_only!(self, "dot", T => csr_t_dense_t::<T>(self, x, g, n, groups))
    }
    fn csr_rsp(&self, x: Csr<'_>, w_data: &Self, w_rows: &CudaIndex, n: usize) -> Result<Self> {
        same_dtype("dot", self, w_data)?;
        float_only!(self, "dot", T => csr_rsp_t::<T>(self, x, w_data, w_rows, n))
    }
    fn dense_csr(&self, x: Csr<'_>, a: &Self, m: usize, tb: bool) -> Result<Self> {
        same_dtype("dot", self, a)?;
        float_only!(self, "dot", T => dense_csr_t::<T>(self, x, a, m, tb))
    }
    fn dense_csr_to_csr(
        &self,
        _x: Csr<'_>,
        _a: &Self,
        _m: usize,
        _ta: bool,
    ) -> Result<(CudaIndex, CudaIndex, Self)> {
        // MXNet has no GPU kernel for dot(dense, csr) = csr either.
        Err(not_ported("dot(dense, csr) = csr", self.ordinal()))
    }
    fn csr_dense_t(&self, x: Csr<'_>, w: &Self, units: usize) -> Result<Self> {
        same_dtype("dot_csr_dense_t", self, w)?;
        float_only!(self, "dot_csr_dense_t", T => csr_w_t::<T>(self, x, w, units, false))
    }
    fn csr_dense_t_into(
        &self,
        _x: Csr<'_>,
        _w: &Self,
        _units: usize,
        _out: &mut Self,
    ) -> Result<()> {
        Err(not_ported(
            "dot_csr_dense_t into a planned buffer",
            self.ordinal(),
        ))
    }
    fn csr_dense_t_grad(&self, x: Csr<'_>, g: &Self, units: usize) -> Result<Self> {
        same_dtype("dot_csr_dense_t backward", self, g)?;
        float_only!(self, "dot_csr_dense_t backward", T => csr_w_t::<T>(self, x, g, units, true))
    }
    fn gather_rows(&self, ids: &CudaIndex, dim: usize) -> Result<Self> {
        with_cuda!(&self.buf, s, T => gather_rows_t::<T>(self, s, ids, dim))
    }
    fn segment_sum(&self, ids: &CudaIndex, dim: usize) -> Result<(CudaIndex, Self)> {
        float_only!(self, "embedding backward", T => segment_sum_t::<T>(self, ids, dim))
    }
    /// Ids are validated on the host (as the CPU validates them: whole numbers inside
    /// `0..bound`), then uploaded: index validation reads host memory on purpose
    /// (ARCHITECTURE.md), and the index array keeps the host copy it was checked on.
    fn to_ids(&self, op: &'static str, bound: usize) -> Result<CudaIndex> {
        let host: CpuStorage = self.to_host()?;
        let ids = <CpuStorage as SparseDotOps>::to_ids(&host, op, bound)?;
        CudaIndex::upload(self.ordinal(), ids)
    }
}
