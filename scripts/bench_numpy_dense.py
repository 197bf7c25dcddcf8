#!/usr/bin/env python3
"""NumPy (OpenBLAS) reference for benches/dense.rs: f32 matmul 512/1024/2048 (GFLOP/s) and an
add of two 16M-element f32 arrays (GB/s, counting 2 reads + 1 write), plus a 1M x 128 uniform
init. Run with the python of a venv with numpy (e.g. the scikit-learn one):
$SK_PY scripts/bench_numpy_dense.py (OPENBLAS_NUM_THREADS=T to pin the matmul threads)
$SK_PY scripts/bench_numpy_dense.py --add-mean: the add alone, mean of 100 calls after 3 warm-ups
(a steadier figure for the single-threaded comparison than the median of 20)
"""
import sys
import time

import numpy as np


def best(f, reps):
    f()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]  # median, as criterion reports


def add_mean():
    n = 16 << 20
    a = np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32)
    b = a.copy()
    for _ in range(3):
        c = a + b
    t = time.perf_counter()
    for _ in range(100):
        c = a + b
    del c
    print("numpy add ms", (time.perf_counter() - t) * 10)


def main():
    if "--add-mean" in sys.argv[1:]:
        add_mean()
        return
    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}")
    for n in (512, 1024, 2048):
        a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        t = best(lambda: a @ b, 10)
        print(f"matmul_f32/{n}: {t * 1e3:.3f} ms  {2 * n**3 / t / 1e9:.1f} GFLOP/s")
    n = 16 << 20
    a = rng.uniform(-1, 1, n).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    t = best(lambda: a + b, 20)
    print(f"elementwise_f32/add_16M: {t * 1e3:.3f} ms  {3 * 4 * n / t / 1e9:.2f} GB/s")
    t = best(lambda: rng.random((1_000_000, 128), dtype=np.float32) * 0.14 - 0.07, 3)
    print(f"random_init/uniform_1Mx128_f32: {t * 1e3:.1f} ms  {128e6 / t / 1e9:.2f} Gelem/s")


if __name__ == "__main__":
    main()
