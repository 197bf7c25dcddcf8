#!/usr/bin/env bash
# dist_sync across a real network: two ranks of dist_check run as two hosts, each in a network
# namespace of its own (`ip netns`), joined by a veth pair, so every byte between them crosses
# a TCP stack (OpenMPI's TCP transport only: no shared memory, no loopback). Needs root,
# iproute2 (`ip`, installed when missing), util-linux (`unshare`) and OpenMPI; the script makes
# and removes the namespaces itself. Where namespaces cannot be made at all (no root, or a
# container without the capability), it prints one SKIPPED line and exits 0.
#   1. `dist_check check` across the hosts: the correctness checks of scripts/dist_check.sh;
#      the veth's byte counters must show the traffic went through it.
#   2. `dist_check link-down`: once both ranks train, host B's link goes down. Every rank's
#      watchdog must end it with its message within the timeout (SPARROW_KV_TIMEOUT_S, 3 s
#      here), not hang.
# Usage: scripts/dist_netns.sh BIN   (BIN: target/release/examples/dist_check, built with the
#        `mpi` feature; scripts/dist_check.sh builds it). Exits non-zero on any failure.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
[ $# -eq 1 ] && [ -x "$1" ] || usage
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
if [ "$(id -u)" -ne 0 ]; then
  echo "dist_netns: SKIPPED: network namespaces need root"; exit 0
fi
if ! command -v ip >/dev/null; then
  apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null
fi
for tool in ip unshare mpirun; do
  command -v "$tool" >/dev/null || { echo "dist_netns: $tool not found" >&2; exit 1; }
done

# Names unique to this run, so two runs (or a stale one) do not collide.
tag="sp$$"
ns_a="${tag}a" ns_b="${tag}b" if_a="${tag}va" if_b="${tag}vb"
ip_a=10.231.0.1 ip_b=10.231.0.2 net=10.231.0.0/24
work=$(mktemp -d)

cleanup() {
  for ns in "$ns_a" "$ns_b"; do
    # Whatever still runs in a namespace (mpirun waiting for a lost host) goes with it.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

if ! err=$(ip netns add "$ns_a" 2>&1); then
  echo "dist_netns: SKIPPED: cannot make a network namespace here ($err)"; exit 0
fi
ip netns add "$ns_b"
ip link add "$if_a" type veth peer name "$if_b"
ip link set "$if_a" netns "$ns_a"
ip link set "$if_b" netns "$ns_b"
ip -n "$ns_a" addr add "$ip_a/24" dev "$if_a"
ip -n "$ns_b" addr add "$ip_b/24" dev "$if_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$if_a" up
ip -n "$ns_b" link set "$if_b" up

# mpirun starts the remote daemon through this agent (OpenMPI's rsh launcher): the "host" is
# an address, the agent runs the daemon in that host's namespace, with a host name of its own.
cat > "$work/agent" <<EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
  $ip_a) ns=$ns_a ;;
  $ip_b) ns=$ns_b ;;
  *) echo "dist_netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
EOF
chmod +x "$work/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SPARROW_KV_TIMEOUT_S=3
# mpirun runs on host A, one rank per host, for at most $1 seconds.
mpirun_on_a() {
  local limit=$1; shift
  ip netns exec "$ns_a" unshare --uts sh -c "hostname $ns_a; exec \"\$@\"" mpirun \
    timeout "$limit" mpirun -H "$ip_a,$ip_b" -np 2 --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net" "$@"
}
tx_bytes() { ip netns exec "$ns_a" cat "/sys/class/net/$if_a/statistics/tx_bytes"; }

echo "== dist_netns: check, ranks on hosts $ip_a ($ns_a) and $ip_b ($ns_b)"
before=$(tx_bytes)
mpirun_on_a 300 "$bin" check | tee "$work/check.log"
test "$(grep -c 'all distributed checks passed' "$work/check.log")" -eq 2
sent=$(( $(tx_bytes) - before ))
echo "dist_netns: $sent bytes left host A through $if_a"
[ "$sent" -gt 10000 ] || { echo "dist_netns: too little traffic on the veth" >&2; exit 1; }

echo "== dist_netns: link-down (host B's link goes down while both ranks train)"
out="$work/link"
mpirun_on_a 300 --output-filename "$out" "$bin" link-down >"$work/mpirun.log" 2>&1 &
job=$!
rank_file() { find "$out" -path "*rank.$1/$2" 2>/dev/null | head -n1 || true; }
for _ in $(seq 1 300); do
  a=$(rank_file 0 stdout) b=$(rank_file 1 stdout)
  if [ -n "$a" ] && [ -n "$b" ] && grep -q training "$a" && grep -q training "$b"; then break; fi
  sleep 0.1
done
grep -q training "$(rank_file 1 stdout)" || { echo "dist_netns: ranks did not start" >&2; cat "$work/mpirun.log" >&2; exit 1; }
ip -n "$ns_b" link set "$if_b" down
down=$(date +%s)
# Each rank must report and leave; mpirun on A may wait for host B's daemon, which it can no
# longer reach, so only the ranks are waited for.
for _ in $(seq 1 300); do
  pgrep -f "^$bin link-down" >/dev/null || break
  sleep 0.1
done
took=$(( $(date +%s) - down ))
fail=0
for r in 0 1; do
  f=$(rank_file "$r" stderr)
  if [ -n "$f" ] && grep -m1 'waited more than' "$f"; then :; else
    echo "dist_netns: rank $r printed no watchdog message" >&2; fail=1
  fi
done
if pgrep -f "^$bin link-down" >/dev/null; then
  echo "dist_netns: ranks still running ${took}s after the link went down" >&2; fail=1
fi
kill "$job" 2>/dev/null || true
if [ "$fail" -ne 0 ]; then
  for f in $(find "$out" -type f); do echo "--- $f" >&2; cat "$f" >&2; done
  cat "$work/mpirun.log" >&2
  exit 1
fi
echo "dist_netns: both ranks ended ${took}s after the link went down"
echo "dist_netns: all passed"
