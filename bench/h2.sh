#!/usr/bin/env bash
# HTTP/2 rate steps: the highest open rate one agent holds over h2c.
#
# Layout (2+ CPUs): nginx (one worker, `return 200`, h2c with prior
# knowledge; bench/targets.py) is pinned to CPU 0; the coordinator with its
# one local agent to CPU 1. CPU is the generator's own user + system time,
# read from getrusage(RUSAGE_CHILDREN) of a wrapper that waits for it, so it
# counts the coordinator *and* the agent it starts (the agent is the
# coordinator's child and is waited for). A rate is held with zero unsent
# and send-lag p99 <= 1 ms.
#
# The comparison with h2load and oha over h2c, counted rather than timed, is
# bench/noise-free.sh's.
#
# Usage: bench/h2.sh [--quick]     (prints a Markdown table; results in bench/out/h2)
#   env: STEP_SECONDS=5 RATES="10000 ... 80000" CONNECTIONS=1 BIN=DIR
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out/h2
mkdir -p "$OUT"

STEP_SECONDS=${STEP_SECONDS:-5}
RATES=${RATES:-"10000 20000 30000 40000 50000 60000 80000"}
CONNECTIONS=${CONNECTIONS:-1}
if [[ "${1:-}" == "--quick" ]]; then
    STEP_SECONDS=3; RATES="5000 20000"
fi
if [[ $(nproc) -lt 2 ]]; then
    echo "bench: needs at least 2 CPUs (target and generator on different cores)" >&2
    exit 2
fi

if ! command -v nginx >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi
BIN=${BIN:-$ROOT/target/release}
[[ -x $BIN/loadfleet-coordinator && -x $BIN/loadfleet-agent ]] || cargo build --release --workspace --bins

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# --- nginx h2c on CPU 0 (bench/targets.py: the one nginx configuration) ---
rm -f "$OUT/nginx.url"
TARGET_CPU=0 python3 "$ROOT/bench/targets.py" nginx "$OUT/nginx" --http2 > "$OUT/nginx.url" &
PIDS+=($!)
for _ in $(seq 150); do
    [[ -s $OUT/nginx.url ]] && break
    sleep 0.1
done
URL=$(cat "$OUT/nginx.url")
[[ -n $URL ]] || { echo "bench: nginx did not start (see $OUT/nginx/logs)" >&2; exit 1; }

# Runs a command pinned to CPU 1 and prints the CPU seconds it (and every
# process it waited for) used.
cpu_of() {
    python3 - "$@" <<'PY'
import resource, subprocess, sys
before = resource.getrusage(resource.RUSAGE_CHILDREN)
subprocess.run(["taskset", "-c", "1"] + sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
print((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
PY
}

# One loadfleet run at RATE: prints "completed unsent lag_p99_ms cpu_s".
loadfleet_at() {
    local rate=$1 out=$2
    local cpu
    # A report left by an earlier run must not stand in for this one.
    rm -rf "$out"
    cpu=$(cpu_of "$BIN/loadfleet-coordinator" run --url "$URL" --http2 --rate "$rate" \
        --duration "${STEP_SECONDS}s" --local-agents 1 --connections "$CONNECTIONS" \
        --max-in-flight 10000 --drain 2s --out "$out")
    python3 - "$out/report.json" "$cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t = r["totals"]; a = r["agents"][0]
lag = (a.get("lag_ms") or {}).get("p99", float("nan"))
print(t["status"].get("200", 0), t["unsent"]["total"], lag, sys.argv[2])
PY
}

per() { python3 -c "print(round($1 / $2) if $2 > 0 else 0)"; }

REPORT=$OUT/results.md
{
    echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "Date: $(date -u +%Y-%m-%d)  loadfleet $(git rev-parse --short HEAD 2>/dev/null || echo '?')  $(nginx -v 2>&1)"
    echo
    echo "### loadfleet --http2 rate steps against nginx h2c (${STEP_SECONDS}s each)"
    echo
    echo "| offered req/s | answered 200 | unsent | send-lag p99 ms | generator CPU s | req per generator CPU-s | held |"
    echo "|---:|---:|---:|---:|---:|---:|:--:|"
} > "$REPORT"
HELD=0
for rate in $RATES; do
    read -r ok unsent lag cpu < <(loadfleet_at "$rate" "$OUT/step-$rate")
    held=$(python3 -c "print('yes' if $unsent == 0 and $lag <= 1.0 else 'no')")
    [[ $held == yes ]] && HELD=$rate
    echo "| $rate | $ok | $unsent | $lag | $cpu | $(per "$ok" "$cpu") | $held |" >> "$REPORT"
    echo "step $rate: $ok ok, unsent $unsent, lag p99 $lag ms, cpu $cpu s" >&2
done
{
    echo
    echo "Highest rate held (zero unsent, send-lag p99 <= 1 ms): **$HELD req/s**"
} >> "$REPORT"
cat "$REPORT"
