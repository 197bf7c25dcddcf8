//! Nothing lost: a process killed while it trains a file-backed table leaves the table at its
//! last flush (issue #22). The child is this test binary run again with an environment
//! variable; it trains, flushes (the checkpoint), records a hash of both files, goes on
//! training and is killed with SIGKILL in the middle of that.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sparrow_core::fsio::checksum64;
use sparrow_core::update::{sgd_mom_update, MomentumParams, UpdateArgs};
use sparrow_core::{DType, MapMode, NDArray};

const CHILD: &str = "SPARROW_CRASH_CHILD_DIR";
const ROWS: usize = 4096;
const COLS: usize = 32;

/// The data part of the two files (after their `.npy` headers), hashed.
fn hash_files(dir: &Path) -> u64 {
    ["w.npy", "mom.npy"]
        .iter()
        .map(|f| {
            let b = std::fs::read(dir.join(f)).unwrap();
            checksum64(&b)
        })
        .fold(0, |h, x| h.rotate_left(7) ^ x)
}

/// A row_sparse gradient over 64 pseudo-random rows of step `s`.
fn grad(s: u64) -> NDArray {
    let mut rows: Vec<i64> = (0..64)
        .map(|k| ((s * 7919 + k * 104_729) % ROWS as u64) as i64)
        .collect();
    rows.sort_unstable();
    rows.dedup();
    let vals: Vec<f32> = (0..rows.len() * COLS)
        .map(|i| ((i as u64 + s) % 13) as f32 - 6.0)
        .collect();
    NDArray::row_sparse_from_parts(vals, rows, &[ROWS, COLS]).unwrap()
}

/// The child: train, checkpoint, record, train until killed.
fn child(dir: &Path) -> ! {
    let w = NDArray::create_npy(dir.join("w.npy"), &[ROWS, COLS], DType::F32).unwrap();
    let mom = NDArray::create_npy(dir.join("mom.npy"), &[ROWS, COLS], DType::F32).unwrap();
    let args = UpdateArgs::new(0.01, MomentumParams { momentum: 0.9 });
    let init = NDArray::from_vec(vec![0.5f32; ROWS * COLS], &[ROWS, COLS]).unwrap();
    w.write_rows(0, &init).unwrap();
    for s in 0..50 {
        sgd_mom_update(&w, &grad(s), &mom, &args).unwrap();
    }
    w.flush().unwrap();
    mom.flush().unwrap();
    std::fs::write(dir.join("checkpoint"), hash_files(dir).to_string()).unwrap();
    for s in 50.. {
        sgd_mom_update(&w, &grad(s), &mom, &args).unwrap();
        if s == 80 {
            std::fs::write(dir.join("training"), "").unwrap();
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    unreachable!()
}

#[test]
fn a_killed_training_process_leaves_the_last_flush() {
    if let Some(d) = std::env::var_os(CHILD) {
        child(Path::new(&d));
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("sparrow-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_training_process_leaves_the_last_flush",
            "--nocapture",
        ])
        .env(CHILD, &dir)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !dir.join("training").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the child never got to train"
        );
        assert!(proc.try_wait().unwrap().is_none(), "the child exited early");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(20));
    proc.kill().unwrap();
    proc.wait().unwrap();

    let checkpoint: u64 = std::fs::read_to_string(dir.join("checkpoint"))
        .unwrap()
        .parse()
        .unwrap();
    // The steps after the flush reached the files (the page cache outlives the process)...
    assert_ne!(
        hash_files(&dir),
        checkpoint,
        "no step after the checkpoint landed"
    );
    // ...and opening them read-write restores the checkpoint from the undo journals.
    let w = NDArray::open_npy(dir.join("w.npy"), MapMode::ReadWrite).unwrap();
    let mom = NDArray::open_npy(dir.join("mom.npy"), MapMode::ReadWrite).unwrap();
    assert_eq!(hash_files(&dir), checkpoint);
    assert!(!dir.join("w.npy.undo").exists() && !dir.join("mom.npy.undo").exists());
    // Training goes on from there, and a flush leaves no journal behind.
    let args = UpdateArgs::new(0.01, MomentumParams { momentum: 0.9 });
    sgd_mom_update(&w, &grad(1), &mom, &args).unwrap();
    assert!(dir.join("w.npy.undo").exists());
    w.flush().unwrap();
    assert!(!dir.join("w.npy.undo").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stale journal (from another file once at the same path) is never applied to a new file.
#[test]
fn a_journal_of_another_file_is_ignored() {
    let dir = std::env::temp_dir().join(format!("sparrow-stale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.npy");
    let a = NDArray::create_npy(&path, &[8, 4], DType::F32).unwrap();
    a.write_rows(2, &NDArray::ones(&[1, 4], DType::F32).unwrap())
        .unwrap();
    a.flush().unwrap();
    a.write_rows(2, &NDArray::full(&[1, 4], 5.0, DType::F32).unwrap())
        .unwrap();
    drop(a);
    // The journal now says "row 2 was ones". Reopening this file would restore that; a new
    // file created at the path (atomically: a new inode) must not get it.
    assert!(dir.join("t.npy.undo").exists());
    let b = NDArray::create_npy(&path, &[8, 4], DType::F32).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![0.0; 32]);
    assert!(!dir.join("t.npy.undo").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
