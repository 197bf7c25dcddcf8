//! The bytes workers exchange: a small header describing each collective call (so a worker
//! whose call disagrees is found before any data moves), and arrays as (row ids, rows).

use std::ops::Range;

use sparrow_core::{DType, Error, NDArray, Result, SType};

/// Appends little-endian fields to a message.
#[derive(Default)]
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
    /// A dense array's values, length-prefixed, in the layout of [`NDArray::to_le_bytes`]
    /// (written straight from the array for f32 and f64: no intermediate vector).
    pub(crate) fn values(&mut self, a: &NDArray) -> Result<&mut Self> {
        let n = a.shape().iter().product::<usize>();
        self.values_range(a, 0..n)
    }
    /// The elements `elems` (in row-major order) of a dense array, as [`Writer::values`]
    /// writes a whole one.
    pub(crate) fn values_range(&mut self, a: &NDArray, elems: Range<usize>) -> Result<&mut Self> {
        self.u64((elems.len() * a.dtype().size_of()) as u64);
        self.raw_values(a, elems)
    }
    /// The elements `elems` of a dense array, without a length in front.
    pub(crate) fn raw_values(&mut self, a: &NDArray, elems: Range<usize>) -> Result<&mut Self> {
        let size = a.dtype().size_of();
        let start = self.0.len();
        let direct = match a.dtype() {
            DType::F32 => {
                a.with_slice::<f32, _>(|s| s.get(elems.clone()).map(|s| put_le(&mut self.0, s)))
            }
            DType::F64 => {
                a.with_slice::<f64, _>(|s| s.get(elems.clone()).map(|s| put_le(&mut self.0, s)))
            }
            _ => Err(Error::dtype("kvstore", "not a float array")),
        };
        if !matches!(direct, Ok(Some(()))) {
            // Other dtypes, or values not readable in place.
            let b = a.to_le_bytes()?;
            let bytes = b.get(elems.start * size..elems.end * size).ok_or_else(|| {
                Error::index(
                    "kvstore",
                    format!("elements {elems:?} of an array of {} bytes", b.len()),
                )
            })?;
            self.0.truncate(start);
            self.0.extend_from_slice(bytes);
        }
        Ok(self)
    }
    pub(crate) fn ids(&mut self, ids: &[i64]) -> &mut Self {
        self.u64(ids.len() as u64);
        put_le(&mut self.0, ids);
        self
    }
    /// A row_sparse array's (row ids, rows), in the layout [`decode_rows`] reads, written straight
    /// from the array.
    /// A length-prefixed slice of plain values (read back with [`Reader::bytes`]).
    pub(crate) fn slice<P: Plain>(&mut self, v: &[P]) -> &mut Self {
        self.u64(std::mem::size_of_val(v) as u64);
        put_le(&mut self.0, v);
        self
    }
    pub(crate) fn rsp(&mut self, a: &NDArray) -> Result<&mut Self> {
        let (ids, rows) = a.row_sparse_parts()?;
        self.ids(&ids).values(&rows)
    }
}

/// Append `vals` as little-endian bytes. On a little-endian machine those are the values
/// own bytes in memory, appended with one copy; zeroing the grown buffer first and then storing
/// each value was a second pass over every message (a tenth of a sharded step).
fn put_le<T: Plain>(out: &mut Vec<u8>, vals: &[T]) {
    #[cfg(target_endian = "little")]
    out.extend_from_slice(le_view(vals));
    #[cfg(not(target_endian = "little"))]
    for &v in vals {
        v.extend_le(out);
    }
}

/// `vals` as their bytes in memory, which on a little-endian machine are the wire's.
#[cfg(target_endian = "little")]
fn le_view<T: Plain>(vals: &[T]) -> &[u8] {
    // SAFETY: `T` is f32, f64, u32, u64 or i64 (`Plain` is implemented for those only): no
    // padding, every byte initialized; the view borrows `vals` for its lifetime and u8 needs
    // no alignment.
    unsafe { std::slice::from_raw_parts(vals.as_ptr().cast::<u8>(), std::mem::size_of_val(vals)) }
}

/// `f` on a dense float array's values as their little-endian bytes, read in place (no copy);
/// `None` where that is not possible (another dtype, values not in host memory, a big-endian
/// machine).
pub(crate) fn with_le_bytes<R>(a: &NDArray, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    #[cfg(target_endian = "little")]
    {
        match a.dtype() {
            DType::F32 => a.with_slice::<f32, _>(|s| f(le_view(s))).ok(),
            DType::F64 => a.with_slice::<f64, _>(|s| f(le_view(s))).ok(),
            _ => None,
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        let _ = (a, f);
        None
    }
}

/// `f` on a dense float array's values as their little-endian bytes, in place (the array's
/// own memory: what `f` writes there are its new values); `None` where that is not possible
/// (another dtype, values not writable in host memory, a big-endian machine).
pub(crate) fn with_le_bytes_mut<R>(a: &NDArray, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
    #[cfg(target_endian = "little")]
    {
        fn bytes<P: Plain>(v: &mut [P]) -> &mut [u8] {
            // SAFETY: `P` is f32, f64, u32, u64 or i64 (`Plain` is implemented for those only): no
            // padding, and every byte pattern is a valid value, so any bytes written through
            // the view leave valid values; the view borrows `v` mutably for its lifetime and
            // u8 needs no alignment.
            unsafe {
                std::slice::from_raw_parts_mut(
                    v.as_mut_ptr().cast::<u8>(),
                    std::mem::size_of_val(v),
                )
            }
        }
        match a.dtype() {
            DType::F32 => a.with_slice_mut::<f32, _>(|s| f(bytes(s))).ok(),
            DType::F64 => a.with_slice_mut::<f64, _>(|s| f(bytes(s))).ok(),
            _ => None,
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        let _ = (a, f);
        None
    }
}

/// A value the wire writes as its little-endian bytes ([`put_le`]): fixed-size, no padding.
pub(crate) trait Plain: Copy {
    /// Append this value's little-endian bytes (the byte-order-swapping path).
    #[cfg_attr(target_endian = "little", allow(dead_code))]
    fn extend_le(self, out: &mut Vec<u8>);
}
impl Plain for f32 {
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl Plain for f64 {
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl Plain for u32 {
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl Plain for u64 {
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl Plain for i64 {
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// Reads the fields a [`Writer`] wrote; a short or malformed message is an error.
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| {
            Error::arg(
                "kvstore",
                format!(
                    "malformed message from a worker: {n} bytes wanted at {} of {}",
                    self.pos,
                    self.b.len()
                ),
            )
        })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u64()? as usize;
        self.take(n)
    }
    /// Where the next length-prefixed field (as [`Reader::bytes`] reads it) lies in the
    /// message, without copying it.
    pub(crate) fn bytes_range(&mut self) -> Result<std::ops::Range<usize>> {
        let n = self.u64()? as usize;
        let start = self.pos;
        self.take(n)?;
        Ok(start..self.pos)
    }
    pub(crate) fn str(&mut self) -> Result<String> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    pub(crate) fn ids(&mut self) -> Result<Vec<i64>> {
        let n = self.u64()? as usize;
        let b = self.take(n.saturating_mul(8))?;
        Ok(le_words(b, i64::from_le_bytes).collect())
    }
}

/// The `N`-byte little-endian words of `b`, each decoded by `from_le` (a trailing partial word
/// is left out: callers check lengths first). Whole arrays with no per-word length check, so
/// the decodes and sums over them vectorize.
pub(crate) fn le_words<'a, E, F, const N: usize>(
    b: &'a [u8],
    from_le: F,
) -> impl Iterator<Item = E> + 'a
where
    F: Fn([u8; N]) -> E + 'a,
{
    b.as_chunks::<N>().0.iter().map(move |&w| from_le(w))
}

/// What one worker says about the collective call it is making: the operation, the key, and
/// the value it brings (dtype, storage type, shape), or why it cannot take part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) op: String,
    pub(crate) key: u64,
    pub(crate) dtype: String,
    pub(crate) stype: String,
    pub(crate) shape: Vec<u64>,
    /// Why this worker's call failed before any data moved (empty: it did not).
    pub(crate) error: String,
}

impl Header {
    /// The header of a call that brings `value` (or fails with `err`).
    pub(crate) fn new(op: &str, key: usize, value: std::result::Result<&NDArray, &Error>) -> Self {
        match value {
            Ok(v) => Header {
                op: op.into(),
                key: key as u64,
                dtype: v.dtype().name().into(),
                stype: stype_name(v.stype()).into(),
                shape: v.shape().iter().map(|&d| d as u64).collect(),
                error: String::new(),
            },
            Err(e) => Header {
                op: op.into(),
                key: key as u64,
                dtype: String::new(),
                stype: String::new(),
                shape: Vec::new(),
                error: e.to_string(),
            },
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.str(&self.op)
            .u64(self.key)
            .str(&self.dtype)
            .str(&self.stype);
        w.u64(self.shape.len() as u64);
        self.shape.iter().for_each(|&d| {
            w.u64(d);
        });
        w.str(&self.error);
        w.0
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Header> {
        let mut r = Reader::new(b);
        let (op, key, dtype, stype) = (r.str()?, r.u64()?, r.str()?, r.str()?);
        // Every dimension is read (a shape cut short would let two different shapes agree);
        // each read is bounds-checked, so a count larger than the message fails at its end.
        let n = r.u64()?;
        let shape = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
        Ok(Header {
            op,
            key,
            dtype,
            stype,
            shape,
            error: r.str()?,
        })
    }

    /// What this header describes, for error messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} of key {} ({} {} {:?})",
            self.op, self.key, self.stype, self.dtype, self.shape
        )
    }
}

/// MXNet's name of a storage type.
pub(crate) fn stype_name(s: SType) -> &'static str {
    match s {
        SType::Dense => "default",
        SType::Csr => "csr",
        SType::RowSparse => "row_sparse",
    }
}

/// Check every worker's header of one collective call: a worker that failed, or one whose
/// call differs from worker 0's (another op, key, dtype, storage type or shape), fails the
/// call on every worker with the same message.
pub(crate) fn check_headers(op: &'static str, headers: &[Header], same_stype: bool) -> Result<()> {
    let failed: Vec<String> = headers
        .iter()
        .enumerate()
        .filter(|(_, h)| !h.error.is_empty())
        .map(|(r, h)| format!("worker {r}: {}", h.error))
        .collect();
    if !failed.is_empty() {
        return Err(Error::arg(
            op,
            format!(
                "{} of key {} failed on {} of {} workers (nothing was changed): {}",
                headers[0].op,
                headers[0].key,
                failed.len(),
                headers.len(),
                failed.join("; ")
            ),
        ));
    }
    let h0 = &headers[0];
    for (r, h) in headers.iter().enumerate().skip(1) {
        let differs = h.op != h0.op
            || h.key != h0.key
            || h.dtype != h0.dtype
            || h.shape != h0.shape
            || (same_stype && h.stype != h0.stype);
        if differs {
            return Err(Error::arg(
                op,
                format!(
                    "workers disagree (nothing was changed): worker 0 calls {}, worker {r} calls {}",
                    h0.describe(),
                    h.describe()
                ),
            ));
        }
    }
    Ok(())
}

/// A dense array, or a row_sparse array's (row ids, rows), as bytes.
pub(crate) fn encode_value(v: &NDArray) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    match v.stype() {
        SType::RowSparse => {
            let (ids, rows) = v.row_sparse_parts()?;
            w.ids(&ids).bytes(&rows.to_le_bytes()?);
        }
        SType::Dense => {
            w.bytes(&v.to_le_bytes()?);
        }
        SType::Csr => {
            return Err(Error::stype(
                "kvstore",
                "csr values cannot be stored (dense or row_sparse only)",
            ))
        }
    }
    Ok(w.0)
}

/// The value [`encode_value`] wrote, for the `dtype`, `stype` and `shape` every worker agreed
/// on.
pub(crate) fn decode_value(
    b: &[u8],
    dtype: DType,
    stype: SType,
    shape: &[usize],
) -> Result<NDArray> {
    let mut r = Reader::new(b);
    match stype {
        SType::RowSparse => {
            let ids = r.ids()?;
            let mut rows_shape = shape.to_vec();
            rows_shape[0] = ids.len();
            let rows = NDArray::from_le_bytes(r.bytes()?, dtype, &rows_shape)?;
            NDArray::row_sparse_from_arrays(&rows, ids, shape)
        }
        _ => NDArray::from_le_bytes(r.bytes()?, dtype, shape),
    }
}

/// Row ids and their rows (a dense `[ids.len(), ...]` array) as bytes.
#[cfg(test)]
pub(crate) fn encode_rows(ids: &[i64], rows_le: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.ids(ids).bytes(rows_le);
    w.0
}

/// A message of row ids and their rows (ids, then the rows' bytes, each length-prefixed).
pub(crate) fn decode_rows(b: &[u8]) -> Result<(Vec<i64>, &[u8])> {
    let mut r = Reader::new(b);
    let ids = r.ids()?;
    Ok((ids, r.bytes()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_keeps_every_dimension_and_a_cut_one_is_an_error() {
        let h = Header {
            op: "push".into(),
            key: 3,
            dtype: "float32".into(),
            stype: "default".into(),
            shape: (1..=70).collect(),
            error: "why".into(),
        };
        let b = h.encode();
        let d = Header::decode(&b).unwrap();
        assert_eq!(d.shape, h.shape);
        assert_eq!(d.error, "why");
        // A count of dimensions the message does not hold fails at its end.
        assert!(Header::decode(&b[..b.len() - 20]).is_err());
    }
}
