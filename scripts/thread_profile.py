"""Time profile of the sparse tutorial's variant (c) on its training thread alone.

Runs `BIN --child c --data-file DATA --epochs EPOCHS --threads THREADS --json` under
`perf record -e cpu-clock -c 250000`, splits the samples by thread (`perf script -F
tid,ip,sym`), keeps the thread that ran the forward gather (`csr_rows_f32_avx2`), drops the
weight initialization's page clearing and fill, and prints the run's epoch median and each
symbol's share of the remaining samples. The twelfth session's gather shares (BENCHMARKS.md)
came from this. Usage:
  python3 scripts/thread_profile.py BIN DATA [EPOCHS=400] [THREADS=1] [TOP=25]
"""
import collections
import json
import subprocess
import sys
import tempfile

binary, data = sys.argv[1], sys.argv[2]
epochs = sys.argv[3] if len(sys.argv) > 3 else "400"
threads = sys.argv[4] if len(sys.argv) > 4 else "1"
top = int(sys.argv[5]) if len(sys.argv) > 5 else 25
GATHER = "sparrow_core::sparse::gather::csr_rows_f32_avx2"
INIT = ("clear_page", "call_mut")  # first touch of the 512 MB weight, the uniform fill

with tempfile.NamedTemporaryFile(suffix=".data") as rec:
    run = subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-c", "250000", "-o", rec.name, binary,
         "--child", "c", "--data-file", data, "--epochs", epochs, "--threads", threads, "--json"],
        capture_output=True, text=True, check=True)
    script = subprocess.run(["perf", "script", "-i", rec.name, "-F", "tid,ip,sym"],
                            capture_output=True, text=True, check=True).stdout
by_thread = collections.defaultdict(collections.Counter)
for line in script.splitlines():
    parts = line.split(None, 2)
    if len(parts) == 3:
        by_thread[parts[0]][parts[2].strip()] += 1
if not by_thread:
    sys.exit("perf recorded no samples")
train = max(by_thread, key=lambda t: by_thread[t][GATHER])
samples = {k: v for k, v in by_thread[train].items() if not any(s in k for s in INIT)}
total = sum(samples.values())
print("epoch median %.3f ms; training-thread samples %d"
      % (json.loads(run.stdout)["epoch_ms"]["median"], total))
for sym, n in sorted(samples.items(), key=lambda kv: -kv[1])[:top]:
    print("%5.1f%% %s" % (100 * n / total, sym[:110]))
