#!/usr/bin/env bash
# The factorization machine (examples/factorization_machine.rs) against the same model in
# PyTorch (examples/factorization_machine_torch.py), on the same LibSVM file (100,000 rows,
# 1,000,000 features, 40 non-zeros per row, k = 16, batch 256, Adagrad), in interleaved rounds
# (each round runs both, alternating which goes first), each process on THREADS threads.
# Usage: TORCH_PY=python-with-torch scripts/bench_fm.sh OUT_DIR [ROUNDS] [EPOCHS]
#   THREADS: environment variable, default 1
#   Build first: cargo build --release --example factorization_machine
# Output: OUT_DIR/fm.jsonl, one JSON object per process; the epoch times are per epoch.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1 ROUNDS=${2:-3} EPOCHS=${3:-3} THREADS=${THREADS:-1}
: "${TORCH_PY:?set TORCH_PY to a python with torch and scikit-learn}"
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$HERE/target/release/examples/factorization_machine
mkdir -p "$OUT"
DATA=$("$BIN" --write-only --data-dir "$OUT/data")
run_sparrow() { RAYON_NUM_THREADS=$THREADS "$BIN" --data "$DATA" --epochs "$EPOCHS" --json >> "$OUT/fm.jsonl"; }
run_torch() { "$TORCH_PY" "$HERE/examples/factorization_machine_torch.py" "$DATA" --epochs "$EPOCHS" \
    --threads "$THREADS" --json 2>/dev/null >> "$OUT/fm.jsonl"; }
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run_sparrow; run_torch; else run_torch; run_sparrow; fi
    echo "round $r done" >&2
done
