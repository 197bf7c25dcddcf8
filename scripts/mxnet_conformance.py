"""MXNet 1.9.1 conformance data for sparrow-optim's optimizers.

Trains a small fixed model a few steps with SGD, SGD+momentum+wd, Adam, AdaGrad and FTRL from
fixed initial weights and writes the initial weights, the data and the resulting weights as
JSON to optim/tests/data/mxnet_conformance.json. The Rust test `mxnet_conformance` replays the
same steps (gradients computed in Rust) and compares to 1e-5 relative; it reads only the JSON.

Model: a Dense layer (W [4, 6], b [4]) on dense inputs, and an Embedding table E [10, 3] with
sparse_grad=True whose rows 6..9 are never used, summed over 2 tokens per sample. Loss: Gluon's
L2Loss on both heads, summed. Updates go through mx.optimizer's updater (Optimizer.update per
parameter index), rescale_grad = 1/batch_size, exactly what gluon.Trainer.step sets.

Run: $MX_PY scripts/mxnet_conformance.py   (MX_PY: python of a venv with mxnet==1.9.1 "numpy<1.24")
"""
import json
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, nd

BATCH, IN, OUT, VOCAB, EDIM, STEPS = 8, 6, 4, 10, 3, 5

rng = np.random.RandomState(7)
x = rng.uniform(-1, 1, (BATCH, IN)).astype(np.float32)
y = rng.uniform(-1, 1, (BATCH, OUT)).astype(np.float32)
tokens = rng.randint(0, 6, (BATCH, 2)).astype(np.int64)
yemb = rng.uniform(-1, 1, (BATCH, EDIM)).astype(np.float32)
init = {
    "dense_w": rng.uniform(-0.5, 0.5, (OUT, IN)).astype(np.float32),
    "dense_b": rng.uniform(-0.1, 0.1, (OUT,)).astype(np.float32),
    "emb": rng.uniform(-0.5, 0.5, (VOCAB, EDIM)).astype(np.float32),
}
ORDER = ["dense_w", "dense_b", "emb"]

CASES = [
    ("sgd", "sgd", dict(learning_rate=0.1)),
    ("sgd_mom_wd", "sgd", dict(learning_rate=0.1, momentum=0.9, wd=0.01)),
    ("sgd_mom_wd_std", "sgd", dict(learning_rate=0.1, momentum=0.9, wd=0.01, lazy_update=False)),
    ("adam", "adam", dict(learning_rate=0.01, wd=0.001, clip_gradient=0.3)),
    ("adam_std", "adam", dict(learning_rate=0.01, wd=0.001, lazy_update=False)),
    ("adagrad", "adagrad", dict(learning_rate=0.1, clip_gradient=0.5)),
    ("ftrl", "ftrl", dict(learning_rate=0.1, lamda1=0.01, wd=0.001)),
]


def run(opt_name, kwargs):
    params = {k: nd.array(v) for k, v in init.items()}
    for p in params.values():
        p.attach_grad()
    params["emb"].attach_grad(stype="row_sparse")
    opt = mx.optimizer.create(opt_name, rescale_grad=1.0 / BATCH, **kwargs)
    updater = mx.optimizer.get_updater(opt)
    loss_fn = mx.gluon.loss.L2Loss()
    xs, ys, ts, yes = nd.array(x), nd.array(y), nd.array(tokens, dtype="int64"), nd.array(yemb)
    for _ in range(STEPS):
        with autograd.record():
            pred = nd.dot(xs, params["dense_w"], transpose_b=True) + params["dense_b"]
            emb = nd.Embedding(ts, params["emb"], input_dim=VOCAB, output_dim=EDIM,
                               sparse_grad=True).sum(axis=1)
            loss = loss_fn(pred, ys) + loss_fn(emb, yes)
        loss.backward()
        assert params["emb"].grad.stype == "row_sparse"
        for i, name in enumerate(ORDER):
            updater(i, params[name].grad, params[name])
    return {k: params[k].asnumpy().ravel().tolist() for k in ORDER}


def main():
    out = {
        "mxnet_version": mx.__version__,
        "batch": BATCH, "in": IN, "out": OUT, "vocab": VOCAB, "edim": EDIM, "steps": STEPS,
        "x": x.ravel().tolist(), "y": y.ravel().tolist(),
        "tokens": tokens.ravel().tolist(), "yemb": yemb.ravel().tolist(),
        "init": {k: v.ravel().tolist() for k, v in init.items()},
        "cases": [],
    }
    for name, opt_name, kwargs in CASES:
        out["cases"].append({"name": name, "optimizer": opt_name, "params": kwargs,
                             "final": run(opt_name, kwargs)})
    path = os.path.join(os.path.dirname(__file__), "..", "optim", "tests", "data",
                        "mxnet_conformance.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
