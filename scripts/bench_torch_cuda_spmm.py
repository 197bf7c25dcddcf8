"""PyTorch CUDA anchor for examples/cuda_bench: the sparse tutorial's two first-layer products.

Same shapes as cuda_bench (values drawn by numpy, not sparrow's generator; the timings do not
depend on the values): X csr 1024 x 1,000,000 with 30 non-zeros per row at distinct random
columns, W dense 1,000,000 x 128, G dense 1024 x 128, f32, all on the GPU.

    forward      torch.sparse.mm(X_csr, W)                       -> dense 1024 x 128
    weight-grad  torch.sparse.mm(X_coo.t(), G)                   -> dense 1,000,000 x 128
    row-sparse   index_add_ of vals[:,None] * G[row_of_nnz] into the unique columns' rows
                 (torch.unique with inverse, then index_add_) -> n_unique x 128
    dense        torch.mm 1024^3 f32 (TF32 off, as cuBLAS's default f32 path)

Each: median / min / max ms of 20 runs after 3 warm-ups, each run ending with
torch.cuda.synchronize(). Prints one JSON object.

    python3 scripts/bench_torch_cuda_spmm.py [--reps N]
"""

import argparse
import json
import statistics
import time

import numpy as np
import torch

ROWS = 1024
COLS = 1_000_000
NNZ_PER_ROW = 30
K = 128


def timed(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    rng = np.random.default_rng(1)
    cols = np.empty((ROWS, NNZ_PER_ROW), dtype=np.int64)
    for i in range(ROWS):
        cols[i] = np.sort(rng.choice(COLS, NNZ_PER_ROW, replace=False))
    vals = rng.random(ROWS * NNZ_PER_ROW, dtype=np.float32)
    indptr = np.arange(0, ROWS * NNZ_PER_ROW + 1, NNZ_PER_ROW, dtype=np.int64)
    crow = torch.from_numpy(indptr).to(dev)
    col = torch.from_numpy(cols.ravel()).to(dev)
    val = torch.from_numpy(vals).to(dev)
    x_csr = torch.sparse_csr_tensor(crow, col, val, (ROWS, COLS), device=dev)
    row_of_nnz = torch.arange(ROWS, device=dev).repeat_interleave(NNZ_PER_ROW)
    x_coo = torch.sparse_coo_tensor(torch.stack([row_of_nnz, col]), val, (ROWS, COLS)).coalesce()
    w = torch.randn(COLS, K, device=dev)
    g = torch.randn(ROWS, K, device=dev)
    a = torch.randn(1024, 1024, device=dev)
    b = torch.randn(1024, 1024, device=dev)

    def row_sparse():
        uniq, inv = torch.unique(col, return_inverse=True)
        out = torch.zeros(uniq.numel(), K, device=dev)
        out.index_add_(0, inv, val[:, None] * g[row_of_nnz])
        return uniq, out

    res = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "forward_csr": timed(lambda: torch.sparse.mm(x_csr, w), args.reps),
        "forward_coo": timed(lambda: torch.sparse.mm(x_coo, w), args.reps),
        "weight_grad_dense": timed(lambda: torch.sparse.mm(x_coo.t(), g), args.reps),
        "weight_grad_row_sparse": timed(row_sparse, args.reps),
        "matmul_1024": timed(lambda: a @ b, args.reps),
    }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
