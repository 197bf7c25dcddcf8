"""PyTorch CUDA anchor for `sparse_gluon --device cuda`: the sparse tutorial's model on a GPU.

The model and data of ../shared/anchors/torch/bench_sparse_mlp.py (1,000,000 -> 128 -> 8 -> 1,
sigmoid after every layer, BCELoss, SGD lr 0.1; rows of 10 non-zeros at distinct random
columns, label = row sum above the mean), with the rows, batch size and variant as flags:

    embbag  nn.EmbeddingBag(sparse=True) first layer: sparse gradient, sparse SGD update
            (the tutorial's variant (c))
    spmm    torch.sparse.mm(csr batch, W): dense 1M x 128 weight gradient (variant (b))

Every batch is sliced on the host beforehand and copied to the GPU inside the step, as sparrow's
loader batches are. One warm-up epoch, then --epochs timed epochs, each ending with
torch.cuda.synchronize(). Prints one JSON object: ms per epoch (median, min, max) and samples/s
at the median.

    python3 scripts/bench_torch_cuda_tutorial.py --variant embbag [--samples 1000]
        [--batch-size 10] [--epochs 7]
"""

import argparse
import json
import statistics
import time

import numpy as np
import torch
from torch import nn

N_FEAT = 1_000_000
NNZ_PER_ROW = 10
HIDDEN = 128


def make_batches(rows, batch, variant, seed=0):
    rng = np.random.default_rng(seed)
    cols = np.empty((rows, NNZ_PER_ROW), dtype=np.int64)
    for i in range(rows):
        cols[i] = np.sort(rng.choice(N_FEAT, NNZ_PER_ROW, replace=False))
    vals = rng.random((rows, NNZ_PER_ROW), dtype=np.float32)
    row_sum = vals.sum(axis=1)
    y = (row_sum > row_sum.mean()).astype(np.float32)
    out = []
    for s in range(0, rows, batch):
        n = min(batch, rows - s)
        indices = torch.from_numpy(cols[s:s + n].ravel().copy())
        values = torch.from_numpy(vals[s:s + n].ravel().copy())
        indptr = torch.arange(0, n * NNZ_PER_ROW + 1, NNZ_PER_ROW, dtype=torch.int64)
        label = torch.from_numpy(y[s:s + n].copy()).view(-1, 1)
        out.append((indices, indptr, values, label, n))
    return out


class EmbBagFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(N_FEAT, HIDDEN, mode="sum", sparse=True)
        self.bias = nn.Parameter(torch.zeros(HIDDEN))

    def forward(self, indices, indptr, values, n):
        return self.emb(indices, indptr[:-1], per_sample_weights=values) + self.bias


class SpmmFirst(nn.Module):
    def __init__(self):
        super().__init__()
        bound = 1.0 / N_FEAT ** 0.5
        self.weight = nn.Parameter(torch.empty(N_FEAT, HIDDEN).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(HIDDEN).uniform_(-bound, bound))

    def forward(self, indices, indptr, values, n):
        x = torch.sparse_csr_tensor(indptr, indices, values, size=(n, N_FEAT))
        return torch.sparse.mm(x, self.weight) + self.bias


class Net(nn.Module):
    def __init__(self, first):
        super().__init__()
        self.first = first
        self.fc2 = nn.Linear(HIDDEN, 8)
        self.fc3 = nn.Linear(8, 1)

    def forward(self, *x):
        h = torch.sigmoid(self.first(*x))
        h = torch.sigmoid(self.fc2(h))
        return torch.sigmoid(self.fc3(h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["embbag", "spmm"], default="embbag")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=7)
    args = ap.parse_args()
    dev = torch.device("cuda")
    batches = make_batches(args.samples, args.batch_size, args.variant)
    first = EmbBagFirst() if args.variant == "embbag" else SpmmFirst()
    net = Net(first).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_fn = nn.BCELoss()

    def epoch():
        loss = None
        for indices, indptr, values, label, n in batches:
            i, p, v, lb = (t.to(dev, non_blocking=False) for t in (indices, indptr, values, label))
            out = net(i, p, v, n)
            loss = loss_fn(out, lb)
            loss.backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
        return float(loss.detach())

    epoch()
    times = []
    last = None
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        last = epoch()
        times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    print(json.dumps({
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "variant": args.variant, "samples": args.samples, "batch_size": args.batch_size,
        "epoch_ms_median": med, "epoch_ms_min": min(times), "epoch_ms_max": max(times),
        "samples_per_s": args.samples / (med / 1e3), "last_loss": last,
    }))


if __name__ == "__main__":
    main()
