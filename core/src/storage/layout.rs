//! The layout family of the backend interface: kernels that move elements without computing
//! on them (broadcast, permute, contiguous ranges, gathers and their adjoint scatter-adds,
//! concatenation, row replacement, one-hot encoding, select by a mask).
//!
//! Positions (which elements a gather reads) are i64 storages on the same backend as the
//! values: the argsort result a `topk` gathers with is one, and the positions a `take` or a
//! slice computes on the host are moved there once by [`Storage::positions_on`]. Axis kernels
//! see the array as `[outer, n, inner]` around the axis (`crate::ops::axis::split3`). Nothing
//! here validates shapes or positions: the operator did that.

use super::Storage;
use crate::dtype::{DType, Device};
use crate::error::{Error, Result};

/// What a backend implements for data movement. `dims` is `(outer, n, inner)` around the
/// axis of the array that is read from (gathers) or written to (scatter-adds); positions are
/// i64 storages of the same backend, already checked to be in `0..n`.
pub(crate) trait LayoutOps: Sized {
    /// The array of `shape` broadcast to `out` (NumPy rules; any dtype).
    fn broadcast(&self, shape: &[usize], out: &[usize]) -> Result<Self>;
    /// The array of `shape` with its axes in the order `perm` (any dtype).
    fn permute(&self, shape: &[usize], perm: &[usize]) -> Result<Self>;
    /// A copy of the elements `start..end` (any dtype).
    fn copy_range(&self, start: usize, end: usize) -> Result<Self>;
    /// `out[o, j, i] = src[o, pos[j], i]`: one list of positions along the axis for every
    /// `(o, i)`, laid out as `[outer, len(pos), inner]` (take, slices, repeat; any dtype).
    fn index_select(&self, dims: (usize, usize, usize), pos: &Self) -> Result<Self>;
    /// The adjoint of [`LayoutOps::index_select`]: `out[o, pos[j], i] += g[o, j, i]` into
    /// zeros of `dims` (repeated positions accumulate; float).
    fn index_add(&self, dims: (usize, usize, usize), pos: &Self) -> Result<Self>;
    /// `out[o, j, i] = src[o, pos[o, j, i], i]`: a position per output element, laid out as
    /// `[outer, k, inner]` (the values of a sort or topk; any dtype).
    fn gather_along(&self, dims: (usize, usize, usize), pos: &Self, k: usize) -> Result<Self>;
    /// The adjoint of [`LayoutOps::gather_along`]: `out[o, pos[o, j, i], i] += g[o, j, i]`
    /// into zeros of `dims` (float).
    fn scatter_add_along(&self, dims: (usize, usize, usize), pos: &Self, k: usize) -> Result<Self>;
    /// The `parts` (one dtype, `sizes[p]` long on the axis, the same `outer` and `inner`)
    /// joined along the axis.
    fn concat(parts: &[&Self], sizes: &[usize], outer: usize, inner: usize) -> Result<Self>;
    /// A copy whose rows of `row` elements at `pos` are those of `new` (same dtype) in order;
    /// when a position repeats, the last row wins.
    fn index_copy(&self, row: usize, pos: &Self, new: &Self) -> Result<Self>;
    /// `self` holds index values (i64, or any dtype truncated to i64): an array of `depth`
    /// times as many elements of `dtype`, `on` at each row's index and `off` elsewhere (an
    /// index outside `0..depth` gives an all-`off` row).
    fn one_hot(&self, depth: usize, on: f64, off: f64, dtype: DType) -> Result<Self>;
    /// 1 where the element is non-zero, else 0, as u8 (any dtype).
    fn nonzero_mask(&self) -> Result<Self>;
    /// `self` is a u8 mask: `x` where it is non-zero, else `y` (all three the same length,
    /// `x` and `y` the same dtype).
    fn select(&self, x: &Self, y: &Self) -> Result<Self>;
    /// Overwrite elements `offset..offset + src.len()` of `self` with `src` (same dtype), in
    /// place: memory shared with another array is copied first, except memory that is a
    /// mapped file's, which is an error (the write would silently stop reaching the file).
    fn write_at(&mut self, offset: usize, src: &Self) -> Result<()>;
}

/// The device of whichever of three storages differs from the first (for the error of an
/// operation whose operands sit on different devices).
fn odd_device(a: &Storage, b: &Storage, c: &Storage) -> (Device, Device) {
    if a.device() != b.device() {
        (a.device(), b.device())
    } else {
        (a.device(), c.device())
    }
}

/// Dispatch an operation on three storages that must share a backend (see `on_backends!`).
macro_rules! on_backends3 {
    ($op:expr, ($a:expr, $b:expr, $c:expr), ($x:ident, $y:ident, $z:ident) => $body:expr) => {
        match ($a, $b, $c) {
            (Storage::Cpu($x), Storage::Cpu($y), Storage::Cpu($z)) => $body,
            #[cfg(feature = "cuda")]
            (Storage::Cuda($x), Storage::Cuda($y), Storage::Cuda($z))
                if $x.ordinal() == $y.ordinal() && $x.ordinal() == $z.ordinal() =>
            {
                $body
            }
            #[allow(unreachable_patterns)]
            (a, b, c) => {
                let (p, q) = odd_device(a, b, c);
                Err(Error::device_mismatch($op, p, q))
            }
        }
    };
}

impl Storage {
    /// Positions computed on the host (a validated `take`, a slice's range) as an i64 storage
    /// on `device`, where the gathers that read them run. A device backend copies them up
    /// here, once per operator.
    pub(crate) fn positions_on(pos: Vec<i64>, device: Device) -> Result<Storage> {
        Storage::from_vec(pos).to_device(device)
    }
    /// See [`LayoutOps::broadcast`].
    pub(crate) fn broadcast(&self, shape: &[usize], out: &[usize]) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.broadcast(shape, out)?)))
    }
    /// See [`LayoutOps::permute`].
    pub(crate) fn permute(&self, shape: &[usize], perm: &[usize]) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.permute(shape, perm)?)))
    }
    /// See [`LayoutOps::copy_range`].
    pub(crate) fn copy_range(&self, start: usize, end: usize) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.copy_range(start, end)?)))
    }
    /// See [`LayoutOps::index_select`].
    pub(crate) fn index_select(
        &self,
        dims: (usize, usize, usize),
        pos: &Storage,
    ) -> Result<Storage> {
        super::on_backends!("index_select", (self, pos), (s, p) => Ok(Storage::from(s.index_select(dims, p)?)))
    }
    /// `out[o, j, i] = self[o, begin + j * step, i]` for `j < len`: a slice's gather. The CPU
    /// computes each position as it copies; another backend is handed the list of positions
    /// (`len` i64 values).
    pub(crate) fn slice_strided(
        &self,
        dims: (usize, usize, usize),
        begin: usize,
        step: isize,
        len: usize,
    ) -> Result<Storage> {
        match self {
            Storage::Cpu(c) => Ok(Storage::Cpu(c.slice_strided(dims, begin, step, len))),
            #[allow(unreachable_patterns)]
            other => {
                let pos = (0..len)
                    .map(|j| begin as i64 + j as i64 * step as i64)
                    .collect();
                other.index_select(dims, &Storage::positions_on(pos, other.device())?)
            }
        }
    }
    /// See [`LayoutOps::index_add`].
    pub(crate) fn index_add(&self, dims: (usize, usize, usize), pos: &Storage) -> Result<Storage> {
        super::on_backends!("index_add", (self, pos), (g, p) => Ok(Storage::from(g.index_add(dims, p)?)))
    }
    /// See [`LayoutOps::gather_along`].
    pub(crate) fn gather_along(
        &self,
        dims: (usize, usize, usize),
        pos: &Storage,
        k: usize,
    ) -> Result<Storage> {
        super::on_backends!("gather_along", (self, pos), (s, p) => Ok(Storage::from(s.gather_along(dims, p, k)?)))
    }
    /// See [`LayoutOps::scatter_add_along`].
    pub(crate) fn scatter_add_along(
        &self,
        dims: (usize, usize, usize),
        pos: &Storage,
        k: usize,
    ) -> Result<Storage> {
        super::on_backends!("scatter_add_along", (self, pos), (g, p) => Ok(Storage::from(g.scatter_add_along(dims, p, k)?)))
    }
    /// See [`LayoutOps::concat`] (`parts` is not empty).
    pub(crate) fn concat(
        parts: &[&Storage],
        sizes: &[usize],
        outer: usize,
        inner: usize,
    ) -> Result<Storage> {
        let first = parts
            .first()
            .ok_or_else(|| Error::arg("concat", "needs at least one array"))?;
        super::on_backend!(first, f => concat_on(f, parts, sizes, outer, inner))
    }
    /// See [`LayoutOps::index_copy`].
    pub(crate) fn index_copy(&self, row: usize, pos: &Storage, new: &Storage) -> Result<Storage> {
        on_backends3!("index_copy", (self, pos, new), (s, p, n) => Ok(Storage::from(s.index_copy(row, p, n)?)))
    }
    /// See [`LayoutOps::one_hot`].
    pub(crate) fn one_hot(&self, depth: usize, on: f64, off: f64, dtype: DType) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.one_hot(depth, on, off, dtype)?)))
    }
    /// See [`LayoutOps::nonzero_mask`].
    pub(crate) fn nonzero_mask(&self) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.nonzero_mask()?)))
    }
    /// See [`LayoutOps::write_at`].
    pub(crate) fn write_at(&mut self, offset: usize, src: &Storage) -> Result<()> {
        super::on_backends!("write_rows", (self, src), (s, x) => s.write_at(offset, x))
    }
    /// See [`LayoutOps::select`].
    pub(crate) fn select(&self, x: &Storage, y: &Storage) -> Result<Storage> {
        on_backends3!("where", (self, x, y), (c, a, b) => Ok(Storage::from(c.select(a, b)?)))
    }
}

/// [`Storage::concat`] on the backend of `_first`: every part must be there.
fn concat_on<B>(
    _first: &B,
    parts: &[&Storage],
    sizes: &[usize],
    outer: usize,
    inner: usize,
) -> Result<Storage>
where
    B: LayoutOps + super::sparse::ValuesOf,
    Storage: From<B>,
{
    let typed = parts
        .iter()
        .map(|p| B::values_of("concat", p))
        .collect::<Result<Vec<&B>>>()?;
    Ok(Storage::from(B::concat(&typed, sizes, outer, inner)?))
}
