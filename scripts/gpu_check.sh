#!/usr/bin/env bash
# The one script a GPU session runs for the CUDA backend: the tests with the `cuda` feature and
# the CUDA benchmark, from binaries built beforehand on a machine without a GPU.
#
#   scripts/gpu_check.sh build BIN_DIR        # here (needs cargo; NVRTC from the wheels of
#                                            # scripts/cuda_kernels_check.sh): test binaries,
#                                            # examples and prebuilt PTX into BIN_DIR
#   scripts/gpu_check.sh run BIN_DIR OUT_DIR  # on the GPU machine (needs only the NVIDIA driver)
#
# `run` writes OUT_DIR/summary.txt (one line per test binary: passed / failed / skipped
# counts), OUT_DIR/tests/<binary>.log, OUT_DIR/cuda_info.txt, OUT_DIR/cuda_bench.json (CPU and
# GPU timings from the same run) and OUT_DIR/nvidia-smi.txt, and exits non-zero when a test
# failed. Kernels load from the prebuilt PTX (SPARROW_CUDA_PTX_DIR) unless NVRTC_LIB_DIR names a
# folder holding libnvrtc.so.12, in which case they are compiled at first use as in production.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
case "$mode" in
build)
  dir="${2:?usage: gpu_check.sh build BIN_DIR}"
  mkdir -p "$dir/tests" "$dir/bin" "$dir/ptx"
  # Test binaries of the crates whose tests run on every device (core, nn, optim).
  cargo test --release -p sparrow-core -p sparrow-nn -p sparrow-optim \
    --features sparrow-core/cuda --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])
' | while read -r exe; do cp "$exe" "$dir/tests/"; done
  cargo build --release --features cuda --example cuda_info --example cuda_bench
  cp target/release/examples/cuda_info target/release/examples/cuda_bench "$dir/bin/"
  # Prebuilt PTX for sm_80 (A100) and sm_90 (H100 / H200), through the runtime's NVRTC path.
  venv="${TMPDIR:-/tmp}/sparrow-cuda-venv"
  bash scripts/cuda_kernels_check.sh "$venv" >/dev/null
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  LD_LIBRARY_PATH="$site/nvidia/cuda_nvrtc/lib" \
    cargo run --release --features cuda --example cuda_kernels_check -- --out "$dir/ptx" >/dev/null
  rm -f "$dir/ptx"/*.cubin
  # Symbols off: the folder travels to the GPU machine, and stripped binaries are a third of
  # the size.
  if command -v strip >/dev/null; then strip --strip-all "$dir"/tests/* "$dir"/bin/*; fi
  du -sh "$dir"
  ;;
run)
  dir="$(cd "${2:?usage: gpu_check.sh run BIN_DIR OUT_DIR}" && pwd)"
  out="${3:?usage: gpu_check.sh run BIN_DIR OUT_DIR}"
  mkdir -p "$out/tests"
  if [ -n "${NVRTC_LIB_DIR:-}" ]; then
    export LD_LIBRARY_PATH="$NVRTC_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    export SPARROW_CUDA_PTX_DIR="$dir/ptx"
  fi
  (nvidia-smi || echo "nvidia-smi not found") >"$out/nvidia-smi.txt" 2>&1
  "$dir/bin/cuda_info" | tee "$out/cuda_info.txt"
  failed=0
  : >"$out/summary.txt"
  for t in "$dir"/tests/*; do
    name="$(basename "$t")"
    rc=0
    "$t" --test-threads=4 >"$out/tests/$name.log" 2>&1 || rc=$?
    passed="$(grep -Eo '[0-9]+ passed' "$out/tests/$name.log" | awk '{s += $1} END {print s + 0}')"
    nfail="$(grep -Eo '[0-9]+ failed' "$out/tests/$name.log" | awk '{s += $1} END {print s + 0}')"
    skipped="$(grep -c '^SKIPPED' "$out/tests/$name.log" || true)"
    echo "$name rc=$rc passed=$passed failed=$nfail skipped_on_gpu=$skipped" | tee -a "$out/summary.txt"
    [ "$rc" = 0 ] || failed=1
  done
  "$dir/bin/cuda_bench" --json >"$out/cuda_bench.json" 2>"$out/cuda_bench.log" || failed=1
  "$dir/bin/cuda_bench" 2>/dev/null | tee "$out/cuda_bench.txt" || failed=1
  exit "$failed"
  ;;
*)
  echo "usage: scripts/gpu_check.sh build BIN_DIR | run BIN_DIR OUT_DIR" >&2
  exit 2
  ;;
esac
