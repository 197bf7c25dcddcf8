//! Load one LibSVM / svmlight file with `load_libsvm` and print what was read as JSON, for
//! `scripts/check_svmlight_compat.py` (which compares it with scikit-learn's
//! `load_svmlight_file`).
//!
//! ```text
//! cargo run --release -p sparrow-data --example svmlight_json -- FILE \
//!     [--base auto|zero|one] [--multilabel] [--ignore-qid] [--strict] [--allow-non-finite]
//! ```
//!
//! Output: `{"ok": true, "num_features", "indptr", "indices", "values", "labels" (one list per
//! row), "qids" (null where a row has none)}`, or `{"ok": false, "error", "line", "col"}`.
//! Non-finite numbers are written as `NaN` / `Infinity` / `-Infinity`, which Python's `json`
//! reads.

use sparrow_data::libsvm::{load_libsvm, IndexBase, LibSvmOptions};

fn num(v: f32) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        // `{:?}` prints the shortest text that reads back to the same f32.
        format!("{v:?}")
    }
}

fn list<T>(xs: &[T], f: impl Fn(&T) -> String) -> String {
    let items: Vec<String> = xs.iter().map(f).collect();
    format!("[{}]", items.join(","))
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut o = LibSvmOptions {
        index_base: IndexBase::Auto,
        ..Default::default()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--base" => {
                o.index_base = match args.next().as_deref() {
                    Some("zero") => IndexBase::Zero,
                    Some("one") => IndexBase::One,
                    Some("auto") => IndexBase::Auto,
                    other => {
                        eprintln!("--base takes auto, zero or one, not {other:?}");
                        std::process::exit(2);
                    }
                }
            }
            "--multilabel" => o.multilabel = true,
            "--ignore-qid" => o.ignore_qid = true,
            "--strict" => o.strict = true,
            "--allow-non-finite" => o.allow_non_finite = true,
            "-h" | "--help" => {
                println!(
                    "svmlight_json FILE [--base auto|zero|one] [--multilabel] [--ignore-qid] \
                     [--strict] [--allow-non-finite]"
                );
                return;
            }
            f if file.is_none() && !f.starts_with("--") => file = Some(f.to_string()),
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let Some(file) = file else {
        eprintln!("usage: svmlight_json FILE [options] (--help)");
        std::process::exit(2);
    };
    match load_libsvm(&file, &o) {
        Ok(d) => {
            let r = &d.rows;
            let labels: Vec<String> = (0..r.len())
                .map(|i| list(r.row_labels(i), |v| num(*v)))
                .collect();
            println!(
                "{{\"ok\":true,\"num_features\":{},\"indptr\":{},\"indices\":{},\"values\":{},\
                 \"labels\":[{}],\"qids\":{}}}",
                d.num_features,
                list(&r.indptr, |v| v.to_string()),
                list(&r.indices, |v| v.to_string()),
                list(&r.values, |v| num(*v)),
                labels.join(","),
                list(&r.qids, |q| q.map_or("null".into(), |q| q.to_string())),
            );
        }
        Err(e) => {
            let (line, col) = e.position().unwrap_or((0, 0));
            println!(
                "{{\"ok\":false,\"error\":{},\"line\":{line},\"col\":{col}}}",
                quote(&e.to_string())
            );
        }
    }
}
