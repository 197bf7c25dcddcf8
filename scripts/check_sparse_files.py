"""Check that array files written by `sparrow_core::io` read with SciPy, NumPy and `safetensors`,
and write the SciPy/NumPy files sparrow's tests read (core/tests/fixtures/sparse_files).

Usage (after `cargo test --release -p sparrow-core --test save_load writes_files_for_python_check`):
    $SK_PY scripts/check_sparse_files.py [DIR]          # DIR: target/tmp/sparrow_sparse_files
    $SK_PY scripts/check_sparse_files.py --write-fixtures core/tests/fixtures/sparse_files
(SK_PY: python of a venv with numpy, scipy and safetensors.)
Exits non-zero on any mismatch.
"""
import json
import os
import sys
import zipfile

import numpy as np
import scipy.sparse as sp

# The matrix the Rust test writes (`KNOWN` in core/tests/save_load.rs).
KNOWN = np.array([[1, 0, 2, 0], [0, 0, 0, 0], [0, 3, 0, 4.5]])
# The row_sparse array it writes: rows 1 and 3 of a 4 x 3 array stored.
ROWS = np.array([[0, 0, 0], [1, 2, 3], [0, 0, 0], [4, 5, 6]], dtype=np.float32)
W = np.arange(6, dtype=np.int64).reshape(2, 3)


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def same(name, got, want, dtype):
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    if got.dtype != dtype or got.shape != want.shape or not np.array_equal(got, want):
        fail(f"{name}: got {got.dtype} {got.shape}\n{got}\nexpected {np.dtype(dtype)} {want.shape}\n{want}")


def check(folder):
    path = lambda f: os.path.join(folder, f)
    # One sparse array: exactly scipy's save_npz file.
    for f in ["csr.npz", "csr_deflate.npz"]:
        names = zipfile.ZipFile(path(f)).namelist()
        if names != ["indices.npy", "indptr.npy", "format.npy", "shape.npy", "data.npy"]:
            fail(f"{f}: members {names}")
        m = sp.load_npz(path(f))
        if m.format != "csr":
            fail(f"{f}: loaded as {m.format}")
        same(f, m, KNOWN, np.float64)
    m = sp.load_npz(path("rsp.npz"))
    if m.format != "bsr" or m.blocksize != (1, 3):
        fail(f"rsp.npz: loaded as {m.format} blocksize {m.blocksize}")
    same("rsp.npz", m, ROWS, np.float32)

    # A dict: np.load, sparse members rebuilt from their scipy components.
    z = np.load(path("dict.npz"))
    if sorted(z.files) != sorted(
        ["w"] + [f"{n}/{c}" for n in "xg" for c in ["data", "indices", "indptr", "format", "shape"]]
    ):
        fail(f"dict.npz: members {z.files}")
    same("dict.npz w", z["w"], W, np.int64)
    if z["x/format"].item() != b"csr" or z["g/format"].item() != b"bsr":
        fail("dict.npz: format members")
    x = sp.csr_matrix((z["x/data"], z["x/indices"], z["x/indptr"]), shape=tuple(z["x/shape"]))
    same("dict.npz x", x, KNOWN, np.float64)
    g = sp.bsr_matrix((z["g/data"], z["g/indices"], z["g/indptr"]), shape=tuple(z["g/shape"]))
    same("dict.npz g", g, ROWS, np.float32)

    # safetensors: components by their documented names, stype and shape in the metadata.
    from safetensors import safe_open
    from safetensors.numpy import load_file

    f = path("dict.safetensors")
    t = load_file(f)
    if sorted(t) != sorted(["w", "x/data", "x/indices", "x/indptr", "g/data", "g/indices"]):
        fail(f"dict.safetensors: tensors {sorted(t)}")
    with safe_open(f, framework="numpy") as st:
        meta = st.metadata()
    if meta.get("format") != "sparrow-ndarrays" or json.loads(meta["names"]) != ["w", "x", "g"]:
        fail(f"dict.safetensors: metadata {meta}")
    if (meta["stype:w"], meta["stype:x"], meta["stype:g"]) != ("default", "csr", "row_sparse"):
        fail(f"dict.safetensors: stypes {meta}")
    same("dict.safetensors w", t["w"], W, np.int64)
    x = sp.csr_matrix(
        (t["x/data"], t["x/indices"], t["x/indptr"]), shape=tuple(json.loads(meta["shape:x"]))
    )
    same("dict.safetensors x", x, KNOWN, np.float64)
    g = np.zeros(json.loads(meta["shape:g"]), dtype=t["g/data"].dtype)
    g[t["g/indices"]] = t["g/data"]
    same("dict.safetensors g", g, ROWS, np.float32)

    # Half precision: float16 values as they were written.
    m = sp.load_npz(path("csr_f16.npz"))
    if m.format != "csr" or m.dtype != np.float16:
        fail(f"csr_f16.npz: loaded as {m.format} {m.dtype}")
    # SciPy's sparsetools have no float16 kernels (toarray refuses it): compare widened.
    same("csr_f16.npz", m.astype(np.float32), KNOWN.astype(np.float16).astype(np.float32), np.float32)
    same("half.safetensors h", load_file(path("half.safetensors"))["h"], ROWS.astype(np.float16), np.float16)
    print("ok: csr.npz, csr_deflate.npz, rsp.npz, csr_f16.npz (scipy.sparse.load_npz), dict.npz "
          "(np.load), dict.safetensors, half.safetensors (safetensors.numpy) hold the expected arrays")


def write_fixtures(folder):
    os.makedirs(folder, exist_ok=True)
    # scipy's defaults: compressed, int32 indices; a csr_array also writes `_is_array`.
    sp.save_npz(os.path.join(folder, "scipy_csr_compressed.npz"), sp.csr_array(KNOWN))
    sp.save_npz(
        os.path.join(folder, "scipy_csr_stored_f32.npz"),
        sp.csr_matrix(KNOWN.astype(np.float32)),
        compressed=False,
    )
    sp.save_npz(os.path.join(folder, "scipy_bsr_rows.npz"), sp.bsr_matrix(ROWS, blocksize=(1, 3)))
    np.savez_compressed(
        os.path.join(folder, "numpy_savez_compressed.npz"),
        ids=np.arange(6, dtype=np.int64),
        w=np.array([[0.5, -1.0], [2.0, 8.0]], dtype=np.float32),
    )
    print(f"wrote fixtures to {folder}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--write-fixtures":
        write_fixtures(sys.argv[2] if len(sys.argv) > 2 else "core/tests/fixtures/sparse_files")
    else:
        check(sys.argv[1] if len(sys.argv) > 1 else "target/tmp/sparrow_sparse_files")
