#!/usr/bin/env bash
# The benchmark of record: what one request costs the agent, counted, side
# by side with its peers. Counts do not move with what else a shared machine
# runs, so these figures compare across runs, builds and days where CPU
# seconds do not.
#
# Figures, each over one tool's whole process (every thread):
#   - user-space instructions per request (valgrind --tool=callgrind);
#   - syscalls per request (strace -f -c), with the agent's and the peers'
#     calls by syscall;
#   - syscalls per request untraced (perf's in-kernel count of
#     raw_syscalls:sys_enter), also between HIGH and FAST req/s, where
#     strace's stops would slow a tool into other batches;
#   - context switches per request (ru_nvcsw + ru_nivcsw from wait4);
#   - CPU seconds per 100,000 requests at FAST req/s (indicative);
#   - the agent's send-lag p99 at LOW and FAST req/s (from its report);
#   - what a flow costs the agent, against the testbed's shop: user-space
#     instructions per flow and per step next to a request's (POST /login
#     alone; login -> cart with a capture and a check; the same without
#     them; and without cookies), marginal between LOW and HIGH arrivals/s,
#     and peak RSS per arrival in flight, a flow's and a request's, between
#     MEM_LOW and MEM_HIGH arrivals/s into a shop that holds every answer
#     MEM_DELAY (MEM_HIGH x MEM_DELAY in flight);
#   - the coordinator's work per merged agent snapshot against
#     bench/scale.sh's swarm: instructions at SWARM_CALLGRIND agents (under
#     callgrind it misses its own deadlines from a few tens of agents), CPU
#     untraced at SWARM_SIZES (100 and 1,000).
# Instructions and syscalls are marginal: (count at HIGH - count at LOW) /
# (requests at HIGH - at LOW), which leaves out start-up and what every
# second costs whatever the rate. Context switches and CPU are per request
# over a whole untraced run. Every figure is taken RUNS times, tools in turn.
#
# The agent runs as a local fleet (coordinator + one agent process); the
# coordinator starts its agent through LOADFLEET_AGENT_BIN, a wrapper that
# runs the agent under the counting tool, so only the agent is counted. oha
# and h2load are counted as their one process.
#
# Targets: nginx `location / { return 200 "ok\n"; }` (bench/targets.py;
# HTTP/1.1, and h2c by prior knowledge), configured in a temp folder,
# started and stopped by PID; the built-in testbed for gRPC (no gRPC
# generator that paces is packaged in Debian, so the agent alone), and its
# shop (--shop) for flows, the agent alone too. Target
# on TARGET_CPU, generator on GEN_CPU.
#
# Usage: bench/noise-free.sh            (~20 minutes on 2 vCPUs)
#   env: LOW=200 HIGH=1000 FAST=20000     rates (req/s)
#        SECONDS_RUN=5 CG_SECONDS=5        run length, untraced and under callgrind
#        RUNS=2                            runs of every figure
#        CONNECTIONS=64                    HTTP/1.1 connections (every tool)
#        H2_CONNECTIONS=1 H2_STREAMS=100   h2c connections; oha -p / h2load -m
#        PARTS="http1 h2c grpc flow coordinator"
#        MEM_LOW=50 MEM_HIGH=5000           the flow part's memory runs: arrivals/s,
#        MEM_SECONDS=2 MEM_DELAY=2s         for how long, into what delay
#        FLOW_MAX_IN_FLIGHT=15000 FLOW_DRAIN=10s
#        FIGURES="instructions syscalls perf rusage"   (the flow part: instructions,
#                                          and rusage for its memory)
#        TOOLS="agent oha h2load"
#        SWARM_SIZES="100 1000"            coordinator, timed untraced
#        SWARM_CALLGRIND="4 12"            coordinator, counted (callgrind keeps
#                                          pace with few agents only)
#        SWARM_SECONDS="2 6"               the two schedule lengths compared
#        BIN_DIR=DIR                       measure another build (default:
#                                          build and use target/release)
#        TARGET_CPU=1 GEN_CPU=0
# e.g. the agent's HTTP/1.1 instructions alone, old build against new:
#   PARTS=http1 FIGURES=instructions TOOLS=agent BIN_DIR=/old/target/release bench/noise-free.sh
#
# Installs what is missing (as root): nginx, valgrind, strace, linux-perf
# and nghttp2-client (h2load) from Debian; oha with `cargo install oha --locked`
# into OHA_CACHE (default ~/.cache/loadfleet-bench; a few minutes, once).
# Prints Markdown tables and writes them to bench/out/noise-free.md; the runs
# stay in a temp folder it names.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [[ $(nproc) -lt 2 ]]; then
    echo "bench: needs at least 2 CPUs (target and generator on different cores)" >&2
    exit 2
fi

need_apt=()
command -v nginx >/dev/null || need_apt+=(nginx)
command -v valgrind >/dev/null || need_apt+=(valgrind)
command -v strace >/dev/null || need_apt+=(strace)
command -v perf >/dev/null || need_apt+=(linux-perf)
command -v h2load >/dev/null || need_apt+=(nghttp2-client)
if ((${#need_apt[@]})); then
    if [[ $EUID -ne 0 ]]; then
        echo "bench: missing ${need_apt[*]}; run as root to install them (apt-get), or install them" >&2
        exit 2
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Only runs that count oha build it (PARTS=flow TOOLS=agent needs none).
if [[ " ${TOOLS:-oha} " == *" oha "* ]]; then
    source "$ROOT/bench/ensure-oha.sh"
fi

if [[ -z ${BIN_DIR:-} ]]; then
    cargo build --release --bins -p loadfleet-coordinator -p loadfleet-agent \
        -p loadfleet-testbed -p loadfleet-swarm
    export BIN_DIR=$ROOT/target/release
fi

exec python3 "$ROOT/bench/noise_free.py" "$@"
