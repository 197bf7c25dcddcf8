//! LibSVMIter: partitions, last-batch modes, shuffle, label files, errors, prefetch.

use std::path::PathBuf;

use super::*;
use crate::LastBatch;
use sparrow_core::NDArray;

/// A batch's csr parts, copied out (f32 values).
struct Csr {
    rows: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f32>,
}

impl Csr {
    fn of(x: &NDArray) -> Csr {
        x.with_csr::<f32, _>(|c| Csr {
            rows: c.shape[0],
            indptr: c.indptr.to_vec(),
            indices: c.indices.to_vec(),
            values: c.values.to_vec(),
        })
        .expect("an f32 csr batch")
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sparrow-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `n` rows; row `i` has label `i` and features `i%5:i` and `5+i%3:1` (one comment line and a
/// blank line mixed in, to check they are not rows).
fn write_rows(path: &std::path::Path, n: usize) {
    let mut s = String::from("# generated\n");
    for i in 0..n {
        s.push_str(&format!("{i} {}:{i} {}:1\n", i % 5, 5 + i % 3));
        if i % 17 == 3 {
            s.push('\n');
        }
    }
    std::fs::write(path, s).unwrap();
}

/// Row ids (labels) of every batch of one pass, and the pads.
fn pass(it: &mut LibSVMIter) -> (Vec<Vec<i64>>, Vec<usize>) {
    let mut ids = Vec::new();
    let mut pads = Vec::new();
    for b in it.by_ref() {
        let b = b.unwrap();
        let rows = b.data.shape()[0];
        let lab = b.label.unwrap().to_vec::<f32>().unwrap();
        assert_eq!(lab.len(), rows);
        // The data must agree with the label (feature i%5 holds value i).
        let c = Csr::of(&b.data);
        for (r, &l) in lab.iter().enumerate() {
            let s = c.indptr[r] as usize;
            assert_eq!(c.indices[s], (l as i64) % 5);
            assert_eq!(c.values[s], l);
        }
        ids.push(lab.iter().map(|&l| l as i64).collect());
        pads.push(b.pad);
    }
    (ids, pads)
}

fn params(path: &std::path::Path, bs: usize, lb: LastBatch) -> LibSVMIterParams {
    let mut p = LibSVMIterParams::new(path, 8, bs);
    p.last_batch = lb;
    p.block_bytes = 64; // many blocks even for tiny files
    p
}

#[test]
fn partitions_cover_every_row_once() {
    let d = tmpdir("parts");
    let f = d.join("a.svm");
    write_rows(&f, 257);
    for parts in [1, 2, 3, 5, 8, 300] {
        let mut seen = vec![0u32; 257];
        for part in 0..parts {
            let mut p = params(&f, 7, LastBatch::Keep);
            p.num_parts = parts;
            p.part_index = part;
            let mut it = LibSVMIter::new(p).unwrap();
            for id in pass(&mut it).0.concat() {
                seen[id as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "num_parts={parts}: {seen:?}");
    }
    assert!(LibSVMIter::new({
        let mut p = params(&f, 7, LastBatch::Keep);
        p.num_parts = 2;
        p.part_index = 2;
        p
    })
    .is_err());
}

#[test]
fn last_batch_modes() {
    let d = tmpdir("last");
    let f = d.join("a.svm");
    write_rows(&f, 10);
    let run = |lb| {
        let mut it = LibSVMIter::new(params(&f, 4, lb)).unwrap();
        let e0 = pass(&mut it);
        it.reset();
        let e1 = pass(&mut it);
        it.reset();
        (e0, e1, pass(&mut it))
    };
    let (e0, e1, _) = run(LastBatch::Keep);
    assert_eq!(e0.0, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    assert_eq!(e0.1, vec![0, 0, 0]);
    assert_eq!(e1, e0);
    let (e0, _, _) = run(LastBatch::Discard);
    assert_eq!(e0.0, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    let (e0, e1, _) = run(LastBatch::Pad);
    assert_eq!(e0.0[2], vec![8, 9, 0, 1]);
    assert_eq!(e0.1, vec![0, 0, 2]);
    assert_eq!(e1, e0);
    // MXNet round_batch: the next epoch starts after the borrowed rows.
    let (e0, e1, e2) = run(LastBatch::RoundBatch);
    assert_eq!(e0.0[2], vec![8, 9, 0, 1]);
    assert_eq!(e0.1[2], 2);
    assert_eq!(e1.0, vec![vec![2, 3, 4, 5], vec![6, 7, 8, 9]]);
    assert_eq!(e2.0, e0.0);
    let (e0, e1, e2) = run(LastBatch::RollOver);
    assert_eq!(e0.0, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(
        e1.0,
        vec![vec![8, 9, 0, 1], vec![2, 3, 4, 5], vec![6, 7, 8, 9]]
    );
    assert_eq!(e2.0.len(), 2);
}

#[test]
fn round_batch_smaller_than_batch() {
    let d = tmpdir("tiny");
    let f = d.join("a.svm");
    write_rows(&f, 3);
    let mut it = LibSVMIter::new(params(&f, 8, LastBatch::RoundBatch)).unwrap();
    let (ids, pads) = pass(&mut it);
    assert_eq!(ids, vec![vec![0, 1, 2, 0, 1, 2, 0, 1]]);
    assert_eq!(pads, vec![5]);
}

#[test]
fn shuffle_is_seeded_and_complete() {
    let d = tmpdir("shuf");
    let f = d.join("a.svm");
    write_rows(&f, 200);
    let mk = |seed| {
        let mut p = params(&f, 16, LastBatch::Keep);
        p.shuffle = true;
        p.seed = seed;
        LibSVMIter::new(p).unwrap()
    };
    let (mut a, mut b) = (mk(7), mk(7));
    let (pa, pb) = (pass(&mut a).0.concat(), pass(&mut b).0.concat());
    assert_eq!(pa, pb);
    let mut sorted = pa.clone();
    sorted.sort();
    assert_eq!(sorted, (0..200).collect::<Vec<_>>());
    assert_ne!(pa, (0..200).collect::<Vec<_>>());
    a.reset();
    assert_ne!(pass(&mut a).0.concat(), pa, "a new epoch gets a new order");
    assert_ne!(pass(&mut mk(8)).0.concat(), pa);
}

#[test]
fn label_file_gives_csr_labels() {
    let d = tmpdir("lab");
    let f = d.join("x.svm");
    write_rows(&f, 50);
    let mut s = String::new();
    for i in 0..50 {
        // row i: label columns i%4 and 4 (value i)
        s.push_str(&format!("0 {}:1 4:{i}\n", i % 4));
        if i == 10 {
            s.push_str("# a comment line\n");
        }
    }
    let lf = d.join("y.svm");
    std::fs::write(&lf, s).unwrap();
    for parts in [1, 3] {
        let mut seen = 0;
        for part in 0..parts {
            let mut p = params(&f, 6, LastBatch::Keep);
            p.label_libsvm = Some(lf.clone());
            p.label_shape = 5;
            p.num_parts = parts;
            p.part_index = part;
            for b in LibSVMIter::new(p).unwrap() {
                let b = b.unwrap();
                let y = b.label.unwrap();
                assert_eq!(y.stype(), sparrow_core::SType::Csr);
                assert_eq!(y.shape(), vec![b.data.shape()[0], 5]);
                let (xc, yc) = (Csr::of(&b.data), Csr::of(&y));
                for r in 0..xc.rows {
                    let id = xc.values[xc.indptr[r] as usize] as i64;
                    let s = yc.indptr[r] as usize;
                    assert_eq!(&yc.indices[s..s + 2], &[id % 4, 4]);
                    assert_eq!(yc.values[s + 1], id as f32);
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 50);
    }
    // A label file with a different number of rows is rejected.
    std::fs::write(&lf, "0 1:1\n").unwrap();
    let mut p = params(&f, 6, LastBatch::Keep);
    p.label_libsvm = Some(lf);
    p.label_shape = 5;
    assert!(LibSVMIter::new(p).is_err());
}

#[test]
fn errors_name_the_absolute_line() {
    let d = tmpdir("err");
    let f = d.join("a.svm");
    write_rows(&f, 300);
    let mut text = std::fs::read_to_string(&f).unwrap();
    let lines = text.lines().count();
    text.push_str("1 3:1 2:x\n");
    std::fs::write(&f, &text).unwrap();
    let mut it = LibSVMIter::new(params(&f, 7, LastBatch::Keep)).unwrap();
    let err = it.find_map(|b| b.err()).expect("an error");
    assert_eq!(err.position(), Some((lines as u64 + 1, 9)), "{err}");
    assert!(it.next().is_none());
    // Too many labels for label_shape 1.
    std::fs::write(&f, "1 0:1\n# c\n1,2 0:1\n").unwrap();
    let mut it = LibSVMIter::new(params(&f, 7, LastBatch::Keep)).unwrap();
    let err = it.next().unwrap().unwrap_err();
    assert_eq!(err.position(), Some((3, 1)), "{err}");
}

#[test]
fn errors_in_block_order_across_parse_tasks() {
    // One block, batches of 2 rows parsed by separate tasks (rows are ~200 KB so each batch is
    // its own task). A row with one label (label_shape 2) in the second batch and a malformed
    // value in the third: the parse error is reported first, as the whole-block path does; the
    // batches before the failing one arrive first.
    let d = tmpdir("order");
    let f = d.join("a.svm");
    let long = |l: &str| {
        let feats: Vec<String> = (0..20_000).map(|c| format!("{c}:0.5")).collect();
        format!("{l} {}\n", feats.join(" "))
    };
    let mut text = String::new();
    for _ in 0..2 {
        text.push_str(&long("1,2"));
    }
    text.push_str(&long("1"));
    text.push_str(&long("1,2"));
    text.push_str(&long("1,2"));
    text.push_str("1,2 0:1 2:oops\n");
    std::fs::write(&f, &text).unwrap();
    let mut p = LibSVMIterParams::new(&f, 20_000, 2);
    p.last_batch = LastBatch::Keep;
    p.label_shape = 2;
    let mut it = LibSVMIter::new(p.clone()).unwrap();
    assert_eq!(it.next().unwrap().unwrap().data.shape(), vec![2, 20_000]);
    let err = it.next().unwrap().unwrap_err();
    assert_eq!(err.position(), Some((6, 11)), "{err}");
    assert!(it.next().is_none());
    // Without the malformed row the label count is the error.
    text.truncate(text.len() - "1,2 0:1 2:oops\n".len());
    std::fs::write(&f, &text).unwrap();
    let mut it = LibSVMIter::new(p).unwrap();
    it.next().unwrap().unwrap();
    let err = it.next().unwrap().unwrap_err();
    assert_eq!(err.position(), Some((3, 1)), "{err}");
}

#[test]
fn directory_auto_base_and_prefetch() {
    let d = tmpdir("dir");
    write_rows(&d.join("part-0"), 30);
    write_rows(&d.join("part-1"), 20);
    std::fs::write(d.join(".hidden"), "junk").unwrap();
    let mut p = params(&d, 4, LastBatch::Keep);
    p.prefetch = 1;
    p.index_base = IndexBase::Auto; // index 0 occurs => zero-based
    let mut it = LibSVMIter::new(p).unwrap();
    let ids = pass(&mut it).0.concat();
    let want: Vec<i64> = (0..30).chain(0..20).collect();
    assert_eq!(ids, want);
    // Dropping an iterator mid-epoch stops its threads (must not hang).
    let mut it = LibSVMIter::new(params(&d, 1, LastBatch::Keep)).unwrap();
    it.next().unwrap().unwrap();
    drop(it);
    // One-based auto detection: indices shift down by one.
    let g = d.join("one.svm");
    std::fs::write(&g, "1 1:1 8:2\n0 3:1\n").unwrap();
    let mut p = params(&g, 2, LastBatch::Keep);
    p.index_base = IndexBase::Auto;
    let b = LibSVMIter::new(p).unwrap().next().unwrap().unwrap();
    assert_eq!(Csr::of(&b.data).indices, vec![0, 7, 2]);
}

#[test]
fn matches_whole_file_loader() {
    let d = tmpdir("cmp");
    let f = d.join("a.svm");
    write_rows(&f, 1000);
    let all = load_libsvm(&f, &LibSvmOptions::default()).unwrap();
    // Blocks smaller than a batch, several batches per block, one block for the whole file.
    for (bs, block) in [
        (64, 1000),
        (4, 1000),
        (3, 1 << 20),
        (1000, 1 << 20),
        (7, 300),
    ] {
        let mut p = params(&f, bs, LastBatch::Keep);
        p.block_bytes = block;
        let mut idx = Vec::new();
        let mut vals = Vec::new();
        let mut sizes = Vec::new();
        for b in LibSVMIter::new(p).unwrap() {
            let b = b.unwrap();
            let c = Csr::of(&b.data);
            idx.extend_from_slice(&c.indices);
            vals.extend_from_slice(&c.values);
            sizes.push(c.rows);
        }
        assert_eq!(idx, all.rows.indices, "batch {bs}, block {block}");
        assert_eq!(vals, all.rows.values, "batch {bs}, block {block}");
        let n = sizes.len();
        assert!(
            sizes[..n - 1].iter().all(|&s| s == bs),
            "batch {bs}, block {block}"
        );
        assert_eq!(sizes.iter().sum::<usize>(), 1000);
    }
}

#[test]
fn recycled_arrays_never_change_batches_still_held() {
    let d = tmpdir("hold");
    let f = d.join("a.svm");
    write_rows(&f, 3000);
    let all = load_libsvm(&f, &LibSvmOptions::default()).unwrap();
    let mut p = params(&f, 16, LastBatch::Keep);
    p.block_bytes = 4000;
    // Keep every other batch while dropping the rest, so the pool reuses arrays around them.
    let mut held = Vec::new();
    let mut it = LibSVMIter::new(p).unwrap();
    for (k, b) in it.by_ref().enumerate() {
        let b = b.unwrap();
        if k % 2 == 0 {
            held.push((k, b));
        }
    }
    for (k, b) in held {
        let c = Csr::of(&b.data);
        let (s, e) = (
            all.rows.indptr[k * 16] as usize,
            all.rows.indptr[k * 16 + c.rows] as usize,
        );
        assert_eq!(c.indices, &all.rows.indices[s..e], "batch {k}");
        assert_eq!(c.values, &all.rows.values[s..e], "batch {k}");
        let lab = b.label.unwrap().to_vec::<f32>().unwrap();
        assert_eq!(lab, all.rows.labels[k * 16..k * 16 + c.rows], "batch {k}");
    }
}

use super::queue::{BatchTx, Msg, GROUP_BYTES};
use std::sync::mpsc::sync_channel;

/// Group sizes a `BatchTx` hands over for `n` dense `rows_each x 4` f32 batches; 0 marks the
/// end-of-epoch message, whose own batches (the last group) are listed just before it.
fn group_sizes(n: usize, prefetch: usize, rows_each: usize) -> Vec<usize> {
    let (tx, rx) = sync_channel(n + 2);
    let mut btx = BatchTx::new(tx, prefetch, false);
    for _ in 0..n {
        let data = sparrow_core::NDArray::zeros(&[rows_each, 4], sparrow_core::DType::F32).unwrap();
        assert!(btx.send(crate::Batch {
            data,
            label: None,
            pad: 0
        }));
    }
    assert!(btx.finish(0));
    let mut sizes = Vec::new();
    while let Ok(m) = rx.try_recv() {
        match m {
            Msg::Batches(g) => sizes.push(g.len()),
            Msg::End { batches, .. } => {
                if !batches.is_empty() {
                    sizes.push(batches.len());
                }
                sizes.push(0)
            }
            Msg::Err(e) => panic!("unexpected error {e}"),
        }
    }
    sizes
}

#[test]
fn small_batches_travel_in_large_groups_after_the_first() {
    // 64-byte batches: the first group is cut at `prefetch`, the rest of the epoch fits in
    // one group under GROUP_BYTES; then the end marker.
    assert_eq!(group_sizes(100, 16, 4), vec![16, 84, 0]);
    // Batches of GROUP_BYTES or more travel exactly `prefetch` at a time.
    let rows = GROUP_BYTES / 16;
    assert_eq!(group_sizes(10, 4, rows), vec![4, 4, 2, 0]);
    // prefetch 1, small batches: one, then the rest together.
    assert_eq!(group_sizes(5, 1, 1), vec![1, 4, 0]);
}

#[test]
fn reset_mid_epoch_after_a_read_ahead_epoch() {
    // After a full pass the next epoch is already being produced; a reset in the middle of
    // that epoch must discard it and start a complete one, and dropping the iterator while an
    // epoch is read ahead must not hang.
    let d = tmpdir("ahead");
    let f = d.join("a.svm");
    write_rows(&f, 10);
    let mut it = LibSVMIter::new(params(&f, 4, LastBatch::Keep)).unwrap();
    let full = pass(&mut it);
    it.reset();
    let first = it.next().unwrap().unwrap();
    assert_eq!(first.data.shape(), vec![4, 8]);
    it.reset();
    assert_eq!(pass(&mut it), full);
    let mut dropped_while_ahead = LibSVMIter::new(params(&f, 4, LastBatch::Keep)).unwrap();
    assert_eq!(pass(&mut dropped_while_ahead), full);
    drop(dropped_while_ahead);
}

#[test]
fn reset_or_drop_while_the_next_epoch_waits_in_the_queue() {
    // The producer goes on with the next epoch as soon as it has sent this one's end (with the
    // last group); a reset (or a drop) while batches of that group are still queued must stop
    // it and start over cleanly.
    let d = tmpdir("queued_ahead");
    let f = d.join("a.svm");
    write_rows(&f, 10);
    let mut it = LibSVMIter::new(params(&f, 4, LastBatch::Keep)).unwrap();
    let full = pass(&mut it);
    it.reset();
    assert!(it.next().is_some());
    // Give the producer time to parse and queue the next epoch's first batches.
    std::thread::sleep(std::time::Duration::from_millis(50));
    it.reset();
    assert_eq!(pass(&mut it), full);
    it.reset();
    assert!(it.next().is_some());
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(it);
}

#[test]
fn full_epochs_reuse_one_producer_thread() {
    // Epochs read to their end continue on the producer already running (no thread start per
    // epoch, whose scheduling delay the tutorial's epochs used to wait for); only a reset in
    // the middle of an epoch starts another.
    let d = tmpdir("one_producer");
    let f = d.join("a.svm");
    write_rows(&f, 10);
    for mode in [LastBatch::Keep, LastBatch::RollOver, LastBatch::RoundBatch] {
        let mut it = LibSVMIter::new(params(&f, 4, mode)).unwrap();
        for _ in 0..4 {
            assert!(!pass(&mut it).0.is_empty());
            it.reset();
        }
        assert_eq!(it.producers_started(), 1, "{mode:?}");
        assert!(it.next().is_some());
        it.reset();
        assert_eq!(it.producers_started(), 2, "{mode:?}");
    }
}

#[test]
fn prepare_transpose_groups_every_batch_on_the_producer() {
    let d = tmpdir("prep");
    let f = d.join("a.svm");
    write_rows(&f, 100);
    for prepare in [false, true] {
        let mut p = params(&f, 7, LastBatch::Keep);
        p.prepare_transpose = prepare;
        let mut it = LibSVMIter::new(p).unwrap();
        for _epoch in 0..2 {
            it.reset();
            let mut n = 0;
            for b in it.by_ref() {
                let b = b.unwrap();
                let g = b.data.csr_column_groups();
                assert_eq!(g.is_some(), prepare);
                if let Some(g) = g {
                    let mut cols = Csr::of(&b.data).indices;
                    cols.sort_unstable();
                    cols.dedup();
                    assert_eq!(g.columns(), &cols[..]);
                }
                n += 1;
            }
            assert_eq!(n, 15);
        }
    }
}

#[test]
fn a_one_block_part_is_read_on_the_producer() {
    // The sparse tutorial's file is one small block: reading it on a reader thread started per
    // epoch made the training loop wait at epoch starts. Such a part now starts no reader
    // thread, and its epochs still match the whole-file loader.
    let d = tmpdir("one_block");
    let f = d.join("a.svm");
    write_rows(&f, 300);
    let all = load_libsvm(&f, &LibSvmOptions::default()).unwrap();
    for (block, inline) in [(1 << 20, true), (500, false)] {
        let mut p = params(&f, 8, LastBatch::Keep);
        p.block_bytes = block;
        let mut it = LibSVMIter::new(p).unwrap();
        for epoch in 0..3 {
            it.reset();
            let mut idx = Vec::new();
            for b in it.by_ref() {
                let b = b.unwrap();
                idx.extend_from_slice(&Csr::of(&b.data).indices);
            }
            assert_eq!(idx, all.rows.indices, "block {block}, epoch {epoch}");
        }
        assert_eq!(it.readers_started() == 0, inline, "block {block}");
    }
}

#[test]
fn idle_priority_runs_the_producer_at_idle_priority_with_the_same_batches() {
    // The producer (and so the block reader it spawns) drops to SCHED_IDLE only when asked;
    // the batches do not change either way, across epochs and with several blocks.
    let d = tmpdir("idle_prio");
    let f = d.join("a.svm");
    write_rows(&f, 300);
    let mut seen = Vec::new();
    for idle in [false, true] {
        let mut p = params(&f, 8, LastBatch::Keep);
        p.block_bytes = 500;
        p.idle_priority = idle;
        let mut it = LibSVMIter::new(p).unwrap();
        let mut idx = Vec::new();
        for _epoch in 0..2 {
            it.reset();
            for b in it.by_ref() {
                idx.extend_from_slice(&Csr::of(&b.unwrap().data).indices);
            }
        }
        let expected = if idle && cfg!(target_os = "linux") {
            it.producers_started()
        } else {
            0
        };
        assert!(it.producers_started() >= 1);
        assert_eq!(it.idle_producers(), expected, "idle_priority {idle}");
        seen.push(idx);
    }
    assert_eq!(seen[0], seen[1]);
    // The calling thread keeps its priority.
    assert!(!sparrow_core::sys::has_idle_priority());
}

#[test]
fn idle_producer_keeps_a_small_epochs_work_off_the_pool() {
    // An idle-priority producer parses and prepares a one-block epoch itself (the pool's
    // threads run at normal priority and would compete with the training thread); the batches
    // are the same as when the pool does that work. A multi-block epoch still uses the pool.
    let d = tmpdir("idle_small");
    let f = d.join("a.svm");
    write_rows(&f, 300);
    let run = |idle: bool, block_bytes: usize| {
        let mut p = params(&f, 8, LastBatch::Keep);
        p.block_bytes = block_bytes;
        p.idle_priority = idle;
        p.prepare_transpose = true;
        let mut it = LibSVMIter::new(p).unwrap();
        let mut seen = Vec::new();
        for _epoch in 0..2 {
            it.reset();
            for b in it.by_ref() {
                let b = b.unwrap();
                let cols = b.data.csr_column_groups().unwrap().columns().to_vec();
                let idx = Csr::of(&b.data).indices;
                seen.push((idx, cols, b.pad));
            }
        }
        (seen, it.pool_tasks())
    };
    let one_block = 1 << 20;
    let (pooled, pool_tasks) = run(false, one_block);
    assert!(
        pool_tasks > 0,
        "a normal-priority producer parses as pool tasks"
    );
    let (own, own_tasks) = run(true, one_block);
    assert_eq!(own_tasks, 0, "idle producer, one small block: no pool task");
    assert_eq!(own, pooled);
    let (many, many_tasks) = run(true, 500);
    assert!(
        many_tasks > 0,
        "idle producer, several blocks: parsed as pool tasks"
    );
    assert_eq!(many, pooled);
}

/// A batch size far past what the file holds (1e9 rows of a 100-row file) must not allocate
/// for the batch size: this aborted the process (the round batch wrapped the file around until
/// the allocator gave up). `Pad` and `RoundBatch`, which would repeat or pad rows up to the
/// batch size, refuse it naming both sizes; `Keep` emits the file's rows as one short batch and
/// `Discard` emits nothing, allocating only for the rows that arrive.
#[test]
fn batch_size_past_the_file_does_not_allocate_for_it() {
    let d = tmpdir("hugebatch");
    let f = d.join("a.libsvm");
    write_rows(&f, 100);
    for lb in [LastBatch::RoundBatch, LastBatch::Pad] {
        let e = LibSVMIter::new(params(&f, 1_000_000_000, lb))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("batch_size 1000000000") && e.contains("bytes"),
            "{e}"
        );
    }
    let mut keep = LibSVMIter::new(params(&f, 1_000_000_000, LastBatch::Keep)).unwrap();
    let b = keep.next().unwrap().unwrap();
    assert_eq!(b.data.shape(), vec![100, 8]);
    assert!(keep.next().is_none());
    let mut discard = LibSVMIter::new(params(&f, 1_000_000_000, LastBatch::Discard)).unwrap();
    assert!(discard.next().is_none());
    // A batch the file can fill by wrapping stays MXNet's round batch.
    assert!(LibSVMIter::new(params(&f, 150, LastBatch::RoundBatch)).is_ok());
}

/// A file truncated by another process in the middle of a pass: mapped blocks made this a
/// SIGBUS that killed the process; blocks are now read by default (`map_files` off), so the
/// pass sees the short file and ends with an error or early, and the process lives.
#[test]
fn a_file_truncated_during_a_pass_is_not_a_crash() {
    let d = tmpdir("trunc");
    let f = d.join("a.libsvm");
    write_rows(&f, 400_000); // ~7 MB: several 2 MB blocks, each past the small-block size
    let mut p = params(&f, 1000, LastBatch::Keep);
    p.block_bytes = 2 << 20;
    p.prefetch = 1;
    assert!(!p.map_files, "reading is the default");
    let mut it = LibSVMIter::new(p).unwrap();
    assert!(it.next().unwrap().is_ok());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(100)
        .unwrap();
    let (mut rows, mut errors) = (1000usize, 0usize);
    for b in it.by_ref() {
        match b {
            Ok(b) => rows += b.data.shape()[0],
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 0 || rows < 400_000, "rows {rows}, errors {errors}");
}

#[test]
fn a_parse_error_leaves_no_reader_thread_behind() {
    // The producer returned early on an error without joining its block reader, which then
    // outlived the iterator (the fuzzer's leak check found the detached thread). Every reader
    // must have finished once the iterator is dropped, on both parse paths.
    let d = tmpdir("reader_joined");
    let f = d.join("a.svm");
    let mut s = String::from("1 0:1\n2 1:x\n");
    for i in 0..400 {
        s.push_str(&format!("{i} {}:1\n", i % 8));
    }
    std::fs::write(&f, s).unwrap();
    for shuffle in [false, true] {
        let mut p = params(&f, 4, LastBatch::Keep);
        p.shuffle = shuffle;
        let mut it = LibSVMIter::new(p).unwrap();
        let shared = it.shared();
        shared
            .reader_exit_delay_ms
            .store(100, std::sync::atomic::Ordering::Relaxed);
        assert!(it.by_ref().any(|b| b.is_err()), "shuffle {shuffle}");
        drop(it);
        let started = shared.readers.load(std::sync::atomic::Ordering::Relaxed);
        let done = shared
            .readers_done
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            started > 0,
            "shuffle {shuffle}: the test needs a reader thread"
        );
        assert_eq!(
            done, started,
            "shuffle {shuffle}: a reader outlived its iterator"
        );
    }
}
