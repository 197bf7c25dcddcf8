#!/bin/bash
# One measurement window for the sparse products of examples/sparse_dot.rs, back to back: sparrow
# (1 and 2 rayon threads, and optionally a baseline binary), scipy, PyTorch (1 and 2 threads),
# MXNet 1.9.1 (OMP 1 and 2; first three products only), then sparrow again. The 1-minute load
# average is logged before each step in OUT_DIR/window.log.
# Usage: SK_PY=... TORCH_PY=... MX_PY=... \
#          scripts/bench_sparse_dot_window.sh SPARROW_EXAMPLE_BIN OUT_DIR [BASELINE_BIN]
#   SPARROW_EXAMPLE_BIN: target/release/examples/sparse_dot (cargo build --release --example sparse_dot)
#   SK_PY:    python of a venv with numpy and scipy (scripts/bench_scipy_sparse_dot.py)
#   TORCH_PY: python of a venv with torch (PyTorch 2.15, CPU)
#   MX_PY:    python of a venv with mxnet==1.9.1 "numpy<1.24" scipy
#   ANCHORS:  directory of the reference scripts (mxnet/, torch/); default ../shared/anchors
#             relative to the repository root
set -u
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
for v in SK_PY TORCH_PY MX_PY; do
    [ -n "${!v:-}" ] || { echo "error: $v is not set" >&2; usage; }
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ANCHORS=${ANCHORS:-$ROOT/../shared/anchors}
export ANCHORS
[ -f "$ANCHORS/torch/bench_spmm.py" ] || { echo "error: $ANCHORS/torch/bench_spmm.py not found (set ANCHORS)" >&2; exit 2; }
B=$1
D=$2
BASE=${3:-}
mkdir -p "$D"
log() { echo "== $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg) $*" >> "$D/window.log"; }
log start
for t in 1 2; do
    log sparrow $t; RAYON_NUM_THREADS=$t "$B" --json > "$D/sparrow_t${t}_a.json"
    if [ -n "$BASE" ]; then log baseline $t; RAYON_NUM_THREADS=$t "$BASE" --json > "$D/main_t${t}.json"; fi
done
log scipy; "$SK_PY" "$ROOT/scripts/bench_scipy_sparse_dot.py" > "$D/scipy.json" 2>&1
for t in 1 2; do
    log torch $t
    timeout 300 "$TORCH_PY" "$ANCHORS/torch/bench_spmm.py" --threads $t \
        --json "$D/torch_t$t.json" > "$D/torch_t$t.out" 2>&1
done
for t in 1 2; do
    log mxnet $t
    OMP_NUM_THREADS=$t timeout 300 "$MX_PY" "$ROOT/scripts/bench_mxnet_sparse_dot_products.py" \
        > "$D/mxnet_omp$t.jsonl" 2> "$D/mxnet_omp$t.err"
done
for t in 1 2; do log sparrow $t; RAYON_NUM_THREADS=$t "$B" --json > "$D/sparrow_t${t}_b.json"; done
log end
