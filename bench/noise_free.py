#!/usr/bin/env python3
"""The runner behind bench/noise-free.sh (see there for what and why).

Every figure is counted over one tool's whole process, every thread of it.
For loadfleet that process is the local fleet's one agent: the coordinator
starts its agent through LOADFLEET_AGENT_BIN, here a wrapper that runs the
agent under the counting tool, so the coordinator's own work is left out.
A peer is counted as the one process it is. Tools run one at a time, in
turn, the generator on GEN_CPU and the target on TARGET_CPU (bench/targets.py).
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import targets  # noqa: E402
import noise_free_tables as tables  # noqa: E402

HERE = Path(__file__).resolve().parent
BIN = targets.BIN
GEN_CPU = targets.GEN_CPU

LOW = int(os.environ.get("LOW", "200"))
HIGH = int(os.environ.get("HIGH", "1000"))
FAST = int(os.environ.get("FAST", "20000"))
SECONDS_RUN = int(os.environ.get("SECONDS_RUN", "5"))
CG_SECONDS = int(os.environ.get("CG_SECONDS", "5"))
RUNS = int(os.environ.get("RUNS", "2"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "64"))
H2_CONNECTIONS = int(os.environ.get("H2_CONNECTIONS", "1"))
H2_STREAMS = int(os.environ.get("H2_STREAMS", "100"))
SWARM_SIZES = [int(n) for n in os.environ.get("SWARM_SIZES", "100 1000").split()]
# Sizes counted under callgrind: only small ones keep pace (part_coordinator).
SWARM_CALLGRIND = [int(n) for n in os.environ.get("SWARM_CALLGRIND", "4 12").split()]
SWARM_SECONDS = [int(s) for s in os.environ.get("SWARM_SECONDS", "2 6").split()]
PARTS = os.environ.get("PARTS", "http1 h2c grpc flow coordinator").split()
# The flow part's memory runs: arrivals a second for MEM_SECONDS into a shop
# that holds every answer MEM_DELAY, so MEM_HIGH x MEM_DELAY are in flight.
MEM_LOW = int(os.environ.get("MEM_LOW", "50"))
MEM_HIGH = int(os.environ.get("MEM_HIGH", "5000"))
MEM_SECONDS = int(os.environ.get("MEM_SECONDS", "2"))
MEM_DELAY = os.environ.get("MEM_DELAY", "2s")
# Room for every arrival in flight, each on its own connection (the
# connections follow, --max-connections defaulting to --max-in-flight), and
# a drain past a held flow's two delayed steps.
FLOW_MAX_IN_FLIGHT = int(os.environ.get("FLOW_MAX_IN_FLIGHT", "15000"))
FLOW_DRAIN = os.environ.get("FLOW_DRAIN", "10s")
FIGURES = os.environ.get("FIGURES", "instructions syscalls perf rusage").split()
TOOLS = os.environ.get("TOOLS", "agent oha h2load").split()
GRPC_METHOD = "loadfleet.testbed.v1.Testbed/Work"

# Each figure's counting tool: the command a generator runs under, in the
# same process (valgrind and strace trace what they start; rusage_of.py
# waits for it).
MODES = {"instructions": "callgrind", "syscalls": "strace", "perf": "perf", "rusage": "rusage"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def prefix(mode, d):
    if mode == "callgrind":
        return ["valgrind", "--tool=callgrind", "-q", f"--callgrind-out-file={d}/callgrind.%p"]
    if mode == "strace":
        return ["strace", "-f", "-c", "-U", "name,calls", "-o", f"{d}/strace.txt"]
    if mode == "perf":
        # Counted in the kernel as each call enters: the process runs at full
        # speed, where strace's stops slow it so far that 20,000 req/s would
        # come in other batches than untraced.
        return ["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-o", f"{d}/perf.txt", "--"]
    return [sys.executable, str(HERE / "rusage_of.py"), f"{d}/rusage.json", "--"]


def read_count(mode, d):
    """The run's count: instructions (an int), calls by syscall (a dict)
    or the rusage (a dict)."""
    if mode == "callgrind":
        files = list(d.glob("callgrind.*"))
        if not files:
            raise RuntimeError("callgrind wrote no profile")
        total = 0
        for f in files:
            with f.open() as text:
                for line in text:
                    if line.startswith("summary:"):
                        total += int(line.split()[1])
                        break
            # Only the total is used, and profiles are megabytes each.
            f.unlink()
        return total
    if mode == "strace":
        calls = {}
        for line in (d / "strace.txt").read_text().splitlines():
            f = line.split()
            if len(f) == 2 and f[1].isdigit() and f[0] != "total":
                calls[f[0]] = int(f[1])
        return calls
    if mode == "perf":
        for line in (d / "perf.txt").read_text().splitlines():
            f = line.split(",")
            if len(f) > 2 and f[2] == "raw_syscalls:sys_enter" and f[0].isdigit():
                return int(f[0])
        raise RuntimeError("perf counted no syscalls (see perf.txt)")
    return json.loads((d / "rusage.json").read_text())


def run_cmd(cmd, d, seconds, env=None, stdout="stdout.txt"):
    """Runs cmd in its own process group, bounded in time: a run that hangs
    (a tool stuck under valgrind) is ended, group and all, and reads as
    failed rather than stopping the benchmark."""
    limit = 90 + 15 * seconds
    with open(d / stdout, "w") as out, open(d / "stderr.txt", "w") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, **(env or {})},
                             start_new_session=True)
        try:
            p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise RuntimeError(f"did not finish within {limit} s")


# --- the tools: each runs at `rate` for `seconds` under `mode`, in folder d ---

def fleet(args, seconds, mode, d):
    """A local fleet run with one agent, counted under `mode`; returns its
    report. `args` say what to send: flags, or a plan file."""
    wrapper = d / "agent"
    wrapper.write_text("#!/bin/sh\nexec " + shlex.join([*prefix(mode, d), str(BIN / "loadfleet-agent")])
                       + ' "$@"\n')
    wrapper.chmod(0o755)
    # Traced, the agent runs many times slower: arrivals it is late for
    # still leave, so a run offers every request its rate asks for.
    slow = ["--max-lag", "30s"] if mode in ("callgrind", "strace") else []
    cmd = ["taskset", "-c", GEN_CPU, str(BIN / "loadfleet-coordinator"), "run", *args,
           "--local-agents", "1", "--out", str(d / "report"), *slow]
    run_cmd(cmd, d, seconds, env={"LOADFLEET_AGENT_BIN": str(wrapper)})
    return json.loads((d / "report" / "report.json").read_text())


def agent(proto, target, rate, seconds, mode, d):
    args = {
        "http1": ["--url", target, "--connections", str(CONNECTIONS)],
        "h2c": ["--url", target, "--http2", "--connections", str(H2_CONNECTIONS)],
        "grpc": ["--url", target, "--reflection", "--grpc-method", GRPC_METHOD,
                 "--grpc-message", '{"payload": "x"}'],
    }[proto]
    r = fleet([*args, "--rate", str(rate), "--duration", f"{seconds}s",
               "--max-in-flight", "10000", "--drain", "3s"], seconds, mode, d)
    t, a = r["totals"], r["agents"][0]
    return {"completed": t["completed"], "unsent": t["unsent"]["total"],
            "lag_p99_ms": (a.get("lag_ms") or {}).get("p99")}


def oha(proto, target, rate, seconds, mode, d):
    conns = CONNECTIONS if proto == "http1" else H2_CONNECTIONS
    cmd = ["taskset", "-c", GEN_CPU, *prefix(mode, d), "oha", "--no-tui", "--output-format", "json",
           "-z", f"{seconds}s", "-c", str(conns), "--latency-correction", "-q", str(rate)]
    if proto == "h2c":
        cmd += ["--http2", "-p", str(H2_STREAMS)]
    run_cmd([*cmd, target], d, seconds, stdout="oha.json")
    j = json.loads((d / "oha.json").read_text())
    return {"completed": sum(j.get("statusCodeDistribution", {}).values())}


def h2load(proto, target, rate, seconds, mode, d):
    # --rps is per client (connection).
    cmd = ["taskset", "-c", GEN_CPU, *prefix(mode, d), "h2load", "-c", str(H2_CONNECTIONS),
           "-m", str(H2_STREAMS), "--rps", str(max(1, rate // H2_CONNECTIONS)),
           "-D", str(seconds), target]
    run_cmd(cmd, d, seconds, stdout="h2load.txt")
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded",
                  (d / "h2load.txt").read_text())
    if not m:
        raise RuntimeError("h2load printed no request counts")
    return {"completed": int(m.group(1))}


RUNNERS = {"agent": agent, "oha": oha, "h2load": h2load}


# --- the flow part: what each arrival is, against the testbed's shop -------

# Two steps, login then cart: the cart needs the session cookie login set.
# `full` captures login's token and checks the cart's status; `bare` does
# neither; `jarless` turns the cookie jar off too, so its cart is answered
# 401 and the flow fails: its answer and its accounting differ a little
# from a 201's, which the tables name.
LOGIN = '\n[[scenario.{kind}]]\nname = "login"\nmethod = "POST"\npath = "/login"\n'
CART = '\n[[scenario.step]]\nname = "cart_add"\nmethod = "POST"\npath = "/cart"\n'
SHAPES = {
    "request": LOGIN.format(kind="request"),
    "full": LOGIN.format(kind="step") + 'capture = { token = "json.token" }\n'
            + CART + 'check = ["status == 201"]\n',
    "bare": LOGIN.format(kind="step") + CART,
    "jarless": "cookies = false\n" + LOGIN.format(kind="step") + CART,
}


def shop(shape, url, rate, seconds, mode, d):
    """One run of a shape at `rate` arrivals (requests or flows) a second.
    In flight is the agent's peak over the run (intervals' max_in_flight:
    arrivals, so flows for a flow); steps are the requests a run's flows
    completed."""
    plan = d / "plan.toml"
    plan.write_text(f'[target]\nurl = "{url}"\n\n[[scenario]]\nname = "{shape}"\n'
                    f'rate = {rate}\nduration = "{seconds}s"\n' + SHAPES[shape])
    r = fleet([str(plan), "--max-in-flight", str(FLOW_MAX_IN_FLIGHT), "--drain", FLOW_DRAIN],
              seconds, mode, d)
    t, s = r["totals"], r["scenarios"][0]
    steps = s.get("steps") or []
    return {"completed": t["completed"], "failures": t["failures"],
            "steps": sum(x["completed"] for x in steps) if steps else t["completed"],
            "unsent": t["unsent"]["total"] + sum(sum(x["unsent"].values()) for x in steps),
            "in_flight": max((i["max_in_flight"] for i in r["intervals"]), default=0)}


def part_flow(results, runs_dir):
    """Instructions per arrival of each shape between LOW and HIGH a
    second against the shop, and peak RSS per arrival in flight between
    MEM_LOW and MEM_HIGH a second into a shop that holds every answer
    MEM_DELAY: the request alone, and the full flow."""
    for figure, args, shapes, rates, secs in (
            ("instructions", [], list(SHAPES), (LOW, HIGH), CG_SECONDS),
            ("rusage", ["--delay", MEM_DELAY], ["request", "full"], (MEM_LOW, MEM_HIGH),
             MEM_SECONDS)):
        if figure not in FIGURES:
            continue
        mode = MODES[figure]
        p, url = targets.start_testbed("--shop", *args)
        try:
            for run in range(RUNS):
                for shape in shapes:
                    for rate in rates:
                        measure(results, ("agent", mode, rate, run), shop, shape,
                                url.rstrip("/"), rate, mode, runs_dir, seconds=secs)
        finally:
            targets.stop(p)


def measure(results, key, runner, proto, target, rate, mode, runs_dir, seconds=None):
    """One run, stored under key; a failed run is logged and left out (a
    dash in the tables), never the end of the benchmark."""
    tool, _, _, run = key
    seconds = seconds or (CG_SECONDS if mode == "callgrind" else SECONDS_RUN)
    d = runs_dir / f"{proto}-{tool}-{mode}-{rate}-{run + 1}"
    d.mkdir(parents=True)
    t0 = time.time()
    try:
        r = runner(proto, target, rate, seconds, mode, d)
        r["count"] = read_count(mode, d)
        r["offered"] = rate * seconds
    except Exception as e:
        log(f"  {d.name}: FAILED: {e} (see {d})")
        return
    results[(proto, *key)] = r
    log(f"  {d.name}: {r['completed']} completed in {time.time() - t0:.0f} s")


def part_protocol(proto, target, tools, results, runs_dir):
    for figure in FIGURES:
        mode = MODES[figure]
        for run in range(RUNS):
            # Tools take turns, and the turn moves each round.
            for tool in tools[run % len(tools):] + tools[:run % len(tools)]:
                if mode == "perf":
                    rates = [LOW, HIGH, FAST]
                elif mode == "rusage":
                    rates = [LOW, HIGH, FAST] if tool == "agent" else [HIGH, FAST]
                else:
                    rates = [LOW, HIGH]
                for rate in rates:
                    measure(results, (tool, mode, rate, run), RUNNERS[tool], proto, target,
                            rate, mode, runs_dir)


def part_coordinator(runs_dir):
    """The coordinator against bench/scale.sh's swarm, at each size for two
    lengths of schedule: the difference over the difference in snapshots
    merged is one agent-second's cost (its snapshot, with the heartbeats of
    that second and a share of what every second costs the coordinator),
    free of the joins and the report, which both lengths share.

    Instructions are counted under callgrind only at small sizes: the
    coordinator takes a snapshot 400 ms after its second closes and an
    agent silent for 2.5 s as lost, deadlines that a coordinator slowed ~35
    times misses once it has more to merge each second than it can (at 100
    agents, on two vCPUs). The larger sizes are timed untraced (CPU,
    indicative)."""
    out = {}
    for mode, sizes in (("callgrind", SWARM_CALLGRIND), ("rusage", SWARM_SIZES)):
        for n in sizes:
            for run in range(RUNS):
                for secs in SWARM_SECONDS:
                    r = coordinator_run(runs_dir, mode, n, secs, run)
                    if r:
                        out[(mode, n, secs, run)] = r
    return out


def coordinator_run(runs_dir, mode, n, secs, run):
    d = runs_dir / f"coordinator-{mode}-{n}-{secs}s-{run + 1}"
    d.mkdir(parents=True)
    env = {**os.environ, "SCALE_OUT": str(d / "scale"), "DURATION": f"{secs}s",
           "BIN_DIR": str(BIN)}
    if mode == "callgrind":
        env["COORDINATOR_WRAP"] = shlex.join(prefix("callgrind", d))
    t0 = time.time()
    try:
        with open(d / "scale.log", "w") as f:
            subprocess.run(["bash", str(HERE / "scale.sh"), str(n)], env=env, stdout=f,
                           stderr=subprocess.STDOUT, timeout=300 + 40 * secs)
        runs = d / "scale" / str(n)
        swarm = json.loads((runs / "swarm.json").read_text())
        report = json.loads((runs / "report" / "report.json").read_text())
        row = (d / "scale.md").read_text().splitlines()[-1]
        user, system = (float(x) for x in (runs / "rusage").read_text().split()[-4:-2])
        r = {"snapshots": swarm["sent"]["snapshots"], "exact": "| yes |" in row,
             "lost": sum(1 for a in report["agents"] if a["status"] != "finished"),
             "count": read_count("callgrind", d) if mode == "callgrind" else user + system}
    except Exception as e:
        log(f"  {d.name}: FAILED: {e} (see {d})")
        return None
    log(f"  {d.name}: {r['snapshots']} snapshots, {r['lost']} agents lost, "
        f"{time.time() - t0:.0f} s")
    return r


def perf_counts_syscalls():
    try:
        p = subprocess.run(["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and any(line.split(",")[0].isdigit() for line in p.stderr.splitlines())


def version(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError:
        return None
    text = (p.stdout + p.stderr).strip()
    return text.splitlines()[0] if text else None


def header():
    cpu = next((line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    rev = version(["git", "-C", str(targets.ROOT), "rev-parse", "--short", "HEAD"])
    # What the figures are of: the last change to the measured code, which
    # a branch that only touches the benchmark does not move.
    src = version(["git", "-C", str(targets.ROOT), "log", "-1", "--format=%h", "--",
                   "agent", "coordinator", "proto", "sys", "testbed", "swarm", "Cargo.lock"])
    tools = [v for v in (version(["oha", "--version"]), version(["h2load", "--version"]),
                         version(["nginx", "-v"]), version(["valgrind", "--version"]),
                         version(["strace", "-V"]), version(["perf", "--version"])) if v]
    return [f"Machine: {os.cpu_count()} CPUs, {cpu}, Linux {os.uname().release}; "
            f"load average {os.getloadavg()[0]:.1f} at the start",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; loadfleet {rev} "
            f"(measured code last changed in {src}; binaries from {BIN}); " + ", ".join(tools),
            f"Layout: target on CPU {targets.TARGET_CPU}, generator on CPU {GEN_CPU}; "
            f"HTTP/1.1 {CONNECTIONS} connections, h2c {H2_CONNECTIONS} connection(s) "
            f"with up to {H2_STREAMS} streams (oha -p, h2load -m); runs of {SECONDS_RUN} s "
            f"({CG_SECONDS} s under callgrind), {RUNS} runs of each, tools in turn.", ""]


def main():
    runs_dir = Path(tempfile.mkdtemp(prefix="loadfleet-noise-free."))
    log(f"bench: runs in {runs_dir}")
    tools = [t for t in TOOLS if t in RUNNERS]
    if "perf" in FIGURES and not perf_counts_syscalls():
        log("bench: perf cannot count raw_syscalls:sys_enter here (needs linux-perf, tracefs and "
            "root); the untraced syscall figure is left out")
        FIGURES.remove("perf")
    results, coordinator, flows = {}, {}, {}
    started = []
    lines = header()
    try:
        if "http1" in PARTS:
            p, url = targets.start_nginx(where=runs_dir / "nginx-http1")
            started.append(p)
            log("HTTP/1.1 against nginx")
            part_protocol("http1", url, [t for t in tools if t != "h2load"], results, runs_dir)
            targets.stop(p)
        if "h2c" in PARTS:
            p, url = targets.start_nginx(http2=True, where=runs_dir / "nginx-h2c")
            started.append(p)
            log("h2c against nginx")
            part_protocol("h2c", url, tools, results, runs_dir)
            targets.stop(p)
        if "grpc" in PARTS and "agent" in tools:
            p, url = targets.start_testbed("--grpc")
            started.append(p)
            log("gRPC against the testbed")
            part_protocol("grpc", url.rstrip("/"), ["agent"], results, runs_dir)
            targets.stop(p)
        if "flow" in PARTS and "agent" in tools:
            log("flows against the testbed's shop")
            part_flow(flows, runs_dir)
        if "coordinator" in PARTS:
            log("the coordinator against the swarm")
            coordinator = part_coordinator(runs_dir)
    finally:
        for p in started:
            targets.stop(p)
    lines += tables.render(results, coordinator, LOW, HIGH, FAST, SWARM_SECONDS)
    lines += tables.flow_tables(flows, LOW, HIGH, MEM_LOW, MEM_HIGH, MEM_DELAY, MEM_SECONDS)
    text = "\n".join(lines) + "\n"
    out = targets.ROOT / "bench" / "out" / "noise-free.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text, end="")
    log(f"bench: tables in {out}, runs in {runs_dir}")


if __name__ == "__main__":
    main()
