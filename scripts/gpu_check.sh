#!/usr/bin/env bash
# The one script a GPU session runs for the CUDA backend: the CUDA benchmark beside PyTorch CUDA,
# then the tests with the `cuda` feature, from binaries built beforehand on a machine without a
# GPU.
#
#   scripts/gpu_check.sh build BIN_DIR        # here (needs cargo; NVRTC from the wheels of
#                                            # scripts/cuda_kernels_check.sh): test binaries,
#                                            # examples and prebuilt PTX into BIN_DIR
#   scripts/gpu_check.sh pack BIN_DIR PACK_DIR  # BIN_DIR small enough to ship: the ~680 MB of
#                                            # binaries and PTX as one xz stream (~49 MB; a 512
#                                            # MiB dictionary finds the code they share), ~6 min
#   scripts/gpu_check.sh run BIN_DIR OUT_DIR  # on the GPU machine (needs only the NVIDIA driver;
#                                            # cuBLAS 12 or 13 found on the loader path or in
#                                            # the usual CUDA folders)
#
# `run` writes OUT_DIR/nvidia-smi.txt, OUT_DIR/cuda_info.txt, OUT_DIR/cuda_bench.txt (CPU and
# GPU timings from the same run), OUT_DIR/torch_cuda.json (PyTorch CUDA on the same products,
# when python3 has torch), OUT_DIR/summary.txt (one line per test binary: passed / failed /
# skipped counts), OUT_DIR/skipped.txt (each test's skip line: an op without a CUDA kernel
# yet), OUT_DIR/cuda_graph.txt (a dense MLP's step eager, hybridized and
# replayed as a CUDA graph, beside PyTorch's eager and CUDA-graph steps), OUT_DIR/tutorial.txt (the main job on the GPU and the CPU, PyTorch CUDA's, and the
# over-budget table: (c) on the GPU with its first-layer weight on the device against the same
# weight held in host memory under a 100 MB device budget) and OUT_DIR/tests.log (the output
# of failing binaries), and exits non-zero when a test failed. Each test binary runs from its
# crate's folder, as cargo runs it, under a limit of TEST_TIMEOUT seconds (300). PARTS
# (default "bench graph tutorial staged tests") picks what runs, STAGED_ROUNDS (2) how many
# alternations of the staged pair; TESTS_ONLY=1 is PARTS=tests; CRATES (default "core nn
# optim") whose test binaries run, in that order.
# Kernels load from the prebuilt PTX (SPARROW_CUDA_PTX_DIR) unless NVRTC_LIB_DIR names a folder
# holding libnvrtc.so.12, in which case they are compiled at first use as in production.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
case "$mode" in
build)
  dir="${2:?usage: gpu_check.sh build BIN_DIR}"
  rm -rf "$dir/tests"
  mkdir -p "$dir/tests" "$dir/bin" "$dir/ptx"
  # Test binaries of the crates whose tests run on every device (core, nn, optim), filed under
  # their crate's folder (tests read fixtures relative to it).
  cargo test --release -p sparrow-core -p sparrow-nn -p sparrow-optim \
    --features sparrow-core/cuda --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, os, sys
root = os.getcwd()
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        crate = os.path.relpath(os.path.dirname(m["manifest_path"]), root)
        print(crate, m["executable"])
' | while read -r crate exe; do
    mkdir -p "$dir/tests/$crate"
    cp "$exe" "$dir/tests/$crate/"
  done
  cargo build --release --features cuda --example cuda_info --example cuda_bench \
    --example sparse_gluon --example cuda_graph
  cp target/release/examples/{cuda_info,cuda_bench,sparse_gluon,cuda_graph} "$dir/bin/"
  # Prebuilt PTX for sm_80 (A100) and sm_90 (H100 / H200), through the runtime's NVRTC path.
  venv="${TMPDIR:-/tmp}/sparrow-cuda-venv"
  bash scripts/cuda_kernels_check.sh "$venv" >/dev/null
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  LD_LIBRARY_PATH="$site/nvidia/cuda_nvrtc/lib" \
    cargo run --release --features cuda --example cuda_kernels_check -- --out "$dir/ptx" >/dev/null
  rm -f "$dir/ptx"/*.cubin
  # Symbols off: the folder travels to the GPU machine, and stripped binaries are a third of
  # the size.
  if command -v strip >/dev/null; then strip --strip-all "$dir"/tests/*/* "$dir"/bin/*; fi
  du -sh "$dir"
  ;;
pack)
  dir="${2:?usage: gpu_check.sh pack BIN_DIR PACK_DIR}"
  pack="${3:?usage: gpu_check.sh pack BIN_DIR PACK_DIR}"
  rm -rf "$pack"
  mkdir -p "$pack"
  # The examples and PTX go in the same stream: shipped as they are they pushed the working
  # tree plus the pack past the device tool's 64 MiB.
  tar cf - -C "$dir" tests bin ptx | xz -T1 -9 --lzma2=dict=512MiB,nice=64 >"$pack/tests.tar.xz"
  du -sh "$pack"
  ;;
run)
  dir="$(cd "${2:?usage: gpu_check.sh run BIN_DIR OUT_DIR}" && pwd)"
  if [ ! -d "$dir/tests" ] && [ -f "$dir/tests.tar.xz" ]; then
    # A packed BIN_DIR (test binaries, examples and PTX in one stream).
    unpacked="$(mktemp -d)"
    xz -dc "$dir/tests.tar.xz" | tar xf - -C "$unpacked"
    dir="$unpacked"
  fi
  out="${3:?usage: gpu_check.sh run BIN_DIR OUT_DIR}"
  out="$(mkdir -p "$out" && cd "$out" && pwd)"
  root="$(pwd)"
  if [ -n "${NVRTC_LIB_DIR:-}" ]; then
    export LD_LIBRARY_PATH="$NVRTC_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    export SPARROW_CUDA_PTX_DIR="$dir/ptx"
  fi
  # cudarc (built for the CUDA 12 API) opens libcublas.so, .so.12 or .so.11; a CUDA 13 machine
  # has libcublas.so.13, whose v2 entry points are the same: link it under the plain name.
  if ! ldconfig -p 2>/dev/null | grep -qE 'libcublas\.so(\.12)? '; then
    lib="$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
      /opt -name 'libcublas.so.1[23]' 2>/dev/null | head -n1 || true)"
    if [ -n "$lib" ]; then
      links="$(mktemp -d)"
      ln -sf "$lib" "$links/libcublas.so"
      export LD_LIBRARY_PATH="$links:$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cuBLAS: $lib"
    fi
  fi
  (nvidia-smi || echo "nvidia-smi not found") >"$out/nvidia-smi.txt" 2>&1
  "$dir/bin/cuda_info" 2>&1 | tee "$out/cuda_info.txt"
  failed=0
  parts=" ${PARTS:-bench graph tutorial staged tests} "
  if [ -n "${TESTS_ONLY:-}" ]; then parts=" tests "; fi
  has_torch=0
  python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && has_torch=1
  tut="$out/tutorial.txt"
  : >"$tut"
  if [[ "$parts" == *" bench "* ]]; then
    "$dir/bin/cuda_bench" 2>&1 | tee "$out/cuda_bench.txt" || failed=1
    if [ "$has_torch" = 1 ]; then
      python3 scripts/bench_torch_cuda_spmm.py | tee "$out/torch_cuda.json" || failed=1
    fi
  fi
  if [[ "$parts" == *" graph "* ]]; then
    # A dense MLP's training step eager, hybridized, and captured as a CUDA graph, beside
    # PyTorch's eager and CUDA-graph steps.
    timeout 200 "$dir/bin/cuda_graph" 2>&1 | tee "$out/cuda_graph.txt" || failed=1
    if [ "$has_torch" = 1 ]; then
      timeout 200 python3 scripts/bench_torch_cuda_mlp.py 2>&1 | tee -a "$out/cuda_graph.txt" ||
        failed=1
    fi
  fi
  if [[ "$parts" == *" tutorial "* ]]; then
    # The main job on the GPU and on this machine's CPU, then PyTorch CUDA's variant (c)
    # (EmbeddingBag, sparse gradient) on the same data sizes: the tutorial's batch of 10, and
    # batches of 1024 over 100,000 rows.
    for dev in cuda cpu; do
      echo "== sparse_gluon --device $dev" >>"$tut"
      timeout 150 "$dir/bin/sparse_gluon" --device "$dev" >>"$tut" 2>&1 || failed=1
      echo "== sparse_gluon --device $dev --variants c --samples 100000 --batch-size 1024 --epochs 5" >>"$tut"
      timeout 150 "$dir/bin/sparse_gluon" --device "$dev" --variants c --samples 100000 --batch-size 1024 \
        --epochs 5 >>"$tut" 2>&1 || failed=1
    done
    if [ "$has_torch" = 1 ]; then
      for cfg in "--variant embbag" "--variant spmm" \
        "--variant embbag --samples 100000 --batch-size 1024 --epochs 5"; do
        echo "== torch $cfg" >>"$tut"
        # shellcheck disable=SC2086
        timeout 150 python3 scripts/bench_torch_cuda_tutorial.py $cfg >>"$tut" 2>&1 || failed=1
      done
    fi
  fi
  if [[ "$parts" == *" staged "* ]]; then
    # The over-budget table: (c) with the 512 MB first-layer weight on the GPU, then held in
    # host memory (100 MB budget) with each step's rows moved, alternated, at both batch sizes.
    for round in $(seq "${STAGED_ROUNDS:-2}"); do
      for budget in "" "--device-budget-mb 100"; do
        for cfg in "" "--samples 100000 --batch-size 1024 --epochs 5"; do
          echo "== staged round $round: sparse_gluon --device cuda --variants c $cfg $budget" >>"$tut"
          # shellcheck disable=SC2086
          timeout 150 "$dir/bin/sparse_gluon" --device cuda --variants c $cfg $budget >>"$tut" 2>&1 ||
            failed=1
        done
      done
    done
  fi
  cat "$tut"
  if [[ "$parts" != *" tests "* ]]; then
    exit "$failed"
  fi
  # Tests that write scratch files use cargo's target/tmp.
  mkdir -p "$root/target/tmp"
  : >"$out/summary.txt"
  : >"$out/tests.log"
  : >"$out/skipped.txt"
  for t in $(for c in ${CRATES:-core nn optim}; do ls -d "$dir/tests/$c"/* 2>/dev/null; done); do
    crate="$(basename "$(dirname "$t")")"
    name="$crate/$(basename "$t")"
    rc=0
    log="$(mktemp)"
    (cd "$root/$crate" && timeout "${TEST_TIMEOUT:-300}" "$t" --test-threads=8) >"$log" 2>&1 || rc=$?
    # A binary killed by the limit printed no result line: grep finds nothing, which must
    # not end the loop (pipefail).
    passed="$({ grep -Eo '[0-9]+ passed' "$log" || true; } | awk '{s += $1} END {print s + 0}')"
    nfail="$({ grep -Eo '[0-9]+ failed' "$log" || true; } | awk '{s += $1} END {print s + 0}')"
    skipped="$(grep -c '^SKIPPED' "$log" || true)"
    echo "$name rc=$rc passed=$passed failed=$nfail skipped_on_gpu=$skipped" | tee -a "$out/summary.txt"
    grep '^SKIPPED' "$log" | sed "s|^|$name: |" >>"$out/skipped.txt" || true
    if [ "$rc" != 0 ]; then
      failed=1
      { echo "=== $name (rc=$rc)"; cat "$log"; } >>"$out/tests.log"
    fi
    rm -f "$log"
  done
  exit "$failed"
  ;;
*)
  echo "usage: scripts/gpu_check.sh build BIN_DIR | pack BIN_DIR PACK_DIR | run BIN_DIR OUT_DIR" >&2
  exit 2
  ;;
esac
