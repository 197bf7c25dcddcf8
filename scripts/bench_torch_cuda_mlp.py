"""PyTorch CUDA anchor for examples/cuda_graph: a 784-512-512-10 relu MLP's training step
(softmax cross-entropy, SGD lr 0.01) at batches of 32 and 256, f32 (TF32 off), eager and
captured as a CUDA graph (torch.cuda.graph over forward, backward and the optimizer step, the
whole-network capture of PyTorch's CUDA graphs guide).

Each figure: median over ROUNDS of the mean step time of STEPS steps, synchronized after each
block. Prints one line per batch.

    python3 scripts/bench_torch_cuda_mlp.py [--steps 50] [--rounds 5]
"""

import argparse
import statistics
import time

import torch


def model():
    return torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).cuda()


def timed(step, steps, rounds):
    ts = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e6 / steps)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    for batch in (32, 256):
        x = torch.rand(batch, 784, device="cuda") * 2 - 1
        y = torch.arange(batch, device="cuda") % 10
        loss_fn = torch.nn.CrossEntropyLoss()

        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=0.01)

        def eager():
            opt.zero_grad(set_to_none=True)
            loss_fn(net(x), y).backward()
            opt.step()

        for _ in range(3):
            eager()
        t_eager = timed(eager, a.steps, a.rounds)

        gnet = model()
        gopt = torch.optim.SGD(gnet.parameters(), lr=0.01)
        sx, sy = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                gopt.zero_grad(set_to_none=True)
                loss_fn(gnet(sx), sy).backward()
                gopt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        gopt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = loss_fn(gnet(sx), sy)
            loss.backward()
            gopt.step()

        def replay():
            sx.copy_(x)
            sy.copy_(y)
            graph.replay()

        t_graph = timed(replay, a.steps, a.rounds)
        print(
            f"torch batch {batch:4}: step us: eager {t_eager:8.1f}  CUDA graph {t_graph:8.1f}  "
            f"(eager / graph {t_eager / t_graph:.2f}x)"
        )


if __name__ == "__main__":
    main()
