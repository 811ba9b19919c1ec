#!/usr/bin/env bash
# Scale benchmark: one coordinator against N synthetic agents.
#
# For each N, a real `loadfleet-coordinator run --expect-agents N` listens on
# 127.0.0.1 and `loadfleet-swarm` opens N real gRPC sessions to it (the real
# protocol: hello, pongs, heartbeats, one snapshot per agent per second with
# ~1,000 distinct latency values over the outcome classes, finished). The
# swarm sends no HTTP load; its counts are synthetic but consistent, and it
# writes what it sent (totals and one histogram of every latency) to
# swarm.json, which must equal the coordinator's report.json.
#
# Measured per N:
#   - coordinator CPU: user+system seconds from getrusage of the child
#     (/usr/bin/time), and cores over the run window and the busiest second
#     from /proc/<pid>/stat sampled every 0.25 s;
#   - peak RSS (ru_maxrss = VmHWM);
#   - time from the last hello to the common start (clock probes included),
#     seen by the swarm: its agents share one clock;
#   - the longest gap between two coordinator heartbeats any agent saw;
#   - exactness: merged totals, status and error counts, and p50/p90/p99/
#     p99.9/max/count overall and per class, against the swarm's histogram;
#   - agents lost.
#
# Usage: bench/scale.sh [N ...]             (default: 100 500 1000)
#   DURATION=10s       length of the schedule
#   PER_AGENT_RATE=1000  arrivals per agent per second (snapshot richness)
#   BIN_DIR=DIR        measure that build (default: build target/release)
#   COORDINATOR_WRAP="valgrind --tool=callgrind ..."  a command the
#                      coordinator runs under, in the same process (how
#                      bench/noise-free.sh counts its instructions)
#   SCALE_OUT=DIR      where the runs go (default bench/out/scale)
# Writes SCALE_OUT/<N>/ and the table SCALE_OUT.md (bench/out/scale.md, the
# table BENCHMARKS.md quotes). Not run in CI (a small version is
# coordinator/tests/it/scale.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${SCALE_OUT:-$ROOT/bench/out/scale}
TABLE=$OUT.md
mkdir -p "$OUT"
DURATION=${DURATION:-10s}
PER_AGENT_RATE=${PER_AGENT_RATE:-1000}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(100 500 1000)

if [[ -n ${BIN_DIR:-} ]]; then
    BIN=$BIN_DIR
else
    cargo build --release -p loadfleet-coordinator -p loadfleet-swarm
    BIN=$ROOT/target/release
fi
read -r -a WRAP <<< "${COORDINATOR_WRAP:-}"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Samples "wall_s cpu_ticks rss_kib hwm_kib" of $1 every 0.25 s until it exits.
sample() {
    local pid=$1 file=$2
    while [[ -r /proc/$pid/stat ]]; do
        local stat rss hwm
        stat=$(cut -d' ' -f14,15 "/proc/$pid/stat" 2>/dev/null) || break
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null) || break
        hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null) || break
        read -r ut st <<< "$stat"
        echo "$(date +%s.%N) $((ut + st)) $rss $hwm" >> "$file"
        sleep 0.25
    done
}

one() {
    local n=$1 dir=$OUT/$1
    rm -rf "$dir"; mkdir -p "$dir"
    local rate=$((n * PER_AGENT_RATE))
    /usr/bin/time -o "$dir/rusage" -f "%U %S %M %e" \
        "${WRAP[@]}" "$BIN/loadfleet-coordinator" run --url http://127.0.0.1:9/ --rate "$rate" \
        --duration "$DURATION" --expect-agents "$n" --listen 127.0.0.1:0 \
        --token scale-bench --agent-timeout 120s --out "$dir/report" \
        > "$dir/coordinator.out" 2> "$dir/coordinator.err" &
    local tpid=$!
    PIDS+=("$tpid")
    local addr=""
    for _ in $(seq 300); do
        addr=$(sed -n 's/^coordinator listening on \([^;]*\);.*/\1/p' "$dir/coordinator.err" 2>/dev/null || true)
        [[ -n $addr ]] && break
        sleep 0.1
    done
    [[ -n $addr ]] || { echo "coordinator did not start:"; cat "$dir/coordinator.err"; exit 1; }
    local cpid
    cpid=$(tr -d " \n" < "/proc/$tpid/task/$tpid/children")
    PIDS+=("$cpid")
    sample "$cpid" "$dir/samples" &
    local spid=$!
    "$BIN/loadfleet-swarm" --coordinator "http://$addr" --token scale-bench --agents "$n" \
        --source 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 --out "$dir/swarm.json" \
        > "$dir/swarm.out" 2>&1 || echo "swarm exit $? (see $dir/swarm.out)"
    wait "$tpid" || echo "coordinator exit $? (see $dir/coordinator.err)"
    wait "$spid" || true
    PIDS=()
    python3 - "$dir" "$n" "$(getconf CLK_TCK)" <<'PY' >> "$TABLE"
import json, sys
d, n, hz = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
report = json.load(open(f"{d}/report/report.json"))
swarm = json.load(open(f"{d}/swarm.json"))
user, system, maxrss_kib, wall = open(f"{d}/rusage").read().split()[-4:]
cpu = float(user) + float(system)
samples = [tuple(map(float, l.split())) for l in open(f"{d}/samples")]
run = report["run"]
start = run["started_at_unix"]
end = start + run["duration_s"]
def cpu_at(t):
    best = min(samples, key=lambda s: abs(s[0] - t))
    return best
a, b = cpu_at(start), cpu_at(end)
run_cores = (b[1] - a[1]) / hz / max(b[0] - a[0], 1e-9)
peak = 0.0
for i, s in enumerate(samples):
    for later in samples[i + 1:]:
        if later[0] - s[0] >= 1.0:
            peak = max(peak, (later[1] - s[1]) / hz / (later[0] - s[0]))
            break
t, sent = report["totals"], swarm["sent"]
keys = ["p50", "p90", "p99", "p999", "max", "count"]
bad = [k for k in ["intended", "sent", "completed", "completed_in_window", "status", "errors"] if t[k] != sent[k]]
bad += [f"latency.{k}" for k in keys if t["latency_ms"][k] != sent["latency_ms"][k]]
for cls, h in sent["latency_by_class_ms"].items():
    bad += [f"{cls}.{k}" for k in keys if t["latency_by_class_ms"].get(cls, {}).get(k) != h[k]]
lost = sum(1 for a in report["agents"] if a["status"] != "finished")
tm = swarm["timing"]
print(f"| {n} | {t['intended']:,} | {sent['distinct_values_per_snapshot']:.0f} | {cpu:.2f} | {run_cores:.3f} | {peak:.3f} | "
      f"{int(maxrss_kib) / 1024:.0f} | {tm['last_hello_to_start_s']:.2f} | {tm['heartbeat_gap_max_ms']:.0f} | "
      f"{tm['heartbeat_gap_before_run_max_ms']:.0f} / {tm['heartbeat_gap_in_run_max_ms']:.0f} / {tm['heartbeat_gap_after_run_max_ms']:.0f} | {'yes' if not bad else 'NO: ' + ','.join(bad)} | {lost} | {float(wall):.1f} |")
PY
    tail -1 "$TABLE"
}

{
    echo "Machine: $(nproc) CPUs, $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r); $(date -u +%F); loadfleet $(git rev-parse --short HEAD)"
    echo "Schedule: $DURATION at $PER_AGENT_RATE arrivals/s per agent; one snapshot per agent per second."
    echo
    echo "| agents | intended | distinct values / snapshot | coordinator CPU s (total) | cores over the run | cores, busiest second | peak RSS MiB | last hello → start s | max heartbeat gap ms | max gap before / in / after run ms | exact | lost | wall s |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:--|---:|---:|"
} > "$TABLE"
for n in "${SIZES[@]}"; do
    one "$n"
done
cat "$TABLE"
