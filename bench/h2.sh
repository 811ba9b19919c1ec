#!/usr/bin/env bash
# HTTP/2 peer benchmark: loadfleet --http2 next to h2load (Debian's
# nghttp2-client) against the same nginx h2c, in one run.
#
# Layout (2+ CPUs): nginx (one worker, `return 200`, h2c with prior
# knowledge) is pinned to CPU 0; the generator under test is pinned to
# CPU 1 — h2load, or the coordinator with its one local agent. CPU is the
# generator's own user + system time, read from getrusage(RUSAGE_CHILDREN)
# of a wrapper that waits for it, so for loadfleet it counts the
# coordinator *and* the agent it starts (the agent is the coordinator's
# child and is waited for).
#
# 1. Side by side, alternating, REPEATS times each, medians:
#    - loadfleet --http2 at a fixed open rate (COMPARE_RATE req/s for
#      STEP_SECONDS), requests per generator CPU-second;
#    - h2load sending the same number of requests. h2load 1.52 (Debian 12)
#      has no request-rate option: it is a closed loop that keeps
#      -c x -m requests in flight and goes as fast as the server answers, so
#      its figure is requests per CPU-second at its own (maximal) pace.
# 2. loadfleet --http2 rate steps: the highest rate held with zero unsent
#    and send-lag p99 <= 1 ms.
#
# Usage: bench/h2.sh [--quick]     (prints a Markdown table; results in bench/out/h2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out/h2
mkdir -p "$OUT"

STEP_SECONDS=${STEP_SECONDS:-5}
RATES=${RATES:-"10000 20000 30000 40000 50000 60000 80000"}
COMPARE_RATE=${COMPARE_RATE:-10000}
REPEATS=${REPEATS:-3}
CONNECTIONS=${CONNECTIONS:-1}
STREAMS=${STREAMS:-100}
if [[ "${1:-}" == "--quick" ]]; then
    STEP_SECONDS=3; RATES="5000 20000"; REPEATS=1
fi
if [[ $(nproc) -lt 2 ]]; then
    echo "bench: needs at least 2 CPUs (target and generator on different cores)" >&2
    exit 2
fi

# --- peers -----------------------------------------------------------------
missing=()
command -v nginx >/dev/null || missing+=(nginx)
command -v h2load >/dev/null || missing+=(nghttp2-client)
if ((${#missing[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
BIN=${BIN:-$ROOT/target/release}
[[ -x $BIN/loadfleet-coordinator && -x $BIN/loadfleet-agent ]] || cargo build --release --workspace --bins

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# --- nginx h2c on CPU 0 ------------------------------------------------------
dir=$OUT/nginx
mkdir -p "$dir/logs"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
master_process off;
error_log $dir/logs/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    http2_max_concurrent_streams 1000;
    server {
        listen 127.0.0.1:$PORT http2;
        location / { return 200 "ok\n"; }
    }
}
CONF
taskset -c 0 nginx -c "$dir/nginx.conf" -p "$dir" &
PIDS+=($!)
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.1)" 2>/dev/null && break
    sleep 0.1
done
URL="http://127.0.0.1:$PORT/"

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

# One h2load run of N requests: prints "succeeded cpu_s req_per_s".
h2load_n() {
    local n=$1 out=$2
    local cpu
    cpu=$(cpu_of sh -c "h2load -c $CONNECTIONS -m $STREAMS -n $n $URL > $out.txt 2>&1")
    python3 - "$out.txt" "$cpu" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ok = re.search(r"(\d+) succeeded", text)
rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text)
print(ok.group(1) if ok else 0, sys.argv[2], rps.group(1) if rps else 0)
PY
}

median() { python3 -c 'import sys, statistics; v=[float(x) for x in sys.argv[1:]]; print(statistics.median(v))' "$@"; }

REPORT=$OUT/results.md
{
    echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "Date: $(date -u +%Y-%m-%d)  loadfleet $(git rev-parse --short HEAD 2>/dev/null || echo '?')  $(h2load --version | head -1)  $(nginx -v 2>&1)"
    echo
    echo "### Side by side against nginx h2c ($CONNECTIONS connection(s); h2load -m $STREAMS), median of $REPEATS alternating runs"
    echo
    echo "| generator | requests | pace | req/s | generator CPU s | req per generator CPU-s |"
    echo "|---|---:|---|---:|---:|---:|"
} > "$REPORT"

N=$((COMPARE_RATE * STEP_SECONDS))
lf_cpu=(); lf_ok=(); lf_lag=(); h_cpu=(); h_ok=(); h_rps=()
for i in $(seq "$REPEATS"); do
    read -r ok unsent lag cpu < <(loadfleet_at "$COMPARE_RATE" "$OUT/cmp-lf-$i")
    lf_ok+=("$ok"); lf_cpu+=("$cpu"); lf_lag+=("$lag")
    echo "loadfleet run $i: $ok ok, unsent $unsent, lag p99 $lag ms, cpu $cpu s" >&2
    read -r ok cpu rps < <(h2load_n "$N" "$OUT/cmp-h2load-$i")
    h_ok+=("$ok"); h_cpu+=("$cpu"); h_rps+=("$rps")
    echo "h2load run $i: $ok ok, $rps req/s, cpu $cpu s" >&2
done
per() { python3 -c "print(round($1 / $2) if $2 > 0 else 0)"; }
m_lf_ok=$(median "${lf_ok[@]}"); m_lf_cpu=$(median "${lf_cpu[@]}")
m_h_ok=$(median "${h_ok[@]}"); m_h_cpu=$(median "${h_cpu[@]}")
printf '| loadfleet --http2 (coordinator + agent) | %.0f | open model, %s req/s, send-lag p99 %s ms | %s | %.2f | %s |\n' \
    "$m_lf_ok" "$COMPARE_RATE" "$(median "${lf_lag[@]}")" "$COMPARE_RATE" "$m_lf_cpu" "$(per "$m_lf_ok" "$m_lf_cpu")" >> "$REPORT"
printf '| h2load | %.0f | closed loop, as fast as nginx answers | %.0f | %.2f | %s |\n' \
    "$m_h_ok" "$(median "${h_rps[@]}")" "$m_h_cpu" "$(per "$m_h_ok" "$m_h_cpu")" >> "$REPORT"

{
    echo
    echo "### loadfleet --http2 rate steps against nginx h2c (${STEP_SECONDS}s each)"
    echo
    echo "| offered req/s | answered 200 | unsent | send-lag p99 ms | generator CPU s | req per generator CPU-s | held |"
    echo "|---:|---:|---:|---:|---:|---:|:--:|"
} >> "$REPORT"
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
