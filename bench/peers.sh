#!/usr/bin/env bash
# loadfleet next to its peers (wrk, oha) on one core: the peers figures of
# BENCHMARKS.md in one run, alternating the tools.
#
# Layout: nginx `return 200` pinned to CPU 1; every generator pinned to
# CPU 0; 64 connections. A generator's CPU is that of ALL its processes:
# the peers.py wrapper runs each tool as a child and takes the rusage of
# that child from wait4(), which includes every descendant it reaped —
# for loadfleet the coordinator and its local agent (which the coordinator
# waits for), for oha and wrk their one process.
#
# Prints, and writes to bench/out/peers.md, after what one sleep and
# wake-up of a thread costs on this machine (the floor under every tick):
#   1. three rounds of: wrk closed; oha -q RATE open; loadfleet open at
#      RATE — requests per generator CPU-second, medians and ratios;
#   2. the same side by side over TLS (nginx https with a self-signed
#      certificate): oha -q RATE --insecure and loadfleet --insecure;
#   3. a rate ladder to the wall for loadfleet and oha (alternating);
#   4. the wall pair by pair (P2): wrk closed, then at once loadfleet open
#      at the rate wrk just reached, three pairs — held or not;
#   5. the accuracy check (P3): the testbed with --delay 10ms at 200 req/s,
#      measured by loadfleet and by oha;
#   6. large answers: nginx serving 4 MiB files at 50 req/s and 1 MiB at
#      200 req/s, loadfleet and oha alternating — latency p50 and p99;
#   7. the memory check (P4): the agent's RSS after a short and a longer
#      run, and with 10,000 requests in flight.
#
# Usage: bench/peers.sh [--quick]
#   env: ROUNDS=3 SECONDS_RUN=10 RATE=20000 CONNECTIONS=64
#        LADDER="20000 25000 … 100000 110000 … 300000" (a tool stops after
#        two misses in a row; the ladder ends when both have)
#        MEMORY_SHORT=60 MEMORY_LONG=120 (set MEMORY_LONG=600 for the
#        10-minute check; it then takes ~12 minutes more)
#        PARTS="peers tls ladder wall accuracy large memory" (any subset)
#
# Installs what is missing: nginx-light, wrk and openssl from Debian, oha with
# `cargo install oha --locked` into ~/.cache/loadfleet-bench
# (bench/ensure-oha.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [[ $(nproc) -lt 2 ]]; then
    echo "bench: needs at least 2 CPUs (target and generator on different cores)" >&2
    exit 2
fi

need_apt=()
command -v nginx >/dev/null || need_apt+=(nginx-light)
command -v wrk >/dev/null || need_apt+=(wrk)
command -v openssl >/dev/null || need_apt+=(openssl)
if ((${#need_apt[@]})); then
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi
source "$ROOT/bench/ensure-oha.sh"
cargo build --release --bins -p loadfleet-coordinator -p loadfleet-agent -p loadfleet-testbed

# 10,000 connections in the memory check need that many descriptors.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

exec python3 "$ROOT/bench/peers.py" "$@"
