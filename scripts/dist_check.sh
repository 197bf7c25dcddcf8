#!/usr/bin/env bash
# The distributed checks of sparrow-kvstore's `dist_sync` (cargo feature `mpi`) under
# `mpirun -np 2` on this machine (shared memory and loopback):
#   1. installs what the `mpi` feature needs to build and run, when missing (Debian's OpenMPI,
#      and clang/libclang for rsmpi's bindings);
#   2. lints sparrow-kvstore and examples/dist_train with the feature, builds the check (only
#      that crate and its deps);
#   3. `dist_check check`: N ranks x batch B == 1 process x batch N*B (1e-6 relative) for SGD
#      with momentum, Adam lazy and standard, FTRL, updating on the workers and on the store;
#      sharded == replicated table; mismatched pushes fail on every rank; exchanges with
#      nothing to move work; then the same with 1 rank;
#   4. `dist_check hung-rank`: the watchdog ends the job within its timeout, with a message;
#   5. `dist_check dead-rank`: a rank that dies ends the job.
# Usage: scripts/dist_check.sh [NP]   (default 2 ranks). Exits non-zero on any failure.
# SPARROW_PROFILE: the cargo profile to build with (default release; .ci/run: overflow); the
# check is target/$SPARROW_PROFILE/examples/dist_check.
set -euo pipefail
cd "$(dirname "$0")/.."
np="${1:-2}"
profile="${SPARROW_PROFILE:-release}"
export CARGO_TERM_COLOR=never
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null \
    || ! ldconfig -p | grep -q 'libclang'; then
  sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_="sudo"
  $sudo_ apt-get update -qq
  $sudo_ apt-get install -y -qq libopenmpi-dev openmpi-bin clang libclang-dev pkg-config >/dev/null
fi
cargo clippy -p sparrow-kvstore --all-targets --features mpi -- -D warnings
cargo clippy -p sparrow --features mpi --example dist_train -- -D warnings
cargo build --profile "$profile" -p sparrow-kvstore --features mpi --example dist_check
cargo test --profile "$profile" -p sparrow-kvstore --features mpi --lib   # the watchdog's unit tests
bin="target/$profile/examples/dist_check"
# As root (CI) OpenMPI wants both variables; --oversubscribe lets N ranks share fewer cores;
# no single-copy (CMA) between ranks, which containers often forbid (ptrace scope).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_=(mpirun -np "$np" --oversubscribe --mca btl_vader_single_copy_mechanism none)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

echo "== dist_check check ($np ranks)"
timeout 300 "${mpirun_[@]}" "$bin" check | tee "$log"
test "$(grep -c 'all distributed checks passed' "$log")" -eq "$np"

echo "== dist_check check (1 rank: every exchange has nothing for another rank, and a sharded"
echo "   push's all-to-all nothing at all, with fresh buffers MPI must not see as one)"
timeout 300 mpirun -np 1 --mca btl_vader_single_copy_mechanism none "$bin" check | tee "$log"
test "$(grep -c 'all distributed checks passed' "$log")" -eq 1

echo "== dist_check hung-rank: the watchdog must end the job within its 3 s timeout"
start=$(date +%s)
set +e
SPARROW_KV_TIMEOUT_S=3 timeout 120 "${mpirun_[@]}" "$bin" hung-rank >"$log" 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
grep -m1 'waited more than 3s' "$log"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$took" -gt 30 ]; then
  echo "hung-rank: exit $rc after ${took}s (want a non-zero exit within 30 s)" >&2
  cat "$log" >&2
  exit 1
fi
echo "hung-rank: job ended with exit $rc after ${took}s"

echo "== dist_check dead-rank: a rank that dies must end the job"
start=$(date +%s)
set +e
SPARROW_KV_TIMEOUT_S=3 timeout 120 "${mpirun_[@]}" "$bin" dead-rank >"$log" 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$took" -gt 30 ] \
    || grep -q 'returned without rank 1' "$log"; then
  echo "dead-rank: exit $rc after ${took}s (want a non-zero exit within 30 s)" >&2
  cat "$log" >&2
  exit 1
fi
echo "dead-rank: job ended with exit $rc after ${took}s"
echo "dist_check: all passed"
