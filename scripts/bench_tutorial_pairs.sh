#!/usr/bin/env bash
# The sparse Gluon tutorial (examples/sparse_gluon), variant (c) only, in interleaved rounds:
# each round runs MXNet 1.9.1 (dot_rsp, OMP_NUM_THREADS=1), sparrow (--threads 1) and PyTorch
# (EmbeddingBag, 1 thread) back to back, 7 timed epochs each after a warm-up (one epoch for the
# references; for sparrow whole epochs until its --warmup-ms, default 100 ms, have passed), so
# that the per-round ratios compare the three under one machine state. The project's 2-vCPU VM
# moves between a fast and a ~1.5-2x slower state within minutes; a window that runs each system
# once compares different states.
# Usage: scripts/bench_tutorial_pairs.sh OUT_DIR [ROUNDS] [MX_PY] [TORCH_PY]
#   ROUNDS:   default 6
#   MX_PY:    python of a venv with mxnet==1.9.1 "numpy<1.24" scipy (argument or environment
#             variable; required)
#   TORCH_PY: python of a venv with torch numpy scipy (argument or environment variable; required)
#   ANCHORS:  directory of the reference scripts (mxnet/, torch/); default ../shared/anchors
#             relative to the repository root. OUT_DIR and MXDATA are relative to it too.
# MXDATA=DIR keeps MXNet's data file (DIR/tutorial.libsvm, ~2.5 min to write) between runs.
# SPARROW_BASE=BINARY also runs an earlier build of the example in every round (right after
# the current one), for a before/after comparison under the same machine states.
# THREADS=2 runs all three with 2 threads instead (OMP_NUM_THREADS=2, --threads 2 for sparrow and
# for PyTorch's script); the default is 1.
# Summary (per-round ratios, their median): python3 scripts/summarize_pairs.py OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1
ROUNDS=${2:-6}
MX=${3:-${MX_PY:-}}
TORCH=${4:-${TORCH_PY:-}}
T=${THREADS:-1}
ANCH=${ANCHORS:-../shared/anchors}
[ -x "$MX" ] || { echo "error: MX_PY (python with mxnet==1.9.1) not given or not executable" >&2; usage; }
[ -x "$TORCH" ] || { echo "error: TORCH_PY (python with torch) not given or not executable" >&2; usage; }
[ -d "$ANCH/mxnet" ] || { echo "error: reference scripts not found in $ANCH (set ANCHORS)" >&2; exit 2; }
mkdir -p "$OUT"
cargo build --release --example sparse_gluon
if [ -z "${MXDATA:-}" ]; then
  MXDATA=$(mktemp -d)
  trap 'rm -rf "$MXDATA"' EXIT
fi
[ -f "$MXDATA/tutorial.libsvm" ] || "$MX" "$ANCH"/mxnet/bench_tutorial_sparse_gluon.py make-data "$MXDATA" > /dev/null
for r in $(seq 1 "$ROUNDS"); do
  OMP_NUM_THREADS=$T "$MX" "$ANCH"/mxnet/bench_tutorial_sparse_gluon.py run dot_rsp "$MXDATA/tutorial.libsvm" 7 \
    > "$OUT/round${r}_mx.json" 2> "$OUT/round${r}_mx.err"
  target/release/examples/sparse_gluon --threads "$T" --variants c --epochs 7 --json > "$OUT/round${r}_sparrow.json"
  if [ -n "${SPARROW_BASE:-}" ]; then
    "$SPARROW_BASE" --threads "$T" --variants c --epochs 7 --json > "$OUT/round${r}_base.json"
  fi
  "$TORCH" "$ANCH"/torch/bench_sparse_mlp.py --variant embbag --threads "$T" --epochs 7 --json "$OUT/round${r}_torch.jsonl" > /dev/null
  echo "round $r done $(date -u +%H:%M:%S)"
done
echo "results in $OUT"
