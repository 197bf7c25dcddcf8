#!/usr/bin/env bash
# Compile every CUDA kernel of sparrow-core with NVRTC for sm_80 and sm_90 and assemble each PTX
# with ptxas, on a machine without a GPU or a CUDA toolkit: NVRTC and ptxas come from Python
# wheels installed into a venv. Runs the same NVRTC call as the runtime
# (examples/cuda_kernels_check.rs). A kernel that does not compile or assemble fails.
#
# Usage: scripts/cuda_kernels_check.sh [VENV_DIR]   (default: $TMPDIR/sparrow-cuda-venv)
# SPARROW_PROFILE: the cargo profile to build with (default release; .ci/run: overflow).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${TMPDIR:-/tmp}/sparrow-cuda-venv}"
# The CUDA 12.9 wheels: NVRTC (libnvrtc.so.12 and its builtins) and nvcc's ptxas.
wheels=(nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-nvcc-cu12==12.9.86)
if [ ! -x "$venv/bin/python" ]; then
  # A fresh Debian/Ubuntu machine may lack python3 or its venv module: install them.
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null && command -v apt-get >/dev/null; then
    sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_="sudo"
    $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq python3 python3-venv >/dev/null
  fi
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "${wheels[@]}"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
nvrtc_lib="$site/nvidia/cuda_nvrtc/lib"
ptxas="$site/nvidia/cuda_nvcc/bin/ptxas"
test -e "$nvrtc_lib/libnvrtc.so.12" || { echo "no libnvrtc.so.12 in $nvrtc_lib" >&2; exit 1; }
test -x "$ptxas" || { echo "no ptxas at $ptxas" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cargo run --profile "${SPARROW_PROFILE:-release}" --features cuda --example cuda_kernels_check -- \
  --ptxas "$ptxas" --out "$out" --arch 80 --arch 90
