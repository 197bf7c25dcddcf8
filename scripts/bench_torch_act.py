#!/usr/bin/env python3
"""PyTorch anchor for the activation_f32 group of benches/dense.rs: each activation forward and
backward on a (256, 4096) float32 array with values in [-3, 3) under a head gradient of ones,
the input requiring a gradient (set to None before each step, as the bench's gradient is
written, not accumulated).

Prints, per activation, the median (min, max) microseconds of a step over --reps steps after
warm-up.

Usage: python scripts/bench_torch_act.py [--threads 2] [--reps 100]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

CASES = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "elu": F.elu,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(4)
    x = (torch.rand(256, 4096) * 6 - 3).requires_grad_()
    head = torch.ones(256, 4096)
    for name, f in CASES.items():

        def step():
            x.grad = None
            f(x).backward(head)

        for _ in range(max(args.reps // 10, 3)):
            step()
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e6)
        print(
            f"torch {torch.__version__} threads {args.threads} {name}: "
            f"{statistics.median(times):.1f} us ({min(times):.1f}, {max(times):.1f})"
        )


if __name__ == "__main__":
    main()
