//! scikit-learn (`load_svmlight_file`) compatibility: multilabel rows, signed 64-bit query ids,
//! ignoring query ids, and strict mode, each in default and opted-in behaviour.

use super::*;

fn load(text: &str, o: &LibSvmOptions) -> crate::Result<LibSvmData> {
    parse_libsvm_bytes(text.as_bytes(), "s.svm", o)
}

fn pos(text: &str, o: &LibSvmOptions) -> (u64, u64, String) {
    match load(text, o) {
        Err(e @ crate::DataError::Parse { .. }) => {
            let (l, c) = e.position().unwrap_or_default();
            (l, c, e.to_string())
        }
        other => panic!("expected a parse error for {text:?}, got {other:?}"),
    }
}

fn multilabel() -> LibSvmOptions {
    LibSvmOptions {
        multilabel: true,
        ..Default::default()
    }
}

#[test]
fn multilabel_rows_with_lists_single_labels_and_none() {
    let text = "1,3 0:1\n2:1 3:2\n\n7 1:1\nqid:5 1:1\n-1,0.5,2\n";
    let d = load(text, &multilabel()).unwrap();
    let r = &d.rows;
    assert_eq!(r.len(), 5);
    assert_eq!(r.labels, vec![1.0, 3.0, 7.0, -1.0, 0.5, 2.0]);
    assert_eq!(r.label_ptr, vec![0, 2, 2, 3, 3, 6]);
    assert_eq!(r.indptr, vec![0, 1, 3, 4, 5, 5]);
    assert_eq!(r.indices, vec![0, 2, 3, 1, 1]);
    assert_eq!(r.qids, vec![None, None, None, Some(5), None]);
    // A row without labels cannot become a dense label vector.
    assert!(d.labels().is_err());
}

#[test]
fn a_comma_in_a_single_label_file_is_an_error_on_its_line() {
    let o = LibSvmOptions::default();
    let (l, c, m) = pos("1 0:1\n\n1,2 0:1\n", &o);
    assert_eq!((l, c), (3, 1), "{m}");
    assert!(m.contains("comma-separated"), "{m}");
    // A label-less row is an error too: its first token is no number.
    let (l, c, m) = pos("1 0:1\n2:1 3:1\n", &o);
    assert_eq!((l, c), (2, 1), "{m}");
    assert!(m.contains("expected a numeric label"), "{m}");
}

#[test]
fn malformed_label_lists_name_the_bad_part() {
    for (text, col) in [
        ("1,,2 0:1\n", 3),
        ("1,2, 0:1\n", 5),
        (",1 0:1\n", 1),
        ("1,x 0:1\n", 3),
    ] {
        let (l, c, m) = pos(text, &multilabel());
        assert_eq!((l, c), (1, col), "{text:?}: {m}");
    }
}

#[test]
fn qids_cover_every_i64_and_rows_without_one_have_none() {
    let text = "1 qid:-9223372036854775808 0:1\n2 qid:9223372036854775807 0:1\n\
                3 0:1\n4 qid:-1\n5 qid:+0 2:2\n";
    let d = load(text, &LibSvmOptions::default()).unwrap();
    assert_eq!(
        d.rows.qids,
        vec![Some(i64::MIN), Some(i64::MAX), None, Some(-1), Some(0)]
    );
    for (text, col) in [
        ("1 qid:9223372036854775808 0:1\n", 7),
        ("1 qid:-9223372036854775809\n", 7),
        ("1 qid: 0:1\n", 7),
        ("1 qid:1.5 0:1\n", 7),
    ] {
        let (l, c, m) = pos(text, &LibSvmOptions::default());
        assert_eq!((l, c), (1, col), "{text:?}: {m}");
        assert!(m.contains("i64"), "{m}");
    }
}

#[test]
fn ignored_qids_are_not_read_but_must_still_be_placed_right() {
    let o = LibSvmOptions {
        ignore_qid: true,
        ..Default::default()
    };
    let d = load(
        "1 qid:abc 0:1\n2 qid:99999999999999999999 1:1\n3 qid:4\n",
        &o,
    )
    .unwrap();
    assert_eq!(d.rows.qids, vec![None, None, None]);
    assert_eq!(d.rows.indices, vec![0, 1]);
    // Not reading the value does not make a misplaced or repeated qid a feature.
    let (l, c, m) = pos("1 0:1 qid:3\n", &o);
    assert_eq!((l, c), (1, 7), "{m}");
    let (l, c, m) = pos("1 qid:3 qid:4 0:1\n", &o);
    assert_eq!((l, c), (1, 9), "{m}");
    // Read by default: the same first file is an error there.
    let (l, c, _) = pos("1 qid:abc 0:1\n", &LibSvmOptions::default());
    assert_eq!((l, c), (1, 7));
}

#[test]
fn strict_mode_refuses_overflow_underflow_and_repeated_labels() {
    let strict = |allow_non_finite, multilabel| LibSvmOptions {
        strict: true,
        allow_non_finite,
        multilabel,
        ..Default::default()
    };
    // Underflow: accepted (as 0) by default, refused in strict mode at the value.
    let text = "1 0:1 3:1e-50\n";
    let d = load(text, &LibSvmOptions::default()).unwrap();
    assert_eq!(d.rows.values, vec![1.0, 0.0]);
    let (l, c, m) = pos(text, &strict(false, false));
    assert_eq!((l, c), (1, 9), "{m}");
    assert!(m.contains("rounds to 0"), "{m}");
    // A subnormal is not zero, and a zero written with an exponent is zero: both fine.
    let d = load("1 0:1e-40 1:0e-50 2:0.000\n", &strict(false, false)).unwrap();
    assert!(d.rows.values[0] > 0.0);
    assert_eq!(&d.rows.values[1..], &[0.0, 0.0]);
    // Overflow: allow_non_finite alone takes it as inf; strict refuses it, but not a literal inf.
    let text = "1e39 0:1\n";
    let allow = LibSvmOptions {
        allow_non_finite: true,
        ..Default::default()
    };
    assert_eq!(load(text, &allow).unwrap().rows.labels, vec![f32::INFINITY]);
    let (l, c, m) = pos(text, &strict(true, false));
    assert_eq!((l, c), (1, 1), "{m}");
    assert!(m.contains("overflows"), "{m}");
    let d = load("-inf 0:inf 1:nan\n", &strict(true, false)).unwrap();
    assert_eq!(d.rows.labels, vec![f32::NEG_INFINITY]);
    // Without allow_non_finite the overflow is the usual non-finite error.
    let (_, _, m) = pos(text, &strict(false, false));
    assert!(m.contains("not a finite number"), "{m}");
    // A label repeated within a multilabel row.
    let text = "1,2,1 0:1\n";
    assert_eq!(
        load(text, &multilabel()).unwrap().rows.labels,
        vec![1.0, 2.0, 1.0]
    );
    let (l, c, m) = pos(text, &strict(false, true));
    assert_eq!((l, c), (1, 5), "{m}");
    assert!(m.contains("appears twice"), "{m}");
}

#[test]
fn strict_mode_changes_nothing_on_ordinary_files() {
    let mut text = String::new();
    for i in 0..500 {
        text.push_str(&format!(
            "{} {}:{} {}:0.5 {}:-3.25e-3\n",
            i % 2,
            i % 7,
            i as f32 / 3.0,
            7 + i % 11,
            20 + i % 5
        ));
    }
    let a = load(&text, &LibSvmOptions::default()).unwrap();
    let o = LibSvmOptions {
        strict: true,
        multilabel: true,
        ..Default::default()
    };
    let b = load(&text, &o).unwrap();
    assert_eq!(a.rows.indptr, b.rows.indptr);
    assert_eq!(a.rows.indices, b.rows.indices);
    assert_eq!(a.rows.values, b.rows.values);
    assert_eq!(a.rows.labels, b.rows.labels);
    assert_eq!(a.rows.qids, b.rows.qids);
}

#[test]
fn iterator_reads_label_lists_only_with_several_labels_per_row() {
    let p = std::env::temp_dir().join(format!("sparrow-ml-{}.svm", std::process::id()));
    std::fs::write(&p, "1,2 0:1\n3,4 qid:-5 1:1\n").unwrap();
    let mut q = LibSVMIterParams::new(&p, 4, 2);
    q.label_shape = 2;
    let b = LibSVMIter::new(q).unwrap().next().unwrap().unwrap();
    let label = b.label.unwrap();
    assert_eq!(label.shape(), vec![2, 2]);
    assert_eq!(label.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    let e = LibSVMIter::new(LibSVMIterParams::new(&p, 4, 2))
        .and_then(|mut it| it.find_map(|b| b.err()).map_or(Ok(()), Err))
        .unwrap_err();
    assert_eq!(e.position(), Some((1, 1)), "{e}");
    // Strict mode reaches the iterator's parser too.
    std::fs::write(&p, "1 0:1\n0 1:1e-60\n").unwrap();
    let mut q = LibSVMIterParams::new(&p, 4, 2);
    q.strict = true;
    let e = LibSVMIter::new(q)
        .and_then(|mut it| it.find_map(|b| b.err()).map_or(Ok(()), Err))
        .unwrap_err();
    assert_eq!(e.position(), Some((2, 5)), "{e}");
    std::fs::remove_file(&p).unwrap();
}
