#!/usr/bin/env bash
# Interleaved A/B of (c): $1 rounds x (binaries...), EPOCHS (default 40) epochs each, --threads 1.
# Prints: round binary median_wall_ms median_cpu_ms (summary: | python3 scripts/summarize_ab.py)
R=$1; shift
EPOCHS=${EPOCHS:-40}
# The example writes the file with --data-dir /tmp/tut.
DATA=${DATA:-/tmp/tut/tutorial.libsvm}
for r in $(seq 1 $R); do
  for b in "$@"; do
    $b --child c --data-file "$DATA" --epochs $EPOCHS --threads 1 --json 2>/dev/null | python3 -c 'import sys,json; d=json.load(sys.stdin); print(sys.argv[1], sys.argv[2], round(d["epoch_ms"]["median"],3), round(d["epoch_cpu_ms"]["median"],3))' $r $(basename $b)
  done
done
