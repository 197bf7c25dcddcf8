//! Indexing operators: take, slice_axis, flip, repeat, index_copy, one_hot, where.
//!
//! Every dtype works for the data movement; gradients flow for float arrays. Indices are i64,
//! or any other dtype holding integers: a float index that is not an integer (2.9, NaN, inf)
//! is an error, where MXNet truncates it silently.
//!
//! Index values are read on the host only to validate them (`take_positions`, `index_copy`);
//! the validated positions move to the array's backend once, and the gathers, scatters and
//! copies run there (`crate::storage::layout`). Backward closures hold array handles and call
//! operators.

use super::axis::{
    index_values, norm_axis, positions_array, resolve_indices, scatter_grad, split3,
};
use crate::autograd::record_op;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::NDArray;

/// The positions along an axis that a gather reads: a validated list (take, repeat), or a
/// slice's run `begin, begin + step, ...` (`len` of them), which the forward copy never
/// lists: a flip of 2^31 elements would otherwise hold 16 GiB of positions. The backward
/// lists them when it runs.
#[derive(Clone, Debug)]
enum Positions {
    List(Vec<usize>),
    Run {
        begin: usize,
        step: isize,
        len: usize,
    },
}

impl Positions {
    fn len(&self) -> usize {
        match self {
            Positions::List(v) => v.len(),
            Positions::Run { len, .. } => *len,
        }
    }

    fn first(&self) -> Option<usize> {
        match self {
            Positions::List(v) => v.first().copied(),
            Positions::Run { begin, len, .. } => (*len > 0).then_some(*begin),
        }
    }

    /// Whether the positions are one ascending run of consecutive ones.
    fn consecutive(&self) -> bool {
        match self {
            Positions::List(v) => v.windows(2).all(|w| w[1] == w[0] + 1),
            Positions::Run { step, len, .. } => *step == 1 || *len <= 1,
        }
    }

    /// The positions as an i64 array on `device`.
    fn to_array(&self, device: crate::Device) -> Result<NDArray> {
        match self {
            Positions::List(v) => positions_array(v, device),
            &Positions::Run { begin, step, len } => {
                let v: Vec<i64> = (0..len)
                    .map(|j| begin as i64 + j as i64 * step as i64)
                    .collect();
                NDArray::from_buffer(Storage::positions_on(v, device)?, &[len])
            }
        }
    }
}

/// Python slice semantics: the run `(first, step, count)` that `begin:end:step` selects from
/// an axis of length `n`.
fn slice_positions(
    op: &'static str,
    n: usize,
    begin: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Result<(usize, i64, usize)> {
    if step == 0 {
        return Err(Error::arg(op, "slice step must be non-zero"));
    }
    let n = n as i64;
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let (b, len) = if step > 0 {
        let b = begin.map(norm).unwrap_or(0).clamp(0, n);
        let e = end.map(norm).unwrap_or(n).clamp(0, n);
        (b, if e > b { (e - b + step - 1) / step } else { 0 })
    } else {
        let b = begin.map(norm).unwrap_or(n - 1).clamp(-1, n - 1);
        let e = end.map(norm).unwrap_or(-1).clamp(-1, n - 1);
        (b, if b > e { (b - e - step - 1) / -step } else { 0 })
    };
    Ok((if len > 0 { b as usize } else { 0 }, step, len as usize))
}

/// The run `begin, begin + step, ...` (`len` positions) along `axis` of `shape`, checked to
/// lie inside the axis (a graph read from a file names any run).
fn run_positions(
    op: &'static str,
    shape: &[usize],
    axis: usize,
    begin: usize,
    step: i64,
    len: usize,
) -> Result<Positions> {
    let n = *shape.get(axis).ok_or_else(|| {
        Error::arg(
            op,
            format!("axis {axis} is out of range for shape {shape:?}"),
        )
    })?;
    let last = begin as i128 + (len as i128 - 1) * step as i128;
    if step == 0 || (len > 0 && (begin >= n || last < 0 || last >= n as i128)) {
        return Err(Error::arg(
            op,
            format!("{len} positions from {begin} by {step} leave axis {axis} of {shape:?}"),
        ));
    }
    Ok(Positions::Run {
        begin,
        step: step as isize,
        len,
    })
}

/// The gradient of [`NDArray::slice_run`] for an input of `in_shape`: `g` scattered into
/// zeros at the run's positions, as the slice's eager backward does (a graph's backward node).
pub(crate) fn slice_run_grad(
    g: &NDArray,
    in_shape: &[usize],
    axis: usize,
    begin: usize,
    step: i64,
    len: usize,
) -> Result<NDArray> {
    const OP: &str = "slice_axis backward";
    let pos = run_positions(OP, in_shape, axis, begin, step, len)?;
    let mut want = in_shape.to_vec();
    want[axis] = len;
    if g.shape() != want {
        return Err(Error::shape(
            OP,
            format!("gradient {:?} for a slice of shape {want:?}", g.shape()),
        ));
    }
    let positions = pos.to_array(g.device())?;
    scatter_grad("slice_axis", g, in_shape, axis, &positions)
}

/// Gather `pos` along `axis` of `a` (shape `shape[..axis] + idx_shape + shape[axis + 1..]`),
/// recording the scatter-add backward.
fn gather_positions(
    op: &'static str,
    a: &NDArray,
    axis: usize,
    pos: Positions,
    idx_shape: &[usize],
) -> Result<NDArray> {
    crate::sparse::densifying(op, &[a])?;
    let d = a.dense_data()?;
    let dims = split3(&d.shape, axis);
    let inner = dims.2;
    let mut out_shape = d.shape[..axis].to_vec();
    out_shape.extend_from_slice(idx_shape);
    out_shape.extend_from_slice(&d.shape[axis + 1..]);
    let buf = match (&pos, pos.first()) {
        // A step-1 run along axis 0 is one contiguous block: copy it in one go.
        (_, Some(first)) if axis == 0 && pos.consecutive() => d
            .buf
            .copy_range(first * inner, (first + pos.len()) * inner)?,
        (&Positions::Run { begin, step, len }, _) => d.buf.slice_strided(dims, begin, step, len)?,
        (Positions::List(_), _) => pos
            .to_array(d.buf.device())?
            .with_dense(|p| d.buf.index_select(dims, &p.buf))?,
    };
    let out = NDArray::from_buffer(buf, &out_shape)?;
    let in_shape = d.shape.clone();
    Ok(record_op(op, out, &[a], move |g| {
        // Made on the gradient's device, where the gather ran.
        let positions = pos.to_array(g.device())?;
        if axis == 0 {
            // Rows gathered: a row_sparse head gradient scatters into a row_sparse one.
            if let Some(gx) = crate::sparse::gathered_rows_grad(g, &positions, &in_shape)? {
                return Ok(vec![Some(gx)]);
            }
        }
        Ok(vec![Some(scatter_grad(
            op, g, &in_shape, axis, &positions,
        )?)])
    }))
}

/// The positions `take` gathers along an axis of length `n`: `indices` read as i64 (integral
/// floats are accepted) and checked to be in range (negative ones count from the end). Kept
/// apart from `take` so that index validation changes in one place.
fn take_positions(indices: &NDArray, n: usize) -> Result<Vec<usize>> {
    resolve_indices("take", &index_values("take", indices)?, n)
}

impl NDArray {
    /// Take the slices at `indices` (any shape, i64 or integral floats) along `axis`; the
    /// result has shape `shape[..axis] + indices.shape + shape[axis+1..]`. Negative indices
    /// count from the end; out-of-range indices are an error. Differentiable in `self`.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
    /// let i = NDArray::from_vec(vec![2i64, 0], &[2]).unwrap();
    /// assert_eq!(a.take(&i, 0).unwrap().to_vec::<f32>().unwrap(), vec![5.0, 6.0, 1.0, 2.0]);
    /// ```
    pub fn take(&self, indices: &NDArray, axis: i64) -> Result<NDArray> {
        let shape = self.shape();
        let ax = norm_axis("take", axis, shape.len())?;
        let idx = take_positions(indices, shape[ax])?;
        gather_positions("take", self, ax, Positions::List(idx), &indices.shape())
    }

    /// Python-style slice `begin:end:step` along `axis` (i64 bounds; negative values count
    /// from the end, `None` means the natural default for the step's sign). Differentiable.
    /// Consecutive rows of a csr array stay csr (sharing its buffers); other sparse slices fall
    /// back to dense (a warning, an error in strict mode).
    pub fn slice_axis(
        &self,
        axis: i64,
        begin: Option<i64>,
        end: Option<i64>,
        step: i64,
    ) -> Result<NDArray> {
        let shape = self.shape();
        let ax = norm_axis("slice_axis", axis, shape.len())?;
        let (first, step, len) = slice_positions("slice_axis", shape[ax], begin, end, step)?;
        self.slice_run(ax, first, step, len)
    }

    /// The `len` positions `begin, begin + step, ...` along `axis` (all inside it): a slice
    /// with its bounds resolved, the form a graph records and replays
    /// ([`crate::graph::Op::SliceAxis`]).
    pub(crate) fn slice_run(
        &self,
        axis: usize,
        begin: usize,
        step: i64,
        len: usize,
    ) -> Result<NDArray> {
        crate::graph::traced!(
            Op::SliceAxis {
                axis,
                begin,
                step,
                len
            },
            [self],
            self.slice_run(axis, begin, step, len)
        );
        let pos = run_positions("slice_axis", &self.shape(), axis, begin, step, len)?;
        if axis == 0 && self.stype() == crate::SType::Csr && pos.consecutive() {
            // Consecutive rows of a csr array: a csr row slice sharing its buffers.
            let start = pos.first().unwrap_or(0);
            return crate::sparse::slice_rows_recorded(self, start, start + pos.len());
        }
        gather_positions("slice_axis", self, axis, pos, &[len])
    }

    /// Reverse the order of elements along `axis`. Differentiable.
    pub fn flip(&self, axis: i64) -> Result<NDArray> {
        self.slice_axis(axis, None, None, -1)
    }

    /// Repeat each element `repeats` times along `axis` (`None`: of the flattened array), as
    /// NumPy's `repeat`. Differentiable.
    pub fn repeat(&self, repeats: usize, axis: Option<i64>) -> Result<NDArray> {
        let (a, axis) = match axis {
            Some(ax) => (self.clone(), ax),
            None => (self.reshape(&[self.size()])?, 0),
        };
        let shape = a.shape();
        let ax = norm_axis("repeat", axis, shape.len())?;
        // The output (and the position list) must be a size memory can hold: a wrapped or
        // absurd count would be an allocation abort, not an error.
        let mut out_shape = shape.clone();
        out_shape[ax] = shape[ax].saturating_mul(repeats);
        let fits = crate::ndarray::checked_size("repeat", &out_shape)
            .ok()
            .and_then(|n| n.max(out_shape[ax]).checked_mul(8))
            .is_some_and(|bytes| bytes <= isize::MAX as usize);
        if !fits {
            return Err(Error::shape(
                "repeat",
                format!("{repeats} repeats of axis {ax} of {shape:?} exceed addressable memory"),
            ));
        }
        let idx: Vec<usize> = (0..shape[ax])
            .flat_map(|i| std::iter::repeat_n(i, repeats))
            .collect();
        let m = idx.len();
        gather_positions("repeat", &a, ax, Positions::List(idx), &[m])
    }

    /// A copy of `self` whose rows (axis 0) at `index` are replaced by the rows of `new`
    /// (MXNet's `index_copy`); `new` has shape `[len(index)] + shape[1..]`. When an index
    /// repeats, the last row wins. Differentiable in `self` and `new`.
    pub fn index_copy(&self, index: &NDArray, new: &NDArray) -> Result<NDArray> {
        let op = "index_copy";
        crate::sparse::densifying(op, &[self, new])?;
        let (d, nd) = (self.dense_data()?, new.dense_data()?);
        if d.shape.is_empty() {
            return Err(Error::shape(op, "needs an array of at least 1 dimension"));
        }
        if d.buf.dtype() != nd.buf.dtype() {
            return Err(Error::dtype_mismatch(op, d.buf.dtype(), nd.buf.dtype()));
        }
        let idx = resolve_indices(op, &index_values(op, index)?, d.shape[0])?;
        let mut want = vec![idx.len()];
        want.extend_from_slice(&d.shape[1..]);
        if nd.shape[..] != want[..] {
            return Err(Error::shape(
                op,
                format!(
                    "new values have shape {:?}, expected {want:?} for {} indices into {:?}",
                    nd.shape,
                    idx.len(),
                    d.shape
                ),
            ));
        }
        let row: usize = d.shape[1..].iter().product();
        let index = positions_array(&idx, d.buf.device())?;
        let out = index.with_dense(|p| {
            NDArray::from_buffer(d.buf.index_copy(row, &p.buf, &nd.buf)?, &d.shape)
        })?;
        let shape = d.shape.clone();
        Ok(record_op(op, out, &[self, new], move |g| {
            let mshape = mshape_for(shape[0], shape.len());
            // Made on the gradient's device, where `index` lives too.
            let dev = g.device();
            let zeros = |n: usize, dtype: DType| {
                NDArray::from_buffer(Storage::zeros_on(dtype, n, dev)?, &[n])
            };
            let (mask, keep) = crate::autograd::pause(|| -> Result<(NDArray, NDArray)> {
                // Rows that were overwritten get no gradient in `self`; `new` gets those rows.
                let ones = zeros(shape[0], g.dtype())?.add_scalar(1.0)?;
                let mask = ones.index_copy(&index, &zeros(index.size(), g.dtype())?)?;
                // With repeated indices only the last write of a row reaches the output: write
                // each index's position j into its row (the last write wins, as in the
                // forward), read the rows back and keep the j that survived.
                let n = index.size();
                let j = positions_array(&(0..n).collect::<Vec<usize>>(), dev)?;
                let winner = zeros(shape[0], DType::I64)?.index_copy(&index, &j)?;
                let keep = winner.take(&index, 0)?.equal(&j)?.astype(g.dtype())?;
                Ok((mask, keep.reshape(&mshape_for(n, shape.len()))?))
            })?;
            let g_old = g.mul(&mask.reshape(&mshape)?)?;
            let g_new = g.take(&index, 0)?.mul(&keep)?;
            Ok(vec![Some(g_old), Some(g_new)])
        }))
    }

    /// One-hot encoding: shape `indices.shape + [depth]`, `on_value` where the last index equals
    /// the index value and `off_value` elsewhere. Indices outside `[0, depth)` give an all-off
    /// row (MXNet's behaviour). Not differentiable.
    pub fn one_hot(
        &self,
        depth: usize,
        on_value: f64,
        off_value: f64,
        dtype: DType,
    ) -> Result<NDArray> {
        crate::graph::traced!(
            Op::OneHot {
                depth,
                on: on_value,
                off: off_value,
                dtype
            },
            [self],
            self.one_hot(depth, on_value, off_value, dtype)
        );
        if self.dtype().is_float() {
            // Validated only: the kernel reads whole numbers as positions.
            index_values("one_hot", self)?;
        }
        crate::sparse::densifying("one_hot", &[self])?;
        let d = self.dense_data()?;
        let mut shape = d.shape.to_vec();
        shape.push(depth);
        if d.buf.len().checked_mul(depth).is_none() {
            return Err(Error::shape(
                "one_hot",
                format!("shape {shape:?} has more elements than usize can count"),
            ));
        }
        NDArray::from_buffer(d.buf.one_hot(depth, on_value, off_value, dtype)?, &shape)
    }

    /// `where(cond, x, y)`: `x` where `cond` is non-zero, else `y`, with broadcasting of all
    /// three (cond may have any dtype). Differentiable in `x` and `y`.
    pub fn where_(cond: &NDArray, x: &NDArray, y: &NDArray) -> Result<NDArray> {
        crate::graph::traced!(Op::Where, [cond, x, y], NDArray::where_(cond, x, y));
        let op = "where";
        crate::sparse::densifying(op, &[cond, x, y])?;
        let (dx, dy) = (x.dense_data()?, y.dense_data()?);
        if dx.buf.dtype() != dy.buf.dtype() {
            return Err(Error::dtype_mismatch(op, dx.buf.dtype(), dy.buf.dtype()));
        }
        let cshape = cond.shape();
        let s = super::broadcast_shapes(op, &cshape, &dx.shape)?;
        let shape = super::broadcast_shapes(op, &s, &dy.shape)?;
        let (c, xb, yb) = crate::autograd::pause(|| -> Result<_> {
            let c = cond.ne_zero_u8()?.broadcast_to(&shape)?;
            Ok((
                c,
                x.detach().broadcast_to(&shape)?,
                y.detach().broadcast_to(&shape)?,
            ))
        })?;
        let (cv, xd, yd) = (
            c.dense_data()?.buf,
            xb.dense_data()?.buf,
            yb.dense_data()?.buf,
        );
        let out = NDArray::from_buffer(cv.select(&xd, &yd)?, &shape)?;
        let (xs, ys) = (dx.shape.clone(), dy.shape.clone());
        Ok(record_op(op, out, &[x, y], move |g| {
            let m = c.astype(g.dtype())?;
            let gx = super::sum_to_shape(&g.mul(&m)?, &xs)?;
            let gy = super::sum_to_shape(&g.mul(&m.rsub_scalar(1.0)?)?, &ys)?;
            Ok(vec![Some(gx), Some(gy)])
        }))
    }

    /// 1 where the element is non-zero, else 0, as u8 (any dtype).
    pub(crate) fn ne_zero_u8(&self) -> Result<NDArray> {
        crate::sparse::densifying("ne_zero", &[self])?;
        let d = self.dense_data()?;
        NDArray::from_buffer(d.buf.nonzero_mask()?, &d.shape)
    }
}

/// `[n, 1, 1, ...]` of rank `ndim`: a per-row factor that broadcasts over the row.
fn mshape_for(n: usize, ndim: usize) -> Vec<usize> {
    let mut s = vec![n];
    s.extend(std::iter::repeat_n(1, ndim - 1));
    s
}
