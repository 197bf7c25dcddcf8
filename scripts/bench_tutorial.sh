#!/usr/bin/env bash
# The sparse Gluon tutorial benchmark (examples/sparse_gluon) beside MXNet 1.9.1 and PyTorch, in
# one run on one machine. Usage: scripts/bench_tutorial.sh OUT_DIR [MX_PY] [TORCH_PY]
#   MX_PY:    python of a venv with mxnet==1.9.1 "numpy<1.24" scipy (argument or environment
#             variable; without it MXNet is skipped)
#   TORCH_PY: python of a venv with torch numpy scipy (argument or environment variable; without
#             it PyTorch is skipped)
#   ANCHORS:  directory of the reference scripts (mxnet/, torch/); default ../shared/anchors
#             relative to the repository root. OUT_DIR is relative to the repository root too.
# Dense-gradient variants (a), (b) are timed on fewer batches (MXNet: 1 epoch after a warm-up
# epoch; PyTorch and sparrow: a window of batches scaled to 100), (c) over 7 epochs after a
# warm-up (sparrow: whole epochs until --warmup-ms, default 100 ms, have passed).
# C_RUNS=N (reduced window, a few minutes): the references run (c) only (MXNet dot_rsp, PyTorch
# EmbeddingBag), then sparrow runs (c) N more times at 1 thread (sparrow_c_t1_run*.json), since
# (c) timings move with the machine's state. The MXNet data file goes to a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; fi
OUT=$1
MX=${2:-${MX_PY:-}}
TORCH=${3:-${TORCH_PY:-}}
ANCH=${ANCHORS:-../shared/anchors}
[ -x "$MX" ] || echo "MX_PY not given or not executable: MXNet skipped" >&2
[ -x "$TORCH" ] || echo "TORCH_PY not given or not executable: PyTorch skipped" >&2
if { [ -x "$MX" ] || [ -x "$TORCH" ]; } && [ ! -d "$ANCH/mxnet" ]; then
  echo "error: reference scripts not found in $ANCH (set ANCHORS)" >&2; exit 2
fi
C_RUNS=${C_RUNS:-}
MXDATA=$OUT
[ -n "$C_RUNS" ] && MXDATA=$(mktemp -d)
mkdir -p "$OUT"
cargo build --release --example sparse_gluon
for t in 1 2; do
  target/release/examples/sparse_gluon --threads "$t" --json > "$OUT/sparrow_t$t.json"
done
if [ -x "$MX" ]; then
  [ -f "$MXDATA/tutorial.libsvm" ] || "$MX" "$ANCH"/mxnet/bench_tutorial_sparse_gluon.py make-data "$MXDATA" > /dev/null
  for omp in 1 2; do
    OMP_NUM_THREADS=$omp "$MX" "$ANCH"/mxnet/bench_tutorial_sparse_gluon.py run dot_rsp "$MXDATA/tutorial.libsvm" 7 \
      > "$OUT/mx_dot_rsp_omp$omp.json" 2> "$OUT/mx_omp$omp.err"
    [ -n "$C_RUNS" ] && continue
    for v in dot dense; do
      OMP_NUM_THREADS=$omp "$MX" "$ANCH"/mxnet/bench_tutorial_sparse_gluon.py run $v "$MXDATA/tutorial.libsvm" 1 \
        > "$OUT/mx_${v}_omp$omp.json"
    done
  done
fi
if [ -x "$TORCH" ]; then
  for t in 1 2; do
    "$TORCH" "$ANCH"/torch/bench_sparse_mlp.py --variant embbag --threads $t --epochs 7 --json "$OUT/torch.jsonl"
    [ -n "$C_RUNS" ] && continue
    "$TORCH" "$ANCH"/torch/bench_sparse_mlp.py --variant spmm --threads $t --window 5 --json "$OUT/torch.jsonl"
    "$TORCH" "$ANCH"/torch/bench_sparse_mlp.py --variant dense --threads $t --window 5 --json "$OUT/torch.jsonl"
  done
fi
for i in $(seq 1 "${C_RUNS:-0}"); do
  target/release/examples/sparse_gluon --threads 1 --variants c --json > "$OUT/sparrow_c_t1_run$i.json"
done
echo "results in $OUT"
