//! Process facts that training programs and benchmarks report: resident memory.

/// Peak resident set size of this process in bytes (`VmHWM` from `/proc/self/status`), or
/// `None` where procfs is not available.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`), or `None` off
/// Unix. Benchmarks report it beside wall time: on a shared machine it separates the work a
/// loop does from the time it spent descheduled or waiting on another thread.
pub fn thread_cpu_time() -> Option<std::time::Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec into the valid pointer it is given.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    #[cfg(not(unix))]
    None
}

/// Move the calling thread to idle scheduling priority (Linux `SCHED_IDLE`): it then runs only
/// on CPU time no normal thread wants and never preempts one when it wakes up. Threads it
/// spawns afterwards inherit the policy. For background helpers whose only job is to stay
/// ahead of a busy thread, such as a data loader's producer, on a machine with few cores:
/// there a woken helper is often placed on the busy thread's core and preempts it even though
/// another core is about to go idle.
///
/// The cost is starvation under oversubscription: with more runnable normal threads than
/// cores, an idle-priority thread gets ~0.3% of a core. An unprivileged thread cannot switch
/// back. Returns whether the policy was applied (`false` off Linux or when refused).
pub fn set_idle_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Whether the calling thread runs at idle scheduling priority (see [`set_idle_priority`]);
/// always `false` off Linux.
pub fn has_idle_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: pid 0 names the calling thread.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Current resident set size of this process in bytes (`VmRSS`), or `None` without procfs.
pub fn current_rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|k| k * 1024)
}

/// Ask the kernel to back `[ptr, ptr + bytes)` with transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`) when the range covers at least one aligned 2 MiB page. A hint only:
/// failures are ignored, and nothing happens off Linux or for small buffers.
pub fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = HUGE_PAGE;
        if bytes < 2 * HUGE {
            return;
        }
        let start = (ptr as usize).div_ceil(HUGE) * HUGE;
        let end = (ptr as usize + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: [start, end) lies inside the caller's allocation; MADV_HUGEPAGE changes
            // only how the kernel backs the pages, never their contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// Size of an x86-64 / aarch64 transparent huge page: the unit in which large buffers are
/// advised and in which parallel fills split them.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// An empty vector with capacity for exactly `n` elements, advised for huge pages *before*
/// anything touches it. Callers write the elements through `spare_capacity_mut` and then
/// `set_len`, so each byte of a large output is written once (no zero fill first). The advice
/// has to come before the first write: a range already faulted in as 4 KiB pages stays that way
/// (khugepaged only collapses it much later, if ever).
pub(crate) fn uninit_vec<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise_huge_pages(v.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>());
    v
}

/// Resident bytes of this process's mappings of the file at `path` (the sum of `Rss:` over its
/// entries in `/proc/self/smaps`), or `None` without procfs. For file-backed arrays: the pages
/// of the file that operations have touched, which is what an out-of-core table costs in memory
/// (the page cache may hold more of the file; that memory is the kernel's to reclaim).
pub fn mapped_rss_bytes(path: &std::path::Path) -> Option<u64> {
    let want = std::fs::canonicalize(path).ok()?;
    let want = want.to_str()?;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut total = 0u64;
    let mut inside = false;
    for line in smaps.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or("");
        // A mapping's header line starts with its address range `lo-hi`; its path is last.
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            inside = line.trim_end().ends_with(want);
        } else if inside && first == "Rss:" {
            total += parts.next()?.parse::<u64>().ok()? * 1024;
        }
    }
    Some(total)
}

fn status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rss_is_positive_on_linux() {
        if cfg!(target_os = "linux") {
            // Current first: RSS may grow between the two reads, the peak never shrinks.
            let cur = super::current_rss_bytes().unwrap();
            let peak = super::peak_rss_bytes().unwrap();
            assert!(peak >= cur && cur > 0);
        }
    }
}

#[cfg(all(test, unix))]
mod cpu_time_tests {
    use super::thread_cpu_time;

    #[test]
    fn thread_cpu_time_grows_with_work_and_not_with_sleep() {
        let t0 = thread_cpu_time().expect("CLOCK_THREAD_CPUTIME_ID on unix");
        // Busy work on this thread: CPU time must advance.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let t1 = thread_cpu_time().unwrap();
        assert!(t1 > t0, "no CPU time recorded for busy work");
        // Sleeping costs wall time but (almost) no CPU time of this thread.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t2 = thread_cpu_time().unwrap();
        assert!(
            t2 - t1 < std::time::Duration::from_millis(25),
            "{:?}",
            t2 - t1
        );
    }
}
