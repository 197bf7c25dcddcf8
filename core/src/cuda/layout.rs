//! The CUDA layout family ([`LayoutOps`]): `kernels/layout.cu`. Broadcast and permute are one
//! strided copy; the gathers along an axis and their scatter-add adjoints; select by a mask
//! and the non-zero mask; slices (`copy_range`) are a device-to-device copy; `concat` is one
//! block copy per part; `index_copy` marks each target row's last writer, then copies those
//! rows; `one_hot` writes every element of the output from the i64 indices.

use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg};

use super::elementwise::{float_only, kname, same_dtype, typed};
use super::launch::{driver_err, grid, too_many_dims, MAX_DIMS};
use super::storage::{half_not_ported, with_cuda, CudaElement, CudaStorage};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::LayoutOps;

/// An output shape and the input's stride per output axis. Mirrors `struct Strided` in
/// layout.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Strided {
    shape: [u64; MAX_DIMS],
    stride: [i64; MAX_DIMS],
    ndim: i32,
}

// SAFETY: plain `repr(C)` integers, laid out as the kernel's struct.
unsafe impl DeviceRepr for Strided {}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1] as i64;
    }
    st
}

/// The kernel name of a copy of elements of `T`'s size.
fn by_size<T>(base: &'static str) -> &'static str {
    kname(
        base,
        match std::mem::size_of::<T>() {
            1 => "b1",
            4 => "b4",
            _ => "b8",
        },
    )
}

fn strided_t<T: CudaElement>(
    x: &CudaStorage,
    s: &CudaSlice<T>,
    op: &'static str,
    out: &[usize],
    in_stride: &[i64],
) -> Result<CudaStorage> {
    if out.len() > MAX_DIMS {
        return Err(too_many_dims(op, out.len()));
    }
    let n: usize = out.iter().product();
    let mut st = Strided {
        ndim: out.len() as i32,
        ..Default::default()
    };
    for d in 0..out.len() {
        st.shape[d] = out[d] as u64;
        st.stride[d] = in_stride[d];
    }
    let mut o = CudaStorage::alloc::<T>(&x.dev, op, n)?;
    if n > 0 {
        let f = x.dev.function("layout.cu", by_size::<T>("strided"))?;
        let n64 = n as u64;
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(s).arg(&mut o).arg(&n64).arg(&st);
        // SAFETY: the operator checked the shapes: every output index maps through the
        // strides to an element of `x` (stride 0 on broadcast axes, a permutation of `x`'s
        // strides for permute).
        unsafe { l.launch(grid(n)) }.map_err(driver_err(op))?;
    }
    Ok(x.with(o))
}

/// Which axis kernel of `layout.cu` (`[outer, n, inner]` around the axis, `k` positions).
#[derive(Clone, Copy)]
enum Axis {
    Select,
    Add,
    GatherAlong,
    ScatterAlong,
}

fn axis_t<T: CudaElement>(
    x: &CudaStorage,
    pos: &CudaStorage,
    dims: (usize, usize, usize),
    k: usize,
    which: Axis,
) -> Result<CudaStorage> {
    let (outer, n, inner) = dims;
    let (op, base, out_len, per_element) = match which {
        Axis::Select => ("take", "index_select", outer * k * inner, false),
        Axis::Add => ("take backward", "index_add", outer * n * inner, false),
        Axis::GatherAlong => ("gather_along", "gather_along", outer * k * inner, true),
        Axis::ScatterAlong => (
            "scatter_add_along",
            "scatter_add_along",
            outer * n * inner,
            true,
        ),
    };
    let xs = typed::<T>(op, x)?;
    let ps = typed::<i64>(op, pos)?;
    let need_pos = if per_element { outer * k * inner } else { k };
    let need_x = if matches!(which, Axis::Select | Axis::GatherAlong) {
        outer * n * inner
    } else {
        outer * k * inner
    };
    if ps.len() != need_pos || xs.len() != need_x {
        return Err(Error::shape(
            op,
            "positions or values do not fit the axis split",
        ));
    }
    let mut o = CudaStorage::alloc::<T>(&x.dev, op, out_len)?;
    let items = outer * k * inner;
    if items > 0 {
        let name = match which {
            Axis::Select | Axis::GatherAlong => by_size::<T>(base),
            Axis::Add | Axis::ScatterAlong => kname(base, T::SUFFIX),
        };
        let f = x.dev.function("layout.cu", name)?;
        let (a, b, c, d) = (outer as u64, n as u64, k as u64, inner as u64);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(xs)
            .arg(ps)
            .arg(&mut o)
            .arg(&a)
            .arg(&b)
            .arg(&c)
            .arg(&d);
        // SAFETY: positions are inside `0..n` (validated by the operator, or an argsort's
        // output); the lengths were checked above against the split.
        unsafe { l.launch(grid(items)) }.map_err(driver_err(op))?;
    }
    Ok(x.with(o))
}

fn select_t<T: CudaElement>(
    mask: &CudaStorage,
    x: &CudaStorage,
    y: &CudaStorage,
) -> Result<CudaStorage> {
    let (ms, xs, ys) = (
        typed::<u8>("where", mask)?,
        typed::<T>("where", x)?,
        typed::<T>("where", y)?,
    );
    let n = ms.len();
    if xs.len() != n || ys.len() != n {
        return Err(Error::shape("where", "mask and operands differ in length"));
    }
    let mut o = CudaStorage::alloc::<T>(&x.dev, "where", n)?;
    if n > 0 {
        let f = x.dev.function("layout.cu", by_size::<T>("select"))?;
        let n64 = n as u64;
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(ms).arg(xs).arg(ys).arg(&mut o).arg(&n64);
        // SAFETY: four buffers of `n` elements (checked above).
        unsafe { l.launch(grid(n)) }.map_err(driver_err("where"))?;
    }
    Ok(x.with(o))
}

fn nonzero_t<T: CudaElement>(x: &CudaStorage, s: &CudaSlice<T>) -> Result<CudaStorage> {
    let n = s.len();
    let mut o = CudaStorage::alloc::<u8>(&x.dev, "where", n)?;
    if n > 0 {
        let f = x.dev.function("layout.cu", kname("nonzero", T::SUFFIX))?;
        let n64 = n as u64;
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(s).arg(&mut o).arg(&n64);
        // SAFETY: two buffers of `n` elements.
        unsafe { l.launch(grid(n)) }.map_err(driver_err("where"))?;
    }
    Ok(x.with(o))
}

fn range_t<T: CudaElement>(
    x: &CudaStorage,
    s: &CudaSlice<T>,
    start: usize,
    end: usize,
) -> Result<CudaStorage> {
    if start > end || end > s.len() {
        return Err(Error::index(
            "slice",
            format!("range {start}..{end} of {}", s.len()),
        ));
    }
    let mut out = CudaStorage::alloc::<T>(&x.dev, "slice", end - start)?;
    if end > start {
        x.dev
            .stream
            .memcpy_dtod(&s.slice(start..end), &mut out)
            .map_err(driver_err("slice"))?;
    }
    Ok(x.with(out))
}

/// `src` copied over elements `offset..` of `dst`, in place (copied first when shared).
fn write_at_t<T: CudaElement>(
    dst: &mut CudaStorage,
    offset: usize,
    src: &CudaStorage,
) -> Result<()> {
    const OP: &str = "write_rows";
    same_dtype(OP, dst, src)?;
    let s = typed::<T>(OP, src)?;
    if offset + s.len() > dst.len() {
        return Err(Error::index(
            OP,
            format!("{} elements at {offset} of {}", s.len(), dst.len()),
        ));
    }
    if s.is_empty() {
        return Ok(());
    }
    let dev = dst.dev.clone();
    let d = dst.make_mut::<T>(OP)?;
    let mut view = d.slice_mut(offset..offset + s.len());
    dev.stream.memcpy_dtod(s, &mut view).map_err(driver_err(OP))
}

/// `parts` joined along the axis: one launch per part, writing its `[outer, size * inner]`
/// block into every row of the output.
fn concat_t<T: CudaElement>(
    parts: &[&CudaStorage],
    sizes: &[usize],
    outer: usize,
    inner: usize,
) -> Result<CudaStorage> {
    const OP: &str = "concat";
    let first = parts
        .first()
        .ok_or_else(|| Error::arg(OP, "needs at least one array"))?;
    if sizes.len() != parts.len() {
        return Err(Error::shape(
            OP,
            format!("{} sizes for {} arrays", sizes.len(), parts.len()),
        ));
    }
    let total: usize = sizes.iter().sum();
    let n = outer * total * inner;
    let mut o = CudaStorage::alloc::<T>(&first.dev, OP, n)?;
    let f = first
        .dev
        .function("layout.cu", by_size::<T>("concat_part"))?;
    let (outer64, total64) = (outer as u64, (total * inner) as u64);
    let mut off = 0usize;
    for (p, &m) in parts.iter().zip(sizes) {
        if p.ordinal() != first.ordinal() {
            return Err(Error::device_mismatch(OP, first.device(), p.device()));
        }
        let src = typed::<T>(OP, p)?;
        let blk = m * inner;
        if src.len() != outer * blk {
            return Err(Error::shape(
                OP,
                format!("a part of {} elements, expected {}", src.len(), outer * blk),
            ));
        }
        if outer * blk > 0 {
            let (blk64, off64) = (blk as u64, off as u64);
            let mut l = first.dev.stream.launch_builder(&f);
            l.arg(src)
                .arg(&mut o)
                .arg(&outer64)
                .arg(&blk64)
                .arg(&total64)
                .arg(&off64);
            // SAFETY: `src` holds `outer * blk` elements (checked above); each lands at
            // `o * total * inner + off + j` with `off + j < total * inner`, inside the
            // `outer * total * inner` of the output.
            unsafe { l.launch(grid(outer * blk)) }.map_err(driver_err(OP))?;
        }
        off += blk;
    }
    Ok(first.with(o))
}

/// A copy of `x` whose rows (of `row` elements) at `pos` are `new`'s, the last row winning
/// where a position repeats: one pass marks each target row's last writer, a second copies
/// only those rows (so the result does not depend on the order threads run in).
fn index_copy_t<T: CudaElement>(
    x: &CudaStorage,
    row: usize,
    pos: &CudaStorage,
    new: &CudaStorage,
) -> Result<CudaStorage> {
    const OP: &str = "index_copy";
    same_dtype(OP, x, new)?;
    let xs = typed::<T>(OP, x)?;
    let src = typed::<T>(OP, new)?;
    let ps = pos.slice::<i64>().map(|s| s.as_ref()).ok_or_else(|| {
        Error::dtype(
            OP,
            format!("positions must be int64, got {}", pos.dtype().name()),
        )
    })?;
    let k = ps.len();
    if src.len() != k * row {
        return Err(Error::shape(
            OP,
            format!("{} new values for {k} rows of {row}", src.len()),
        ));
    }
    let n = xs.len();
    let mut o = CudaStorage::alloc::<T>(&x.dev, OP, n)?;
    if n > 0 {
        x.dev
            .stream
            .memcpy_dtod(xs, &mut o)
            .map_err(driver_err(OP))?;
    }
    if row == 0 || k == 0 {
        return Ok(x.with(o));
    }
    let rows = n / row;
    let mut winner = CudaStorage::alloc::<i64>(&x.dev, OP, rows)?;
    let (k64, row64, rows64) = (k as u64, row as u64, rows as u64);
    let fw = x.dev.function("layout.cu", "index_copy_winner")?;
    let mut l = x.dev.stream.launch_builder(&fw);
    l.arg(ps).arg(&mut winner).arg(&k64).arg(&rows64);
    // SAFETY: `pos` holds `k` ids; the kernel skips any outside `0..rows`, the length of
    // `winner`.
    unsafe { l.launch(grid(k)) }.map_err(driver_err(OP))?;
    let f = x.dev.function("layout.cu", by_size::<T>("index_copy"))?;
    let mut l = x.dev.stream.launch_builder(&f);
    l.arg(src)
        .arg(ps)
        .arg(&winner)
        .arg(&mut o)
        .arg(&k64)
        .arg(&row64)
        .arg(&rows64);
    // SAFETY: `new` holds `k * row` values (checked above); a row is written only at a
    // position inside `0..rows`, whose `row` elements lie inside the output of `n`.
    unsafe { l.launch(grid(k * row)) }.map_err(driver_err(OP))?;
    Ok(x.with(o))
}

/// `idx` (i64) one-hot encoded into `T`: `on` and `off` rounded to `T` as the CPU does.
fn one_hot_t<T: CudaElement>(
    x: &CudaStorage,
    idx: &CudaSlice<i64>,
    depth: usize,
    on: f64,
    off: f64,
) -> Result<CudaStorage> {
    const OP: &str = "one_hot";
    let rows = idx.len();
    let n = rows
        .checked_mul(depth)
        .ok_or_else(|| Error::shape(OP, format!("{rows} x {depth} elements overflow usize")))?;
    let mut o = CudaStorage::alloc::<T>(&x.dev, OP, n)?;
    if n > 0 {
        let (on, off) = (T::from_f64(on), T::from_f64(off));
        let f = x.dev.function("layout.cu", by_size::<T>("one_hot"))?;
        let (rows64, depth64) = (rows as u64, depth as u64);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(idx)
            .arg(&mut o)
            .arg(&rows64)
            .arg(&depth64)
            .arg(&on)
            .arg(&off);
        // SAFETY: `idx` holds `rows` values and the output `rows * depth`; `on` and `off` are
        // passed by value with the size of the kernel's element type.
        unsafe { l.launch(grid(n)) }.map_err(driver_err(OP))?;
    }
    Ok(x.with(o))
}

impl LayoutOps for CudaStorage {
    fn broadcast(&self, shape: &[usize], out: &[usize]) -> Result<Self> {
        if shape.len() > out.len() {
            return Err(Error::shape(
                "broadcast_to",
                "more axes than the target shape",
            ));
        }
        let lead = out.len() - shape.len();
        let own = strides(shape);
        let st: Vec<i64> = (0..out.len())
            .map(|d| {
                if d < lead || (shape[d - lead] == 1 && out[d] != 1) {
                    0
                } else {
                    own[d - lead]
                }
            })
            .collect();
        with_cuda!(&self.buf, s, T => strided_t::<T>(self, s, "broadcast_to", out, &st))
    }
    fn permute(&self, shape: &[usize], perm: &[usize]) -> Result<Self> {
        let own = strides(shape);
        let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let st: Vec<i64> = perm.iter().map(|&p| own[p]).collect();
        with_cuda!(&self.buf, s, T => strided_t::<T>(self, s, "transpose", &out, &st))
    }
    fn copy_range(&self, start: usize, end: usize) -> Result<Self> {
        with_cuda!(&self.buf, s, _T => range_t(self, s, start, end))
    }
    fn index_select(&self, dims: (usize, usize, usize), pos: &Self) -> Result<Self> {
        let k = pos.len();
        with_cuda!(&self.buf, _s, T => axis_t::<T>(self, pos, dims, k, Axis::Select))
    }
    fn index_add(&self, dims: (usize, usize, usize), pos: &Self) -> Result<Self> {
        let k = pos.len();
        float_only!(self, "take backward", T => axis_t::<T>(self, pos, dims, k, Axis::Add))
    }
    fn gather_along(&self, dims: (usize, usize, usize), pos: &Self, k: usize) -> Result<Self> {
        with_cuda!(&self.buf, _s, T => axis_t::<T>(self, pos, dims, k, Axis::GatherAlong))
    }
    fn scatter_add_along(&self, dims: (usize, usize, usize), pos: &Self, k: usize) -> Result<Self> {
        float_only!(self, "scatter_add_along", T => axis_t::<T>(self, pos, dims, k, Axis::ScatterAlong))
    }
    fn concat(parts: &[&Self], sizes: &[usize], outer: usize, inner: usize) -> Result<Self> {
        let first = parts
            .first()
            .ok_or_else(|| Error::arg("concat", "needs at least one array"))?;
        with_cuda!(&first.buf, _s, T => concat_t::<T>(parts, sizes, outer, inner))
    }
    fn index_copy(&self, row: usize, pos: &Self, new: &Self) -> Result<Self> {
        with_cuda!(&self.buf, _s, T => index_copy_t::<T>(self, row, pos, new))
    }
    fn one_hot(&self, depth: usize, on: f64, off: f64, dtype: DType) -> Result<Self> {
        // Index values as i64: exact for i64, truncated through f64 otherwise (MXNet's rule,
        // the cast's `as` semantics).
        let converted;
        let idx = match self.slice::<i64>() {
            Some(s) => s.as_ref(),
            None => {
                converted = self.cast(DType::I64)?;
                typed::<i64>("one_hot", &converted)?
            }
        };
        match dtype {
            DType::F32 => one_hot_t::<f32>(self, idx, depth, on, off),
            DType::F64 => one_hot_t::<f64>(self, idx, depth, on, off),
            DType::I64 => one_hot_t::<i64>(self, idx, depth, on, off),
            DType::I32 => one_hot_t::<i32>(self, idx, depth, on, off),
            DType::U8 => one_hot_t::<u8>(self, idx, depth, on, off),
            DType::F16 | DType::BF16 => Err(half_not_ported("one_hot", self.ordinal())),
        }
    }
    fn nonzero_mask(&self) -> Result<Self> {
        with_cuda!(&self.buf, s, _T => nonzero_t(self, s))
    }
    fn write_at(&mut self, offset: usize, src: &Self) -> Result<()> {
        with_cuda!(&src.buf, _s, T => write_at_t::<T>(self, offset, src))
    }
    fn select(&self, x: &Self, y: &Self) -> Result<Self> {
        same_dtype("where", x, y)?;
        with_cuda!(&x.buf, _s, T => select_t::<T>(self, x, y))
    }
}
