#!/usr/bin/env bash
# Issue 6 benchmark: sparrow's sparse Gluon tutorial beside MXNet 1.9.1 and PyTorch, in one run
# on one machine. Usage: scripts/bench_tutorial.sh OUT_DIR [MX_PY] [TORCH_PY]
#   MX_PY:    python of a venv with mxnet==1.9.1 "numpy<1.24" scipy
#   TORCH_PY: python of a venv with torch numpy scipy
# Reference scripts: ../shared/anchors/{mxnet,torch}. Dense-gradient variants (a), (b) are timed
# on fewer batches (MXNet: 1 epoch after a warm-up epoch; PyTorch and sparrow: a window of
# batches scaled to 100), (c) over 7 epochs after a warm-up epoch.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?OUT_DIR}
MX=${2:-/work/venvs/mx/bin/python}
TORCH=${3:-/work/venvs/torch/bin/python}
ANCH=../shared/anchors
mkdir -p "$OUT"
cargo build --release --example sparse_gluon
for t in 1 2; do
  target/release/examples/sparse_gluon --threads "$t" --json > "$OUT/sparrow_t$t.json"
done
if [ -x "$MX" ]; then
  [ -f "$OUT/tutorial.libsvm" ] || "$MX" $ANCH/mxnet/bench_tutorial_sparse_gluon.py make-data "$OUT"
  for omp in 1 2; do
    OMP_NUM_THREADS=$omp "$MX" $ANCH/mxnet/bench_tutorial_sparse_gluon.py run dot_rsp "$OUT/tutorial.libsvm" 7 \
      > "$OUT/mx_dot_rsp_omp$omp.json"
    for v in dot dense; do
      OMP_NUM_THREADS=$omp "$MX" $ANCH/mxnet/bench_tutorial_sparse_gluon.py run $v "$OUT/tutorial.libsvm" 1 \
        > "$OUT/mx_${v}_omp$omp.json"
    done
  done
fi
if [ -x "$TORCH" ]; then
  for t in 1 2; do
    "$TORCH" $ANCH/torch/bench_sparse_mlp.py --variant embbag --threads $t --epochs 7 --json "$OUT/torch.jsonl"
    "$TORCH" $ANCH/torch/bench_sparse_mlp.py --variant spmm --threads $t --window 5 --json "$OUT/torch.jsonl"
    "$TORCH" $ANCH/torch/bench_sparse_mlp.py --variant dense --threads $t --window 5 --json "$OUT/torch.jsonl"
  done
fi
echo "results in $OUT"
