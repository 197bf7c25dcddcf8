#!/usr/bin/env python3
"""PyTorch anchor for the softmax_ce_f32 group of benches/dense.rs: softmax cross-entropy of
float32 logits against class ids (`F.cross_entropy(x, ids, reduction="none")`), forward and
backward under a head gradient of ones, the logits requiring a gradient (set to None before
each step, as the bench's gradient is written, not accumulated).

Prints, per shape, the median (min, max) microseconds of a step over --reps steps after
warm-up.

Usage: python scripts/bench_torch_loss.py [--threads 2] [--reps 200]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(3)
    for rows, classes in [(256, 10), (256, 10_000)]:
        x = (torch.rand(rows, classes) * 6 - 3).requires_grad_()
        ids = torch.tensor([(r * 7919) % classes for r in range(rows)])
        head = torch.ones(rows)

        def step():
            x.grad = None
            F.cross_entropy(x, ids, reduction="none").backward(head)

        reps = args.reps if classes < 1000 else max(args.reps // 10, 10)
        for _ in range(max(reps // 10, 3)):
            step()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e6)
        print(
            f"torch {torch.__version__} threads {args.threads} {rows}x{classes}: "
            f"{statistics.median(times):.1f} us ({min(times):.1f}, {max(times):.1f})"
        )


if __name__ == "__main__":
    main()
