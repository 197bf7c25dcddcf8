"""Check that parsed LibSVM values are the correctly rounded f32 of their decimal text.

Reference: exact rational arithmetic (fractions.Fraction) picks the nearest f32 (ties to even)
for each value token.  Compared: sparrow's values (dumped by
`libsvm_read --dump-values N OUT`) and, if mxnet imports, MXNet's LibSVMIter values.

Usage (the LibSVM reading benchmark's value check, BENCHMARKS.md):
    target/release/examples/libsvm_read FILE --data-shape 10000000 --batch-size 1024 --dump-values 200000 DUMP.bin
    $MX_PY scripts/check_libsvm_rounding.py FILE 100000 DUMP.bin
Any python with numpy works; with mxnet==1.9.1 importable it also checks MXNet's values.
"""
import sys
from fractions import Fraction

import numpy as np


def exact_f32(tok):
    x = Fraction(tok)
    f = np.float32(float(tok))  # within one ulp of the answer; check neighbours exactly
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(c.view(np.uint32)) & 1))
    return best


def main(path, n, dump):
    toks = []
    with open(path) as fh:
        for line in fh:
            for t in line.split()[1:]:
                toks.append(t.split(":")[1])
            if len(toks) >= n:
                break
    toks = toks[:n]
    ref = np.array([exact_f32(t) for t in toks], dtype=np.float32)
    ours = np.fromfile(dump, dtype="<f4")[:n]
    bad = int((ours.view(np.uint32) != ref.view(np.uint32)).sum())
    print("sparrow: %d of %d values differ from the correctly rounded f32" % (bad, n))
    naive = np.array([np.float32(float(t)) for t in toks], dtype=np.float32)
    print("python float -> f32 (double rounding): %d of %d differ"
          % (int((naive.view(np.uint32) != ref.view(np.uint32)).sum()), n))
    try:
        import mxnet as mx
    except ImportError:
        return
    it = mx.io.LibSVMIter(data_libsvm=path, data_shape=(10000000,), label_shape=(1,),
                          batch_size=200)
    vals = []
    for b in it:
        vals.append(b.data[0].data.asnumpy())
        if sum(len(v) for v in vals) >= n:
            break
    mxv = np.concatenate(vals)[:n].astype(np.float32)
    d = mxv.view(np.uint32).astype(np.int64) - ref.view(np.uint32).astype(np.int64)
    print("mxnet: %d of %d differ (%.2f%%), max |ulp diff| %d"
          % (int((d != 0).sum()), n, 100.0 * (d != 0).mean(), int(np.abs(d).max())))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
