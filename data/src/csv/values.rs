//! Typed row storage: the values of whole rows in one vector of the iterator's dtype, and the
//! parsing of one CSV line into it.

use sparrow_core::{DType, Element, NDArray};

use crate::libsvm::number::{parse_f32, parse_i64};

/// An element type a CSV field parses to.
trait Field: Element {
    /// The field's value, or what is wrong with it.
    fn parse(tok: &[u8], allow_non_finite: bool) -> Result<Self, String>;
}

fn shown(tok: &[u8]) -> String {
    let s = String::from_utf8_lossy(&tok[..tok.len().min(40)]).into_owned();
    if tok.len() > 40 {
        format!("{s}...")
    } else {
        s
    }
}

fn float<T: Copy>(
    tok: &[u8],
    v: Option<T>,
    finite: impl Fn(T) -> bool,
    allow: bool,
) -> Result<T, String> {
    match v {
        None => Err(format!("expected a number, found `{}`", shown(tok))),
        Some(v) if !allow && !finite(v) => Err(format!(
            "`{}` is not a finite number (NaN, infinities and values past the float range are \
             refused; set allow_non_finite to accept them)",
            shown(tok)
        )),
        Some(v) => Ok(v),
    }
}

impl Field for f32 {
    fn parse(tok: &[u8], allow: bool) -> Result<f32, String> {
        float(tok, parse_f32(tok), f32::is_finite, allow)
    }
}

impl Field for f64 {
    fn parse(tok: &[u8], allow: bool) -> Result<f64, String> {
        let v = std::str::from_utf8(tok).ok().and_then(|s| s.parse().ok());
        float(tok, v, f64::is_finite, allow)
    }
}

impl Field for i64 {
    fn parse(tok: &[u8], _: bool) -> Result<i64, String> {
        parse_i64(tok)
            .ok_or_else(|| format!("expected an integer in i64's range, found `{}`", shown(tok)))
    }
}

impl Field for i32 {
    fn parse(tok: &[u8], _: bool) -> Result<i32, String> {
        parse_i64(tok)
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| format!("expected an integer in i32's range, found `{}`", shown(tok)))
    }
}

/// Rows of values, flattened, in one of the supported dtypes.
#[derive(Debug, Clone)]
pub(super) enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// Run `$e` with `$v` bound to the vector of whichever variant `$x` is.
macro_rules! each {
    ($x:expr, $v:ident => $e:expr) => {
        match $x {
            Values::F32($v) => $e,
            Values::F64($v) => $e,
            Values::I32($v) => $e,
            Values::I64($v) => $e,
        }
    };
}

/// A parse failure in a line: the 1-based byte column and the message.
pub(super) type LineError = (u64, String);

impl Values {
    /// Empty storage of `dtype` (one of the four the parameters allow).
    pub fn new(dtype: DType) -> Values {
        match dtype {
            DType::F64 => Values::F64(Vec::new()),
            DType::I32 => Values::I32(Vec::new()),
            DType::I64 => Values::I64(Vec::new()),
            _ => Values::F32(Vec::new()),
        }
    }

    /// Empty storage of the same dtype.
    pub fn empty_like(&self) -> Values {
        match self {
            Values::F32(_) => Values::F32(Vec::new()),
            Values::F64(_) => Values::F64(Vec::new()),
            Values::I32(_) => Values::I32(Vec::new()),
            Values::I64(_) => Values::I64(Vec::new()),
        }
    }

    /// Append `n` zeros.
    pub fn push_zeros(&mut self, n: usize) {
        each!(self, v => v.resize(v.len() + n, Default::default()))
    }

    /// Append values `a..b` of `other` (same dtype; a mismatch appends nothing, which cannot
    /// happen: one iterator uses one dtype).
    pub fn extend_from(&mut self, other: &Values, a: usize, b: usize) {
        match (self, other) {
            (Values::F32(x), Values::F32(y)) => x.extend_from_slice(&y[a..b]),
            (Values::F64(x), Values::F64(y)) => x.extend_from_slice(&y[a..b]),
            (Values::I32(x), Values::I32(y)) => x.extend_from_slice(&y[a..b]),
            (Values::I64(x), Values::I64(y)) => x.extend_from_slice(&y[a..b]),
            _ => debug_assert!(false, "one dtype per iterator"),
        }
    }

    /// The rows in the order `order` (row ids), each `width` values.
    pub fn permuted(&self, order: &[usize], width: usize) -> Values {
        let mut out = self.empty_like();
        for &r in order {
            out.extend_from(self, r * width, (r + 1) * width);
        }
        out
    }

    /// Wrap the values into an array of `shape`, leaving `self` empty.
    pub fn take_array(&mut self, shape: &[usize]) -> crate::Result<NDArray> {
        Ok(each!(self, v => NDArray::from_vec(std::mem::take(v), shape))?)
    }

    /// Parse the line content `line` (no newline) as exactly `width` comma-separated fields and
    /// append them. On error nothing is appended.
    /// `shape` names the row shape in a field-count error.
    pub fn push_line(
        &mut self,
        line: &[u8],
        width: usize,
        shape: &str,
        allow: bool,
    ) -> Result<(), LineError> {
        each!(self, v => push_fields(v, line, width, shape, allow))
    }
}

#[inline]
fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

/// True when a line holds no row: nothing but blanks.
pub(super) fn is_blank_line(line: &[u8]) -> bool {
    line.iter().all(|&b| is_blank(b) || b == b'\n')
}

fn push_fields<T: Field>(
    out: &mut Vec<T>,
    line: &[u8],
    width: usize,
    shape: &str,
    allow: bool,
) -> Result<(), LineError> {
    let before = out.len();
    let fail = |out: &mut Vec<T>, col: usize, msg: String| {
        out.truncate(before);
        Err((col as u64 + 1, msg))
    };
    let mut start = 0;
    let mut k = 0;
    loop {
        let end = memchr::memchr(b',', &line[start..]).map_or(line.len(), |i| start + i);
        if k == width {
            return fail(
                out,
                start,
                format!(
                    "expected {width} fields ({shape}), found more (this is field {})",
                    k + 1
                ),
            );
        }
        // Blanks around a field are not part of it (as strtod skips leading ones).
        let (mut s, mut e) = (start, end);
        while s < e && is_blank(line[s]) {
            s += 1;
        }
        while e > s && is_blank(line[e - 1]) {
            e -= 1;
        }
        if s == e {
            return fail(
                out,
                start,
                format!("field {} is empty (expected a number)", k + 1),
            );
        }
        match T::parse(&line[s..e], allow) {
            Ok(v) => out.push(v),
            Err(m) => return fail(out, s, format!("field {}: {m}", k + 1)),
        }
        k += 1;
        if end == line.len() {
            break;
        }
        start = end + 1;
    }
    if k < width {
        let mut col = line.len();
        while col > 0 && is_blank(line[col - 1]) {
            col -= 1;
        }
        return fail(
            out,
            col,
            format!("expected {width} fields ({shape}), found {k}"),
        );
    }
    Ok(())
}
