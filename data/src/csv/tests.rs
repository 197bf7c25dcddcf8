//! CSVIter against a reference parse and against NDArrayIter (every last-batch mode), every
//! error case with its position, partitions, shuffling, dtypes, and random files.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sparrow_core::{DType, NDArray};

use super::*;
use crate::{Batch, DataError, LastBatch, NDArrayIter};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sparrow-csv-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Write `rows` (each a list of numbers) as CSV.
fn write(path: &Path, rows: &[Vec<f32>]) {
    let text: String = rows
        .iter()
        .map(|r| {
            let f: Vec<String> = r.iter().map(|v| v.to_string()).collect();
            f.join(",") + "\n"
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

fn table(n: usize, w: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|r| (0..w).map(|c| r as f32 * 10.0 + c as f32 / 4.0).collect())
        .collect()
}

fn all(it: impl Iterator<Item = crate::Result<Batch>>) -> Vec<Batch> {
    it.map(|b| b.unwrap()).collect()
}

fn err_of(p: CSVIterParams) -> DataError {
    match CSVIter::new(p) {
        Err(e) => e,
        Ok(mut it) => it.find_map(|b| b.err()).expect("an error"),
    }
}

fn parse_err(p: CSVIterParams) -> (PathBuf, u64, u64, String) {
    match err_of(p) {
        DataError::Parse {
            file,
            line,
            col,
            msg,
        } => (file, line, col, msg),
        other => panic!("expected a parse error, got {other}"),
    }
}

#[test]
fn batches_hold_the_file_rows_with_shapes() {
    let (x, y) = (tmp("shape-x.csv"), tmp("shape-y.csv"));
    let data = table(7, 6);
    let labels = table(7, 2);
    write(&x, &data);
    write(&y, &labels);
    let mut p = CSVIterParams::new(&x, &[2, 3], 3);
    p.label_csv = Some(y.clone());
    p.label_shape = vec![2];
    p.last_batch = LastBatch::Keep;
    let b = all(CSVIter::new(p.clone()).unwrap());
    assert_eq!(b.len(), 3);
    assert_eq!(b[0].data.shape(), vec![3, 2, 3]);
    assert_eq!(b[0].label.as_ref().unwrap().shape(), vec![3, 2]);
    assert_eq!(b[2].data.shape(), vec![1, 2, 3]);
    let got: Vec<f32> = b
        .iter()
        .flat_map(|b| b.data.to_vec::<f32>().unwrap())
        .collect();
    assert_eq!(got, data.concat());
    let got: Vec<f32> = b
        .iter()
        .flat_map(|b| b.label.as_ref().unwrap().to_vec::<f32>().unwrap())
        .collect();
    assert_eq!(got, labels.concat());
    // Without a label file the labels are zeros of shape [batch].
    p.label_csv = None;
    p.label_shape = vec![1];
    let b = all(CSVIter::new(p).unwrap());
    let l = b[0].label.as_ref().unwrap();
    assert_eq!(l.shape(), vec![3]);
    assert_eq!(l.to_vec::<f32>().unwrap(), vec![0.0; 3]);
}

#[test]
fn every_last_batch_mode_matches_ndarray_iter_over_epochs() {
    let (x, y) = (tmp("modes-x.csv"), tmp("modes-y.csv"));
    let n = 11;
    let data = table(n, 2);
    let labels: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32]).collect();
    write(&x, &data);
    write(&y, &labels);
    let xa = NDArray::from_vec(data.concat(), &[n, 2]).unwrap();
    let ya = NDArray::from_vec(labels.concat(), &[n]).unwrap();
    for mode in [
        LastBatch::Keep,
        LastBatch::Discard,
        LastBatch::Pad,
        LastBatch::RoundBatch,
        LastBatch::RollOver,
    ] {
        for bs in [1, 3, 4, 11] {
            for block_rows in [1, 2, 5, 4096] {
                let mut p = CSVIterParams::new(&x, &[2], bs);
                p.label_csv = Some(y.clone());
                p.last_batch = mode;
                p.block_rows = block_rows;
                let mut a = CSVIter::new(p).unwrap();
                let mut b =
                    NDArrayIter::new(xa.clone(), Some(ya.clone()), bs, false, mode).unwrap();
                for epoch in 0..4 {
                    let (ga, gb) = (all(a.by_ref()), all(b.by_ref()));
                    assert_eq!(ga.len(), gb.len(), "{mode:?} bs {bs} epoch {epoch}");
                    for (u, v) in ga.iter().zip(&gb) {
                        assert_eq!(u.pad, v.pad, "{mode:?} bs {bs} epoch {epoch}");
                        assert_eq!(u.data.shape(), v.data.shape());
                        assert_eq!(
                            u.data.to_vec::<f32>().unwrap(),
                            v.data.to_vec::<f32>().unwrap()
                        );
                        let (lu, lv) = (u.label.as_ref().unwrap(), v.label.as_ref().unwrap());
                        assert_eq!(lu.to_vec::<f32>().unwrap(), lv.to_vec::<f32>().unwrap());
                    }
                    a.reset();
                    b.reset();
                }
            }
        }
    }
}

#[test]
fn a_filled_last_batch_larger_than_the_part_is_refused() {
    let x = tmp("small.csv");
    write(&x, &table(3, 1));
    for mode in [LastBatch::Pad, LastBatch::RoundBatch] {
        let mut p = CSVIterParams::new(&x, &[1], 4);
        p.last_batch = mode;
        assert!(matches!(CSVIter::new(p), Err(DataError::Arg { .. })));
    }
    let mut p = CSVIterParams::new(&x, &[1], 4);
    p.last_batch = LastBatch::Keep;
    assert_eq!(all(CSVIter::new(p).unwrap())[0].data.shape(), vec![3, 1]);
}

#[test]
fn parts_cover_every_row_once_and_keep_labels_aligned() {
    let (x, y) = (tmp("parts-x.csv"), tmp("parts-y.csv"));
    let n = 23;
    write(&x, &table(n, 1));
    write(
        &y,
        &(0..n).map(|r| vec![r as f32 * 10.0]).collect::<Vec<_>>(),
    );
    for parts in 1..=6 {
        let mut seen = Vec::new();
        for k in 0..parts {
            let mut p = CSVIterParams::new(&x, &[1], 4);
            p.label_csv = Some(y.clone());
            p.last_batch = LastBatch::Keep;
            p.num_parts = parts;
            p.part_index = k;
            p.block_rows = 5;
            for b in CSVIter::new(p).unwrap() {
                let b = b.unwrap();
                let d = b.data.to_vec::<f32>().unwrap();
                assert_eq!(d, b.label.unwrap().to_vec::<f32>().unwrap());
                seen.extend(d);
            }
        }
        let want: Vec<f32> = (0..n).map(|r| r as f32 * 10.0).collect();
        assert_eq!(seen, want, "{parts} parts");
    }
}

#[test]
fn shuffle_permutes_rows_per_epoch_reproducibly() {
    let x = tmp("shuffle.csv");
    let n = 40;
    write(&x, &table(n, 1));
    let epochs = |seed| {
        let mut p = CSVIterParams::new(&x, &[1], 7);
        p.shuffle = true;
        p.seed = seed;
        p.block_rows = 8;
        p.last_batch = LastBatch::Keep;
        let mut it = CSVIter::new(p).unwrap();
        let mut out = Vec::new();
        for _ in 0..3 {
            let rows: Vec<f32> = all(it.by_ref())
                .iter()
                .flat_map(|b| b.data.to_vec::<f32>().unwrap())
                .collect();
            out.push(rows);
            it.reset();
        }
        out
    };
    let a = epochs(5);
    let want: Vec<f32> = (0..n).map(|r| r as f32 * 10.0).collect();
    for e in &a {
        let mut s = e.clone();
        s.sort_by(f32::total_cmp);
        assert_eq!(s, want);
    }
    assert_ne!(a[0], want, "shuffled");
    assert_ne!(a[0], a[1], "each epoch its own order");
    assert_eq!(a, epochs(5), "same seed, same orders");
}

#[test]
fn dtypes() {
    let x = tmp("dtypes.csv");
    std::fs::write(&x, "1, -2 ,3\n9007199254740993,0,-9223372036854775808\n").unwrap();
    let mut p = CSVIterParams::new(&x, &[3], 2);
    p.dtype = DType::I64;
    let b = CSVIter::new(p.clone()).unwrap().next().unwrap().unwrap();
    assert_eq!(b.data.dtype(), DType::I64);
    assert_eq!(
        b.data.to_vec::<i64>().unwrap(),
        vec![1, -2, 3, 9007199254740993, 0, i64::MIN]
    );
    assert_eq!(b.label.unwrap().dtype(), DType::I64);
    // i32: the large value is out of range, at its line and column.
    p.dtype = DType::I32;
    let (_, l, c, m) = parse_err(p.clone());
    assert_eq!((l, c), (2, 1), "{m}");
    assert!(m.contains("i32"), "{m}");
    p.dtype = DType::F64;
    let b = CSVIter::new(p.clone()).unwrap().next().unwrap().unwrap();
    assert_eq!(b.data.to_vec::<f64>().unwrap()[3], 9007199254740992.0);
    std::fs::write(&x, "0.1,1e-3,2\n").unwrap();
    let mut p = CSVIterParams::new(&x, &[3], 1);
    p.dtype = DType::F64;
    let b = CSVIter::new(p.clone()).unwrap().next().unwrap().unwrap();
    assert_eq!(b.data.to_vec::<f64>().unwrap(), vec![0.1, 1e-3, 2.0]);
    p.dtype = DType::I64;
    let (_, l, c, _) = parse_err(p.clone());
    assert_eq!((l, c), (1, 1));
    p.dtype = DType::U8;
    assert!(matches!(CSVIter::new(p), Err(DataError::Arg { .. })));
}

#[test]
fn errors_name_file_line_and_column() {
    let x = tmp("errs.csv");
    let cases: &[(&str, &[usize], u64, u64, &str)] = &[
        // Too few and too many fields for the shape.
        (
            "1,2,3\n4,5\n",
            &[3],
            2,
            4,
            "expected 3 fields (data_shape [3]), found 2",
        ),
        ("1,2,3\n\n4,5,6,7\n", &[3], 3, 7, "found more"),
        (
            "1,2,3,4,5\n",
            &[2, 3],
            1,
            10,
            "expected 6 fields (data_shape [2, 3]), found 5",
        ),
        (
            "1,2,3\r\n4,x,6\r\n",
            &[3],
            2,
            3,
            "field 2: expected a number, found `x`",
        ),
        ("1,2,3\n4,,6\n", &[3], 2, 3, "field 2 is empty"),
        ("1,2,3\n4,5,  \n", &[3], 2, 5, "field 3 is empty"),
        ("1,2,nan\n", &[3], 1, 5, "not a finite number"),
        ("1,2,1e39\n", &[3], 1, 5, "not a finite number"),
        ("1;2;3\n", &[3], 1, 1, "expected a number"),
    ];
    for &(text, shape, line, col, what) in cases {
        std::fs::write(&x, text).unwrap();
        let mut p = CSVIterParams::new(&x, shape, 1);
        p.last_batch = LastBatch::Keep;
        let (file, l, c, m) = parse_err(p);
        assert_eq!(file, x);
        assert_eq!((l, c), (line, col), "{text:?}: {m}");
        assert!(m.contains(what), "{text:?}: {m}");
    }
    // Display: file:line:col.
    std::fs::write(&x, "1,2\n3\n").unwrap();
    let e = err_of(CSVIterParams::new(&x, &[2], 1));
    assert!(
        e.to_string().starts_with(&format!("{}:2:", x.display())),
        "{e}"
    );
    // allow_non_finite accepts what is otherwise refused.
    std::fs::write(&x, "1,nan,-inf\n").unwrap();
    let mut p = CSVIterParams::new(&x, &[3], 1);
    p.allow_non_finite = true;
    let b = CSVIter::new(p).unwrap().next().unwrap().unwrap();
    assert!(b.data.to_vec::<f32>().unwrap()[1].is_nan());
}

#[test]
fn label_file_errors() {
    let (x, y) = (tmp("lab-x.csv"), tmp("lab-y.csv"));
    write(&x, &table(5, 2));
    // Fewer label rows: the data file's first row without a partner.
    std::fs::write(&y, "1\n\n2\n3\n").unwrap();
    let mut p = CSVIterParams::new(&x, &[2], 2);
    p.label_csv = Some(y.clone());
    p.block_rows = 2;
    let (file, l, c, m) = parse_err(p.clone());
    assert_eq!((file, l, c), (x.clone(), 4, 1), "{m}");
    assert!(m.contains("row 4 has no partner"), "{m}");
    // More label rows: the label file's.
    std::fs::write(&y, "1\n2\n3\n4\n5\n\n6\n").unwrap();
    let (file, l, _, m) = parse_err(p.clone());
    assert_eq!((file, l), (y.clone(), 7), "{m}");
    // A label row of the wrong size names the label file and label_shape.
    std::fs::write(&y, "1\n2\n3,4\n4\n5\n").unwrap();
    let (file, l, c, m) = parse_err(p.clone());
    assert_eq!((file, l, c), (y.clone(), 3, 3), "{m}");
    assert!(m.contains("label_shape [1]"), "{m}");
    // Missing files are I/O errors naming them.
    p.label_csv = Some(tmp("no-such-labels.csv"));
    match err_of(p.clone()) {
        DataError::Io { path, .. } => assert_eq!(path, tmp("no-such-labels.csv")),
        e => panic!("{e}"),
    }
    let p = CSVIterParams::new(tmp("no-such-data.csv"), &[2], 2);
    assert!(matches!(err_of(p), DataError::Io { .. }));
}

#[test]
fn an_error_ends_the_epoch_after_the_batches_before_it() {
    let x = tmp("mid.csv");
    std::fs::write(&x, "1\n2\n3\n4\nx\n6\n").unwrap();
    let mut p = CSVIterParams::new(&x, &[1], 2);
    p.block_rows = 2;
    let mut it = CSVIter::new(p).unwrap();
    assert_eq!(
        it.next().unwrap().unwrap().data.to_vec::<f32>().unwrap(),
        vec![1.0, 2.0]
    );
    assert_eq!(
        it.next().unwrap().unwrap().data.to_vec::<f32>().unwrap(),
        vec![3.0, 4.0]
    );
    assert_eq!(it.next().unwrap().unwrap_err().position(), Some((5, 1)));
    assert!(it.next().is_none());
    it.reset();
    assert!(it.next().unwrap().is_ok(), "a reset starts over");
}

#[test]
fn bad_parameters_are_refused() {
    let x = tmp("params.csv");
    write(&x, &table(4, 2));
    let bad = |f: &dyn Fn(&mut CSVIterParams)| {
        let mut p = CSVIterParams::new(&x, &[2], 2);
        f(&mut p);
        matches!(CSVIter::new(p), Err(DataError::Arg { .. }))
    };
    assert!(bad(&|p| p.batch_size = 0));
    assert!(bad(&|p| p.data_shape = vec![]));
    assert!(bad(&|p| p.data_shape = vec![2, 0]));
    assert!(bad(&|p| p.label_shape = vec![usize::MAX, 2]));
    assert!(bad(&|p| p.part_index = 1));
    assert!(bad(&|p| p.block_rows = 0));
    assert!(!bad(&|_| ()));
}

/// A random table written with random blanks, `\r\n` and blank lines.
fn any_file() -> impl Strategy<Value = (Vec<Vec<f32>>, String)> {
    (1usize..5, 0usize..40).prop_flat_map(|(w, n)| {
        (
            prop::collection::vec(
                prop::collection::vec(any::<f32>().prop_filter("finite", |v| v.is_finite()), w),
                n,
            ),
            prop::collection::vec((0u8..4, 0u8..3, any::<bool>()), n),
        )
            .prop_map(|(rows, style)| {
                let mut text = String::new();
                for (r, (pad, blank, crlf)) in rows.iter().zip(&style) {
                    let sp = " ".repeat(*pad as usize % 2);
                    let f: Vec<String> = r.iter().map(|v| format!("{sp}{v:e}{sp}")).collect();
                    text.push_str(&f.join(","));
                    text.push_str(if *crlf { "\r\n" } else { "\n" });
                    if *blank == 0 {
                        text.push_str(" \t\n");
                    }
                }
                (rows, text)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Any file of finite f32 values reads back bit for bit, whatever the batch and block
    /// sizes, and split into parts the rows come back once each.
    #[test]
    fn random_files_round_trip((rows, text) in any_file(), bs in 1usize..9,
                               block_rows in 1usize..12, parts in 1usize..4) {
        let x = tmp(&format!("prop-{}.csv", rows.len() * 131 + bs * 7 + block_rows));
        std::fs::write(&x, &text).unwrap();
        let w = rows.first().map_or(1, |r| r.len());
        let mut got = Vec::new();
        for k in 0..parts {
            let mut p = CSVIterParams::new(&x, &[w], bs);
            p.last_batch = LastBatch::Keep;
            p.block_rows = block_rows;
            p.num_parts = parts;
            p.part_index = k;
            for b in CSVIter::new(p).unwrap() {
                got.extend(b.unwrap().data.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()));
            }
        }
        let want: Vec<u32> = rows.concat().iter().map(|v| v.to_bits()).collect();
        prop_assert_eq!(got, want);
    }
}
