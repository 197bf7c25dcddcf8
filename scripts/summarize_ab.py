"""Summary of bench-notes/tutorial_2026-11-23/ab/ab.sh output (lines `round binary wall_ms
cpu_ms`): per binary the median and mean epoch wall time, and its per-round ratio to the first
binary (median, geometric mean, rounds in which it was faster). Usage:
EPOCHS=7 bench-notes/tutorial_2026-11-23/ab/ab.sh 60 OLD NEW | python3 scripts/summarize_ab.py"""
import collections
import statistics as st
import sys

runs = collections.defaultdict(list)
order = []
for line in sys.stdin:
    parts = line.split()
    if len(parts) != 4:
        continue
    b, wall = parts[1], float(parts[2])
    if b not in runs:
        order.append(b)
    runs[b].append(wall)
if not order:
    sys.exit("no ab.sh lines on stdin")
base = runs[order[0]]
for b in order:
    r = [x / y for x, y in zip(runs[b], base)]
    print(
        "%s: median %.3f ms, mean %.3f ms; per-round ratio to %s: median %.3f, "
        "geometric mean %.3f, faster in %d of %d"
        % (b, st.median(runs[b]), st.mean(runs[b]), order[0], st.median(r),
           st.geometric_mean(r), sum(x < 1 for x in r), len(r))
    )
