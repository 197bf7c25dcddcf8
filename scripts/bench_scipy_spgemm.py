"""scipy.sparse reference for csr x csr (examples/sparse_spgemm.rs, the same matrices):
A csr f32 (20,000 x 50,000) and B csr f32 (50,000 x 20,000), 16 non-zeros per row, columns and
values from the counter-based splitmix64 generator both programs share.

Prints the product's nnz and value sum (to compare with the example's) and median / min / max
milliseconds of `A @ B` over repeated runs after a warm-up, as JSON, with the process's CPU
milliseconds per run (`cpu_ms`, as the example reports it: on a loaded machine it moves less
than wall time).
Usage: $SK_PY scripts/bench_scipy_spgemm.py [--rows R] [--inner K] [--cols N] [--nnz Z]
(SK_PY: python of a venv with numpy and scipy)
"""
import argparse
import json
import time

import numpy as np
import scipy.sparse as sp

def splitmix64(x):
    """splitmix64 of each counter in the uint64 array `x` (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def first_of_duplicates(rows, cols, nnz, seed):
    """Row r holds the columns splitmix64(seed * 2^40 + r * nnz + t) % cols for t < nnz, with
    values (hash >> 40) / 2^24 in [0, 1); a column drawn twice keeps its first draw."""
    r = np.repeat(np.arange(rows, dtype=np.uint64), nnz)
    t = np.tile(np.arange(nnz, dtype=np.uint64), rows)
    with np.errstate(over="ignore"):
        h = splitmix64(np.uint64(seed) * np.uint64(1 << 40) + r * np.uint64(nnz) + t)
    c = (h % np.uint64(cols)).astype(np.int64)
    v = ((h >> np.uint64(40)).astype(np.float64) / float(1 << 24)).astype(np.float32)
    key = r.astype(np.int64) * cols + c
    _, first = np.unique(key, return_index=True)
    rr, cc, vv = r[first].astype(np.int64), c[first], v[first]
    return sp.csr_matrix((vv, (rr, cc)), shape=(rows, cols))


def bench(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    cpu0 = time.process_time()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / reps
    return {"median_ms": float(np.median(ts)) * 1e3, "min_ms": min(ts) * 1e3,
            "max_ms": max(ts) * 1e3, "cpu_ms": cpu * 1e3, "reps": reps}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--inner", type=int, default=50_000)
    p.add_argument("--cols", type=int, default=20_000)
    p.add_argument("--nnz", type=int, default=16)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    A = first_of_duplicates(a.rows, a.inner, a.nnz, 1)
    B = first_of_duplicates(a.inner, a.cols, a.nnz, 2)
    C = A @ B
    res = {
        "scipy": __import__("scipy").__version__,
        "a_nnz": int(A.nnz),
        "b_nnz": int(B.nnz),
        "c_nnz": int(C.nnz),
        "c_sum": float(C.sum(dtype=np.float64)),
        "csr_x_csr": bench(lambda: A @ B, a.reps, 2),
    }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
