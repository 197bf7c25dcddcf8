#!/usr/bin/env bash
# Throughput of examples/dist_train (the sparse tutorial's model, row_sparse first-layer
# gradient, one thread per rank): 1 rank against 2 ranks, interleaved rounds, one JSON line per
# run. 1 rank runs twice: free (its LibSVM reader thread then parses on the core the second
# rank would use) and bound to one core (`--bind-to core`: one core's worth, as each of the two
# ranks has); the same with the first layer a sharded table (`--first-grad sharded`); 1 rank on
# one core and 2 ranks sharded with each rank's batches parsed before training (`--in-memory`:
# the training step alone, without the LibSVM pipeline's share of the core), and two
# independent in-memory 1-rank runs at once, one a core (the two cores' ceiling for this
# workload with no exchange at all: a VM's second core is not always a whole core); then the
# bytes per step of the first layer over TCP loopback, row_sparse exchange against the dense all-reduce of its 512 MB gradient (variant (b)).
# With MLP=1, instead: the dense MLP (`--model mlp`, 784-512-512-10 on synthetic rows, 2.7 MB of
# gradients all-reduced a step), 1 rank on one core against 2 ranks, with MPI's shared-memory
# transport copying through its buffers (`none`) and reading the other rank's memory (`cma`).
# With RATIO=1, instead: the goal's question alone, asked steadily. ROUNDS interleaved rounds of
# in-memory runs of EPOCHS epochs (default 30): 1 rank on one core, 2 ranks with the first layer
# sharded (twice: MPI's shared-memory transport copying through its buffers, `none`, as every
# other run here, then reading the other rank's memory, `cma`, OpenMPI's own default where the
# kernel allows it), two independent 1-rank runs at once, one a core, and 1 rank on one core with the
# first layer sharded (the sharded path's own work, no exchange: splitting and assembling the
# batch, the product's sum, the gradient's bookkeeping); one JSON line each, then the
# median over the rounds of each round's ratio to the 1 rank (a VM's runs vary by a quarter
# from one to the next; the median of many long rounds much less), then the same median over
# the calm rounds alone: those where the runs compared lost at most CALM (default 2) ticks of
# CPU to other guests (/proc/stat's steal time, which is what makes a VM's runs vary), and the
# best 2-rank run against the best 1-rank run, and the pair's run on core 1 against its run on
# core 0 (whether the two cores are equal).
# Usage: scripts/dist_bench.sh DATA_DIR [ROUNDS] [BATCH_PER_RANK]   (default 3 rounds, batch 10)
# Needs: cargo build --release --features mpi --example dist_train
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:?usage: scripts/dist_bench.sh DATA_DIR [ROUNDS] [BATCH_PER_RANK]}"
rounds="${2:-3}"
batch="${3:-10}"
bin=target/release/examples/dist_train
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
shm=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
one_core=(mpirun --bind-to core --mca btl_vader_single_copy_mechanism none)
shm_cma=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism cma)
tcp=(mpirun --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo)
run=("$bin" --data-dir "$data" --batch-size "$batch" --epochs 10 --samples 20000)
if [ "${RATIO:-0}" = 1 ]; then
  long=("$bin" --data-dir "$data" --batch-size "$batch" --epochs "${EPOCHS:-30}" --samples 20000
    --in-memory)
  rate() { sed 's/.*"samples_per_s": \([0-9.]*\).*/\1/' <<<"$1"; }
  # CPU time the hypervisor gave other guests (/proc/stat's steal, in ticks), all CPUs.
  steal() { awk '/^cpu / { print $9 }' /proc/stat; }
  median() {
    [ $# -gt 0 ] || { echo "no rounds"; return; }
    printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "median %.2fx of %d rounds (min %.2fx, max %.2fx)\n", m, NR, v[1], v[NR] }'
  }
  # A run's rate over this round's 1 rank; whether this round's 1 rank and a run that lost
  # $1 ticks were both calm.
  ratio() { awk -v a="$(rate "$one")" -v b="$(rate "$1")" 'BEGIN { print b / a }'; }
  calm() { [ $((s1 - s0)) -le "${CALM:-2}" ] && [ "$1" -le "${CALM:-2}" ]; }
  sharded=() sharded_cma=() pair=() own=() calm_sharded=() calm_cma=() calm_pair=() cores=()
  rates_one=() rates_two=()
  side=$(mktemp)
  trap 'rm -f "$side"' EXIT
  for r in $(seq "$rounds"); do
    s0=$(steal)
    one=$("${one_core[@]}" -np 1 "${long[@]}" | grep '^{')
    s1=$(steal)
    two=$("${shm[@]}" -np 2 "${long[@]}" --first-grad sharded | grep '^{')
    s2=$(steal)
    cma=$("${shm_cma[@]}" -np 2 "${long[@]}" --first-grad sharded | grep '^{')
    s3=$(steal)
    taskset -c 0 mpirun --bind-to none -np 1 "${long[@]}" | grep '^{' >"$side" &
    b=$(taskset -c 1 mpirun --bind-to none -np 1 "${long[@]}" | grep '^{')
    wait
    s4=$(steal)
    a=$(cat "$side")
    alone=$("${one_core[@]}" -np 1 "${long[@]}" --first-grad sharded | grep '^{')
    printf '%s\n' "$one" "$two" "$cma" "$a" "$b" "$alone"
    echo "round $r: steal ticks during the runs: 1 rank $((s1 - s0)), 2 ranks $((s2 - s1)), 2 ranks cma $((s3 - s2)), pair $((s4 - s3))"
    x=$(ratio "$two")
    xc=$(ratio "$cma")
    y=$(awk -v a="$(rate "$one")" -v b="$(rate "$a")" -v c="$(rate "$b")" 'BEGIN { print (b + c) / a }')
    z=$(ratio "$alone")
    # The pair's run on core 1 against its run on core 0, side by side: whether the two cores
    # are equal (a synchronous 2-rank step goes at the slower rank's pace).
    c=$(awk -v a="$(rate "$a")" -v b="$(rate "$b")" 'BEGIN { print b / a }')
    sharded+=("$x") sharded_cma+=("$xc") pair+=("$y") own+=("$z") cores+=("$c")
    rates_one+=("$(rate "$one")") rates_two+=("$(rate "$two")")
    if calm $((s2 - s1)); then calm_sharded+=("$x"); fi
    if calm $((s3 - s2)); then calm_cma+=("$xc"); fi
    if calm $((s4 - s3)); then calm_pair+=("$y"); fi
  done
  what="(in memory, batch $batch a rank)"
  echo "2 ranks sharded / 1 rank on one core $what: $(median "${sharded[@]}")"
  echo "   rounds where neither run lost more than ${CALM:-2} ticks to steal: $(median "${calm_sharded[@]}")"
  best() { printf '%s\n' "$@" | sort -g | tail -1; }
  echo "   the best 2-rank run / the best 1-rank run (noise only ever slows a run): $(awk -v a="$(best "${rates_one[@]}")" \
    -v b="$(best "${rates_two[@]}")" 'BEGIN { printf "%.2fx", b / a }')"
  echo "2 ranks sharded, cma copy / 1 rank on one core $what: $(median "${sharded_cma[@]}")"
  echo "   rounds where neither run lost more than ${CALM:-2} ticks to steal: $(median "${calm_cma[@]}")"
  echo "two independent 1-rank runs, one a core / 1 rank (the machine's ceiling): $(median "${pair[@]}")"
  echo "   rounds where neither run lost more than ${CALM:-2} ticks to steal: $(median "${calm_pair[@]}")"
  echo "   its run on core 1 / its run on core 0 (the same work at the same time): $(median "${cores[@]}")"
  echo "1 rank sharded / 1 rank (the sharded path's own work, no exchange): $(median "${own[@]}")"
  exit 0
fi
if [ "${MLP:-0}" = 1 ]; then
  mlp=("$bin" --model mlp --batch-size "$batch" --samples 20480 --epochs 2)
  for r in $(seq "$rounds"); do
    echo "round $r: mlp, 1 rank on one core, 2 ranks (none), 2 ranks (cma)"
    "${one_core[@]}" -np 1 "${mlp[@]}" | grep '^{'
    "${shm[@]}" -np 2 "${mlp[@]}" | grep '^{'
    mpirun --oversubscribe --mca btl_vader_single_copy_mechanism cma -np 2 "${mlp[@]}" | grep '^{'
  done
  exit 0
fi
for r in $(seq "$rounds"); do
  echo "round $r: 1 rank free, 1 rank on one core, 2 ranks"
  "${shm[@]}" -np 1 "${run[@]}" | grep '^{'
  "${one_core[@]}" -np 1 "${run[@]}" | grep '^{'
  "${shm[@]}" -np 2 "${run[@]}" | grep '^{'
  echo "round $r: first layer a sharded table, 1 rank, 2 ranks"
  "${shm[@]}" -np 1 "${run[@]}" --first-grad sharded | grep '^{'
  "${shm[@]}" -np 2 "${run[@]}" --first-grad sharded | grep '^{'
  echo "round $r: batches in memory (no parsing while training): 1 rank on one core, 2 ranks sharded"
  "${one_core[@]}" -np 1 "${run[@]}" --in-memory | grep '^{'
  "${shm[@]}" -np 2 "${run[@]}" --first-grad sharded --in-memory | grep '^{'
  echo "round $r: two independent 1-rank runs at once, one on each core (in memory; the sum is"
  echo "   what this machine's two cores give two trainings that exchange nothing)"
  taskset -c 0 mpirun --bind-to none -np 1 "${run[@]}" --in-memory | grep '^{' &
  taskset -c 1 mpirun --bind-to none -np 1 "${run[@]}" --in-memory | grep '^{'
  wait
done
# Bytes per step, counted by the loopback interface (TCP between the ranks).
"${tcp[@]}" -np 2 "$bin" --data-dir "$data" --batch-size "$batch" --epochs 1 | grep '^{'
"${tcp[@]}" -np 2 "$bin" --data-dir "$data" --batch-size "$batch" --epochs 1 --max-steps 3 \
  --first-grad dense | grep '^{'
