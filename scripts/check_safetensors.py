"""Check that a parameter file written by sparrow reads with the Python `safetensors` package.

Usage (after `cargo test -p sparrow-nn --test io writes_file_for_python_check`):
    $SK_PY scripts/check_safetensors.py [target/tmp/sparrow_nn_check.safetensors]
(SK_PY: python of a venv with numpy and safetensors.)
Exits non-zero on any mismatch.
"""
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

path = sys.argv[1] if len(sys.argv) > 1 else "target/tmp/sparrow_nn_check.safetensors"
expected = {
    "embedding0.weight": (100, 8),
    "dense0.weight": (16, 16),
    "dense0.bias": (16,),
    "dense1.weight": (16, 2),  # row_sparse-grad Dense: stored (in_units, units)
    "dense1.bias": (2,),
}
tensors = load_file(path)
if set(tensors) != set(expected):
    sys.exit(f"names differ: {sorted(tensors)} vs {sorted(expected)}")
for name, shape in expected.items():
    t = tensors[name]
    if t.shape != shape or t.dtype != np.float32:
        sys.exit(f"{name}: shape {t.shape} dtype {t.dtype}, expected {shape} float32")
    if not np.all(np.isfinite(t)):
        sys.exit(f"{name}: non-finite values")
with safe_open(path, framework="numpy") as f:
    meta = f.metadata()
if meta.get("format") != "sparrow" or meta.get("layout:dense1.weight") != "in_out":
    sys.exit(f"metadata: {meta}")
if not np.all(tensors["dense0.bias"] == 0):
    sys.exit("dense0.bias should be zero-initialized")
print(f"ok: {len(tensors)} tensors, names, shapes, dtypes and metadata as expected")
