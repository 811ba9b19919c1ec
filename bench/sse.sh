#!/usr/bin/env bash
# Held streams: what one agent pays per Server-Sent Events subscriber.
#
# The testbed (pinned to CPU 0) sends every stream one event a second; one
# local agent (the coordinator pins it to another CPU) opens STREAMS
# subscribers at RATE a second and holds each for HOLD. While they are all
# held, the agent's RSS and CPU time are read from /proc every second:
#   - RSS per stream = (RSS with every stream held - RSS before the first
#     one) / streams held;
#   - CPU at one event/s/stream = CPU seconds over the steady part of the
#     hold / its length, in cores.
# Not in CI: it needs ~2 × STREAMS file descriptors and ports on 127.0.0.0/8.
#
# Usage: bench/sse.sh [BIN_DIR]   (default target/release)
#        STREAMS=20000 RATE=2000 HOLD=40s bench/sse.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-$PWD/target/release}
STREAMS=${STREAMS:-20000}
RATE=${RATE:-1000}
HOLD=${HOLD:-40s}
OUT=$(mktemp -d /tmp/loadfleet-sse.XXXXXX)

# Every stream is a descriptor in the agent and one in the testbed. Both
# raise their soft limit to the hard one by themselves; raising the hard
# limit needs CAP_SYS_RESOURCE, so where that is refused (a container's
# --ulimit too, when the engine lacks it) the run is cut to what the limit
# allows, less OWN_FILES for each process's own descriptors (control
# connection, epoll, timers, stdio), and says so.
OWN_FILES=${OWN_FILES:-48}

# Every stream is also an ephemeral port from one source address to one
# destination. With the usual range (32768-60999) 16,000 of them make each
# connect() search the range in the kernel (__inet_hash_connect was 45% of
# the agent's CPU here), and the ramp stalls: widen the range for the run
# where we may (root), as a user holding this many streams would, and put
# it back after.
PORTS_WAS=$(sysctl -n net.ipv4.ip_local_port_range | tr -s '\t ' ' ')
if [[ $EUID -eq 0 && ${WIDEN_PORTS:-1} == 1 ]] && sysctl -qw net.ipv4.ip_local_port_range="1024 65535" 2>/dev/null; then
    echo "ephemeral ports widened to 1024-65535 for the run (was $PORTS_WAS)" >&2
    trap 'sysctl -qw net.ipv4.ip_local_port_range="$PORTS_WAS"' EXIT
fi
ulimit -Hn $((STREAMS + 4096)) 2>/dev/null || true
HARD=$(ulimit -Hn)
if [[ "$HARD" != unlimited && $((STREAMS + OWN_FILES)) -gt $HARD ]]; then
    echo "open-file hard limit $HARD: holding $((HARD - OWN_FILES)) streams instead of $STREAMS" >&2
    STREAMS=$((HARD - OWN_FILES))
fi

"$BIN/loadfleet-testbed" --listen 127.0.0.1:0 --cpus 0 --sse-interval 1s \
    >"$OUT/testbed.out" 2>"$OUT/testbed.err" &
TESTBED=$!
trap 'kill "$TESTBED" 2>/dev/null || true; sysctl -qw net.ipv4.ip_local_port_range="$PORTS_WAS" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q "listening on" "$OUT/testbed.out" && break
    sleep 0.1
done
ADDR=$(sed -n 's/^listening on //p' "$OUT/testbed.out")

SCHEDULE=$(python3 -c "print(f'{$STREAMS/$RATE:.3f}s')")
cat >"$OUT/plan.toml" <<PLAN
[target]
url = "http://$ADDR"
max_in_flight = $STREAMS
[run]
drain = "5s"
[[scenario]]
name = "held"
kind = "sse"
rate = $RATE
duration = "$SCHEDULE"
hold = "$HOLD"
send_time = "data.sent_us"
send_time_unit = "us"
[[scenario.request]]
path = "/sse"
PLAN

LOADFLEET_AGENT_BIN=$BIN/loadfleet-agent "$BIN/loadfleet-coordinator" run "$OUT/plan.toml" \
    --local-agents 1 --out "$OUT/report" >"$OUT/coordinator.out" 2>"$OUT/coordinator.err" &
COORD=$!

# The agent is the coordinator's child; sample it every second.
AGENT=""
for _ in $(seq 200); do
    AGENT=$(ps -o pid= --ppid "$COORD" | head -1 | tr -d ' ' || true)
    [[ -n "$AGENT" && -r /proc/$AGENT/status ]] && break
    sleep 0.1
done
TICKS=$(getconf CLK_TCK)
: >"$OUT/samples"
while kill -0 "$COORD" 2>/dev/null && [[ -r /proc/$AGENT/stat ]]; do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$AGENT/status" 2>/dev/null || echo 0)
    cpu=$(awk '{print $14 + $15}' "/proc/$AGENT/stat" 2>/dev/null || echo 0)
    fds=$(ls "/proc/$AGENT/fd" 2>/dev/null | wc -l)
    echo "$(date +%s.%N) $rss $cpu $fds" >>"$OUT/samples"
    sleep 1
done
wait "$COORD" || true

python3 - "$OUT" "$STREAMS" "$TICKS" <<'PY'
import json, sys
out, streams, ticks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [tuple(map(float, l.split())) for l in open(f"{out}/samples") if l.strip()]
report = json.load(open(f"{out}/report/report.json"))
sc = report["scenarios"][0]
sse = sc["sse"]
base = rows[0][1]
# The steady part: every stream held (descriptors within 1% of the peak).
peak_fds = max(r[3] for r in rows)
held = [r for r in rows if r[3] >= 0.99 * peak_fds]
rss_held = max(r[1] for r in held)
cpu = (held[-1][2] - held[0][2]) / ticks
seconds = held[-1][0] - held[0][0]
opened = sse["opened"]
print(f"subscribers intended {sc['intended']}, opened {opened}, unsent {sc['unsent']['total']}, errors {sc['errors']}")
print(f"events {sse['events']}, per subscriber {sse['events_per_subscriber']}")
print(f"agent RSS before the streams {base/1024:.1f} MiB, with {opened} held {rss_held/1024:.1f} MiB")
print(f"RSS per held stream: {(rss_held - base) * 1024 / max(1, opened):.0f} bytes")
print(f"agent CPU over {seconds:.0f} s of steady hold (~{opened} events/s): {cpu/max(seconds,1e-9):.3f} cores")
print(f"to subscribe p50/p99: {sc['latency_ms']['p50']:.2f} / {sc['latency_ms']['p99']:.2f} ms; "
      f"delivery p50/p99: {sse['delivery']['latency_ms']['p50']:.2f} / {sse['delivery']['latency_ms']['p99']:.2f} ms")
print(f"(samples and report in {out})")
PY
