#!/usr/bin/env bash
# gRPC benchmark: one agent on one core calling the built-in testbed's gRPC
# service (loadfleet-testbed --grpc, no delay) over h2c.
#
# Layout: the testbed is pinned to CPU 0 (one worker), the
# coordinator and one agent to CPU 1. For each rate the run is repeated
# REPEATS times; the table gives the medians of requests per agent
# CPU-second and of send-lag p99. A rate is "held" when, in the median run,
# nothing was unsent and send-lag p99 <= 1 ms.
#
# Usage: bench/grpc.sh   (prints a Markdown table; BENCHMARKS.md quotes it)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out/grpc
mkdir -p "$OUT"

STEP_SECONDS=${STEP_SECONDS:-5}
RATES=${RATES:-"5000 10000 20000 30000"}
REPEATS=${REPEATS:-3}
BIN=${BIN:-$ROOT/target/release}
COORD=${COORD:-$BIN/loadfleet-coordinator}
[[ -x $COORD ]] || cargo build --release --workspace --bins

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

"$BIN/loadfleet-testbed" --grpc --listen 127.0.0.1:0 --cpus 0 --workers 1 > "$OUT/testbed.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    grep -q "listening on" "$OUT/testbed.out" 2>/dev/null && break
    sleep 0.1
done
URL="http://$(sed -n 's/^listening on //p' "$OUT/testbed.out")"

# One run: prints "unsent lag_p99_ms req_per_cpu_s ok".
step() {
    local rate=$1 dir=$2
    # A report left by an earlier run must not stand in for this one.
    rm -rf "$dir"
    taskset -c 1 "$COORD" run --url "$URL" --reflection \
        --grpc-method loadfleet.testbed.v1.Testbed/Work --grpc-message '{"payload": "x"}' \
        --rate "$rate" --duration "${STEP_SECONDS}s" --local-agents 1 --max-in-flight 10000 \
        --drain 2s --out "$dir" > "$dir.txt" 2>&1 || true
    python3 - "$dir/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["totals"]; a = r["agents"][0]
lag = (a.get("lag_ms") or {}).get("p99", float("nan"))
ok = (t.get("grpc") or {}).get("status", {}).get("OK", 0)
cpu = a["cpu_seconds"]
print(t["unsent"]["total"], lag, round(t["completed"] / cpu) if cpu > 0 else 0, ok)
PY
}

median() { python3 -c 'import sys, statistics; v=[float(x) for x in sys.argv[1:]]; print(statistics.median(v))' "$@"; }

echo "| offered req/s | unsent (median) | send-lag p99 ms (median) | req per agent CPU-s (median) | gRPC OK (median) | held |"
echo "|---:|---:|---:|---:|---:|:--:|"
for rate in $RATES; do
    unsent=() lag=() per=() ok=()
    for i in $(seq "$REPEATS"); do
        read -r u l p o < <(step "$rate" "$OUT/$rate-$i")
        unsent+=("$u"); lag+=("$l"); per+=("$p"); ok+=("$o")
        echo "grpc $rate run $i: unsent $u lag p99 $l ms, $p req/cpu-s, OK $o" >&2
    done
    mu=$(median "${unsent[@]}"); ml=$(median "${lag[@]}"); mp=$(median "${per[@]}"); mo=$(median "${ok[@]}")
    held=$(python3 -c "print('yes' if $mu == 0 and $ml <= 1.0 else 'no')")
    printf '| %s | %.0f | %s | %.0f | %.0f | %s |\n' "$rate" "$mu" "$ml" "$mp" "$mo" "$held"
done
