#!/usr/bin/env bash
# Conv2D forward + backward (ResNet 3x3 layer) in sparrow and PyTorch, back to back, for
# ROUNDS rounds at 1 and 2 threads: the rows of BENCHMARKS.md's convolution table.
#   TORCH_PY=/path/to/python-with-torch scripts/bench_conv_pairs.sh [ROUNDS] [REPS]
# Needs `cargo build --release --example conv_bench` first.
set -euo pipefail
if [ -z "${TORCH_PY:-}" ]; then
    echo "usage: TORCH_PY=python-with-torch $0 [ROUNDS=3] [REPS=10]" >&2
    exit 2
fi
rounds=${1:-3}
reps=${2:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
for r in $(seq 1 "$rounds"); do
    for t in 1 2; do
        echo "== round $r, $t thread(s), load $(cut -d' ' -f1 /proc/loadavg)"
        echo "-- sparrow"
        RAYON_NUM_THREADS=$t "$root/target/release/examples/conv_bench" --reps "$reps" | tail -6
        echo "-- torch"
        "$TORCH_PY" "$root/scripts/bench_torch_conv.py" --threads "$t" --reps "$reps" | tail -5
    done
done
