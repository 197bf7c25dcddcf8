//! The fast path for the common LibSVM line: `label index:value index:value ...` with one plain
//! decimal label, plain decimal values, and strictly increasing in-range indices.
//!
//! It reads digits eight at a time (see `swar`) and parses each token in one pass. Whenever a
//! line is anything else (qid, several labels, exponents, unsorted or out-of-range indices,
//! malformed text) it undoes what it appended and reports `false`, and the caller parses that
//! line again with the general parser, which alone produces rows for the unusual syntax and
//! every error message and position. So this path only has to be right about the lines it
//! accepts: for those it appends exactly what the general parser would.

use super::number::decimal_at;
use super::parse::{ChunkOpts, Rows};
use super::swar::{digit_count, digits_value, load8};

#[inline(always)]
fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

/// Parse the line content `buf[start..end]` (`end` is at a newline, a `#`, or the end of
/// `buf`; bytes after `end` may be read but never change the result) and append its row to
/// `out`. A blank content appends nothing. Returns `false`, with `out` unchanged, when the line
/// needs the general parser.
#[inline]
pub(crate) fn parse_line_fast(
    buf: &[u8],
    start: usize,
    end: usize,
    opts: &ChunkOpts,
    out: &mut Rows,
) -> bool {
    let mut i = start;
    while i < end && is_blank(buf[i]) {
        i += 1;
    }
    if i == end {
        return true; // blank or comment-only line: no row, as in the general parser
    }
    let Some((label, j)) = decimal_at(buf, i, end) else {
        return false;
    };
    i = j;
    let row_start = out.indices.len();
    let (mut first_raw, mut last_raw) = (-1i64, -1i64);
    let mut prev: i64 = -1;
    loop {
        while i < end && is_blank(buf[i]) {
            i += 1;
        }
        if i == end {
            break;
        }
        let Some((raw, v, j)) = feature_tokens(buf, i, end) else {
            return undo(out, row_start);
        };
        let col = raw - opts.shift;
        let out_of_range = opts.bound.is_some_and(|b| col as u64 >= b);
        if (opts.zero_is_error && raw == 0) || out_of_range || col <= prev {
            return undo(out, row_start);
        }
        if first_raw < 0 {
            first_raw = raw;
        }
        last_raw = raw;
        prev = col;
        out.indices.push(col);
        out.values.push(v);
        i = j;
    }
    if first_raw >= 0 {
        // Indices are strictly increasing, so the first and last are the row's extremes.
        out.min_raw = out.min_raw.min(first_raw);
        out.max_raw = out.max_raw.max(last_raw);
    }
    out.indptr.push(out.indices.len() as i64);
    out.labels.push(label);
    out.label_ptr.push(out.labels.len() as i64);
    out.qids.push(None);
    true
}

/// `index:value` at `s` read one digit run at a time (any sign or shape `decimal_at` takes).
#[inline]
fn feature_tokens(buf: &[u8], s: usize, end: usize) -> Option<(i64, f32, usize)> {
    let x = load8(buf, s);
    let n = digit_count(x);
    // The digit run stops before `end` (its byte is no digit), so `s + n < end` whenever the
    // ':' test passes. Eight digits may continue: the general parser decides those.
    if n == 0 || n == 8 || buf.get(s + n) != Some(&b':') {
        return None;
    }
    let (v, j) = decimal_at(buf, s + n + 1, end)?;
    Some((digits_value(x, n) as i64, v, j))
}

#[cold]
fn undo(out: &mut Rows, row_start: usize) -> bool {
    out.indices.truncate(row_start);
    out.values.truncate(row_start);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libsvm::parse::parse_line;
    use proptest::prelude::*;

    /// Tokens that exercise both paths: plain features, and everything the fast path declines.
    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => (0u32..2000, 0u32..100_000, 0usize..7).prop_map(|(i, v, d)| {
                format!("{i}:{}", v as f64 / 10f64.powi(d as i32))
            }),
            1 => Just("qid:3".to_string()),
            1 => Just("qid:-9223372036854775808".to_string()),
            1 => Just("qid:9223372036854775808".to_string()),
            1 => (0u32..50).prop_map(|i| format!("{i}:1e-60")),
            1 => (0u32..50).prop_map(|i| format!("{i}:1e60")),
            1 => (0u32..50).prop_map(|i| format!("{i}:0.0")),
            1 => (0u32..50).prop_map(|i| format!("{i}:1e-3")),
            1 => (0u32..50).prop_map(|i| format!("{i}:")),
            1 => (0u32..50).prop_map(|i| format!("-{i}:1")),
            1 => (0u32..50).prop_map(|i| format!("{i}:0.{}", "3".repeat(20))),
            1 => Just("123456789:2".to_string()),
            1 => (10_000_000u32..99_999_999).prop_map(|i| format!("{i}:0.5")),
            1 => (0u32..50).prop_map(|i| format!("{i}:-0.{i}")),
            1 => (0u32..50).prop_map(|i| format!("{i}:{i}.0000000{i}")),
            1 => Just("x:1".to_string()),
            1 => Just("7:abc".to_string()),
        ]
    }

    fn label() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => Just("1".to_string()),
            2 => Just("-1".to_string()),
            1 => Just("0.25".to_string()),
            1 => Just("1,2".to_string()),
            1 => Just("2,2".to_string()),
            1 => Just("3:1".to_string()),
            1 => Just("".to_string()),
            1 => Just("abc".to_string()),
        ]
    }

    proptest! {
        /// Whenever the fast path accepts a line it appends exactly the general parser's row;
        /// when it declines it leaves the output untouched.
        #[test]
        fn agrees_with_general(lab in label(), toks in proptest::collection::vec(token(), 0..8),
                               sep in prop_oneof![Just(" "), Just("\t"), Just("  ")],
                               shift in 0i64..2,
                               bound in proptest::option::of(prop_oneof![1u64..3000, Just(1u64 << 40)]),
                               sort in any::<bool>(), multilabel in any::<bool>(),
                               ignore_qid in any::<bool>(), strict in any::<bool>()) {
            let line = format!("{lab}{sep}{}", toks.join(sep));
            let opts = ChunkOpts { shift, zero_is_error: shift == 1, bound, sort, allow_non_finite: false,
                                   multilabel, ignore_qid, strict };
            let mut fast = Rows::new();
            fast.push_empty(&[9.0]); // a previous row, so undo has something to keep
            let before = fast.clone();
            let bytes = line.as_bytes();
            if parse_line_fast(bytes, 0, bytes.len(), &opts, &mut fast) {
                let mut slow = before.clone();
                prop_assert!(parse_line(bytes, 0, &opts, &mut slow).is_ok(), "{}", line);
                prop_assert_eq!(&fast.indptr, &slow.indptr);
                prop_assert_eq!(&fast.indices, &slow.indices);
                let (fb, sb): (Vec<u32>, Vec<u32>) = (
                    fast.values.iter().map(|v| v.to_bits()).collect(),
                    slow.values.iter().map(|v| v.to_bits()).collect(),
                );
                prop_assert_eq!(fb, sb);
                prop_assert_eq!(&fast.labels, &slow.labels);
                prop_assert_eq!(&fast.label_ptr, &slow.label_ptr);
                prop_assert_eq!(&fast.qids, &slow.qids);
                prop_assert_eq!((fast.min_raw, fast.max_raw), (slow.min_raw, slow.max_raw));
            } else {
                prop_assert_eq!(&fast.indptr, &before.indptr);
                prop_assert_eq!(&fast.indices, &before.indices);
                prop_assert_eq!(&fast.values, &before.values);
                prop_assert_eq!(&fast.labels, &before.labels);
            }
        }
    }

    #[test]
    fn typical_line_takes_the_fast_path() {
        let opts = ChunkOpts {
            shift: 0,
            zero_is_error: false,
            bound: Some(10_000_000),
            sort: false,
            allow_non_finite: false,
            multilabel: false,
            ignore_qid: false,
            strict: false,
        };
        let line = b"1 428463:0.3477131 511223:0.8689084 9027454:0.01532944\n";
        let mut out = Rows::new();
        assert!(parse_line_fast(line, 0, line.len() - 1, &opts, &mut out));
        assert_eq!(out.indices, vec![428463, 511223, 9027454]);
        assert_eq!(out.values, vec![0.3477131, 0.8689084, 0.01532944]);
        assert_eq!(out.labels, vec![1.0]);
    }
}
