//! `sys::set_idle_priority`: applies to the calling thread only, and threads it spawns
//! afterwards inherit it.

use sparrow_core::sys::{has_idle_priority, set_idle_priority};

#[test]
fn idle_priority_is_per_thread_and_inherited() {
    let (applied, own, child) = std::thread::spawn(|| {
        let applied = set_idle_priority();
        let own = has_idle_priority();
        let child = std::thread::spawn(has_idle_priority).join().unwrap();
        (applied, own, child)
    })
    .join()
    .unwrap();
    if cfg!(target_os = "linux") {
        assert!(
            applied,
            "SCHED_IDLE is always allowed for the calling thread"
        );
        assert!(own);
        assert!(child, "threads spawned later inherit the policy");
    } else {
        assert!(!applied && !own && !child);
    }
    assert!(!has_idle_priority(), "the spawning thread is untouched");
}
