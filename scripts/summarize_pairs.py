"""Per-round ratios of scripts/bench_tutorial_pairs.sh: MXNet / sparrow and PyTorch / sparrow
epoch-time medians of variant (c), each round measured back to back. Usage:
python3 scripts/summarize_pairs.py OUT_DIR
With SPARROW_BASE rounds, also the earlier build's time and its ratio to the current one."""
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
    base = out / f"round{r}_base.json"
    b_ms = json.loads(base.read_text())["variants"]["c"]["epoch_ms"]["median"] if base.exists() else None
    rows.append((r, s_ms, m_ms, t_ms, m_ms / s_ms, t_ms / s_ms, b_ms))
    r += 1
has_base = any(x[6] is not None for x in rows)
head = "round  sparrow_ms  mxnet_ms  torch_ms  mxnet/sparrow  torch/sparrow"
print(head + ("  base_ms  base/sparrow" if has_base else ""))
for row in rows:
    line = "%5d  %10.3f  %8.1f  %8.1f  %13.1f  %13.1f" % row[:6]
    if row[6] is not None:
        line += "  %7.3f  %12.3f" % (row[6], row[6] / row[1])
    print(line)
if rows:
    med = lambda f: statistics.median(f(x) for x in rows)
    line = "median %10.3f  %8.1f  %8.1f  %13.1f  %13.1f" % tuple(med(lambda x, i=i: x[i]) for i in range(1, 6))
    if has_base:
        line += "  %7.3f  %12.3f" % (med(lambda x: x[6]), med(lambda x: x[6] / x[1]))
    print(line)
