#!/usr/bin/env bash
# The linear classifier (examples/linear_classifier.rs, one pass: parse + learn, then held-out
# AUC) beside Vowpal Wabbit on the learnable 1M x 40 LibSVM data of the VW anchor, in the same
# run: VW through the anchor's bench_vw.py (text input, -b 24, 2 and 1 cores), sparrow at each
# optimizer setting of SPARROW_RUNS, ROUNDS times, alternating which tool goes first.
# Usage: VW_PY=python-with-vowpalwabbit scripts/bench_linear_vw.sh ANCHOR_DIR DATA_DIR OUT_DIR [ROUNDS]
#   ANCHOR_DIR: the VW anchor folder (bench_vw.py, libsvm_to_vw.py, metrics.py)
#   DATA_DIR:   holds learnable_1m_x_40.libsvm and learnable_1m_x_40.test.libsvm (the anchor's
#               gen_learnable.py writes them); the VW text files are made beside them once
#   SPARROW_RUNS: environment variable, "optimizer:lr:batch ..." (default below); the word
#               "defaults" runs the example with its own defaults (COCOB, batch 1024)
#   Build first: cargo build --release --example linear_classifier
# Output: OUT_DIR/vw.jsonl (bench_vw.py's records) and OUT_DIR/sparrow.jsonl.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
ANCHOR=$1 DATA=$2 OUT=$3 ROUNDS=${4:-1}
: "${VW_PY:?set VW_PY to a python with vowpalwabbit, numpy and scipy}"
RUNS=${SPARROW_RUNS:-"defaults adagrad:0.1:256 adagrad:0.1:1024"}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$HERE/target/release/examples/linear_classifier
TRAIN=$DATA/learnable_1m_x_40.libsvm TEST=$DATA/learnable_1m_x_40.test.libsvm
mkdir -p "$OUT"
for f in "$TRAIN" "$TEST"; do
    [ -f "${f%.libsvm}.vw" ] || "$VW_PY" "$ANCHOR/libsvm_to_vw.py" "$f" "${f%.libsvm}.vw"
done
run_vw() {
    "$VW_PY" "$ANCHOR/bench_vw.py" "${TRAIN%.libsvm}.vw" "${TEST%.libsvm}.vw" "$TEST" "$OUT/vw.jsonl" \
        --reps 1 --bits 24 --quick --opts default,ftrl,coin --src-bytes "$(stat -c %s "$TRAIN")" > /dev/null
}
run_sparrow() {
    local run opt lr batch
    local flags
    for run in $RUNS; do
        flags=()
        if [ "$run" != defaults ]; then
            IFS=: read -r opt lr batch <<< "$run"
            flags=(--optimizer "$opt" --lr "$lr" --batch "$batch")
        fi
        "$BIN" --train "$TRAIN" --test "$TEST" --features 10000000 "${flags[@]}" --json \
            >> "$OUT/sparrow.jsonl"
    done
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run_vw; run_sparrow; else run_sparrow; run_vw; fi
    echo "round $r done" >&2
done
