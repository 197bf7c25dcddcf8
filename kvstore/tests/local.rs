//! Every method and every error of the `local` store, with one worker and with a group of
//! threads.

use std::time::Duration;

use sparrow_core::{DType, NDArray, SType};
use sparrow_kvstore::{local, local_group, shard_range, SyncStore, ThreadTransport, MAX_TIMEOUT};
use sparrow_optim::{KVStore, ProductGrad, Sgd};

fn dense(v: &[f32], shape: &[usize]) -> NDArray {
    NDArray::from_vec(v.to_vec(), shape).unwrap()
}

/// One output array as the slice the store's methods take.
fn one(a: &NDArray) -> &[NDArray] {
    std::slice::from_ref(a)
}

fn rsp(ids: Vec<i64>, rows: &[f32], shape: &[usize]) -> NDArray {
    NDArray::row_sparse_from_parts(rows.to_vec(), ids, shape).unwrap()
}

/// Run `f(rank, store)` on `n` threads, each with its worker of a local group.
fn on_workers<R: Send + 'static>(
    n: usize,
    f: impl Fn(usize, &mut SyncStore<ThreadTransport>) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let stores = local_group(n, Duration::from_secs(20)).unwrap();
    let hs: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(r, mut kv)| {
            let f = f.clone();
            std::thread::spawn(move || f(r, &mut kv))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn rank_kind_and_workers() {
    let kv = local();
    assert_eq!((kv.kind(), kv.rank(), kv.num_workers()), ("local", 0, 1));
    let ranks = on_workers(3, |_, kv| (kv.rank(), kv.num_workers()));
    assert_eq!(ranks, vec![(0, 3), (1, 3), (2, 3)]);
}

#[test]
fn init_then_pull_copies_the_value() {
    let mut kv = local();
    let v = dense(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    kv.init(7, &v).unwrap();
    // The store holds a copy: later writes to `v` do not reach it.
    v.with_slice_mut::<f32, _>(|s| s[0] = 9.0).unwrap();
    let out = NDArray::zeros(&[2, 2], DType::F32).unwrap();
    kv.pull(7, std::slice::from_ref(&out)).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn push_sums_the_values_of_several_devices() {
    let mut kv = local();
    kv.init(0, &NDArray::zeros(&[3], DType::F32).unwrap())
        .unwrap();
    kv.push(
        0,
        &[
            dense(&[1.0, 2.0, 3.0], &[3]),
            dense(&[10.0, 20.0, 30.0], &[3]),
        ],
    )
    .unwrap();
    let out = NDArray::zeros(&[3], DType::F32).unwrap();
    kv.pull(0, one(&out)).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![11.0, 22.0, 33.0]);
}

#[test]
fn push_of_row_sparse_values_stays_row_sparse() {
    let mut kv = local();
    kv.init(1, &NDArray::zeros(&[5, 2], DType::F32).unwrap())
        .unwrap();
    let a = rsp(vec![0, 3], &[1.0, 1.0, 2.0, 2.0], &[5, 2]);
    let b = rsp(vec![3, 4], &[10.0, 10.0, 5.0, 5.0], &[5, 2]);
    let out = NDArray::zeros(&[5, 2], DType::F32).unwrap();
    kv.pushpull(1, &[a, b], one(&out)).unwrap();
    assert_eq!(out.stype(), SType::RowSparse);
    assert_eq!(out.row_ids().unwrap(), vec![0, 3, 4]);
    let d = out.tostype(SType::Dense).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(d, vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 12.0, 12.0, 5.0, 5.0]);
}

#[test]
fn workers_sum_dense_and_row_sparse_pushes_and_get_the_same_bits() {
    let got = on_workers(3, |r, kv| {
        kv.init(0, &dense(&[r as f32; 4], &[4])).unwrap();
        kv.init(1, &NDArray::zeros(&[6, 2], DType::F32).unwrap())
            .unwrap();
        // init: worker 0's value on every worker.
        let init = NDArray::zeros(&[4], DType::F32).unwrap();
        kv.pull(0, one(&init)).unwrap();
        let f = r as f32 + 1.0;
        let d = NDArray::zeros(&[4], DType::F32).unwrap();
        kv.pushpull(0, &[dense(&[f, 2.0 * f, 0.1, 0.2], &[4])], one(&d))
            .unwrap();
        let s = NDArray::zeros(&[6, 2], DType::F32).unwrap();
        let g = rsp(vec![r as i64, 5], &[f, f, 1.0, 1.0], &[6, 2]);
        let before = kv.traffic().bytes;
        kv.pushpull(1, &[g], one(&s)).unwrap();
        let sent = kv.traffic().bytes - before;
        (
            init.to_vec::<f32>().unwrap(),
            d.to_vec::<f32>().unwrap(),
            s,
            sent,
        )
    });
    for (init, d, s, sent) in &got {
        assert_eq!(init, &vec![0.0; 4]);
        assert_eq!(d, &got[0].1);
        assert!((d[0] - 6.0).abs() < 1e-6 && (d[1] - 12.0).abs() < 1e-6);
        assert_eq!(s.row_ids().unwrap(), vec![0, 1, 2, 5]);
        let v = s.tostype(SType::Dense).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(&v[..6], &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
        assert_eq!(&v[10..], &[3.0, 3.0]);
        // Only the rows move: a header plus 2 ids and 2 rows, far below the 48-byte table
        // times anything dense would need (header ~100 bytes, rows part 2*8 + 2*8 + 16).
        assert!(*sent < 300, "sent {sent} bytes");
    }
}

#[test]
fn mixed_dense_and_row_sparse_pushes_sum_dense() {
    let got = on_workers(2, |r, kv| {
        kv.init(0, &NDArray::zeros(&[3, 1], DType::F32).unwrap())
            .unwrap();
        let v = if r == 0 {
            dense(&[1.0, 2.0, 3.0], &[3, 1])
        } else {
            rsp(vec![1], &[10.0], &[3, 1])
        };
        let out = NDArray::zeros(&[3, 1], DType::F32).unwrap();
        kv.pushpull(0, &[v], one(&out)).unwrap();
        out.to_vec::<f32>().unwrap()
    });
    assert_eq!(got, vec![vec![1.0, 12.0, 3.0]; 2]);
}

#[test]
fn row_sparse_pull_gives_the_rows_asked_for() {
    let mut kv = local();
    kv.init(
        2,
        &dense(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &[4, 2]),
    )
    .unwrap();
    let out = NDArray::zeros(&[4, 2], DType::F32).unwrap();
    kv.row_sparse_pull(2, one(&out), &[3, 1, 3]).unwrap();
    let (ids, rows) = out.row_sparse_parts().unwrap();
    assert_eq!(ids, vec![1, 3]);
    assert_eq!(rows.to_vec::<f32>().unwrap(), vec![2.0, 3.0, 6.0, 7.0]);
    // From a row_sparse value: rows not stored come back absent (zero).
    kv.push(2, &[rsp(vec![0, 2], &[1.0, 1.0, 2.0, 2.0], &[4, 2])])
        .unwrap();
    kv.row_sparse_pull(2, one(&out), &[2, 3]).unwrap();
    assert_eq!(out.row_ids().unwrap(), vec![2]);
}

#[test]
fn init_shared_keeps_the_callers_array() {
    // Every worker's array becomes worker 0's value, and the store's updates land in it.
    let got = on_workers(2, |r, kv| {
        let w = dense(&[r as f32 + 1.0; 4], &[4, 1]);
        kv.init_shared(0, &w).unwrap();
        let first = w.to_vec::<f32>().unwrap();
        kv.set_optimizer(Box::new(Sgd::new(0.5))).unwrap();
        // Lazy: only the pushed rows (1 from worker 0, 1 and 3 from worker 1) change.
        let ids = if r == 0 { vec![1] } else { vec![1, 3] };
        let g = rsp(ids.clone(), &vec![1.0; ids.len()], &[4, 1]);
        kv.push(0, &[g]).unwrap();
        (first, w.to_vec::<f32>().unwrap())
    });
    for (first, after) in got {
        assert_eq!(first, vec![1.0; 4]);
        assert_eq!(after, vec![1.0, 0.0, 1.0, 0.5]);
    }
    // One worker: the same; with a copy (init), the caller's array is left alone.
    let mut kv = local();
    kv.set_optimizer(Box::new(Sgd::new(0.5))).unwrap();
    let (shared, copied) = (dense(&[1.0; 2], &[2]), dense(&[1.0; 2], &[2]));
    kv.init_shared(0, &shared).unwrap();
    kv.init(1, &copied).unwrap();
    for k in [0, 1] {
        kv.push(k, &[dense(&[1.0, -1.0], &[2])]).unwrap();
    }
    assert_eq!(shared.to_vec::<f32>().unwrap(), vec![0.5, 1.5]);
    assert_eq!(copied.to_vec::<f32>().unwrap(), vec![1.0; 2]);
    assert!(
        kv.init_shared(0, &shared).is_err(),
        "a second init of a key"
    );
}

#[test]
fn set_optimizer_updates_on_the_store() {
    let mut kv = local();
    assert!(!kv.has_optimizer());
    kv.init(0, &dense(&[1.0, 1.0], &[2])).unwrap();
    kv.set_optimizer(Box::new(Sgd::new(0.5))).unwrap();
    assert!(kv.has_optimizer());
    let out = NDArray::zeros(&[2], DType::F32).unwrap();
    kv.pushpull(0, &[dense(&[1.0, -2.0], &[2])], one(&out))
        .unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![0.5, 2.0]);
    // Row_sparse gradients update their rows only (lazy).
    kv.init(1, &dense(&[1.0, 1.0, 1.0], &[3, 1])).unwrap();
    kv.push(1, &[rsp(vec![1], &[2.0], &[3, 1])]).unwrap();
    let w = NDArray::zeros(&[3, 1], DType::F32).unwrap();
    kv.pull(1, one(&w)).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, 0.0, 1.0]);
}

#[test]
fn barrier_waits_for_every_worker() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let arrived = Arc::new(AtomicUsize::new(0));
    let seen = on_workers(3, move |r, kv| {
        std::thread::sleep(Duration::from_millis(20 * r as u64));
        arrived.fetch_add(1, Ordering::SeqCst);
        kv.barrier().unwrap();
        arrived.load(Ordering::SeqCst)
    });
    assert_eq!(seen, vec![3, 3, 3]);
}

fn err(r: sparrow_core::Result<()>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn wrong_use_is_an_error_naming_what_was_wrong() {
    let mut kv = local();
    let v = NDArray::zeros(&[2, 3], DType::F32).unwrap();
    let out = NDArray::zeros(&[2, 3], DType::F32).unwrap();
    assert!(err(kv.push(4, one(&v))).contains("unknown key 4"));
    assert!(err(kv.pull(4, one(&out))).contains("unknown key 4"));
    assert!(err(kv.row_sparse_pull(4, one(&out), &[0])).contains("unknown key 4"));
    kv.init(4, &v).unwrap();
    assert!(err(kv.init(4, &v)).contains("already initialized"));
    let e = err(kv.push(4, &[NDArray::zeros(&[3, 2], DType::F32).unwrap()]));
    assert!(e.contains("shape [2, 3]") && e.contains("[3, 2]"), "{e}");
    let e = err(kv.push(4, &[NDArray::zeros(&[2, 3], DType::F64).unwrap()]));
    assert!(e.contains("float32") && e.contains("float64"), "{e}");
    let csr = NDArray::zeros(&[2, 3], DType::F32)
        .unwrap()
        .tostype(SType::Csr)
        .unwrap();
    assert!(err(kv.push(4, one(&csr))).contains("csr"));
    assert!(err(kv.init(5, &csr)).contains("csr"));
    assert!(err(kv.push(4, &[])).contains("no values"));
    let e = err(kv.pull(4, &[NDArray::zeros(&[6], DType::F32).unwrap()]));
    assert!(e.contains("output [6]"), "{e}");
    let e = err(kv.pull(4, &[NDArray::zeros(&[2, 3], DType::I64).unwrap()]));
    assert!(e.contains("int64"), "{e}");
    let e = err(kv.row_sparse_pull(4, one(&out), &[2]));
    assert!(e.contains("row id 2 out of range"), "{e}");
    let i = NDArray::zeros(&[2], DType::I32).unwrap();
    kv.init(6, &i).unwrap();
    assert!(err(kv.push(6, &[i])).contains("float32 or float64"));
    // A scalar key has no rows to pull.
    kv.init(7, &NDArray::scalar(1f32)).unwrap();
    let e = err(kv.row_sparse_pull(7, one(&NDArray::scalar(0f32)), &[0]));
    assert!(e.contains("key 7 is a scalar"), "{e}");
}

#[test]
fn a_timeout_of_zero_or_past_the_longest_is_an_error() {
    for t in [
        Duration::ZERO,
        Duration::MAX,
        MAX_TIMEOUT + Duration::from_secs(1),
    ] {
        let e = local_group(2, t).err().expect("refused").to_string();
        assert!(e.contains("timeout") && e.contains("more than zero"), "{e}");
    }
    assert!(local_group(2, MAX_TIMEOUT).is_ok());
}

#[test]
fn a_push_that_fails_on_one_worker_fails_on_all_and_changes_nothing() {
    let got = on_workers(2, |r, kv| {
        kv.init(0, &dense(&[1.0, 2.0], &[2])).unwrap();
        // Worker 1 pushes the wrong shape.
        let v = if r == 0 {
            dense(&[1.0, 1.0], &[2])
        } else {
            dense(&[1.0, 1.0, 1.0], &[3])
        };
        let e = kv.push(0, &[v]).unwrap_err().to_string();
        // Then both continue with a correct push.
        let out = NDArray::zeros(&[2], DType::F32).unwrap();
        kv.pull(0, one(&out)).unwrap();
        let kept = out.to_vec::<f32>().unwrap();
        kv.pushpull(0, &[dense(&[1.0, 1.0], &[2])], one(&out))
            .unwrap();
        (e, kept, out.to_vec::<f32>().unwrap())
    });
    for (e, kept, after) in &got {
        assert!(
            e.contains("worker 1") && e.contains("[2]") && e.contains("[3]"),
            "{e}"
        );
        assert_eq!(kept, &vec![1.0, 2.0]);
        assert_eq!(after, &vec![2.0, 2.0]);
    }
}

#[test]
fn workers_pushing_different_keys_fail_instead_of_mixing_sums() {
    let got = on_workers(2, |r, kv| {
        kv.init(0, &dense(&[0.0], &[1])).unwrap();
        kv.init(1, &dense(&[0.0], &[1])).unwrap();
        kv.push(r, &[dense(&[1.0], &[1])]).unwrap_err().to_string()
    });
    for e in got {
        assert!(
            e.contains("disagree") && e.contains("key 0") && e.contains("key 1"),
            "{e}"
        );
    }
}

#[test]
fn a_worker_that_never_comes_fails_the_others_with_a_timeout() {
    let mut stores = local_group(2, Duration::from_millis(200)).unwrap();
    let _absent = stores.pop().unwrap();
    let mut kv = stores.pop().unwrap();
    let e = err(kv.init(0, &dense(&[0.0], &[1])));
    assert!(e.contains("waited") && e.contains("worker 0"), "{e}");
}

#[test]
fn a_worker_that_ends_fails_the_others_at_once() {
    let mut stores = local_group(2, Duration::from_secs(600)).unwrap();
    let gone = stores.pop().unwrap();
    let mut kv = stores.pop().unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(gone);
    });
    let started = std::time::Instant::now();
    let e = err(kv.barrier());
    t.join().unwrap();
    assert!(e.contains("worker 1 left"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn sharded_table_matches_the_replicated_one() {
    // 3 workers, a 10 x 2 table, lazy SGD with momentum, 4 steps of row_sparse pushes that
    // differ per worker and step; then every worker pulls rows of both tables.
    let got = on_workers(3, |r, kv| {
        let rows = 10;
        let full: Vec<f32> = (0..rows * 2).map(|i| i as f32 * 0.1).collect();
        let table = dense(&full, &[rows, 2]);
        kv.set_optimizer(Box::new(Sgd::with_momentum(0.1, 0.9)))
            .unwrap();
        kv.init(0, &table).unwrap();
        let (lo, hi) = shard_range(rows, r, 3);
        let shard = dense(&full[lo * 2..hi * 2], &[hi - lo, 2]);
        kv.init_sharded(1, &[rows, 2], &shard).unwrap();
        for step in 0..4i64 {
            let ids: Vec<i64> = vec![(r as i64 + step) % 10, (3 * r as i64 + 2 * step + 5) % 10];
            let mut ids = ids;
            ids.sort_unstable();
            ids.dedup();
            let vals: Vec<f32> = (0..ids.len() * 2)
                .map(|k| (k as f32 + 1.0) * (r as f32 - 1.3) * (step as f32 + 0.5))
                .collect();
            let g = rsp(ids, &vals, &[rows, 2]);
            kv.push(0, one(&g)).unwrap();
            kv.push(1, &[g]).unwrap();
        }
        let ask = [0i64, 3, 4, 9, 7];
        let (a, b) = (
            NDArray::zeros(&[rows, 2], DType::F32).unwrap(),
            NDArray::zeros(&[rows, 2], DType::F32).unwrap(),
        );
        kv.row_sparse_pull(0, one(&a), &ask).unwrap();
        kv.row_sparse_pull(1, one(&b), &ask).unwrap();
        let (fa, fb) = (
            NDArray::zeros(&[rows, 2], DType::F32).unwrap(),
            NDArray::zeros(&[rows, 2], DType::F32).unwrap(),
        );
        kv.pull(0, one(&fa)).unwrap();
        kv.pull(1, one(&fb)).unwrap();
        let (shard_lo, shard_hi, _) = kv.shard(1).unwrap();
        (
            a.row_sparse_parts().unwrap().1.to_vec::<f32>().unwrap(),
            b.row_sparse_parts().unwrap().1.to_vec::<f32>().unwrap(),
            b.row_ids().unwrap(),
            fa.to_vec::<f32>().unwrap(),
            fb.to_vec::<f32>().unwrap(),
            full,
            (shard_lo, shard_hi),
        )
    });
    for (a, b, ids, fa, fb, full, _) in &got {
        assert_eq!(ids, &vec![0, 3, 4, 7, 9]);
        assert_eq!(
            a, b,
            "rows pulled from the sharded and the replicated table"
        );
        assert_eq!(fa, fb, "whole tables");
        assert_ne!(fa, full, "the pushes changed the table");
    }
    let ranges: Vec<_> = got.iter().map(|g| g.6).collect();
    assert_eq!(ranges, vec![(0, 3), (3, 6), (6, 10)]);
}

#[test]
fn sharded_table_errors() {
    let got = on_workers(2, |r, kv| {
        let (lo, hi) = shard_range(4, r, 2);
        let shard = NDArray::zeros(&[hi - lo, 3], DType::F32).unwrap();
        let mut errs = vec![];
        // A shard of the wrong rows fails on both workers.
        let bad = NDArray::zeros(&[3, 3], DType::F32).unwrap();
        errs.push(err(kv.init_sharded(
            0,
            &[4, 3],
            if r == 0 { &bad } else { &shard },
        )));
        kv.init_sharded(0, &[4, 3], &shard).unwrap();
        // Pushes before an optimizer, dense pushes.
        errs.push(err(kv.push(0, &[rsp(vec![1], &[1.0; 3], &[4, 3])])));
        kv.set_optimizer(Box::new(Sgd::new(0.1))).unwrap();
        errs.push(err(
            kv.push(0, &[NDArray::zeros(&[4, 3], DType::F32).unwrap()])
        ));
        errs.push(err(kv.init_sharded(0, &[4, 3], &shard)));
        // A wrong pull on one worker fails the collective on both (not a wait for it).
        let out = NDArray::zeros(&[if r == 1 { 5 } else { 4 }, 3], DType::F32).unwrap();
        errs.push(err(kv.pull(0, one(&out))));
        let out = NDArray::zeros_stype(&[4, 3], DType::F32, SType::RowSparse).unwrap();
        let ids: &[i64] = if r == 0 { &[1, 9] } else { &[1] };
        errs.push(err(kv.row_sparse_pull(0, one(&out), ids)));
        // Then both work.
        let out = NDArray::zeros(&[4, 3], DType::F32).unwrap();
        kv.pull(0, one(&out)).unwrap();
        errs
    });
    for errs in got {
        assert!(
            errs[0].contains("worker 0") && errs[0].contains("rows 0..2"),
            "{}",
            errs[0]
        );
        assert!(errs[1].contains("set_optimizer"), "{}", errs[1]);
        assert!(errs[2].contains("row_sparse"), "{}", errs[2]);
        assert!(errs[3].contains("already initialized"), "{}", errs[3]);
        for e in &errs[4..6] {
            assert!(e.contains("failed on 1 of 2 workers"), "{e}");
        }
        assert!(errs[5].contains("row id 9"), "{}", errs[5]);
    }
}

#[test]
fn a_key_unknown_on_one_worker_fails_a_sharded_pull_on_all_at_once() {
    // Worker 1 pulls a key it does not have while worker 0 pulls a sharded table (a
    // collective): both fail at once naming worker 1's key, not after the group's 20 s.
    let started = std::time::Instant::now();
    let got = on_workers(2, |r, kv| {
        let (lo, hi) = shard_range(4, r, 2);
        kv.init_sharded(
            0,
            &[4, 3],
            &NDArray::zeros(&[hi - lo, 3], DType::F32).unwrap(),
        )
        .unwrap();
        let key = if r == 0 { 0 } else { 7 };
        let rsp_out = NDArray::zeros_stype(&[4, 3], DType::F32, SType::RowSparse).unwrap();
        let dense_out = NDArray::zeros(&[4, 3], DType::F32).unwrap();
        let errs = [
            err(kv.row_sparse_pull(key, one(&rsp_out), &[1, 2])),
            err(kv.pull(key, one(&dense_out))),
        ];
        // Then both pull the table.
        kv.pull(0, one(&dense_out)).unwrap();
        errs
    });
    assert!(started.elapsed() < Duration::from_secs(10));
    for errs in got {
        for e in errs {
            assert!(
                e.contains("failed on 1 of 2 workers")
                    && e.contains("worker 1")
                    && e.contains("unknown key 7"),
                "{e}"
            );
        }
    }
}

#[test]
fn shard_ranges_cover_the_rows_once() {
    for (rows, n) in [(10, 3), (7, 7), (3, 5), (1_000_001, 16)] {
        let mut next = 0;
        for r in 0..n {
            let (lo, hi) = shard_range(rows, r, n);
            assert_eq!(lo, next);
            assert!(hi - lo <= rows / n + 1);
            next = hi;
        }
        assert_eq!(next, rows);
    }
}

#[test]
fn partition_libsvm_follows_the_rank() {
    let stores = local_group(2, Duration::from_secs(5)).unwrap();
    for kv in &stores {
        let mut p = sparrow_data::libsvm::LibSVMIterParams::new("x.libsvm", 10, 2);
        sparrow_kvstore::partition_libsvm(&mut p, kv);
        assert_eq!((p.num_parts, p.part_index), (2, kv.rank()));
    }
}

#[test]
fn pushpull_many_sums_like_one_key_at_a_time() {
    let got = on_workers(2, |r, kv| {
        let f = r as f32 + 1.0;
        kv.init(0, &NDArray::zeros(&[3], DType::F32).unwrap())
            .unwrap();
        kv.init(1, &NDArray::zeros(&[4, 2], DType::F32).unwrap())
            .unwrap();
        kv.init(2, &NDArray::zeros(&[2], DType::F64).unwrap())
            .unwrap();
        kv.init(3, &NDArray::zeros(&[2, 1], DType::F32).unwrap())
            .unwrap();
        let vals = vec![
            dense(&[f, 2.0 * f, 3.0], &[3]),
            rsp(vec![r as i64, 3], &[f, f, 1.0, 1.0], &[4, 2]),
            NDArray::from_vec(vec![f as f64, 0.5], &[2]).unwrap(),
            // Worker 0 dense, worker 1 row_sparse: summed dense.
            if r == 0 {
                dense(&[1.0, 2.0], &[2, 1])
            } else {
                rsp(vec![1], &[5.0], &[2, 1])
            },
        ];
        let outs: Vec<NDArray> = vals.iter().map(|v| v.zeros_like()).collect();
        kv.pushpull_many(&[0, 1, 2, 3], &vals, &outs).unwrap();
        outs.iter()
            .map(|o| o.tostype(SType::Dense).unwrap().to_f64_vec())
            .collect::<Vec<_>>()
    });
    let want = vec![
        vec![3.0, 6.0, 6.0],
        vec![1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 2.0, 2.0],
        vec![3.0, 1.0],
        vec![1.0, 7.0],
    ];
    assert_eq!(got, vec![want.clone(), want]);
}

/// An update that fails on one worker only (its optimizer state does not fit) fails that
/// worker's call, after the call's every exchange: the other worker is not left waiting in
/// the sharded key's pull, and the next call finds the workers in step.
#[test]
fn an_update_failing_on_one_worker_skips_none_of_the_calls_exchanges() {
    let got = on_workers(2, |r, kv| {
        kv.set_optimizer(Box::new(Sgd::with_momentum(0.1, 0.9)))
            .unwrap();
        kv.init(0, &NDArray::zeros(&[2], DType::F32).unwrap())
            .unwrap();
        let (lo, hi) = shard_range(4, r, 2);
        kv.init_sharded(
            1,
            &[4, 2],
            &NDArray::zeros(&[hi - lo, 2], DType::F32).unwrap(),
        )
        .unwrap();
        if r == 1 {
            // No momentum array: this worker's update of key 0 fails.
            kv.set_optimizer_state(0, sparrow_optim::State::default())
                .unwrap();
        }
        let vals = vec![
            dense(&[1.0, 2.0], &[2]),
            rsp(vec![r as i64, 3], &[1.0, 1.0, 1.0, 1.0], &[4, 2]),
        ];
        let outs = vec![
            NDArray::zeros(&[2], DType::F32).unwrap(),
            NDArray::zeros(&[4, 2], DType::F32).unwrap(),
        ];
        let t = std::time::Instant::now();
        let first = kv.pushpull_many(&[0, 1], &vals, &outs);
        let took = t.elapsed();
        // The workers are still in step: a pushpull of the sharded key alone works on both.
        kv.pushpull_many(&[1], &vals[1..], &outs[1..]).unwrap();
        (first.map_err(|e| e.to_string()), took)
    });
    assert!(got[0].0.is_ok(), "{:?}", got[0].0);
    let e = got[1].0.as_ref().unwrap_err();
    assert!(!e.contains("waited"), "{e}");
    for (_, took) in &got {
        assert!(took.as_secs_f64() < 10.0, "{took:?}");
    }
}

#[test]
fn pushpull_many_errors_reach_every_worker() {
    let got = on_workers(2, |r, kv| {
        kv.init(0, &NDArray::zeros(&[2], DType::F32).unwrap())
            .unwrap();
        kv.init(1, &NDArray::zeros(&[2], DType::F32).unwrap())
            .unwrap();
        let v = NDArray::zeros(&[2], DType::F32).unwrap();
        let mut errs = vec![];
        // Worker 1 lists key 0 twice.
        let keys: &[usize] = if r == 1 { &[0, 0] } else { &[0, 1] };
        errs.push(err(kv.pushpull_many(
            keys,
            &[v.clone(), v.clone()],
            &[v.clone(), v.clone()],
        )));
        // Worker 0 gives one output for two keys.
        let outs = if r == 0 {
            vec![v.clone()]
        } else {
            vec![v.clone(), v.clone()]
        };
        errs.push(err(kv.pushpull_many(
            &[0, 1],
            &[v.clone(), v.clone()],
            &outs,
        )));
        // Worker 1 pushes one key only.
        let keys: &[usize] = if r == 1 { &[0] } else { &[0, 1] };
        let n = keys.len();
        errs.push(err(kv.pushpull_many(
            keys,
            &vec![v.clone(); n],
            &vec![v.clone(); n],
        )));
        // Worker 0 pushes the wrong shape to key 1.
        let bad = NDArray::zeros(&[3], DType::F32).unwrap();
        let vals = if r == 0 {
            vec![v.clone(), bad]
        } else {
            vec![v.clone(), v.clone()]
        };
        errs.push(err(kv.pushpull_many(
            &[0, 1],
            &vals,
            &[v.clone(), v.clone()],
        )));
        // And the store still works.
        let one = NDArray::ones(&[2], DType::F32).unwrap();
        let o = v.zeros_like();
        kv.pushpull_many(&[0, 1], &[one.clone(), one], &[o.clone(), v.clone()])
            .unwrap();
        (errs, o.to_vec::<f32>().unwrap())
    });
    for (errs, sum) in got {
        assert!(
            errs[0].contains("worker 1") && errs[0].contains("listed twice"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains("worker 0") && errs[1].contains("1 outputs"),
            "{}",
            errs[1]
        );
        assert!(
            errs[2].contains("2 keys") && errs[2].contains("worker 1 1"),
            "{}",
            errs[2]
        );
        assert!(
            errs[3].contains("worker 0") && errs[3].contains("[3]"),
            "{}",
            errs[3]
        );
        assert_eq!(sum, vec![2.0, 2.0]);
    }
}

#[test]
fn pushpull_many_with_one_worker_checks_its_lists_and_keys() {
    let mut kv = local();
    let v = NDArray::ones(&[2], DType::F32).unwrap();
    kv.init(0, &v).unwrap();
    let o = v.zeros_like();
    let e = err(kv.pushpull_many(&[0, 0], &[v.clone(), v.clone()], &[o.clone(), o.clone()]));
    assert!(e.contains("listed twice"), "{e}");
    let e = err(kv.pushpull_many(&[0, 9], &[v.clone(), v.clone()], &[o.clone(), o.clone()]));
    assert!(e.contains("unknown key 9"), "{e}");
    let e = err(kv.pushpull_many(&[0], one(&v), &[]));
    assert!(e.contains("0 outputs"), "{e}");
    kv.pushpull_many(&[0], one(&v), one(&o)).unwrap();
    assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
}

/// Worker `r`'s batch of the sharded-product test: `3 + r` rows over 50 columns (worker 2's
/// second row empty), and the gradient its product gets.
fn product_batch(r: usize) -> (NDArray, NDArray) {
    use sparrow_core::sparse::{rand_sparse_seeded, SparseDist};
    let x = rand_sparse_seeded(
        &[3 + r, 50],
        0.2,
        SType::Csr,
        SparseDist::Uniform,
        11 + r as u64,
    )
    .unwrap();
    let x = if r == 2 {
        let mut d = x.tostype(SType::Dense).unwrap().to_vec::<f32>().unwrap();
        d[50..100].iter_mut().for_each(|v| *v = 0.0);
        dense(&d, &[5, 50]).tostype(SType::Csr).unwrap()
    } else {
        x
    };
    let dy = sparrow_core::random::Rng::new(21 + r as u64)
        .uniform(-1.0, 1.0, &[3 + r, 4], DType::F32)
        .unwrap();
    (x, dy)
}

#[test]
fn sharded_dot_is_the_product_and_its_backward_the_owners_gradient() {
    // 3 workers, a 50 x 4 table split by rows, a random csr batch per worker: each worker's
    // product equals its batch times the whole table, and the owners' gradients together are
    // the sum over the workers of batch^T . dy, each owner holding only its rows.
    let table: Vec<f32> = (0..200)
        .map(|i| ((i * 37) % 101) as f32 * 0.01 - 0.5)
        .collect();
    let got = on_workers(3, move |r, kv| {
        let (lo, hi) = shard_range(50, r, 3);
        kv.init_sharded(5, &[50, 4], &dense(&table[lo * 4..hi * 4], &[hi - lo, 4]))
            .unwrap();
        let (x, dy) = product_batch(r);
        let (y, parts) = kv.sharded_dot(5, &x).unwrap();
        let want = x
            .tostype(SType::Dense)
            .unwrap()
            .dot(&dense(&table, &[50, 4]))
            .unwrap();
        let g = kv.sharded_dot_backward(5, &parts, &dy).unwrap();
        assert_eq!(g.stype(), SType::RowSparse);
        assert_eq!(g.shape(), vec![50, 4]);
        let ids = g.row_ids().unwrap();
        assert!(
            ids.iter().all(|&i| i as usize >= lo && (i as usize) < hi),
            "{ids:?}"
        );
        (
            y.to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            g.tostype(SType::Dense).unwrap().to_vec::<f32>().unwrap(),
        )
    });
    let mut grad = vec![0f32; 200];
    for (r, (y, want, g)) in got.iter().enumerate() {
        assert_eq!(y.len(), (3 + r) * 4);
        for (a, b) in y.iter().zip(want) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "worker {r}: {y:?} vs {want:?}"
            );
        }
        grad.iter_mut().zip(g).for_each(|(s, v)| *s += v);
    }
    // The reference: the sum over the workers of x^T . dy, dense.
    let mut want = vec![0f32; 200];
    for r in 0..3 {
        let (x, dy) = product_batch(r);
        let xd = x.tostype(SType::Dense).unwrap();
        let g = xd.dot_t(&dy, true, false).unwrap().to_vec::<f32>().unwrap();
        want.iter_mut().zip(g).for_each(|(s, v)| *s += v);
    }
    for (a, b) in grad.iter().zip(&want) {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "{grad:?} vs {want:?}"
        );
    }
    assert!(want.iter().any(|&v| v != 0.0));
}

#[test]
fn a_wrong_batch_or_gradient_on_one_worker_fails_the_sharded_dot_on_all() {
    let got = on_workers(2, |r, kv| {
        let (lo, hi) = shard_range(6, r, 2);
        kv.init_sharded(
            0,
            &[6, 2],
            &NDArray::zeros(&[hi - lo, 2], DType::F32).unwrap(),
        )
        .unwrap();
        let good = dense(&[1.0, 0.0, 0.0, 0.0, 0.0, 2.0], &[1, 6])
            .tostype(SType::Csr)
            .unwrap();
        let bad = dense(&[1.0, 0.0, 2.0], &[1, 3])
            .tostype(SType::Csr)
            .unwrap();
        let mut errs = vec![err(kv
            .sharded_dot(0, if r == 1 { &bad } else { &good })
            .map(|_| ()))];
        // Then both work, and a gradient of the wrong shape on worker 0 fails both backwards.
        let (_, parts) = kv.sharded_dot(0, &good).unwrap();
        let dy = NDArray::zeros(&[if r == 0 { 2 } else { 1 }, 2], DType::F32).unwrap();
        errs.push(err(kv.sharded_dot_backward(0, &parts, &dy).map(|_| ())));
        let dy = NDArray::zeros(&[1, 2], DType::F32).unwrap();
        kv.sharded_dot_backward(0, &parts, &dy).unwrap();
        // A replicated key is not a table.
        kv.init(1, &NDArray::zeros(&[6, 2], DType::F32).unwrap())
            .unwrap();
        errs.push(err(kv.sharded_dot(1, &good).map(|_| ())));
        errs
    });
    for errs in got {
        assert!(
            errs[0].contains("failed on 1 of 2 workers") && errs[0].contains("6 columns"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains("failed on 1 of 2 workers") && errs[1].contains("[1, 2]"),
            "{}",
            errs[1]
        );
        assert!(errs[2].contains("not a sharded table"), "{}", errs[2]);
    }
}

#[test]
fn update_owned_applies_a_workers_own_rows_without_an_exchange() {
    // Worker r updates its own rows alone (no collective: worker 1 makes a second call that
    // worker 0 does not); rows outside its shard, a wrong shape and a replicated key are errors.
    let got = on_workers(2, |r, kv| {
        let (lo, hi) = shard_range(6, r, 2);
        kv.set_optimizer(Box::new(Sgd::new(0.5))).unwrap();
        kv.init_sharded(0, &[6, 2], &dense(&vec![1.0; (hi - lo) * 2], &[hi - lo, 2]))
            .unwrap();
        let mine = rsp(vec![lo as i64 + 1], &[2.0, 4.0], &[6, 2]);
        kv.update_owned(0, &mine).unwrap();
        if r == 1 {
            kv.update_owned(0, &mine).unwrap();
        }
        let theirs = rsp(vec![((hi % 6) + 1) as i64], &[1.0, 1.0], &[6, 2]);
        let errs = vec![
            err(kv.update_owned(0, &theirs)),
            err(kv.update_owned(0, &rsp(vec![1], &[1.0, 1.0, 1.0], &[6, 3]))),
            err(kv.update_owned(9, &mine)),
        ];
        let (_, _, shard) = kv.shard(0).unwrap();
        (shard.to_vec::<f32>().unwrap(), errs)
    });
    // Row lo+1 of each shard: 1 - 0.5 * g once (worker 0), twice (worker 1).
    assert_eq!(got[0].0, vec![1.0, 1.0, 0.0, -1.0, 1.0, 1.0]);
    assert_eq!(got[1].0, vec![1.0, 1.0, -1.0, -3.0, 1.0, 1.0]);
    for (_, errs) in &got {
        assert!(
            errs[0].contains("outside this worker's rows"),
            "{}",
            errs[0]
        );
        assert!(errs[1].contains("row_sparse float32 [6, 2]"), "{}", errs[1]);
        assert!(errs[2].contains("not a sharded table"), "{}", errs[2]);
    }
}

#[test]
fn pushpull_with_products_is_the_pushpull_and_each_backward_fused() {
    // 3 workers: two products of a sharded table (the second backward's gradient doubled),
    // a small dense key and a replicated row_sparse key. One fused call gives the bits of
    // `pushpull_many` and of each `sharded_dot_backward`, in one collective call for every
    // header and key, then one per product that gathers its gradients straight into place.
    let table: Vec<f32> = (0..200)
        .map(|i| ((i * 13) % 29) as f32 * 0.05 - 0.7)
        .collect();
    let got = on_workers(3, move |r, kv| {
        let (lo, hi) = shard_range(50, r, 3);
        kv.init_sharded(5, &[50, 4], &dense(&table[lo * 4..hi * 4], &[hi - lo, 4]))
            .unwrap();
        kv.init(0, &NDArray::zeros(&[3], DType::F32).unwrap())
            .unwrap();
        kv.init(1, &NDArray::zeros(&[8, 2], DType::F32).unwrap())
            .unwrap();
        let (x, dy) = product_batch(r);
        let (_, p1) = kv.sharded_dot(5, &x).unwrap();
        let (_, p2) = kv.sharded_dot(5, &x).unwrap();
        let dy2 = dy.mul_scalar(2.0).unwrap();
        let values = [
            dense(&[r as f32, 1.0, -2.0], &[3]),
            rsp(vec![r as i64, 7], &[1.0, 2.0, 3.0, r as f32], &[8, 2]),
        ];
        let outs = [
            NDArray::zeros(&[3], DType::F32).unwrap(),
            NDArray::zeros(&[8, 2], DType::F32).unwrap(),
        ];
        let products = [
            ProductGrad {
                key: 5,
                parts: &p1,
                dy: &dy,
            },
            ProductGrad {
                key: 5,
                parts: &p2,
                dy: &dy2,
            },
        ];
        let calls = kv.traffic().calls;
        let fused = kv
            .pushpull_with_products(&[0, 1], &values, &outs, &products)
            .unwrap();
        let fused_calls = kv.traffic().calls - calls;
        let bits = |a: &NDArray| a.tostype(SType::Dense).unwrap().to_vec::<f32>().unwrap();
        let got: Vec<Vec<f32>> = fused.iter().chain(&outs).map(bits).collect();
        // The same, one call after another.
        let mut want = vec![
            bits(&kv.sharded_dot_backward(5, &p1, &dy).unwrap()),
            bits(&kv.sharded_dot_backward(5, &p2, &dy2).unwrap()),
        ];
        let outs2 = [
            NDArray::zeros(&[3], DType::F32).unwrap(),
            NDArray::zeros(&[8, 2], DType::F32).unwrap(),
        ];
        kv.pushpull_many(&[0, 1], &values, &outs2).unwrap();
        want.extend(outs2.iter().map(bits));
        (got, want, fused_calls)
    });
    for (r, (got, want, calls)) in got.iter().enumerate() {
        assert_eq!(got, want, "worker {r}");
        assert_eq!(*calls, 3, "worker {r}: {calls} collective calls");
        // The second product's gradient is twice the first's, and not zero.
        assert!(got[0].iter().any(|&v| v != 0.0), "worker {r}");
        for (a, b) in got[0].iter().zip(&got[1]) {
            assert!((2.0 * a - b).abs() <= 1e-5 * (1.0 + b.abs()), "worker {r}");
        }
    }
}

#[test]
fn a_product_missing_or_wrong_on_one_worker_fails_the_fused_pushpull_on_all() {
    let got = on_workers(2, |r, kv| {
        let (lo, hi) = shard_range(6, r, 2);
        kv.init_sharded(
            0,
            &[6, 2],
            &NDArray::zeros(&[hi - lo, 2], DType::F32).unwrap(),
        )
        .unwrap();
        kv.init(1, &NDArray::zeros(&[2], DType::F32).unwrap())
            .unwrap();
        let x = dense(&[1.0, 0.0, 0.0, 0.0, 0.0, 2.0], &[1, 6])
            .tostype(SType::Csr)
            .unwrap();
        let (_, parts) = kv.sharded_dot(0, &x).unwrap();
        let v = [dense(&[1.0, 2.0], &[2])];
        let o = [NDArray::zeros(&[2], DType::F32).unwrap()];
        let dy = NDArray::zeros(&[1, 2], DType::F32).unwrap();
        let good = [ProductGrad {
            key: 0,
            parts: &parts,
            dy: &dy,
        }];
        // Worker 1 has no product to send (its backward never ran).
        let mut errs = vec![err(kv
            .pushpull_with_products(&[1], &v, &o, if r == 0 { &good } else { &[] })
            .map(|_| ()))];
        // Worker 0's gradient has the wrong shape.
        let wrong = NDArray::zeros(&[2, 2], DType::F32).unwrap();
        let bad = [ProductGrad {
            key: 0,
            parts: &parts,
            dy: &wrong,
        }];
        errs.push(err(kv
            .pushpull_with_products(&[1], &v, &o, if r == 0 { &bad } else { &good })
            .map(|_| ())));
        // Worker 1's product says its batch had two rows (and its gradient has two): each
        // check passes on its own worker, but the workers disagree on where the rows go, and
        // both fail before the gradients are gathered (neither waits for the other), in the
        // fused call and in a backward of its own.
        let shifted = sparrow_optim::ShardedDot {
            own: parts.own.clone(),
            starts: vec![0, 1, 3],
        };
        let two = NDArray::zeros(&[2, 2], DType::F32).unwrap();
        let (p, d) = if r == 1 {
            (&shifted, &two)
        } else {
            (&parts, &dy)
        };
        let disagree = [ProductGrad {
            key: 0,
            parts: p,
            dy: d,
        }];
        errs.push(err(kv
            .pushpull_with_products(&[1], &v, &o, &disagree)
            .map(|_| ())));
        errs.push(err(kv.sharded_dot_backward(0, p, d).map(|_| ())));
        // Then both are right, and the call works.
        kv.pushpull_with_products(&[1], &v, &o, &good).unwrap();
        errs
    });
    for errs in got {
        assert!(errs[0].contains("worker 1"), "{}", errs[0]);
        assert!(
            errs[1].contains("failed on 1 of 2 workers") && errs[1].contains("[2, 2]"),
            "{}",
            errs[1]
        );
        for e in &errs[2..] {
            assert!(e.contains("workers disagree on the product's rows"), "{e}");
        }
    }
}

#[test]
fn init_sharded_shared_keeps_the_callers_rows() {
    // Each worker's shard array is the store's: an update of its rows (pushed by both workers)
    // lands in it; with `init_sharded` (a copy) the caller's rows are left alone.
    let got = on_workers(2, |r, kv| {
        kv.set_optimizer(Box::new(Sgd::new(0.5))).unwrap();
        let (lo, hi) = shard_range(4, r, 2);
        let shared = dense(&vec![1.0; hi - lo], &[hi - lo, 1]);
        let copied = dense(&vec![1.0; hi - lo], &[hi - lo, 1]);
        kv.init_sharded_shared(0, &[4, 1], &shared).unwrap();
        kv.init_sharded(1, &[4, 1], &copied).unwrap();
        for k in [0, 1] {
            kv.push(k, &[rsp(vec![1, 2], &[1.0, 2.0], &[4, 1])])
                .unwrap();
        }
        let (_, _, store_rows) = kv.table_shard(0).unwrap();
        (
            shared.to_vec::<f32>().unwrap(),
            store_rows.to_vec::<f32>().unwrap(),
            copied.to_vec::<f32>().unwrap(),
        )
    });
    // Rows 0..2 on worker 0, 2..4 on worker 1; row 1 got 2 x 1.0, row 2 got 2 x 2.0.
    assert_eq!(got[0].0, vec![1.0, 0.0]);
    assert_eq!(got[1].0, vec![-1.0, 1.0]);
    for (shared, store_rows, copied) in &got {
        assert_eq!(shared, store_rows);
        assert_eq!(copied, &vec![1.0; 2]);
    }
}

#[test]
fn init_gives_every_worker_worker_0s_value_for_every_kind() {
    // f32 and f64 dense values go straight into the store's array, row_sparse ones through
    // a message: each worker pulls worker 0's value; `init` leaves the caller's array alone,
    // `init_shared` sets it to worker 0's.
    let got = on_workers(3, |r, kv| {
        let v = r as f32 + 1.0;
        let copied = dense(&[v, -v], &[2]);
        let shared = NDArray::from_vec(vec![v as f64; 3], &[3]).unwrap();
        let sparse = rsp(vec![r as i64], &[v, v], &[4, 2]);
        kv.init(0, &copied).unwrap();
        kv.init_shared(1, &shared).unwrap();
        kv.init(2, &sparse).unwrap();
        let outs = [
            NDArray::zeros(&[2], DType::F32).unwrap(),
            NDArray::zeros(&[3], DType::F64).unwrap(),
            NDArray::zeros(&[4, 2], DType::F32).unwrap(),
        ];
        for (k, o) in outs.iter().enumerate() {
            kv.pull(k, one(o)).unwrap();
        }
        (
            outs[0].to_vec::<f32>().unwrap(),
            outs[1].to_vec::<f64>().unwrap(),
            outs[2]
                .tostype(SType::Dense)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            copied.to_vec::<f32>().unwrap(),
            shared.to_vec::<f64>().unwrap(),
        )
    });
    for (r, (a, b, c, copied, shared)) in got.into_iter().enumerate() {
        let v = r as f32 + 1.0;
        assert_eq!(a, vec![1.0, -1.0], "worker {r}");
        assert_eq!(b, vec![1.0; 3], "worker {r}");
        assert_eq!(
            c,
            vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "worker {r}"
        );
        assert_eq!(copied, vec![v, -v], "worker {r}");
        assert_eq!(shared, vec![1.0; 3], "worker {r}");
    }
}

#[test]
fn exchange_time_counts_the_wait_for_a_late_worker() {
    // Worker 1 arrives 300 ms late at a pushpull: worker 0 spends about that long inside the
    // exchange, and its store says so; outside collectives the count does not move.
    let got = on_workers(2, |r, kv| {
        kv.init(0, &NDArray::zeros(&[4], DType::F32).unwrap())
            .unwrap();
        let before = kv
            .exchange_time()
            .expect("the store measures its exchanges");
        std::thread::sleep(Duration::from_millis(if r == 1 { 300 } else { 0 }));
        let idle = kv.exchange_time().unwrap() - before;
        let d = NDArray::zeros(&[4], DType::F32).unwrap();
        kv.pushpull(0, &[dense(&[1.0, 2.0, 3.0, 4.0], &[4])], one(&d))
            .unwrap();
        (idle, kv.exchange_time().unwrap() - before)
    });
    assert_eq!(got[0].0, Duration::ZERO);
    assert!(got[0].1 >= Duration::from_millis(100), "{:?}", got[0].1);
}

#[test]
fn a_known_gather_writes_every_part_in_place_and_checks_its_arguments() {
    use sparrow_kvstore::Transport;
    let group = ThreadTransport::group(3, Duration::from_secs(20)).unwrap();
    let hs: Vec<_> = group
        .into_iter()
        .enumerate()
        .map(|(r, mut t)| {
            std::thread::spawn(move || {
                // Worker r sends r + 1 bytes of value r; the parts leave a gap at the start
                // and between the first two, which the gather leaves alone.
                let parts = [1..2, 3..5, 5..8];
                let mut recv = vec![9u8; 8];
                t.all_gather_known_into(&vec![r as u8; r + 1], &mut recv, &parts)
                    .unwrap();
                let errs: Vec<String> = [
                    t.all_gather_known_into(&[0], &mut [0u8; 8], &[0..1, 1..2]),
                    t.all_gather_known_into(&[0], &mut [0u8; 8], &[0..1, 2..3, 1..2]),
                    t.all_gather_known_into(&[0], &mut [0u8; 2], &[0..1, 1..2, 2..3]),
                    t.all_gather_known_into(&[0, 0], &mut [0u8; 8], &[0..1, 1..2, 2..3]),
                ]
                .into_iter()
                .map(|e| e.unwrap_err().to_string())
                .collect();
                // A worker that sends another length than the parts say fails the call on
                // every worker that reads it, not with a short read.
                let long = vec![0u8; if r == 2 { 2 } else { 1 }];
                let parts = if r == 2 {
                    [0..1, 1..2, 2..4]
                } else {
                    [0..1, 1..2, 2..3]
                };
                let wrong = t.all_gather_known_into(&long, &mut [0u8; 4], &parts);
                (recv, errs, wrong.map_err(|e| e.to_string()))
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        let (recv, errs, wrong) = h.join().unwrap();
        assert_eq!(recv, [9, 0, 9, 1, 1, 2, 2, 2], "worker {r}");
        assert!(errs[0].contains("2 parts for 3 workers"), "{}", errs[0]);
        assert!(errs[1].contains("not ascending"), "{}", errs[1]);
        assert!(errs[2].contains("of a 2-byte buffer"), "{}", errs[2]);
        assert!(
            errs[3].contains("sends 2 bytes into a part of 1"),
            "{}",
            errs[3]
        );
        if r == 2 {
            assert!(wrong.is_ok(), "{wrong:?}");
        } else {
            let e = wrong.unwrap_err();
            assert!(
                e.contains("worker 2 sent 2 bytes where 1 were expected"),
                "{e}"
            );
        }
    }
}
