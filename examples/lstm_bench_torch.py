"""PyTorch counterpart of examples/lstm_bench.rs: torch.nn.LSTM forward + backward (batch 32,
input 256, hidden 256, 100 steps, f32, CPU), median of REPS runs after a warm-up, at each
thread count given, with a 1024^3 matmul's rate in the same run.

Run: python examples/lstm_bench_torch.py [THREADS ...] (default: 1 2)
"""
import statistics
import sys
import time

import torch

T, N, I, H, REPS = 100, 32, 256, 256, 10


def main(threads):
    torch.manual_seed(0)
    net = torch.nn.LSTM(I, H)
    x = torch.rand(T, N, I) * 2 - 1
    a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
    flops = 3.0 * 2.0 * T * N * 4 * H * (I + H)
    for k in threads:
        torch.set_num_threads(k)

        def run():
            out, _ = net(x)
            out.sum().backward()

        run()
        times = []
        for _ in range(REPS):
            s = time.perf_counter()
            run()
            times.append(time.perf_counter() - s)
        secs = statistics.median(times)
        a @ b
        g = []
        for _ in range(5):
            s = time.perf_counter()
            a @ b
            g.append(time.perf_counter() - s)
        gemm = 2.0 * 1024**3 / statistics.median(g) / 1e9
        rate = flops / secs / 1e9
        print(f"torch {torch.__version__} LSTM fwd+bwd T={T} N={N} I={I} H={H} threads={k}: "
              f"{secs * 1e3:.1f} ms total, {secs * 1e3 / T:.3f} ms/step, {rate:.1f} GFLOP/s; "
              f"GEMM 1024^3 {gemm:.1f} GFLOP/s; fraction of GEMM {rate / gemm:.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 2])
