#!/usr/bin/env python3
"""PyTorch anchor for examples/conv_bench.rs: Conv2D forward + backward on a ResNet-style 3x3
layer (batch 32, 64 -> 64 channels, 56x56, padding 1, bias, float32), the input requiring a
gradient, so one step computes y, dx, dw and db; the head gradient is a fixed random tensor.

Prints the median (min, max) milliseconds of the forward, the backward and the step over
--reps steps after two warm-up steps, the process CPU time per step (all threads; on a shared
machine the figure other processes do not inflate, though OpenMP's spin-waiting counts), the
step's GFLOP/s (3 * 2 * N * Cout * Cin * 9 * H * W)
and that as a fraction of torch's GEMM peak at the same thread count (the faster of
torch.mm on the convolution's per-entry product, 64 x 576 by 576 x 3136, and on 1024^3).

Usage: python scripts/bench_torch_conv.py --threads 1 [--reps 10] [--batch 32]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def gemm_gflops(m, k, n, reps):
    a = torch.rand(m, k) * 2 - 1
    b = torch.rand(k, n) * 2 - 1
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2.0 * m * k * n / best / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n, c, hw = args.batch, 64, 56
    x = (torch.rand(n, c, hw, hw) * 2 - 1).requires_grad_()
    w = ((torch.rand(c, c, 3, 3) * 2 - 1) * 0.05).requires_grad_()
    b = ((torch.rand(c) * 2 - 1) * 0.1).requires_grad_()
    dy = torch.rand(n, c, hw, hw) * 2 - 1
    fwd, bwd, step = [], [], []
    cpu_start = None
    for i in range(args.reps + 2):
        if i == 2:
            cpu_start = time.process_time()
        for t in (x, w, b):
            t.grad = None
        t0 = time.perf_counter()
        y = F.conv2d(x, w, b, padding=1)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        if i >= 2:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            step.append((t2 - t0) * 1e3)
    cpu_ms = (time.process_time() - cpu_start) * 1e3 / args.reps
    flops = 3.0 * 2.0 * n * c * c * 9 * hw * hw
    s = statistics.median(step)
    gflops = flops / (s / 1e3) / 1e9
    peak = max(gemm_gflops(c, c * 9, hw * hw, 5), gemm_gflops(1024, 1024, 1024, 3))
    print(f"torch {torch.__version__} conv2d 3x3 batch {n} {c}->{c} {hw}x{hw} pad 1, f32, "
          f"{args.threads} thread(s), {args.reps} steps, mkldnn {torch.backends.mkldnn.is_available()}")
    for name, v in (("forward", fwd), ("backward", bwd), ("step", step)):
        print(f"{name:9s} median {statistics.median(v):8.1f} ms (min {min(v):.1f}, max {max(v):.1f})")
    print(f"step CPU time (all threads) {cpu_ms:.1f} ms")
    print(f"step {gflops:.1f} GFLOP/s; GEMM peak {peak:.1f} GFLOP/s; fraction {gflops / peak:.2f}")


if __name__ == "__main__":
    main()
