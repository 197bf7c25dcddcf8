//! Format cases, malformed input with exact positions, and writer round trips.

use super::*;
use proptest::prelude::*;

fn parse(s: &str, base: IndexBase, nf: Option<usize>) -> crate::Result<LibSvmData> {
    let o = LibSvmOptions {
        index_base: base,
        num_features: nf,
        sort_indices: false,
        allow_non_finite: false,
        map_file: false,
        ..Default::default()
    };
    parse_libsvm_bytes(s.as_bytes(), "t.svm", &o)
}

fn err_at(s: &str, base: IndexBase, nf: Option<usize>) -> (u64, u64, String) {
    match parse(s, base, nf) {
        Err(crate::DataError::Parse {
            line,
            col,
            msg,
            file,
        }) => {
            assert_eq!(file, std::path::Path::new("t.svm"));
            (line, col, msg)
        }
        other => panic!("expected a parse error for {s:?}, got {other:?}"),
    }
}

#[test]
fn format_cases() {
    let text = "# header comment\n\
                1 0:1.5 3:-2e3\n\
                \n\
                   \t  \n\
                0\t1:0 2:1E-2 # inline comment 9:9\n\
                -1 qid:7 4:0.000001\r\n\
                1,2,3\n\
                +1 5:123456789.123456789";
    let o = LibSvmOptions {
        num_features: Some(6),
        multilabel: true,
        ..Default::default()
    };
    let d = parse_libsvm_bytes(text.as_bytes(), "t.svm", &o).unwrap();
    let r = &d.rows;
    assert_eq!(r.len(), 5);
    assert_eq!(r.indptr, vec![0, 2, 4, 5, 5, 6]);
    assert_eq!(r.indices, vec![0, 3, 1, 2, 4, 5]);
    assert_eq!(
        r.values,
        vec![1.5, -2000.0, 0.0, 0.01, 1e-6, 123456789.123456789f32]
    );
    assert_eq!(r.labels, vec![1.0, 0.0, -1.0, 1.0, 2.0, 3.0, 1.0]);
    assert_eq!(r.label_ptr, vec![0, 1, 2, 3, 6, 7]);
    assert_eq!(r.qids, vec![None, None, Some(7), None, None]);
    assert_eq!(d.num_features, 6);
    // Explicit zeros are kept as stored entries.
    let x = d.csr().unwrap();
    assert_eq!(x.shape(), vec![5, 6]);
    assert!(
        d.labels().is_err(),
        "multi-label row rejected for dense labels"
    );
}

#[test]
fn full_precision_is_correctly_rounded() {
    // 17 significant digits and a value between two floats: must match std's exact parse.
    for v in [
        "0.10000000149011612",
        "0.1000000014901161193847656250001",
        "3.4028234663852886e38",
        "1.17549435e-38",
        "7.0064923216240862e-46",
        "0.99999997",
    ] {
        let d = parse(&format!("1 0:{v}"), IndexBase::Zero, None).unwrap();
        assert_eq!(
            d.rows.values[0].to_bits(),
            v.parse::<f32>().unwrap().to_bits(),
            "{v}"
        );
    }
}

#[test]
fn index_bases() {
    let one = "1 1:1 3:1\n0 2:5\n";
    let d = parse(one, IndexBase::Auto, None).unwrap();
    assert_eq!(d.index_base, IndexBase::One);
    assert_eq!(d.rows.indices, vec![0, 2, 1]);
    assert_eq!(d.num_features, 3);
    let d = parse(one, IndexBase::One, Some(3)).unwrap();
    assert_eq!(d.rows.indices, vec![0, 2, 1]);
    let d = parse(one, IndexBase::Zero, None).unwrap();
    assert_eq!(d.rows.indices, vec![1, 3, 2]);
    assert_eq!(d.num_features, 4);
    let zero = "1 1:1\n0 0:5\n";
    let d = parse(zero, IndexBase::Auto, None).unwrap();
    assert_eq!(d.index_base, IndexBase::Zero);
    assert_eq!(d.rows.indices, vec![1, 0]);
    // Index 0 in one-based data.
    let (l, c, m) = err_at(zero, IndexBase::One, None);
    assert_eq!((l, c), (2, 3), "{m}");
    assert!(m.contains("one-based"));
    // Auto + bound: the out-of-range index is located after the base is decided.
    let (l, c, m) = err_at("1 1:1\n0 2:5 4:1\n", IndexBase::Auto, Some(3));
    assert_eq!((l, c), (2, 7), "{m}");
}

#[test]
#[allow(clippy::type_complexity)]
fn malformed_positions() {
    let cases: &[(&str, IndexBase, Option<usize>, u64, u64, &str)] = &[
        (
            "1 0:1\nabc 1:2\n",
            IndexBase::Zero,
            None,
            2,
            1,
            "numeric label",
        ),
        (
            "1 0:1\n1,x 1:2\n",
            IndexBase::Zero,
            None,
            2,
            1,
            "comma-separated",
        ),
        ("1,,2 0:1\n", IndexBase::Zero, None, 1, 1, "comma-separated"),
        (
            "1 0:1 5:\n",
            IndexBase::Zero,
            None,
            1,
            9,
            "value after `5:`",
        ),
        ("1 0:1 5: 6:1\n", IndexBase::Zero, None, 1, 9, "value after"),
        (
            "\n\n1\t2:zz\n",
            IndexBase::Zero,
            None,
            3,
            5,
            "numeric value",
        ),
        ("1 -3:1\n", IndexBase::Zero, None, 1, 3, "negative"),
        (
            "# c\n1 2:1 10:1\n",
            IndexBase::Zero,
            Some(10),
            2,
            7,
            "out of range",
        ),
        ("1 4:1 2:1\n", IndexBase::Zero, None, 1, 7, "unsorted"),
        ("1 4:1 4:1\n", IndexBase::Zero, None, 1, 7, "duplicate"),
        ("1 4\n", IndexBase::Zero, None, 1, 3, "`index:value`"),
        (
            "1 a:1\n",
            IndexBase::Zero,
            None,
            1,
            3,
            "integer feature index",
        ),
        (
            "1 99999999999999999999:1\n",
            IndexBase::Zero,
            None,
            1,
            3,
            "does not fit",
        ),
        ("1 qid:x 1:1\n", IndexBase::Zero, None, 1, 7, "qid"),
        ("1 1:1 qid:3\n", IndexBase::Zero, None, 1, 7, "qid"),
        ("1 1:1.5.5\n", IndexBase::Zero, None, 1, 5, "numeric value"),
        (
            "1 1:1 # ok\n2 3:4 :5\n",
            IndexBase::Zero,
            None,
            2,
            7,
            "integer feature index",
        ),
    ];
    for &(s, b, nf, line, col, what) in cases {
        let (l, c, m) = err_at(s, b, nf);
        assert_eq!((l, c), (line, col), "{s:?}: {m}");
        assert!(m.contains(what), "{s:?}: {m}");
    }
}

#[test]
fn error_display_names_file_line_col() {
    let e = parse("1 0:1\n1 0:x\n", IndexBase::Zero, None).unwrap_err();
    let s = e.to_string();
    assert!(s.starts_with("t.svm:2:5: "), "{s}");
}

#[test]
fn sort_option_sorts_and_merges() {
    let o = LibSvmOptions {
        sort_indices: true,
        ..Default::default()
    };
    let d = parse_libsvm_bytes(b"1 5:1 2:2 5:3 0:1\n0 1:1\n", "m", &o).unwrap();
    assert_eq!(d.rows.indices, vec![0, 2, 5, 1]);
    assert_eq!(d.rows.values, vec![1.0, 2.0, 4.0, 1.0]);
    assert_eq!(d.rows.indptr, vec![0, 3, 4]);
}

#[test]
fn never_panics_on_junk() {
    let mut seed = 12345u64;
    for _ in 0..2000 {
        let mut bytes = Vec::new();
        for _ in 0..(seed % 64) {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let alphabet = b"0123456789:.-+eE #\n\t,qid\xff\x00";
            bytes.push(alphabet[(seed >> 33) as usize % alphabet.len()]);
        }
        for base in [IndexBase::Zero, IndexBase::One, IndexBase::Auto] {
            let o = LibSvmOptions {
                index_base: base,
                num_features: Some(50),
                sort_indices: seed.is_multiple_of(2),
                allow_non_finite: seed.is_multiple_of(3),
                map_file: seed.is_multiple_of(5),
                multilabel: seed.is_multiple_of(7),
                ignore_qid: seed.is_multiple_of(11),
                strict: seed.is_multiple_of(13),
            };
            let _ = parse_libsvm_bytes(&bytes, "junk", &o);
        }
    }
}

#[test]
fn big_input_splits_into_pieces_consistently() {
    // More than one parse piece: rows and error lines must be counted across pieces.
    let mut s = String::new();
    for i in 0..60_000 {
        s.push_str(&format!("{} {}:{} {}:0.5\n", i % 2, i % 7, i, 7 + i % 11));
    }
    let d = parse(&s, IndexBase::Zero, None).unwrap();
    assert_eq!(d.rows.len(), 60_000);
    assert_eq!(d.rows.values[2 * 59_999], 59_999.0);
    s.push_str("1 3:1 2:1\n");
    let (l, c, _) = err_at(&s, IndexBase::Zero, None);
    assert_eq!((l, c), (60_001, 7));
}

fn write_read(x: &sparrow_core::NDArray, y: &sparrow_core::NDArray, base: IndexBase) -> LibSvmData {
    let dir = std::env::temp_dir().join(format!("sparrow-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("rt-{:?}-{}.svm", base, x.id()));
    save_libsvm_with(&p, x, y, base).unwrap();
    let o = LibSvmOptions {
        index_base: if base == IndexBase::One {
            IndexBase::One
        } else {
            IndexBase::Zero
        },
        num_features: Some(x.shape()[1]),
        sort_indices: false,
        allow_non_finite: false,
        map_file: false,
        ..Default::default()
    };
    let d = load_libsvm(&p, &o).unwrap();
    std::fs::remove_file(&p).unwrap();
    d
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Any CSR with any finite f32 values (and labels) writes and reads back bit-identical.
    #[test]
    fn roundtrip_bit_identical(rows in prop::collection::vec(
            (any::<u32>(), prop::collection::btree_map(0i64..40, any::<u32>(), 0..8)), 0..20),
            one_based in any::<bool>()) {
        let mut indptr = vec![0i64];
        let (mut idx, mut val, mut lab) = (vec![], vec![], vec![]);
        let fin = |b: u32| { let v = f32::from_bits(b); if v.is_finite() { v } else { 1.0 } };
        for (l, row) in &rows {
            lab.push(fin(*l));
            for (c, v) in row { idx.push(*c); val.push(fin(*v)); }
            indptr.push(idx.len() as i64);
        }
        let x = crate::batch::csr_array(rows.len(), 40, indptr.clone(), idx.clone(), val.clone()).unwrap();
        let y = sparrow_core::NDArray::from_vec(lab.clone(), &[rows.len()]).unwrap();
        let base = if one_based { IndexBase::One } else { IndexBase::Zero };
        let d = write_read(&x, &y, base);
        prop_assert_eq!(&d.rows.indptr, &indptr);
        prop_assert_eq!(&d.rows.indices, &idx);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&d.rows.values), bits(&val));
        prop_assert_eq!(bits(&d.rows.labels), bits(&lab));
    }
}

#[test]
fn writer_multilabel_and_atomic() {
    let x = crate::batch::csr_array(2, 3, vec![0, 1, 1], vec![2], vec![0.25]).unwrap();
    let y = sparrow_core::NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let dir = std::env::temp_dir().join(format!("sparrow-w-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("ml.svm");
    save_libsvm(&p, &x, &y).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "1,2 2:0.25\n3,4\n");
    // No temp file left behind.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // A label count that does not match the rows is an argument error, nothing written.
    let bad = sparrow_core::NDArray::from_vec(vec![1.0f32], &[1]).unwrap();
    assert!(save_libsvm(dir.join("bad.svm"), &x, &bad).is_err());
    assert!(!dir.join("bad.svm").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Threads writing one LibSVM path at once: every write succeeds and every read between them
/// finds one writer's whole file. With the pid-only temporary, writers renamed each other's
/// files ("No such file") and readers could find a mix.
#[test]
fn concurrent_writers_of_one_path_never_collide() {
    let dir = std::env::temp_dir().join(format!("sparrow-wc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("shared.svm");
    let rows = 500;
    std::thread::scope(|s| {
        for t in 0..4 {
            let p = &p;
            s.spawn(move || {
                // Writer t's file: every value is t + 1, so a mixed file shows two values.
                let indptr: Vec<i64> = (0..=rows as i64).collect();
                let x = crate::batch::csr_array(
                    rows,
                    2,
                    indptr,
                    vec![1; rows],
                    vec![t as f32 + 1.0; rows],
                )
                .unwrap();
                let y = sparrow_core::NDArray::from_vec(vec![0f32; rows], &[rows]).unwrap();
                for _ in 0..10 {
                    save_libsvm(p, &x, &y).unwrap();
                    let d = load_libsvm(p, &LibSvmOptions::default()).unwrap();
                    assert_eq!(d.num_rows(), rows);
                    let v = &d.rows.values;
                    assert!(v.iter().all(|&x| x == v[0]), "a mixed file");
                }
            });
        }
    });
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A line of LibSVM text for `rows_parser_matches_line_scanner`: plain rows (the fast path),
/// rows the general parser takes, comment and blank lines, inline comments, malformed rows.
fn any_line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u32..3, prop::collection::vec((0u32..4, 0u32..1000), 0..5)).prop_map(|(l, fs)| {
            let mut col = 0;
            let mut s = format!("{l}");
            for (gap, v) in fs {
                col += gap + 1;
                s.push_str(&format!(" {col}:{}", v as f32 / 8.0));
            }
            s
        }),
        1 => Just("1 qid:2 3:1e-2".to_string()),
        1 => Just("1,2 4:0.5".to_string()),
        1 => Just("1 2:0.5 # inline 7:7".to_string()),
        1 => Just("1 2:0.5#tight".to_string()),
        1 => Just("0\t1:2\t3:4\r".to_string()),
        1 => Just("# a comment".to_string()),
        1 => Just("".to_string()),
        1 => Just(" \t ".to_string()),
        1 => Just("  # indented comment".to_string()),
        1 => Just("1 5:0.5 2:1".to_string()),
        1 => Just("1 2:x".to_string()),
        1 => Just("abc 1:1".to_string()),
        1 => Just("1 9:".to_string()),
        1 => Just("2:1 4:0.5".to_string()),
        1 => Just("qid:-9223372036854775808 1:1".to_string()),
        1 => Just("1 qid:9223372036854775807".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Parsing from the reader's row starts gives exactly what scanning every line does: the
    /// same rows bit for bit, or the same first error at the same line and column, from any row
    /// start on (a batch's range) and with or without a final newline.
    #[test]
    fn rows_parser_matches_line_scanner(lines in prop::collection::vec(any_line(), 0..24),
                                       final_nl in any::<bool>(), from in 0usize..24,
                                       shift in 0i64..2, sort in any::<bool>(), multilabel in any::<bool>()) {
        use super::parse::{parse_into, parse_rows_into, ChunkOpts};
        let mut text = lines.join("\n");
        if final_nl {
            text.push('\n');
        }
        let buf = text.as_bytes();
        let mut starts = Vec::new();
        super::block_batches::row_starts(buf, &mut starts);
        let k = from.min(starts.len());
        let s0 = starts.get(k).copied().unwrap_or(buf.len());
        let opts = ChunkOpts { shift, zero_is_error: false, bound: Some(9), sort, allow_non_finite: false,
                               multilabel, ignore_qid: false, strict: false };
        let (mut a, mut b) = (Rows::new(), Rows::new());
        let ra = parse_into(&buf[s0..], &opts, &mut a)
            .map_err(|e| (s0 + nth_line_start(&buf[s0..], e.line), e.col, e.msg));
        let rb = parse_rows_into(buf, &starts[k..], buf.len(), &opts, &mut b)
            .map_err(|e| (e.line_start, e.err.col, e.err.msg));
        prop_assert_eq!(&ra, &rb, "{:?}", text);
        if ra.is_ok() {
            prop_assert_eq!(b.len(), starts.len() - k);
            prop_assert_eq!(&a.indptr, &b.indptr);
            prop_assert_eq!(&a.indices, &b.indices);
            let bits = |r: &Rows| r.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&a), bits(&b));
            prop_assert_eq!(&a.labels, &b.labels);
            prop_assert_eq!(&a.label_ptr, &b.label_ptr);
            prop_assert_eq!(&a.qids, &b.qids);
            prop_assert_eq!((a.min_raw, a.max_raw), (b.min_raw, b.max_raw));
        }
    }
}

/// NaN, infinities and overflowing values are a parse error at their line and column unless
/// `allow_non_finite` is set; the fast path never sees them (they are not plain decimals).
#[test]
fn non_finite_values_are_refused_with_their_position() {
    for (text, line, col) in [
        ("1 0:1\n0 3:nan\n", 2, 5),
        ("1 0:1 2:inf\n", 1, 9),
        ("1 0:1e999\n", 1, 5),
        ("1 0:1\n-inf 1:2\n", 2, 1),
    ] {
        let e = parse(text, IndexBase::Zero, Some(10)).unwrap_err();
        assert_eq!(e.position(), Some((line, col)), "{text:?}: {e}");
        assert!(e.to_string().contains("not a finite number"), "{e}");
        let o = LibSvmOptions {
            index_base: IndexBase::Zero,
            num_features: Some(10),
            sort_indices: false,
            allow_non_finite: true,
            map_file: false,
            ..Default::default()
        };
        let d = parse_libsvm_bytes(text.as_bytes(), "t.svm", &o).unwrap();
        let all = d.rows.values.iter().chain(&d.rows.labels);
        assert!(all.clone().any(|v| !v.is_finite()), "{text:?}");
    }
}

/// The streaming iterator refuses them too (its own parse options), and takes them when asked.
#[test]
fn libsvm_iter_refuses_non_finite_values_unless_allowed() {
    let p = std::env::temp_dir().join(format!("sparrow-nonfinite-{}.svm", std::process::id()));
    std::fs::write(&p, "1 0:1\n0 1:nan\n").unwrap();
    let first_error = |allow: bool| {
        let mut q = LibSVMIterParams::new(&p, 4, 2);
        q.allow_non_finite = allow;
        LibSVMIter::new(q).and_then(|mut it| it.find_map(|b| b.err()).map_or(Ok(()), Err))
    };
    let e = first_error(false).unwrap_err();
    assert!(e.to_string().contains(":2:5:"), "{e}");
    assert!(first_error(true).is_ok());
    std::fs::remove_file(&p).unwrap();
}
