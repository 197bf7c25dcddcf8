"""Per-round ratios of scripts/bench_tutorial_pairs.sh: MXNet / sparrow and PyTorch / sparrow
epoch-time medians of variant (c), each round measured back to back. Usage:
python3 scripts/summarize_pairs.py OUT_DIR"""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = []
r = 1
while (out / f"round{r}_sparrow.json").exists():
    sp = json.loads((out / f"round{r}_sparrow.json").read_text())["variants"]["c"]
    mx = json.loads((out / f"round{r}_mx.json").read_text())
    th = json.loads((out / f"round{r}_torch.jsonl").read_text().splitlines()[-1])
    s_ms = sp["epoch_ms"]["median"]
    m_ms = 1e3 * mx["epoch_median_s"]
    t_ms = 1e3 * th["epoch_wall_median_s"]
    rows.append((r, s_ms, m_ms, t_ms, m_ms / s_ms, t_ms / s_ms))
    r += 1
print("round  sparrow_ms  mxnet_ms  torch_ms  mxnet/sparrow  torch/sparrow")
for row in rows:
    print("%5d  %10.3f  %8.1f  %8.1f  %13.1f  %13.1f" % row)
if rows:
    med = lambda i: statistics.median(x[i] for x in rows)
    print("median %10.3f  %8.1f  %8.1f  %13.1f  %13.1f" % (med(1), med(2), med(3), med(4), med(5)))
