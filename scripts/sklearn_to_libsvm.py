"""Convert scikit-learn's bundled breast-cancer data set to LibSVM train/test files and record
scikit-learn's LogisticRegression accuracy on the held-out split, for the real-data check of
examples/real_data.rs.

Usage: python scripts/sklearn_to_libsvm.py OUT_DIR
Writes OUT_DIR/breast_cancer_train.libsvm, OUT_DIR/breast_cancer_test.libsvm and
OUT_DIR/breast_cancer_sklearn.json. Features are standardised with the training split's mean and
standard deviation (as a user would before a linear model); zero-based indices; labels 0/1.
"""
import json
import os
import sys

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split


def write(path, x, y):
    with open(path, "w") as f:
        for row, label in zip(x, y):
            feats = " ".join(f"{j}:{repr(float(v))}" for j, v in enumerate(row) if v != 0.0)
            f.write(f"{int(label)} {feats}\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    x, y = load_breast_cancer(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    mu, sd = xtr.mean(axis=0), xtr.std(axis=0)
    xtr = ((xtr - mu) / sd).astype(np.float32)
    xte = ((xte - mu) / sd).astype(np.float32)
    write(os.path.join(out, "breast_cancer_train.libsvm"), xtr, ytr)
    write(os.path.join(out, "breast_cancer_test.libsvm"), xte, yte)
    clf = LogisticRegression(max_iter=1000).fit(xtr, ytr)
    res = {
        "dataset": "sklearn.datasets.load_breast_cancer",
        "n_train": int(len(ytr)),
        "n_test": int(len(yte)),
        "n_features": int(x.shape[1]),
        "sklearn_logreg_test_accuracy": float(clf.score(xte, yte)),
        "sklearn_logreg_train_accuracy": float(clf.score(xtr, ytr)),
    }
    with open(os.path.join(out, "breast_cancer_sklearn.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
