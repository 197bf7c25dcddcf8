"""Runs the MXNet 1.9.1 anchor $ANCHORS/mxnet/bench_sparse_dot.py for its first
three products only (dot(X, W1), dot(X, W128), dot(X^T, G) -> row_sparse), printing each result
as one JSON line as soon as it is measured, then stops: the anchor's later dense-output and
4 GB dense-X products take minutes per call under load and are not part of this benchmark.
The anchor's own data, timing loop and correctness checks are used unchanged.

Usage: OMP_NUM_THREADS=1|2 $MX_PY scripts/bench_mxnet_sparse_dot_products.py
MX_PY: python of a venv with mxnet==1.9.1 "numpy<1.24" scipy. ANCHORS: directory of the reference
scripts (default ../shared/anchors relative to the repository root).
"""
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ANCHORS = os.environ.get("ANCHORS") or os.path.join(_ROOT, "..", "shared", "anchors")
if not os.path.isfile(os.path.join(_ANCHORS, "mxnet", "bench_sparse_dot.py")):
    sys.exit(f"bench_sparse_dot.py not found under {_ANCHORS}/mxnet: set ANCHORS")
sys.path.insert(0, os.path.join(_ANCHORS, "mxnet"))
import bench_sparse_dot as anchor  # noqa: E402

NAMES = ["dot(X, W1)", "dot(X, W128)", "dot(X^T, G) -> row_sparse"]
_orig = anchor.bench
_done = []


def bench(fn, reps, warmup):
    out, res = _orig(fn, reps, warmup)
    _done.append(res)
    print(json.dumps({"op": NAMES[len(_done) - 1], **res}), flush=True)
    if len(_done) == len(NAMES):
        sys.exit(0)
    return out, res


anchor.bench = bench
anchor.main("/dev/null", dense128=False)
