#!/usr/bin/env python3
"""Compare sparrow's LibSVM loader with scikit-learn's load_svmlight_file on tricky files.

Each case writes a small file, loads it with sklearn (query_id=True where qids matter, else the
default query_id=False) and with sparrow (`svmlight_json`, the sparrow-data example that prints
what `load_libsvm` read as JSON, with the matching options: multilabel, index base, and
`--ignore-qid` exactly when sklearn is not asked for qids), and compares: both refuse the file,
or both accept it with the same rows, indices, values, labels and qids. A case whose outcome
differs on purpose names the divergence it shows (documented in data/src/libsvm/mod.rs and the
README); the script fails if a case marked "same" differs, or if a documented divergence does
not show (then the documentation is stale).

Usage (from the repository root; scikit-learn in the Python that runs it):
    cargo build --release -p sparrow-data --example svmlight_json
    $SK_PY scripts/check_svmlight_compat.py [--bin target/release/examples/svmlight_json]
(SK_PY: the python of a venv with scikit-learn, e.g. `python3 -m venv VENV && VENV/bin/pip
install scikit-learn`.)

Values: sklearn is loaded with dtype=np.float32 (sparrow reads f32) and compared bit for bit,
labels (float64 in sklearn) after rounding to float32; multilabel label tuples are compared
sorted (sklearn sorts them, sparrow keeps file order); sklearn's query array holds only the
rows that have a qid, so it is compared with sparrow's non-null qids.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from sklearn.datasets import load_svmlight_file

# (name, text, sklearn kwargs, extra sparrow flags, expected: "same" or a divergence key)
CASES = [
    ("one-based auto", "1 1:0.5 3:2\n-1 2:1.5\n", {}, [], "same"),
    ("zero-based auto", "1 0:1 2:2\n0 1:3\n", {}, [], "same"),
    ("explicit one-based", "1 1:1 4:2\n", {"zero_based": False}, [], "same"),
    ("index 0 in one-based", "1 0:1\n", {"zero_based": False}, [], "same"),
    ("comments, tabs, CRLF", "# head\n1\t1:1  2:2 # tail\r\n\n+1 3:1e0\n", {}, [], "same"),
    ("label and value spellings", "+1 1:.5 2:5. 3:-0\n.5 1:1e-3\n1e1 2:+7\n", {}, [], "same"),
    ("row without features", "1\n2 1:1\n", {}, [], "same"),
    ("multilabel", "1,3 1:1\n2:1 3:2\n\n7 1:1\n0.5,2,-1 2:3\n", {"multilabel": True}, [], "sorted_multilabel"),
    ("multilabel qid, no label", "qid:5 1:1\n1 qid:6 2:1\n", {"multilabel": True, "query_id": True}, [], "same"),
    ("multilabel repeated label", "1,1 1:1\n", {"multilabel": True}, [], "same"),
    ("multilabel repeated label, strict", "1,1 1:1\n", {"multilabel": True}, ["--strict"], "strict_refuses"),
    ("multilabel empty part", "1,,2 1:1\n", {"multilabel": True}, [], "same"),
    ("comma in single-label file", "1,2 1:1\n", {}, [], "same"),
    ("label-less row, single-label", "1:1 2:2\n", {}, [], "same"),
    ("qid extremes", "1 qid:-9223372036854775808 1:1\n2 qid:9223372036854775807 1:2\n3 qid:0 2:1\n",
     {"query_id": True}, [], "same"),
    ("qid past i64", "1 qid:9223372036854775808 1:1\n", {"query_id": True}, [], "same"),
    ("qid on some rows", "1 qid:3 1:1\n2 1:1\n3 qid:-3 2:1\n", {"query_id": True}, [], "qid_per_row"),
    ("qid misplaced", "1 1:1 qid:3\n", {"query_id": True}, [], "same"),
    ("qid not read when ignored", "1 qid:abc 1:1\n", {}, [], "same"),
    ("qid junk when read", "1 qid:abc 1:1\n", {"query_id": True}, [], "same"),
    ("qid-prefixed name", "1 qidx:3 1:1\n", {"query_id": True}, [], "qid_prefix"),
    ("unsorted indices", "1 2:1 1:1\n", {}, [], "same"),
    ("duplicate indices", "1 2:1 2:1\n", {}, [], "same"),
    ("missing value", "1 1:\n", {}, [], "same"),
    ("missing index", "1 :1\n", {}, [], "same"),
    ("non-number value", "1 1:abc\n", {}, [], "same"),
    ("overflow f32 only", "1 1:1e39\n", {}, [], "non_finite_refused"),
    ("overflow f32, allowed", "1 1:1e39\n", {}, ["--allow-non-finite"], "same"),
    ("overflow, allowed but strict", "1 1:1e39\n", {}, ["--allow-non-finite", "--strict"], "strict_refuses"),
    ("overflow f64", "1 1:1e999\n", {}, [], "non_finite_refused"),
    ("nan and inf", "nan 1:inf 2:-Infinity\n", {}, [], "non_finite_refused"),
    ("nan and inf, allowed", "nan 1:inf 2:-Infinity\n", {}, ["--allow-non-finite"], "same"),
    ("underflow to zero", "1 1:1e-50\n", {}, [], "same"),
    ("underflow, strict", "1 1:1e-50\n", {}, ["--strict"], "strict_refuses"),
    ("subnormal", "1 1:1e-40\n", {}, ["--strict"], "same"),
    ("double rounding", "1 1:1.00000005960464477550\n", {}, [], "double_rounding"),
    ("underscore digits", "1 1:1_0\n", {}, [], "underscores"),
    ("vertical tab separator", "1\x0b1:1\n", {}, [], "whitespace"),
    ("index past i32", "1 3000000000:1\n", {}, [], "wide_index"),
    ("empty file", "", {}, [], "empty_shape"),
]

# What each divergence is (kept in step with the libsvm module docs).
DIVERGENCES = {
    "sorted_multilabel": "sklearn sorts each row's labels; sparrow keeps file order",
    "qid_per_row": "sklearn's query array skips rows without qid; sparrow has one Option per row",
    "qid_prefix": "sklearn takes any first token starting with `qid` as the qid; sparrow only `qid:`",
    "non_finite_refused": "sparrow refuses NaN/inf (and f32 overflow) unless allow_non_finite",
    "strict_refuses": "strict mode refuses what sklearn accepts",
    "double_rounding": "sklearn float32 rounds decimal->f64->f32 (twice); sparrow rounds once",
    "underscores": "sklearn (Python float/int) accepts `1_0`; sparrow does not",
    "whitespace": "sklearn splits on any whitespace; sparrow on space, tab and \\r",
    "wide_index": "sklearn keeps indices in a C int (32-bit); sparrow takes any i64",
    "empty_shape": "an empty file has 1 column in sklearn, 0 in sparrow",
}


def sklearn_load(path, kw):
    kw = dict(kw)
    kw.setdefault("zero_based", "auto")
    try:
        res = load_svmlight_file(path, dtype=np.float32, **kw)
    except Exception as e:  # sklearn raises ValueError, OverflowError, ...
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    X, y = res[0], res[1]
    X = X.tocsr()
    out = {
        "ok": True,
        "num_features": X.shape[1],
        "indptr": X.indptr.tolist(),
        "indices": X.indices.tolist(),
        "values": X.data.astype(np.float32).tolist(),
    }
    if kw.get("multilabel"):
        out["labels"] = [sorted(np.float32(v).item() for v in t) for t in y]
    else:
        out["labels"] = [[np.float32(v).item()] for v in y]
    out["qids"] = res[2].tolist() if kw.get("query_id") else None
    return out


def sparrow_load(binary, path, kw, flags):
    args = [binary, path]
    zb = kw.get("zero_based", "auto")
    args += ["--base", {True: "zero", False: "one"}.get(zb, "auto")]
    if kw.get("multilabel"):
        args.append("--multilabel")
    if not kw.get("query_id"):
        args.append("--ignore-qid")
    args += flags
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def same_floats(a, b):
    a = np.array(a, dtype=np.float32)
    b = np.array(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def compare(sk, sp, kw):
    """The fields that differ (empty when the results agree)."""
    if not sk["ok"] or not sp["ok"]:
        return [] if sk["ok"] == sp["ok"] else ["accepted by one only"]
    diff = []
    for k in ("indptr", "indices"):
        if sk[k] != sp[k]:
            diff.append(k)
    if not same_floats(sk["values"], sp["values"]):
        diff.append("values")
    if sk["num_features"] != sp["num_features"]:
        diff.append("num_features")
    sp_labels = [sorted(l) for l in sp["labels"]] if kw.get("multilabel") else sp["labels"]
    if len(sk["labels"]) != len(sp_labels) or not all(
        same_floats(a, b) for a, b in zip(sk["labels"], sp_labels)
    ):
        diff.append("labels")
    if kw.get("query_id"):
        if sk["qids"] != [q for q in sp["qids"] if q is not None]:
            diff.append("qids")
        if any(q is None for q in sp["qids"]):
            diff.append("qid rows")
    elif any(q is not None for q in sp["qids"]):
        diff.append("qids read though ignored")
    if kw.get("multilabel") and sp["labels"] != sp_labels:
        diff.append("label order")
    return diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join("target", "release", "examples", "svmlight_json"))
    a = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for i, (name, text, kw, flags, expect) in enumerate(CASES):
            path = os.path.join(d, f"case{i}.svm")
            with open(path, "w", newline="") as f:
                f.write(text)
            sk = sklearn_load(path, kw)
            sp = sparrow_load(a.bin, path, kw, flags)
            diff = compare(sk, sp, kw)
            if expect == "same":
                status = "same" if not diff else f"MISMATCH {diff}"
                bad += bool(diff)
            else:
                status = (f"divergence ({DIVERGENCES[expect]}): {diff}" if diff
                          else f"STALE: expected divergence {expect!r} did not show")
                bad += not diff
            both = "both refuse" if not sk["ok"] and not sp["ok"] else ""
            print(f"{name:36s} {status} {both}")
            if status.startswith(("MISMATCH", "STALE")):
                print(f"    sklearn: {json.dumps(sk)[:300]}\n    sparrow: {json.dumps(sp)[:300]}")
    print(f"{len(CASES)} cases, {bad} unexpected")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
