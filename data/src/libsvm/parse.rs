//! The LibSVM line parser: turns a byte range of whole lines into CSR parts.
//!
//! One call parses one chunk (a run of complete lines) single-threaded; parallelism comes from
//! calling it on many chunks at once (see `read` and `iter`). It never panics, whatever the
//! bytes: every index is checked, numbers go through checked parsers, and a malformed token
//! yields a [`RawError`] with the chunk-relative line and the 1-based byte column.

use super::fast_line::parse_line_fast;
use super::number::{parse_f32, parse_i64, parse_index, IndexErr};

/// How raw indices map to columns, and which checks apply. Built by the callers from
/// [`super::IndexBase`] and the declared number of features.
#[derive(Debug, Clone, Copy)]
pub struct ChunkOpts {
    /// Subtracted from every raw index (1 for one-based data, 0 otherwise).
    pub shift: i64,
    /// Raw index 0 is an error (one-based data).
    pub zero_is_error: bool,
    /// Columns must be `< bound` (after the shift).
    pub bound: Option<u64>,
    /// Sort each row's indices and sum duplicates instead of rejecting them.
    pub sort: bool,
    /// Accept `nan`, `inf` and values that overflow f32 (`1e999`); refused by default.
    pub allow_non_finite: bool,
    /// Labels are comma-separated lists, and a row whose first token is a feature has none;
    /// otherwise a comma in a label is an error.
    pub multilabel: bool,
    /// Skip `qid:` tokens without reading their value (every row's qid is `None`).
    pub ignore_qid: bool,
    /// Refuse what scikit-learn accepts but is almost surely a mistake (see the module docs):
    /// numbers that overflow to infinity even with `allow_non_finite`, non-zero numbers that
    /// round to zero in `f32`, and a label repeated in one multilabel row.
    pub strict: bool,
}

/// The strict-mode verdict on a parsed number `v` of text `tok` (`None`: accepted). Only the
/// general parser calls it: the fast path never produces an infinity or a zero from non-zero
/// digits (`decimal_to_f32` declines results outside the normal `f32` range).
fn strict_number(tok: &[u8], v: f32) -> Option<String> {
    let mantissa = tok
        .iter()
        .position(|&b| b == b'e' || b == b'E')
        .map_or(tok, |e| &tok[..e]);
    if v.is_infinite() && tok.iter().any(u8::is_ascii_digit) {
        return Some(format!(
            "`{}` overflows f32 to infinity (strict mode refuses it even with allow_non_finite; \
             write `inf` for an intended infinity)",
            show(tok)
        ));
    }
    if v == 0.0 && mantissa.iter().any(|b| (b'1'..=b'9').contains(b)) {
        return Some(format!(
            "`{}` is not zero but rounds to 0 in f32 (strict mode refuses the underflow)",
            show(tok)
        ));
    }
    None
}

/// The message for a value that parsed to NaN or ±inf: one bad value turns every weight it
/// touches NaN within a few steps, so it is refused where it is, with its position.
fn non_finite(tok: &[u8]) -> String {
    format!(
        "`{}` is not a finite number (NaN, infinities and values past f32's range are refused; \
         set allow_non_finite to accept them)",
        String::from_utf8_lossy(tok)
    )
}

/// Parsed rows in CSR form, plus what auto base detection needs.
#[derive(Debug, Clone)]
pub struct Rows {
    /// Row pointers into `indices`/`values`, `rows + 1` entries starting at 0.
    pub indptr: Vec<i64>,
    /// Column ids (raw index minus the shift).
    pub indices: Vec<i64>,
    /// Values.
    pub values: Vec<f32>,
    /// All labels of all rows, concatenated.
    pub labels: Vec<f32>,
    /// Row pointers into `labels`, `rows + 1` entries starting at 0.
    pub label_ptr: Vec<i64>,
    /// Column ids of CSR labels (only filled when labels come from a separate label file; then
    /// `labels` holds their values).
    pub label_indices: Vec<i64>,
    /// The `qid:` of each row (any `i64`), `None` where the row has none or qids are ignored.
    pub qids: Vec<Option<i64>>,
    /// Smallest raw index seen (`i64::MAX` if none).
    pub min_raw: i64,
    /// Largest raw index seen (-1 if none).
    pub max_raw: i64,
}

impl Default for Rows {
    /// No rows (same as [`Rows::new`]).
    fn default() -> Self {
        Rows::new()
    }
}

impl Rows {
    /// Empty rows, ready to be filled.
    pub fn new() -> Rows {
        Rows {
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
            labels: Vec::new(),
            label_ptr: vec![0],
            label_indices: Vec::new(),
            qids: Vec::new(),
            min_raw: i64::MAX,
            max_raw: -1,
        }
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.indptr.len() - 1
    }
    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of stored features.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
    /// Append rows `r0..r1` of `other`.
    pub fn extend_from(&mut self, other: &Rows, r0: usize, r1: usize) {
        let (a, b) = (other.indptr[r0] as usize, other.indptr[r1] as usize);
        let base = self.indices.len() as i64 - a as i64;
        self.indices.extend_from_slice(&other.indices[a..b]);
        self.values.extend_from_slice(&other.values[a..b]);
        self.indptr
            .extend(other.indptr[r0 + 1..=r1].iter().map(|p| p + base));
        let (la, lb) = (other.label_ptr[r0] as usize, other.label_ptr[r1] as usize);
        let lbase = self.labels.len() as i64 - la as i64;
        self.labels.extend_from_slice(&other.labels[la..lb]);
        let li = other.label_indices.len();
        self.label_indices
            .extend_from_slice(&other.label_indices[la.min(li)..lb.min(li)]);
        self.label_ptr
            .extend(other.label_ptr[r0 + 1..=r1].iter().map(|p| p + lbase));
        self.qids.extend_from_slice(&other.qids[r0..r1]);
        self.min_raw = self.min_raw.min(other.min_raw);
        self.max_raw = self.max_raw.max(other.max_raw);
    }
    /// The rows in the order `order` (each entry a row id of `self`).
    pub fn gather(&self, order: &[usize]) -> Rows {
        let mut out = Rows::new();
        out.indices.reserve(self.nnz());
        out.values.reserve(self.nnz());
        for &r in order {
            out.extend_from(self, r, r + 1);
        }
        out
    }
    /// Append one empty row (no features) with the given labels.
    pub fn push_empty(&mut self, labels: &[f32]) {
        self.indptr.push(self.indices.len() as i64);
        self.labels.extend_from_slice(labels);
        self.label_ptr.push(self.labels.len() as i64);
        self.qids.push(None);
    }
    /// The labels of row `r`.
    pub fn row_labels(&self, r: usize) -> &[f32] {
        &self.labels[self.label_ptr[r] as usize..self.label_ptr[r + 1] as usize]
    }
}

/// A parse error inside a chunk: `line` is 0-based from the chunk start, `col` 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawError {
    /// 0-based line within the chunk.
    pub line: u64,
    /// 1-based byte column within the line.
    pub col: u64,
    /// What was wrong and what was expected.
    pub msg: String,
}

#[inline]
fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

/// Show a token in an error message (lossy, shortened).
fn show(tok: &[u8]) -> String {
    let s = String::from_utf8_lossy(&tok[..tok.len().min(40)]).into_owned();
    if tok.len() > 40 {
        format!("{s}...")
    } else {
        s
    }
}

/// True when the line (without its newline) holds a row: it has a non-blank byte before any `#`.
#[inline]
pub fn is_row_line(line: &[u8]) -> bool {
    for &b in line {
        if !is_ws(b) {
            return b != b'#';
        }
    }
    false
}

/// Count the data rows in a byte range of whole lines (blank and comment-only lines are not rows).
pub fn count_rows(buf: &[u8]) -> u64 {
    let mut n = 0;
    for line in buf.split(|&b| b == b'\n') {
        n += is_row_line(line) as u64;
    }
    n
}

/// Parse every line of `buf` into `out`. Stops at the first malformed token.
///
/// Each line first tries the fast path (`fast_line`); lines it declines go through the general
/// `parse_line`, which is the reference for what is accepted and for every error.
pub fn parse_into(buf: &[u8], opts: &ChunkOpts, out: &mut Rows) -> Result<(), RawError> {
    let n = buf.len();
    let mut pos = 0usize;
    let mut line_no = 0u64;
    while pos < n {
        let (content_end, eol) = match memchr::memchr2(b'\n', b'#', &buf[pos..]) {
            Some(i) if buf[pos + i] == b'\n' => (pos + i, pos + i),
            Some(i) => {
                let c = pos + i;
                let e = memchr::memchr(b'\n', &buf[c..]).map_or(n, |j| c + j);
                (c, e)
            }
            None => (n, n),
        };
        if !parse_line_fast(buf, pos, content_end, opts, out) {
            parse_line(&buf[pos..content_end], line_no, opts, out)?;
        }
        line_no += 1;
        pos = eol + 1;
    }
    Ok(())
}

/// Parse the rows whose lines start at `starts` (offsets into `buf`, increasing, each the start
/// of a line that holds a row as [`is_row_line`] decides; the last row's line ends at or before
/// `end`, a line start or `buf.len()`) into `out`. Stops at the first malformed row; the error
/// carries that row's line start in `buf`.
///
/// Same rows and errors as [`parse_into`] on `buf[starts[0]..end]`, without searching every
/// line for its end: the caller already found the line starts (the streaming reader does, to cut
/// batches), and the byte before the next row's start is normally this row's newline. When
/// blank or comment lines come between, or the row has an inline comment, the fast path meets
/// a newline or `#` inside the content it was given and declines (neither is ever part of a
/// token it accepts), and the line is cut properly and parsed by the general parser.
pub(crate) fn parse_rows_into(
    buf: &[u8],
    starts: &[usize],
    end: usize,
    opts: &ChunkOpts,
    out: &mut Rows,
) -> Result<(), super::BufError> {
    let end = end.min(buf.len());
    for (i, &s) in starts.iter().enumerate() {
        // Clamped so that offsets that break the contract cannot index out of bounds.
        let ub = starts.get(i + 1).map_or(end, |&n| n.min(end));
        let s = s.min(ub);
        let content_end = if ub > s && buf[ub - 1] == b'\n' {
            ub - 1
        } else {
            ub
        };
        if parse_line_fast(buf, s, content_end, opts, out) {
            continue;
        }
        let line = &buf[s..ub];
        let ce = memchr::memchr2(b'\n', b'#', line).unwrap_or(line.len());
        parse_line(&line[..ce], 0, opts, out)
            .map_err(|err| super::BufError { line_start: s, err })?;
    }
    Ok(())
}

/// Parse one line (comment already cut off). A blank line adds no row.
pub(super) fn parse_line(
    line: &[u8],
    line_no: u64,
    opts: &ChunkOpts,
    out: &mut Rows,
) -> Result<(), RawError> {
    let len = line.len();
    let err = |col: usize, msg: String| RawError {
        line: line_no,
        col: col as u64 + 1,
        msg,
    };
    let mut i = 0;
    while i < len && is_ws(line[i]) {
        i += 1;
    }
    if i == len {
        return Ok(());
    }
    // Labels: `l1[,l2...]`; in multilabel mode a first token with a colon is a feature (or the
    // qid) of a row without labels, as in scikit-learn.
    let ls = i;
    while i < len && !is_ws(line[i]) {
        i += 1;
    }
    let label_tok = &line[ls..i];
    let nlab_before = out.labels.len();
    if opts.multilabel && label_tok.contains(&b':') {
        i = ls;
    } else {
        if !opts.multilabel && label_tok.contains(&b',') {
            return Err(err(
                ls,
                format!(
                    "`{}` is a comma-separated label list, but this file is read as single-label \
                     (enable multilabel to read label lists)",
                    show(label_tok)
                ),
            ));
        }
        let mut off = ls;
        for part in label_tok.split(|&b| b == b',') {
            let bad = match parse_f32(part) {
                Some(v) if !v.is_finite() && !opts.allow_non_finite => Some(non_finite(part)),
                Some(v) => match opts.strict.then(|| strict_number(part, v)).flatten() {
                    Some(m) => Some(m),
                    None if opts.strict && out.labels[nlab_before..].contains(&v) => Some(format!(
                        "label `{}` appears twice in this row (strict mode)",
                        show(part)
                    )),
                    None => {
                        out.labels.push(v);
                        None
                    }
                },
                None => {
                    let what = if part.is_empty() {
                        "an empty label".to_string()
                    } else {
                        format!("`{}`", show(part))
                    };
                    Some(format!(
                        "expected a numeric label (labels are `l` or, multilabel, `l1,l2,...`), \
                         found {what}"
                    ))
                }
            };
            if let Some(msg) = bad {
                out.labels.truncate(nlab_before);
                return Err(err(off, msg));
            }
            off += part.len() + 1;
        }
    }
    let row_start = out.indices.len();
    let mut qid: Option<i64> = None;
    let mut seen_qid = false;
    let mut prev: i64 = -1;
    let mut unsorted = false;
    let mut first_feature = true;
    let fail = |out: &mut Rows, e: RawError| {
        out.labels.truncate(nlab_before);
        out.indices.truncate(row_start);
        out.values.truncate(row_start);
        Err(e)
    };
    loop {
        while i < len && is_ws(line[i]) {
            i += 1;
        }
        if i == len {
            break;
        }
        let ts = i;
        // Fast path: digits then ':'.
        let mut raw: i64 = 0;
        let mut nd = 0;
        while i < len && line[i].is_ascii_digit() && nd < 18 {
            raw = raw * 10 + (line[i] - b'0') as i64;
            nd += 1;
            i += 1;
        }
        if !(nd > 0 && i < len && line[i] == b':') {
            // General path: find the token and its colon.
            let mut te = ts;
            while te < len && !is_ws(line[te]) {
                te += 1;
            }
            let tok = &line[ts..te];
            let Some(c) = tok.iter().position(|&b| b == b':') else {
                return fail(
                    out,
                    err(ts, format!("expected `index:value`, found `{}`", show(tok))),
                );
            };
            let (name, val) = (&tok[..c], &tok[c + 1..]);
            if name == b"qid" {
                if !first_feature || seen_qid {
                    return fail(
                        out,
                        err(
                            ts,
                            "`qid:` must come right after the label, once".to_string(),
                        ),
                    );
                }
                seen_qid = true;
                if !opts.ignore_qid {
                    match parse_i64(val) {
                        Some(q) => qid = Some(q),
                        None => {
                            return fail(
                                out,
                                err(
                                    ts + c + 1,
                                    format!(
                                        "expected an integer qid in i64's range, found `{}`",
                                        show(val)
                                    ),
                                ),
                            )
                        }
                    }
                }
                i = te;
                continue;
            }
            raw = match parse_index(name) {
                Ok(v) => v,
                Err(IndexErr::Negative) => {
                    return fail(
                        out,
                        err(ts, format!("negative feature index `{}`", show(name))),
                    )
                }
                Err(IndexErr::TooLarge) => {
                    return fail(
                        out,
                        err(
                            ts,
                            format!("feature index `{}` does not fit in i64", show(name)),
                        ),
                    )
                }
                Err(IndexErr::NotInteger) => {
                    return fail(
                        out,
                        err(
                            ts,
                            format!("expected an integer feature index, found `{}`", show(name)),
                        ),
                    )
                }
            };
            i = ts + c;
        }
        // line[i] == ':'
        let vs = i + 1;
        let mut ve = vs;
        while ve < len && !is_ws(line[ve]) {
            ve += 1;
        }
        let vtok = &line[vs..ve];
        if vtok.is_empty() {
            return fail(
                out,
                err(
                    vs,
                    format!("expected a value after `{raw}:`, found nothing"),
                ),
            );
        }
        let Some(v) = parse_f32(vtok) else {
            return fail(
                out,
                err(
                    vs,
                    format!("expected a numeric value, found `{}`", show(vtok)),
                ),
            );
        };
        if !v.is_finite() && !opts.allow_non_finite {
            return fail(out, err(vs, non_finite(vtok)));
        }
        if opts.strict {
            if let Some(m) = strict_number(vtok, v) {
                return fail(out, err(vs, m));
            }
        }
        // Map and check the index.
        if opts.zero_is_error && raw == 0 {
            return fail(
                out,
                err(
                    ts,
                    "feature index 0 in one-based data (indices start at 1)".to_string(),
                ),
            );
        }
        let col = raw - opts.shift;
        if let Some(b) = opts.bound {
            if col as u64 >= b {
                return fail(
                    out,
                    err(
                        ts,
                        format!(
                            "feature index {raw} is out of range: expected fewer than {b} features \
                             ({} indices)",
                            if opts.shift == 1 { "one-based" } else { "zero-based" }
                        ),
                    ),
                );
            }
        }
        if col <= prev {
            if opts.sort {
                unsorted = true;
            } else {
                let what = if col == prev { "duplicate" } else { "unsorted" };
                return fail(
                    out,
                    err(
                        ts,
                        format!(
                            "{what} feature index {raw}: indices in a row must be strictly \
                             increasing (enable sorting to sort and merge them)"
                        ),
                    ),
                );
            }
        }
        prev = col;
        out.min_raw = out.min_raw.min(raw);
        out.max_raw = out.max_raw.max(raw);
        out.indices.push(col);
        out.values.push(v);
        first_feature = false;
        i = ve;
    }
    if unsorted {
        sort_merge(&mut out.indices, &mut out.values, row_start);
    }
    out.indptr.push(out.indices.len() as i64);
    out.label_ptr.push(out.labels.len() as i64);
    out.qids.push(qid);
    Ok(())
}

/// Sort the row starting at `start` by index and sum duplicate indices.
fn sort_merge(indices: &mut Vec<i64>, values: &mut Vec<f32>, start: usize) {
    let mut pairs: Vec<(i64, f32)> = indices[start..]
        .iter()
        .copied()
        .zip(values[start..].iter().copied())
        .collect();
    pairs.sort_by_key(|p| p.0);
    indices.truncate(start);
    values.truncate(start);
    for (c, v) in pairs {
        if indices.len() > start && *indices.last().unwrap_or(&-1) == c {
            if let Some(last) = values.last_mut() {
                *last += v;
            }
        } else {
            indices.push(c);
            values.push(v);
        }
    }
}
