#!/usr/bin/env bash
# Same binary, (c) with and without --no-prefetch, interleaved; $1 rounds.
for r in $(seq 1 $1); do
  for flag in "" "--no-prefetch"; do
    /tmp/sg_pf --child c --data-file /tmp/tut/tutorial.libsvm --epochs 40 --threads 1 --json $flag 2>/dev/null | python3 -c 'import sys,json; d=json.load(sys.stdin); print(sys.argv[1], sys.argv[2], round(d["epoch_ms"]["median"],3), round(d["epoch_cpu_ms"]["median"],3), round(d["loss"],6))' $r "pf${flag:+_off}"
  done
done
