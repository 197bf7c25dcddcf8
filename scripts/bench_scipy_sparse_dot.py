"""scipy.sparse reference for the sparse products of issue 3 (same shapes as
examples/sparse_dot.rs and the MXNet anchor): X csr float32 (1024, 1,000,000) with 30 distinct
random columns per row, W dense (1e6, 128), G dense (1024, 128); and G^T (128, 1024) @ X, and
D @ X^T for D = G^T @ X as a C-ordered dense array.

Prints median / min / max milliseconds over repeated runs after a warm-up, as JSON.
Usage: $SK_PY scripts/bench_scipy_sparse_dot.py [--only TEXT]
(SK_PY: python of a venv with numpy and scipy; --only runs just the ops whose key contains TEXT)
"""
import json
import sys
import time

import numpy as np
import scipy.sparse as sp

ROWS, COLS, NNZ = 1024, 1_000_000, 30


def bench(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return {"median_ms": float(np.median(ts)) * 1e3, "min_ms": min(ts) * 1e3,
            "max_ms": max(ts) * 1e3, "reps": reps}


def main():
    rng = np.random.RandomState(0)
    idx = np.sort(rng.randint(0, COLS, size=(ROWS, NNZ)), axis=1)
    dup = (np.diff(idx, axis=1) == 0).any(axis=1)
    while dup.any():
        idx[dup] = np.sort(rng.randint(0, COLS, size=(dup.sum(), NNZ)), axis=1)
        dup = (np.diff(idx, axis=1) == 0).any(axis=1)
    data = rng.uniform(0, 1, size=ROWS * NNZ).astype(np.float32)
    indptr = np.arange(0, ROWS * NNZ + 1, NNZ, dtype=np.int64)
    X = sp.csr_matrix((data, idx.ravel(), indptr), shape=(ROWS, COLS))
    W = rng.uniform(-1, 1, size=(COLS, 128)).astype(np.float32)
    G = rng.uniform(-1, 1, size=(ROWS, 128)).astype(np.float32)
    XT = X.T.tocsr()
    res = {"scipy": __import__("scipy").__version__}
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""

    def run(key, fn, reps, warmup):
        if only in key:
            res[key] = bench(fn, reps, warmup)
    run("dot_X_W128", lambda: X @ W, 30, 3)
    # scipy has no row_sparse type: the closest is X^T @ G with a dense (1e6, 128) output
    # (transposing X inside the timed call, as a framework's backward would).
    run("dot_XT_G_dense_out", lambda: X.T @ G, 5, 1)
    run("dot_XT_G_pretransposed_dense_out", lambda: XT @ G, 5, 1)
    # dense . csr: numpy @ csr gives a dense (128, 1e6) array; a csr left operand gives csr.
    GT = np.ascontiguousarray(G.T)
    GT_csr = sp.csr_matrix(GT)
    run("dot_GT_X_dense_out", lambda: GT @ X, 5, 1)
    run("dot_GT_X_csr_out", lambda: GT_csr @ X, 10, 2)
    # D @ X^T with D = G^T @ X as a C-ordered (128, 1e6) array (sparrow's dot(D, X^T)).
    D = np.ascontiguousarray(GT @ X) if only in "dot_D_XT_dense_out" else None
    run("dot_D_XT_dense_out", lambda: D @ X.T, 10, 2)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
