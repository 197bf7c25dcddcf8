#!/usr/bin/env bash
# Interleaved A/B of (c): $1 rounds x (binaries...), 40 epochs each, --threads 1.
# Prints: round binary median_wall_ms median_cpu_ms
R=$1; shift
# The example writes the file with --data-dir /tmp/tut.
DATA=${DATA:-/tmp/tut/tutorial.libsvm}
for r in $(seq 1 $R); do
  for b in "$@"; do
    $b --child c --data-file "$DATA" --epochs 40 --threads 1 --json 2>/dev/null | python3 -c 'import sys,json; d=json.load(sys.stdin); print(sys.argv[1], sys.argv[2], round(d["epoch_ms"]["median"],3), round(d["epoch_cpu_ms"]["median"],3))' $r $(basename $b)
  done
done
