//! Progress bars (indicatif) for passes over files and epochs.
//!
//! [`bar`] returns a hidden bar when stderr is not a terminal or the `CI` environment variable
//! is set, so logs of batch jobs and CI stay clean. Other crates (fit loops) can reuse it.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// True when progress bars should be drawn: stderr is a terminal and `CI` is unset.
pub fn enabled() -> bool {
    std::env::var_os("CI").is_none() && std::io::stderr().is_terminal()
}

/// A progress bar of `len` units labelled `msg`, hidden when [`enabled`] is false.
pub fn bar(len: u64, msg: &str) -> ProgressBar {
    if !enabled() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    let style = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_message(msg.to_string());
    pb
}
