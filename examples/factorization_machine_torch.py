"""PyTorch counterpart of examples/factorization_machine.rs: the same factorization machine
(linear term + rank-K pairwise term in Rendle's O(nnz K) form, weights zero / factors N(0, 0.01)),
sigmoid cross-entropy on logits (mean over the batch), Adagrad (lr 0.05, sparse gradients:
nn.Embedding(sparse=True), so only the batch's rows are updated), batch 256, on the LibSVM
file the Rust example writes (`--write-only` prints its path). The batches are built once
before training, so an epoch's time is the training alone, as in the Rust example.

Run: python examples/factorization_machine_torch.py FILE [--features N] [--k K] [--epochs N]
         [--batch N] [--lr F] [--threads N] [--json]
"""
import argparse
import json
import time

import numpy as np
import torch
from sklearn.datasets import load_svmlight_file


class FM(torch.nn.Module):
    def __init__(self, features, k):
        super().__init__()
        self.w = torch.nn.Embedding(features, 1, sparse=True)
        self.v = torch.nn.Embedding(features, k, sparse=True)
        self.b = torch.nn.Parameter(torch.zeros(1))
        torch.nn.init.zeros_(self.w.weight)
        torch.nn.init.normal_(self.v.weight, 0.0, 0.01)

    def forward(self, idx, val, seg, rows):
        # idx, val, seg: column id, value and row of each non-zero of the csr batch.
        lin = torch.zeros(rows).index_add_(0, seg, self.w(idx).squeeze(1) * val) + self.b
        e = self.v(idx) * val.unsqueeze(1)  # the batch's factor rows times their values
        k = e.shape[1]
        xv = torch.zeros(rows, k).index_add_(0, seg, e)
        x2v2 = torch.zeros(rows, k).index_add_(0, seg, e * e)
        return lin + 0.5 * (xv * xv - x2v2).sum(1)


def batches(path, features, batch):
    x, y = load_svmlight_file(path, n_features=features, dtype=np.float32)
    x = x.tocsr()
    out = []
    for s in range(0, x.shape[0], batch):
        xb = x[s:s + batch]
        rows = xb.shape[0]
        seg = np.repeat(np.arange(rows), np.diff(xb.indptr))
        out.append((
            torch.from_numpy(xb.indices.astype(np.int64)),
            torch.from_numpy(xb.data.astype(np.float32)),
            torch.from_numpy(seg.astype(np.int64)),
            rows,
            torch.from_numpy(y[s:s + batch].astype(np.float32)),
        ))
    return out, x.shape[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--features", type=int, default=1_000_000)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    data, rows = batches(a.file, a.features, a.batch)
    fm = FM(a.features, a.k)
    # Adagrad with sparse gradients for the two tables, dense for the bias.
    opt = torch.optim.Adagrad(fm.parameters(), lr=a.lr)
    bce = torch.nn.BCEWithLogitsLoss()
    epoch_s = []
    for epoch in range(a.epochs):
        t = time.perf_counter()
        total = 0.0
        for idx, val, seg, n, y in data:
            opt.zero_grad()
            loss = bce(fm(idx, val, seg, n), y)
            loss.backward()
            opt.step()
            total += loss.item() * n
        secs = time.perf_counter() - t
        epoch_s.append(secs)
        if not a.json:
            print(f"epoch {epoch}: {secs:.3f} s ({rows / secs:.0f} rows/s), mean training loss {total / rows:.4f}")
    if a.json:
        print(json.dumps({"impl": "pytorch", "version": torch.__version__, "rows": rows,
                          "features": a.features, "k": a.k, "batch": a.batch,
                          "threads": a.threads, "epoch_s": [round(s, 4) for s in epoch_s]}))


if __name__ == "__main__":
    main()
