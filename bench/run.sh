#!/usr/bin/env bash
# Throughput benchmark: how fast can one agent on one core send an open-model
# schedule on time, and at what CPU cost, next to oha on the same core.
#
# Layout (2+ CPUs): the target (loadfleet-testbed, then nginx `return 200`) is
# pinned to CPU 0; the coordinator and one agent are pinned to CPU 1, as is
# oha. For each target the open-model rate is raised step by step; a step is
# "held" when nothing was unsent and the agent's send-lag p99 <= 1 ms. Then,
# at one common rate, loadfleet and oha run alternately REPEATS times each
# and the medians of requests per generator CPU-second are compared.
#
# Usage: bench/run.sh [--quick]      (writes BENCHMARKS.md at the repo root)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out
mkdir -p "$OUT"

STEP_SECONDS=${STEP_SECONDS:-5}
RATES=${RATES:-"10000 20000 30000 40000 50000 60000 70000 80000 100000"}
COMPARE_RATE=${COMPARE_RATE:-20000}
REPEATS=${REPEATS:-3}
if [[ "${1:-}" == "--quick" ]]; then
    STEP_SECONDS=3; RATES="5000 20000"; REPEATS=1
fi

if [[ $(nproc) -lt 2 ]]; then
    echo "bench: needs at least 2 CPUs (target and generator on different cores)" >&2
    exit 2
fi

# --- tools -----------------------------------------------------------------
if ! command -v nginx >/dev/null; then
    apt-get update -qq && apt-get install -y -qq nginx-light
fi
if ! command -v oha >/dev/null; then
    cargo install oha --locked
fi
cargo build --release --workspace --bins
BIN=$ROOT/target/release

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# --- targets ---------------------------------------------------------------
start_testbed() {
    "$BIN/loadfleet-testbed" --listen 127.0.0.1:0 --cpus 0 --workers 1 > "$OUT/testbed.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do
        grep -q "listening on" "$OUT/testbed.out" 2>/dev/null && break
        sleep 0.1
    done
    TESTBED_URL="http://$(sed -n 's/^listening on //p' "$OUT/testbed.out")/"
}

start_nginx() {
    local dir=$OUT/nginx
    mkdir -p "$dir/logs"
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $dir/logs/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$port;
        location / { return 200 "ok\n"; }
    }
}
CONF
    taskset -c 0 nginx -c "$dir/nginx.conf" -p "$dir" &
    PIDS+=($!)
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
        sleep 0.1
    done
    NGINX_URL="http://127.0.0.1:$port/"
}

# --- one loadfleet step: prints "sent unsent lag_p99_ms cpu_s completed" ------
loadfleet_step() {
    local url=$1 rate=$2 dir=$3
    taskset -c 1 "$BIN/loadfleet-coordinator" run --url "$url" --rate "$rate" \
        --duration "${STEP_SECONDS}s" --local-agents 1 --max-in-flight 10000 \
        --connections 64 --drain 2s --out "$dir" > "$dir.txt" 2>&1 || true
    python3 - "$dir/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["totals"]; a = r["agents"][0]
lag = (a.get("lag_ms") or {}).get("p99", float("nan"))
print(t["sent"], t["unsent"]["total"], lag, a["cpu_seconds"], t["completed"], t["throughput_rps"])
PY
}

# --- one oha step: prints "requests cpu_s rps" ----------------------------
oha_step() {
    local url=$1 rate=$2 dir=$3
    local n=$((rate * STEP_SECONDS))
    local t0 t1
    t0=$(python3 -c 'import resource; r=resource.getrusage(resource.RUSAGE_CHILDREN); print(r.ru_utime+r.ru_stime)')
    # oha's own CPU time is read from getrusage of a wrapper that runs it.
    python3 - "$url" "$rate" "$n" "$dir" <<'PY'
import json, resource, subprocess, sys
url, rate, n, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cmd = ["taskset", "-c", "1", "oha", "--no-tui", "--output-format", "json",
       "-n", n, "-q", rate, "-c", "64", "--latency-correction", url]
with open(out + ".json", "w") as f:
    subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL, check=False)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = u.ru_utime + u.ru_stime
try:
    s = json.load(open(out + ".json"))["summary"]
    rps = s.get("requestsPerSec", 0.0)
    total = round(rps * s.get("total", 0.0))
except Exception:
    rps, total = 0.0, 0
print(total, cpu, rps)
PY
}

median() { python3 -c 'import sys, statistics; v=[float(x) for x in sys.argv[1:]]; print(statistics.median(v))' "$@"; }

REPORT=$OUT/results.md
: > "$REPORT"
{
    echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "Date: $(date -u +%Y-%m-%d)  loadfleet $(git rev-parse --short HEAD 2>/dev/null || echo '?')  $(oha --version 2>/dev/null | head -1)"
    echo
} >> "$REPORT"

ramp() {
    local name=$1 url=$2
    echo "### Rate steps against $name (target on CPU 0, one agent on CPU 1, ${STEP_SECONDS}s each)" >> "$REPORT"
    echo >> "$REPORT"
    echo "| offered req/s | sent | unsent | send-lag p99 ms | agent CPU s | req per agent CPU-s | throughput req/s | held |" >> "$REPORT"
    echo "|---:|---:|---:|---:|---:|---:|---:|:--:|" >> "$REPORT"
    HELD=0
    for rate in $RATES; do
        read -r sent unsent lag cpu completed rps < <(loadfleet_step "$url" "$rate" "$OUT/$name-$rate")
        per_cpu=$(python3 -c "print(round($completed / $cpu) if $cpu > 0 else 0)")
        held=$(python3 -c "print('yes' if $unsent == 0 and $lag <= 1.0 else 'no')")
        [[ $held == yes ]] && HELD=$rate
        echo "| $rate | $sent | $unsent | $lag | $cpu | $per_cpu | $rps | $held |" >> "$REPORT"
        echo "$name $rate: sent $sent unsent $unsent lag p99 $lag ms cpu $cpu s -> $per_cpu req/cpu-s" >&2
    done
    echo >> "$REPORT"
    echo "Highest rate held against $name (zero unsent, send-lag p99 <= 1 ms): **$HELD req/s**" >> "$REPORT"
    echo >> "$REPORT"
}

compare() {
    local name=$1 url=$2
    local lf=() lf5=() oh=() lag=() lag5=()
    for i in $(seq "$REPEATS"); do
        read -r sent unsent l cpu completed rps < <(loadfleet_step "$url" "$COMPARE_RATE" "$OUT/cmp-$name-lf-$i")
        lf+=("$(python3 -c "print($completed / $cpu if $cpu > 0 else 0)")"); lag+=("$l")
        read -r sent unsent l cpu completed rps < <(LOADFLEET_WAKE_QUANTUM=500us loadfleet_step "$url" "$COMPARE_RATE" "$OUT/cmp-$name-lf500-$i")
        lf5+=("$(python3 -c "print($completed / $cpu if $cpu > 0 else 0)")"); lag5+=("$l")
        read -r total cpu rps < <(oha_step "$url" "$COMPARE_RATE" "$OUT/cmp-$name-oha-$i")
        oh+=("$(python3 -c "print($total / $cpu if $cpu > 0 else 0)")")
    done
    local mlf mlf5 moh
    mlf=$(median "${lf[@]}"); mlf5=$(median "${lf5[@]}"); moh=$(median "${oh[@]}")
    printf '| %s | %s | %.0f (lag p99 %s ms) | %.0f (lag p99 %s ms) | %.0f | %.2f | %.2f |\n' "$name" "$COMPARE_RATE" \
        "$mlf" "$(median "${lag[@]}")" "$mlf5" "$(median "${lag5[@]}")" "$moh" \
        "$(python3 -c "print($mlf / $moh if $moh > 0 else 0)")" \
        "$(python3 -c "print($mlf5 / $moh if $moh > 0 else 0)")" >> "$REPORT"
}

start_testbed
start_nginx
ramp testbed "$TESTBED_URL"
ramp nginx "$NGINX_URL"

{
    echo "### Side by side at $COMPARE_RATE req/s (open model), median of $REPEATS alternating runs"
    echo
    echo "| target | rate | loadfleet req per CPU-s (default 250us wake quantum) | loadfleet, 500us quantum | oha -q req per CPU-s | ratio (250us) | ratio (500us) |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
} >> "$REPORT"
compare testbed "$TESTBED_URL"
compare nginx "$NGINX_URL"

cat "$REPORT"
