#!/usr/bin/env bash
# Old build against new build, in interleaved rounds under the same machine states: the sparse
# tutorial's variant (c) (1 thread), the two sparse products (examples/sparse_dot), one
# LibSVMIter pass over FILE (examples/libsvm_read) and dense f32 matmul 1024 (benches/dense,
# criterion). Each round runs every benchmark with both builds, alternating which goes first.
# Usage: scripts/ab_binaries.sh OLD_DIR NEW_DIR FILE OUT_DIR [ROUNDS]
#   OLD_DIR, NEW_DIR: each holds sparse_gluon, sparse_dot, libsvm_read and dense (the criterion
#                     binary of benches/dense.rs, `cargo bench --no-run --bench dense` prints it)
#   FILE:   a LibSVM file with feature ids below 10,000,000 (scripts/gen_libsvm.py writes one)
#   ROUNDS: default 6
#   ONLY:   environment variable, the benchmarks to run, default "gluon dot libsvm matmul"
#   DOT_ARGS: environment variable, extra arguments of sparse_dot (e.g. "--only row_sparse")
#   The binaries inherit the environment, so allocator settings (MALLOC_MMAP_THRESHOLD_=...)
#   given to this script apply to both builds.
# Summary (median of the per-round new/old ratios): python3 scripts/summarize_ab.py OUT_DIR
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -ge 4 ] || usage
OLD=$1 NEW=$2 FILE=$3 OUT=$4 ROUNDS=${5:-6}
mkdir -p "$OUT"
ONLY=" ${ONLY:-gluon dot libsvm matmul} "
want() { [[ $ONLY == *" $1 "* ]]; }
run() { # build-label bin-dir round
    local tag=$1 dir=$2 r=$3
    if want gluon; then
        "$dir/sparse_gluon" --json --variants c --epochs 7 --threads 1 > "$OUT/gluon_${tag}_$r.json" 2>/dev/null
    fi
    if want dot; then
        RAYON_NUM_THREADS=2 "$dir/sparse_dot" --json ${DOT_ARGS:-} > "$OUT/dot_${tag}_$r.json" 2>/dev/null
    fi
    if want libsvm; then
        "$dir/libsvm_read" "$FILE" --data-shape 10000000 --batch-size 1024 --json \
            > "$OUT/libsvm_${tag}_$r.json" 2>/dev/null
    fi
    if want matmul; then
        "$dir/dense" --bench --warm-up-time 1 --measurement-time 3 "matmul_f32/1024" \
            > "$OUT/matmul_${tag}_$r.txt" 2>/dev/null
    fi
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run old "$OLD" "$r"; run new "$NEW" "$r"; else run new "$NEW" "$r"; run old "$OLD" "$r"; fi
    echo "round $r done" >&2
done
