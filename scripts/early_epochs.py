"""How much slower (c)'s first timed epochs are than its later ones, with the old one-epoch
warm-up: RUNS runs of `BIN --child c --data-file DATA --epochs 40 --threads 1 --warmup-ms 0
--json`, per run the median of epochs 1-7 over the median of epochs 9-40, then the median of
those ratios and the per-index medians across runs. The twelfth session's 1.31x (BENCHMARKS.md,
"The warm-up") came from this. Usage: python3 scripts/early_epochs.py BIN DATA [RUNS=10]
"""
import json
import statistics
import subprocess
import sys

binary, data = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 10
rows = []
for _ in range(runs):
    out = subprocess.run([binary, "--child", "c", "--data-file", data, "--epochs", "40",
                          "--threads", "1", "--warmup-ms", "0", "--json"],
                         capture_output=True, text=True, check=True).stdout
    rows.append(json.loads(out)["epoch_ms"]["all"])
ratios = [statistics.median(r[:7]) / statistics.median(r[8:]) for r in rows]
print("first 7 / epochs 9-40 per run:", " ".join("%.2f" % x for x in ratios))
print("median %.3f" % statistics.median(ratios))
print("per-epoch medians:", " ".join("%.2f" % statistics.median(r[i] for r in rows)
                                     for i in range(len(rows[0]))))
