#!/usr/bin/env bash
# Interleaved rounds: numpy (OpenBLAS) then sparrow's criterion dense bench, T threads each.
set -u
cd "$(dirname "$0")/../.."
OUT=bench-notes/dense_2026-11-23
BIN=$(ls -t target/release/deps/dense-* | grep -v '\.d$' | head -1)
round() { # name threads
  echo "== $1 threads=$2 start $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $OUT/rounds.txt
  OPENBLAS_NUM_THREADS=$2 OMP_NUM_THREADS=$2 /work/venvs/sk/bin/python scripts/bench_numpy_dense.py >> $OUT/rounds.txt 2>&1
  RAYON_NUM_THREADS=$2 $BIN --bench --warm-up-time 1 --measurement-time 3 "matmul|elementwise" 2>&1 | grep -E "^(matmul|elementwise)|time:|thrpt:" >> $OUT/rounds.txt
  echo "== end $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $OUT/rounds.txt
}
for r in 1 2 3 4 5; do round r$r 2; done
for r in 1 2; do round s$r 1; done
echo done >> $OUT/rounds.txt
