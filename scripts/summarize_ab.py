"""Summarize scripts/ab_binaries.sh: per benchmark, the per-round new/old ratio of the time
(MB/s inverted, so above 1 is always slower) and its median, pooled over every OUT_DIR given.

Usage: python3 scripts/summarize_ab.py OUT_DIR [OUT_DIR ...]
"""
import glob
import json
import os
import re
import statistics
import sys


def find_variant(v, name):
    """The result object of variant `name` anywhere in the example's JSON."""
    if isinstance(v, dict):
        if v.get("variant") == name and "epoch_ms" in v:
            return v
        children = v.values()
    elif isinstance(v, list):
        children = v
    else:
        return None
    for c in children:
        found = find_variant(c, name)
        if found is not None:
            return found
    return None


def gluon(path):
    r = find_variant(json.loads(open(path).read()), "c")
    if r is None:
        raise ValueError(f"{path}: no variant (c) result")
    return r["epoch_ms"]["median"]


def dot(path, op):
    v = json.loads(open(path).read())
    return next(o["median_ms"] for o in v["ops"] if o["op"].startswith(op))


def libsvm(path):
    return 1.0 / json.loads(open(path).read())["MB_per_s"]


UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def matmul(path):
    m = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", open(path).read())
    return float(m.group(1)) * UNITS[m.group(2)]


def benches():
    return {
        "tutorial (c), ms per epoch": lambda o, t, r: gluon(f"{o}/gluon_{t}_{r}.json"),
        "dot(X, W128) -> dense, ms": lambda o, t, r: dot(f"{o}/dot_{t}_{r}.json", "dot(X, W128)"),
        "dot(X^T, G) -> row_sparse, ms": lambda o, t, r: dot(f"{o}/dot_{t}_{r}.json", "dot(X^T, G)"),
        "LibSVMIter, 1 / (MB/s)": lambda o, t, r: libsvm(f"{o}/libsvm_{t}_{r}.json"),
        "matmul f32 1024, ms": lambda o, t, r: matmul(f"{o}/matmul_{t}_{r}.txt"),
    }


def main(outs):
    print(f"{'benchmark':34} {'rounds':>6}  median new/old  (per round)")
    for name, get in benches().items():
        ratios = []
        for out in outs:
            rounds = sorted({int(re.search(r"_(\d+)\.", f).group(1)) for f in glob.glob(f"{out}/*_old_*")})
            for r in rounds:
                try:
                    ratios.append(get(out, "new", r) / get(out, "old", r))
                except (OSError, ValueError, StopIteration, AttributeError, KeyError):
                    pass  # this benchmark did not run in this round (ONLY=...)
        if ratios:
            per = " ".join(f"{x:.3f}" for x in ratios)
            print(f"{name:34} {len(ratios):6}  {statistics.median(ratios):.3f}  ({per})")


if __name__ == "__main__":
    if len(sys.argv) < 2 or not all(os.path.isdir(d) for d in sys.argv[1:]):
        sys.exit(__doc__)
    main(sys.argv[1:])
