#!/usr/bin/env python3
"""Export scikit-learn's bundled digits (1797 8x8 images, pixels 0..16) for
examples/lenet_digits.rs, and train the reference models on the same held-out split.

Split: train_test_split(test_size=0.3, random_state=0, stratify=labels). Files: one image per
line, "<label> <64 pixel characters>", each pixel one character of 0123456789abcdefg (0..16),
row-major. The example scales pixels by 1/16 as this script does.

References written to OUT_DIR/digits_reference.json:
  - the same LeNet-style network in PyTorch with the same recipe as the example
    (Conv2D(16, 3, pad 1, relu) -> MaxPool2D(2) -> Conv2D(32, 3, pad 1, relu) -> MaxPool2D(2)
    -> Dense(64, relu) -> Dense(10); softmax cross-entropy; Adam(lr 0.003); batch 32;
    20 epochs; shuffled), mean and spread of the test accuracy over 3 seeds;
  - scikit-learn's LogisticRegression on the flattened pixels.

Usage: python scripts/digits_lenet.py OUT_DIR [--epochs 20]
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

CHARS = "0123456789abcdefg"


def write(path, x, y):
    with open(path, "w") as f:
        for img, label in zip(x, y):
            f.write(f"{int(label)} {''.join(CHARS[int(v)] for v in img)}\n")


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10))


def train_torch(xtr, ytr, xte, yte, epochs, seed):
    torch.manual_seed(seed)
    net = lenet()
    opt = torch.optim.Adam(net.parameters(), lr=0.003)
    loss_fn = nn.CrossEntropyLoss()
    xt = torch.tensor(xtr, dtype=torch.float32).reshape(-1, 1, 8, 8)
    yt = torch.tensor(ytr, dtype=torch.int64)
    for _ in range(epochs):
        perm = torch.randperm(len(yt))
        for i in range(0, len(yt), 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            loss = loss_fn(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    with torch.no_grad():
        pred = net(torch.tensor(xte, dtype=torch.float32).reshape(-1, 1, 8, 8)).argmax(1)
    return float((pred.numpy() == yte).mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    write(os.path.join(args.out_dir, "digits_train.txt"), xtr, ytr)
    write(os.path.join(args.out_dir, "digits_test.txt"), xte, yte)
    xtr, xte = xtr / 16.0, xte / 16.0
    torch.set_num_threads(1)
    accs = [train_torch(xtr, ytr, xte, yte, args.epochs, s) for s in range(3)]
    logreg = LogisticRegression(max_iter=2000).fit(xtr, ytr).score(xte, yte)
    res = {
        "dataset": "sklearn.datasets.load_digits",
        "n_train": int(len(ytr)),
        "n_test": int(len(yte)),
        "torch_version": torch.__version__,
        "torch_lenet_epochs": args.epochs,
        "torch_lenet_test_accuracy": accs,
        "torch_lenet_test_accuracy_mean": float(np.mean(accs)),
        "sklearn_logistic_regression_test_accuracy": float(logreg),
    }
    with open(os.path.join(args.out_dir, "digits_reference.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
