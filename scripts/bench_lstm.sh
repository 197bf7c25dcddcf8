#!/usr/bin/env bash
# Rounds of the LSTM layer benchmark, sparrow and PyTorch back to back at 1 and 2 threads
# (examples/lstm_bench.rs, examples/lstm_bench_torch.py).
# usage: TORCH_PY=python-with-torch scripts/bench_lstm.sh [ROUNDS]   (after cargo build --release --example lstm_bench)
set -euo pipefail
rounds=${1:-3}
: "${TORCH_PY:?set TORCH_PY to a python with torch}"
bin=target/release/examples/lstm_bench
for r in $(seq "$rounds"); do
    for t in 1 2; do
        echo "round $r"
        RAYON_NUM_THREADS=$t "$bin"
        OMP_NUM_THREADS=$t "$TORCH_PY" examples/lstm_bench_torch.py "$t"
    done
done
