#!/bin/bash
# One measurement window for issue 3's sparse products, back to back: sparrow (1 and 2 rayon
# threads, and optionally a baseline binary), scipy, PyTorch (1 and 2 threads), MXNet 1.9.1
# (OMP 1 and 2; first three products only), then sparrow again. The 1-minute load average is
# logged before each step in OUT_DIR/window.log.
# Usage: scripts/bench_sparse_dot_window.sh SPARROW_EXAMPLE_BIN OUT_DIR [BASELINE_BIN]
set -u
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
log scipy; /work/venvs/sk/bin/python scripts/bench_scipy_sparse_dot.py > "$D/scipy.json" 2>&1
for t in 1 2; do
    log torch $t
    timeout 300 /work/venvs/torch/bin/python /work/shared/anchors/torch/bench_spmm.py --threads $t \
        --json "$D/torch_t$t.json" > "$D/torch_t$t.out" 2>&1
done
for t in 1 2; do
    log mxnet $t
    OMP_NUM_THREADS=$t timeout 300 /work/venvs/mx/bin/python scripts/bench_mxnet_sparse_dot_products.py \
        > "$D/mxnet_omp$t.jsonl" 2> "$D/mxnet_omp$t.err"
done
for t in 1 2; do log sparrow $t; RAYON_NUM_THREADS=$t "$B" --json > "$D/sparrow_t${t}_b.json"; done
log end
