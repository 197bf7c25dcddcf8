"""PyTorch version of examples/char_lm.rs: the same corpus file, vocabulary (the bytes that
occur, in byte order), 90/10 split, 32 contiguous streams, windows of 50 steps with the hidden
state carried (detached), Embedding(V, 32) -> LSTM(32, H) -> Linear(H, V), weights uniform in
[-0.1, 0.1] and biases zero, Adam 2e-3, global-norm clipping at 1.0; held-out perplexity after
each epoch.

Run: python examples/char_lm_torch.py CORPUS [EPOCHS] [HIDDEN] [THREADS]
"""
import math
import sys
import time

import torch

BATCH, BPTT, EMBED = 32, 50, 32


def batchify(ids):
    n = len(ids) // BATCH
    return torch.tensor(ids[: n * BATCH]).view(BATCH, n).t().contiguous()  # (len, BATCH)


class Model(torch.nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, EMBED, sparse=False)
        self.lstm = torch.nn.LSTM(EMBED, hidden)
        self.out = torch.nn.Linear(hidden, vocab)
        for name, p in self.named_parameters():
            if "bias" in name:
                torch.nn.init.zeros_(p)
            else:
                torch.nn.init.uniform_(p, -0.1, 0.1)

    def forward(self, x, state):
        h, state = self.lstm(self.embed(x), state)
        return self.out(h.reshape(-1, h.shape[-1])), state


def windows(data):
    t0 = 0
    while t0 + 1 < data.shape[0]:
        t = min(BPTT, data.shape[0] - 1 - t0)
        yield data[t0 : t0 + t], data[t0 + 1 : t0 + 1 + t].reshape(-1)
        t0 += t


def main(path, epochs, hidden, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(7)
    text = open(path, "rb").read()
    alphabet = sorted(set(text))
    index = {b: i for i, b in enumerate(alphabet)}
    ids = [index[b] for b in text]
    split = len(ids) * 9 // 10
    train, valid = batchify(ids[:split]), batchify(ids[split:])
    model = Model(len(alphabet), hidden)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    print(f"torch {torch.__version__}, {threads} threads; corpus {path}: {len(text)} chars, "
          f"vocab {len(alphabet)}, train {train.shape[0]} x {BATCH}, valid {valid.shape[0]} x {BATCH}")
    for epoch in range(epochs):
        start = time.perf_counter()
        model.train()
        state, total, count = None, 0.0, 0
        for x, y in windows(train):
            logits, state = model(x, state)
            loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            state = tuple(s.detach() for s in state)
            total += loss.item() * y.numel()
            count += y.numel()
        model.eval()
        with torch.no_grad():
            state, vtotal, vcount = None, 0.0, 0
            for x, y in windows(valid):
                logits, state = model(x, state)
                vtotal += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
                vcount += y.numel()
        vce = vtotal / vcount
        print(f"epoch {epoch + 1}: train ppl {math.exp(total / count):.3f}, valid ppl "
              f"{math.exp(vce):.3f} ({vce / math.log(2):.3f} bits/char), "
              f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: char_lm_torch.py CORPUS [EPOCHS] [HIDDEN] [THREADS]")
    a = sys.argv[1:] + [None] * 3
    main(a[0], int(a[1] or 3), int(a[2] or 128), int(a[3] or 1))
