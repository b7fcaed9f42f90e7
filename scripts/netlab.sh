#!/usr/bin/env bash
# netlab.sh: ranks on separate network stacks with a capped link, on one machine (needs root).
#
#   scripts/netlab.sh [--np N] [--rate RATE] [--cpus LIST] [--down AT:FOR] mpi  -- PROGRAM [ARGS]
#   scripts/netlab.sh [--np N] [--rate RATE] [--cpus LIST] [--down AT:FOR] each -- COMMAND [ARGS]
#   scripts/netlab.sh --cleanup
#
# Every rank gets a network namespace of its own (its own TCP stack, one interface lab0 with
# address 10.77.0.(r+1)/24), all plugged into a bridge in one more namespace, a switch. Each
# port is capped at RATE in both directions by a token-bucket qdisc (tc tbf) on either end of
# its veth pair, as a full-duplex Ethernet link of that rate is: --rate 1gbit | 2.5gbit |
# 5gbit | 10gbit | none (no qdisc; default 1gbit). Traffic between ranks crosses two capped
# links, so a rank sends and receives at most RATE each way, whatever the others do.
# What this cannot model: propagation latency (this kernel has no netem; a veth hop costs
# tens of microseconds, a datacenter switch a few more) and a NIC's offloads (TCP runs on the
# same two cores as the ranks, which a real node would not spend on it). Say so beside any
# number it gives.
#
#   mpi   runs `mpirun -np N PROGRAM ARGS` with rank r in namespace r: Open MPI's launcher
#         reaches "host" 10.77.0.(r+1) through an agent that enters that namespace (as ssh
#         would reach a node), ranks talk over TCP only (--mca pml ob1, btl tcp,self on lab0;
#         no shared memory), and each rank is pinned to one CPU of LIST (default 0..N-1
#         modulo the cores): [train] threads = 0 then takes one thread per rank. Variables
#         named DPT_* in the environment go to the ranks (-x), as Open MPI's OMPI_MCA_* do.
#   each  runs COMMAND once in every namespace, at once, with RANK, WORLD_SIZE, LOCAL_RANK=0,
#         MASTER_ADDR=10.77.0.1, MASTER_PORT and GLOO_SOCKET_IFNAME=lab0 set, torchrun's
#         variables: a PyTorch DDP peer starts with init_method="env://". Exit code: the first
#         failing rank's, else 0.
#   --down AT:FOR takes every link down AT seconds after the start for FOR seconds (a
#         failed switch), e.g. --down 5:60, to see a run end with its named-collective report.
#
# Nothing is left behind: the namespaces (and with them the veths, the bridge and the qdiscs)
# are deleted when the job ends, fails or is interrupted; --cleanup removes a lab whose script
# was killed with SIGKILL (namespaces named dptlab<PID>-* whose PID is gone).
set -u
np=2 rate=1gbit cpus= down= mode=
die() { echo "netlab: $*" >&2; exit 2; }
usage() { sed -n '4,6p' "$0" | sed 's/^# //' >&2; exit 2; }

cleanup_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dptlab[0-9]*-'); do
        pid=${ns#dptlab}; pid=${pid%%-*}
        if ! kill -0 "$pid" 2>/dev/null; then
            ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
            ip netns del "$ns" && echo "netlab: removed $ns (its script, pid $pid, is gone)"
        fi
    done
}

while [ $# -gt 0 ]; do
    case "$1" in
    --np) np=${2:-}; shift 2 ;;
    --rate) rate=${2:-}; shift 2 ;;
    --cpus) cpus=${2:-}; shift 2 ;;
    --down) down=${2:-}; shift 2 ;;
    --cleanup) cleanup_stale; exit 0 ;;
    -h | --help) usage ;;
    mpi | each) mode=$1; shift; [ "${1:-}" = -- ] && shift; break ;;
    *) echo "netlab: unknown argument '$1'" >&2; usage ;;
    esac
done
[ -n "$mode" ] || { echo "netlab: say 'mpi' or 'each' before the command" >&2; usage; }
[ $# -gt 0 ] || die "no command to run"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces and qdiscs); HINT: run it with sudo"
for tool in ip tc taskset; do command -v $tool >/dev/null || die "'$tool' not found; HINT: apt-get install iproute2 util-linux"; done
[[ "$np" =~ ^[1-9][0-9]?$ ]] && [ "$np" -ge 2 ] && [ "$np" -le 64 ] || die "--np takes 2 to 64 ranks, not '$np'"
[[ "$rate" == none || "$rate" =~ ^[0-9]+(\.[0-9]+)?[kmg]bit$ ]] ||
    die "--rate takes a rate as tc writes it (1gbit, 2.5gbit, 500mbit) or none, not '$rate'"
if [ -n "$down" ]; then
    [[ "$down" =~ ^[0-9]+(\.[0-9]+)?:[0-9]+(\.[0-9]+)?$ ]] || die "--down takes AT:FOR in seconds (e.g. 5:60), not '$down'"
fi
ncores=$(nproc)
if [ -n "$cpus" ]; then
    IFS=, read -r -a cpu_list <<<"$cpus"
    [ ${#cpu_list[@]} -ge "$np" ] || die "--cpus names ${#cpu_list[@]} CPU(s) for $np ranks"
else
    cpu_list=()
    for ((r = 0; r < np; r++)); do cpu_list+=($((r % ncores))); done
fi

lab=dptlab$$
sw=$lab-sw
tmp=$(mktemp -d /tmp/netlab.XXXXXX)
pids=()
cleanup() {
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$lab-"); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# tbf: the bucket holds 0.25 ms at the rate, at least 64 KiB (a GSO packet's most): a larger
# one lets each transfer after an idle moment start above the rate (4 ms made a 1 gbit link
# carry an 800 KiB bucket at 1.12 Gbit/s); the queue holds 20 ms before a drop, so TCP sees a
# link of that rate, not a lossy one
shape() { # NAMESPACE DEVICE
    [ "$rate" = none ] && return 0
    local bps burst
    bps=$(awk -v r="$rate" 'BEGIN { u = substr(r, length(r) - 3, 1); v = substr(r, 1, length(r) - 4);
        m = (u == "k") ? 1e3 : (u == "m") ? 1e6 : 1e9; printf "%.0f", v * m }')
    burst=$((bps / 8 / 4000))
    [ "$burst" -lt 65536 ] && burst=65536
    tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 20ms
}
ip netns add "$sw" || die "could not create a network namespace; HINT: needs root and a kernel with network namespaces"
ip -n "$sw" link add name sw type bridge && ip -n "$sw" link set sw up || die "could not create the bridge"
for ((r = 0; r < np; r++)); do
    ns=$lab-$r
    ip netns add "$ns" &&
        ip link add name lab0 netns "$ns" type veth peer name p$r netns "$sw" &&
        ip -n "$sw" link set p$r master sw && ip -n "$sw" link set p$r up &&
        ip -n "$ns" link set lo up && ip -n "$ns" link set lab0 up &&
        ip -n "$ns" addr add 10.77.0.$((r + 1))/24 dev lab0 &&
        shape "$ns" lab0 && shape "$sw" p$r || die "could not set up rank $r's namespace"
done
echo "netlab: $np namespaces, links capped at $rate each way (tc tbf), ranks on CPUs ${cpu_list[*]:0:$np}" >&2

if [ -n "$down" ]; then
    (
        at=${down%%:*} for_s=${down##*:}
        sleep "$at"
        for ((r = 0; r < np; r++)); do ip -n "$sw" link set p$r down; done
        echo "netlab: every link down at ${at}s for ${for_s}s" >&2
        sleep "$for_s"
        for ((r = 0; r < np; r++)); do ip -n "$sw" link set p$r up 2>/dev/null; done
        echo "netlab: links up again" >&2
    ) &
    pids+=($!)
fi

rc=0
if [ "$mode" = mpi ]; then
    # the "remote shell": enter the namespace that owns the host's address, pinned to its CPU
    hostfile=$tmp/hosts agent=$tmp/agent
    : >"$hostfile"
    {
        echo '#!/bin/sh'
        echo 'host=$1; shift'
        echo 'case "$host" in'
        for ((r = 0; r < np; r++)); do
            echo "10.77.0.$((r + 1))) exec ip netns exec $lab-$r taskset -c ${cpu_list[$r]} sh -c \"\$*\" ;;"
            echo "10.77.0.$((r + 1)) slots=1" >>"$hostfile"
        done
        echo '*) echo "netlab agent: unknown host $host" >&2; exit 1 ;;'
        echo 'esac'
    } >"$agent"
    chmod +x "$agent"
    # Open MPI passes its own OMPI_MCA_* variables to the ranks; dptrain's DPT_* go with -x
    forward=()
    for v in $(compgen -e | grep '^DPT_' || true); do forward+=(-x "$v"); done
    ip netns exec "$lab-0" taskset -c "${cpu_list[0]}" mpirun --allow-run-as-root -np "$np" --hostfile "$hostfile" \
        --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include lab0 --mca oob_tcp_if_include lab0 --bind-to none "${forward[@]}" "$@" &
    pids+=($!)
    wait $! || rc=$?
else
    port=$((29500 + $$ % 1000))
    rank_pids=()
    for ((r = 0; r < np; r++)); do
        ip netns exec "$lab-$r" env RANK=$r WORLD_SIZE=$np LOCAL_RANK=0 MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
            GLOO_SOCKET_IFNAME=lab0 NETLAB_RATE=$rate taskset -c "${cpu_list[$r]}" "$@" &
        rank_pids+=($!)
        pids+=($!)
    done
    for p in "${rank_pids[@]}"; do
        wait "$p" || { s=$?; [ "$rc" = 0 ] && rc=$s; }
    done
fi
exit "$rc"
