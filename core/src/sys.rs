//! Process facts that training programs and benchmarks report: resident memory.

/// Peak resident set size of this process in bytes (`VmHWM` from `/proc/self/status`), or
/// `None` where procfs is not available.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident set size of this process in bytes (`VmRSS`), or `None` without procfs.
pub fn current_rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|k| k * 1024)
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
