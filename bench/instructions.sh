#!/usr/bin/env bash
# Noise-free cost of the agent: instructions per request under callgrind.
#
# The agent (the whole process: every thread) runs under
# `valgrind --tool=callgrind` twice, at a low and a high rate for the same
# duration against the built-in testbed; the difference in instructions
# divided by the difference in completed requests is the marginal cost of one
# request, free of start-up, per-second snapshots and timer ticks, which both
# runs share. Instruction counts do not depend on what else the machine is
# doing, so this figure can be compared across runs and machines of the same
# architecture, unlike CPU seconds.
#
# Usage: bench/instructions.sh [BIN_DIR]   (default target/release; pass
# another build's folder to compare two builds)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-$PWD/target/release}
LOW=${LOW:-200}
HIGH=${HIGH:-1000}
SECONDS_RUN=${SECONDS_RUN:-5s}
OUT=$(mktemp -d /tmp/loadfleet-instr.XXXXXX)
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }

cat > "$OUT/agent-under-callgrind" <<WRAP
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file="\$CALLGRIND_OUT.%p" "$BIN/loadfleet-agent" "\$@"
WRAP
chmod +x "$OUT/agent-under-callgrind"

run_at() {
    local rate=$1 dir=$OUT/rate-$1
    mkdir -p "$dir"
    CALLGRIND_OUT=$dir/callgrind LOADFLEET_AGENT_BIN=$OUT/agent-under-callgrind \
        LOADFLEET_TESTBED_BIN=$BIN/loadfleet-testbed \
        "$BIN/loadfleet-coordinator" run --local-agents 1 --rate "$rate" --duration "$SECONDS_RUN" \
        --testbed-delay 0ms --max-lag 1s --out "$dir/report" >"$dir/stdout" 2>"$dir/stderr" || true
    local ir completed
    ir=$(cat "$dir"/callgrind.* | sed -n 's/^summary: //p' | awk '{s+=$1} END {print s}')
    completed=$(python3 -c "import json,sys; print(json.load(open('$dir/report/report.json'))['totals']['completed'])")
    echo "$rate $ir $completed"
}

read -r _ ir_lo n_lo < <(run_at "$LOW")
read -r _ ir_hi n_hi < <(run_at "$HIGH")
python3 - "$ir_lo" "$n_lo" "$ir_hi" "$n_hi" <<'PY'
import sys
ir_lo, n_lo, ir_hi, n_hi = map(int, sys.argv[1:])
print(f"low:  {n_lo} requests, {ir_lo} instructions")
print(f"high: {n_hi} requests, {ir_hi} instructions")
print(f"marginal instructions per request: {(ir_hi - ir_lo) / max(1, n_hi - n_lo):.0f}")
PY
