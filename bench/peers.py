#!/usr/bin/env python3
"""The runner behind bench/peers.sh (see there for what and why).

Every tool runs as a child of this script, pinned with taskset; its CPU is
the rusage wait4() returns for it, which counts every descendant it reaped
(loadfleet's coordinator waits for its local agent). Run sequentially, never
two generators at once.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import (BIN, GEN_CPU, ROOT, TARGET_CPU, children,  # noqa: E402
                     start_nginx, start_testbed, stop)

OUT = ROOT / "bench" / "out" / "peers"

ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS_RUN = int(os.environ.get("SECONDS_RUN", "10"))
RATE = int(os.environ.get("RATE", "20000"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "64"))
# To the wall: a tool leaves the ladder after two misses in a row (one
# miss is often a stall of the host, not the tool's wall), so the top
# only needs to be above what any tool here holds (wrk's closed figure is
# 48k-210k req/s on 2-CPU virtual machines). Below 100k the steps are 5k: on
# a slow machine, whose wall is near wrk's 50k-65k, 20k steps say only "40k
# held, 60k not", too coarse to set against wrk's figure.
LADDER = [int(r) for r in os.environ.get(
    "LADDER",
    " ".join(str(r) for r in [*range(20000, 100000, 5000), *range(100000, 300001, 10000)])).split()]
LADDER_SECONDS = int(os.environ.get("LADDER_SECONDS", "5"))
MEMORY_SHORT = int(os.environ.get("MEMORY_SHORT", "60"))
MEMORY_LONG = int(os.environ.get("MEMORY_LONG", "120"))
PARTS = os.environ.get("PARTS", "peers tls ladder wall accuracy large memory").split()
# Extra agent settings for every loadfleet run, e.g. LOADFLEET_WAKE_QUANTUM.
if "--quick" in sys.argv:
    ROUNDS, SECONDS_RUN, LADDER, LADDER_SECONDS = 1, 3, [20000, 60000], 3
    MEMORY_SHORT, MEMORY_LONG = 5, 10

def run_measured(cmd, stdout_path, watch_agent=False):
    """Runs cmd pinned to GEN_CPU; returns (cpu_seconds, wall, peak_agent_rss_kib).

    CPU is user+system of the child and every descendant it reaped (wait4).
    With watch_agent, the RSS of the child's loadfleet-agent child is
    sampled every 0.2 s (VmRSS; the last sample before the agent exits is
    its RSS at the end of the run, the largest its peak)."""
    t0 = time.time()
    with open(stdout_path, "w") as out:
        p = subprocess.Popen(["taskset", "-c", GEN_CPU, *cmd], stdout=out,
                             stderr=subprocess.STDOUT)
    rss_last = rss_peak = 0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        if watch_agent:
            for child in children_of(p.pid):
                rss = vm_rss_kib(child)
                if rss:
                    rss_last = rss
                    rss_peak = max(rss_peak, rss)
        time.sleep(0.2)
    p.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, time.time() - t0, rss_last, rss_peak


def children_of(pid):
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def vm_rss_kib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# --- the three tools --------------------------------------------------------

def wrk(url, seconds, tag):
    out = OUT / f"{tag}.txt"
    cpu, wall, _, _ = run_measured(["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", url], out)
    text = out.read_text()
    done = 0
    for line in text.splitlines():
        if "requests in" in line:
            done = int(line.split()[0])
    return {"tool": "wrk", "completed": done, "cpu": cpu, "rps": done / seconds}


def oha(url, rate, seconds, tag, extra=()):
    out = OUT / f"{tag}.json"
    cmd = ["oha", "--no-tui", "--output-format", "json", "-z", f"{seconds}s",
           "-c", str(CONNECTIONS), "--latency-correction", *extra]
    if rate:
        cmd += ["-q", str(rate)]
    cpu, wall, _, _ = run_measured(cmd + [url], out)
    try:
        j = json.loads(out.read_text())
    except Exception:
        return {"tool": "oha", "completed": 0, "cpu": cpu, "rps": 0.0}
    done = sum(j.get("statusCodeDistribution", {}).values())
    pct = j.get("latencyPercentiles", {})
    return {"tool": "oha", "completed": done, "cpu": cpu, "rps": done / seconds,
            "p50_ms": (pct.get("p50") or 0) * 1000, "p99_ms": (pct.get("p99") or 0) * 1000,
            "p999_ms": (pct.get("p99.9") or 0) * 1000}


def loadfleet(url, rate, seconds, tag, connections=CONNECTIONS, max_in_flight=10000,
              watch=False, extra=()):
    d = OUT / tag
    shutil.rmtree(d, ignore_errors=True)
    cmd = [str(BIN / "loadfleet-coordinator"), "run", "--url", url, "--rate", str(rate),
           "--duration", f"{seconds}s", "--local-agents", "1", "--connections",
           str(connections), "--max-in-flight", str(max_in_flight), "--drain", "3s",
           "--out", str(d), *extra]
    cpu, wall, rss_last, rss_peak = run_measured(cmd, OUT / f"{tag}.txt", watch_agent=watch)
    try:
        r = json.loads((d / "report.json").read_text())
    except Exception:
        return {"tool": "loadfleet", "completed": 0, "cpu": cpu, "rps": 0.0, "unsent": -1,
                "lag_p99_ms": float("nan")}
    t = r["totals"]
    a = r["agents"][0] if r.get("agents") else {}
    lat = t.get("latency_ms") or {}
    return {"tool": "loadfleet", "completed": t["completed"], "cpu": cpu,
            "agent_cpu": a.get("cpu_seconds"), "rps": t["completed"] / seconds,
            "unsent": t["unsent"]["total"], "sent": t["sent"],
            "lag_p99_ms": (a.get("lag_ms") or {}).get("p99", float("nan")),
            "p50_ms": lat.get("p50"), "p99_ms": lat.get("p99"), "p999_ms": lat.get("p999"),
            "pool_wait_p99_ms": (t.get("pool_wait_ms") or {}).get("p99", 0.0),
            "max_in_flight": max((i.get("max_in_flight", 0) for i in r.get("intervals", [])),
                                 default=None),
            "rss_last_mib": rss_last / 1024, "rss_peak_mib": rss_peak / 1024}


def holds(r):
    """The rule a loadfleet run holds its rate by, in the ladder and the wall
    pairs alike: nothing unsent, send-lag p99 within 1 ms."""
    return r["unsent"] == 0 and r["lag_p99_ms"] <= 1.0


def per_cpu(r):
    return r["completed"] / r["cpu"] if r["cpu"] > 0 else 0.0


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


# --- the parts --------------------------------------------------------------

def wake_cost(period_us=400, n=5000):
    """CPU one sleep and wake-up costs a thread on GEN_CPU, in µs: its own
    rusage over n absolute sleeps of period_us, less the same loop without
    the sleep. The open loop pays this once per tick
    (docs/design/pacing.md), so it is the machine's floor under loadfleet's
    cost at low rates: on a virtual machine whose halts go through the
    hypervisor it is tens of µs.

    Also how late those wake-ups came, in µs (p50, p99): what a tick's
    arrivals wait beyond the quantum when one is late, so a tail here is a
    floor under any sleeping generator's send lag (a wake-up p99 of 0.15 to
    1.9 ms goes with a send-lag p99 of 1-2.8 ms at 20,000 req/s)."""
    import ctypes
    import resource
    libc = ctypes.CDLL(None, use_errno=True)

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    late = []
    # The loop without the sleep does the same bookkeeping, so that the
    # difference is the sleep's alone.
    spare = []

    def loop(sleep):
        t = Timespec()
        woke = Timespec()
        libc.clock_gettime(1, ctypes.byref(t))
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        for _ in range(n):
            t.tv_nsec += period_us * 1000
            if t.tv_nsec >= 1_000_000_000:
                t.tv_sec += 1
                t.tv_nsec -= 1_000_000_000
            if sleep:
                libc.clock_nanosleep(1, 1, ctypes.byref(t), None)
            libc.clock_gettime(1, ctypes.byref(woke))
            (late if sleep else spare).append(
                (woke.tv_sec - t.tv_sec) * 1e6 + (woke.tv_nsec - t.tv_nsec) / 1e3)
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(GEN_CPU)})
    # The agent's timer slack (`tighten_timer_slack`), not the default 50 µs
    # that would add to every wake-up's lateness.
    pr_set_timerslack = 29
    libc.prctl(pr_set_timerslack, ctypes.c_ulong(1000), 0, 0, 0)
    try:
        cost = (loop(True) - loop(False)) / n * 1e6
    finally:
        os.sched_setaffinity(0, old)
    late.sort()
    return cost, late[len(late) // 2], late[len(late) * 99 // 100]



lines = []


def say(s=""):
    print(s, flush=True)
    lines.append(s)


def part_peers(nginx):
    say(f"### Side by side: nginx on CPU {TARGET_CPU}, each generator on CPU {GEN_CPU}, "
        f"{CONNECTIONS} connections, {SECONDS_RUN} s, {ROUNDS} alternating rounds")
    say()
    say("| round | tool | model | completed | req/s | generator CPU s | req per CPU-s | send-lag p99 ms |")
    say("|---:|---|---|---:|---:|---:|---:|---:|")
    runs = {"wrk": [], "oha": [], "loadfleet": []}
    order = ["wrk", "oha", "loadfleet"]
    for i in range(ROUNDS):
        for tool in order[i % 3:] + order[:i % 3]:
            tag = f"peers-{tool}-{i}"
            if tool == "wrk":
                r = wrk(nginx, SECONDS_RUN, tag)
                model = "closed"
            elif tool == "oha":
                r = oha(nginx, RATE, SECONDS_RUN, tag)
                model = f"open {RATE}"
            else:
                r = loadfleet(nginx, RATE, SECONDS_RUN, tag)
                model = f"open {RATE}"
            runs[tool].append(r)
            lag = r.get("lag_p99_ms")
            say(f"| {i + 1} | {tool} | {model} | {r['completed']} | {r['rps']:.0f} | "
                f"{r['cpu']:.2f} | {per_cpu(r):.0f} | {'' if lag is None else lag} |")
    say()
    m = {t: med([per_cpu(r) for r in rs]) for t, rs in runs.items()}
    lag = med([r["lag_p99_ms"] for r in runs["loadfleet"]])
    say("| tool | median req per CPU-s | median req/s |")
    say("|---|---:|---:|")
    for t in order:
        say(f"| {t} | {m[t]:.0f} | {med([r['rps'] for r in runs[t]]):.0f} |")
    say()
    say(f"loadfleet / oha (P1, goal >= 1.5): **{m['loadfleet'] / m['oha']:.2f}**, "
        f"loadfleet send-lag p99 median {lag} ms (goal <= 0.5)")
    say()
    return runs


def part_tls():
    """P1's comparison over `https://`: the same nginx behind TLS (a
    self-signed P-256 certificate, whose check both tools skip), oha and
    loadfleet alternating at RATE. Encryption is work every generator does
    for every request, so the ratio says how much of the rest each adds."""
    server, nginx = start_nginx(OUT / "nginx-tls", tls=True)
    say(f"### Over TLS: nginx https on CPU {TARGET_CPU}, each generator on CPU {GEN_CPU}, "
        f"{CONNECTIONS} connections, {SECONDS_RUN} s, {ROUNDS} alternating rounds")
    say()
    say("| round | tool | completed | generator CPU s | req per CPU-s | send-lag p99 ms |")
    say("|---:|---|---:|---:|---:|---:|")
    runs = {"oha": [], "loadfleet": []}
    try:
        for i in range(ROUNDS):
            for tool in (["oha", "loadfleet"] if i % 2 == 0 else ["loadfleet", "oha"]):
                tag = f"tls-{tool}-{i}"
                if tool == "oha":
                    r = oha(nginx, RATE, SECONDS_RUN, tag, extra=("--insecure",))
                else:
                    r = loadfleet(nginx, RATE, SECONDS_RUN, tag, extra=("--insecure",))
                runs[tool].append(r)
                lag = r.get("lag_p99_ms", "")
                say(f"| {i + 1} | {tool} | {r['completed']} | {r['cpu']:.2f} | "
                    f"{per_cpu(r):.0f} | {lag} |")
    finally:
        stop(server)
    m = {t: med([per_cpu(r) for r in rs]) for t, rs in runs.items()}
    say()
    say(f"Over TLS, loadfleet / oha at {RATE} req/s: **{m['loadfleet'] / m['oha']:.2f}** "
        f"({m['loadfleet']:.0f} / {m['oha']:.0f} req per CPU-s, medians)")
    say()


def part_ladder(nginx):
    say(f"### Rate ladder: nginx on CPU {TARGET_CPU}, generator on CPU {GEN_CPU}, "
        f"{LADDER_SECONDS} s a step")
    say()
    say("loadfleet holds a step with zero unsent and send-lag p99 <= 1 ms; oha reports "
        "no lag, so it holds a step when it completes >= 99% of the offered requests.")
    say()
    say("| offered req/s | tool | completed req/s | unsent | send-lag p99 ms | generator CPU s | req per CPU-s | held |")
    say("|---:|---|---:|---:|---:|---:|---:|:--:|")
    held = {"loadfleet": 0, "oha": 0}
    failed = {"loadfleet": 0, "oha": 0}
    for n, rate in enumerate(LADDER):
        if all(f >= 2 for f in failed.values()):
            break
        tools = ["loadfleet", "oha"] if n % 2 == 0 else ["oha", "loadfleet"]
        for tool in tools:
            if failed[tool] >= 2:
                continue
            tag = f"ladder-{tool}-{rate}"
            if tool == "oha":
                r = oha(nginx, rate, LADDER_SECONDS, tag)
                ok = r["completed"] >= 0.99 * rate * LADDER_SECONDS
                unsent, lag = "", ""
            else:
                r = loadfleet(nginx, rate, LADDER_SECONDS, tag)
                ok = holds(r)
                unsent, lag = r["unsent"], r["lag_p99_ms"]
            if ok:
                held[tool] = max(held[tool], rate)
                failed[tool] = 0
            else:
                failed[tool] += 1
            say(f"| {rate} | {tool} | {r['rps']:.0f} | {unsent} | {lag} | {r['cpu']:.2f} | "
                f"{per_cpu(r):.0f} | {'yes' if ok else 'no'} |")
    say()
    say(f"Highest rate held on one core: loadfleet **{held['loadfleet']}**, oha **{held['oha']}**")
    say()
    return held


def cpu_jiffies(cpu):
    """(busy, total) jiffies of one CPU so far, from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] == f"cpu{cpu}":
            ticks = [int(x) for x in f[1:]]
            return sum(ticks) - ticks[3] - ticks[4], sum(ticks)
    return 0, 0


class BusyDuring:
    """How busy a CPU is in the middle of a run of `seconds`, from 3 s in to
    1 s before its end (less in a short run): start-up and drain left out,
    so that a generator's start does not dilute the figure."""

    def __init__(self, cpu, seconds):
        self.cpu, self.first, self.last = cpu, None, None
        self.timers = [threading.Timer(min(3, 0.3 * seconds), self.take, ("first",)),
                       threading.Timer(max(seconds - 1, 0.8 * seconds), self.take, ("last",))]
        for t in self.timers:
            t.start()

    def take(self, which):
        setattr(self, which, cpu_jiffies(self.cpu))

    def share(self):
        for t in self.timers:
            t.join()
        (b0, t0), (b1, t1) = self.first, self.last
        return (b1 - b0) / (t1 - t0) if t1 > t0 else float("nan")


def part_wall(nginx):
    """P2 asked directly, pair by pair: wrk closed, then at once loadfleet
    open at the rate wrk just reached. On a machine whose speed drifts by a
    tenth or more from one minute to the next, a ladder's step and the median of wrk's
    rounds taken minutes apart can land on either side of each other; a
    pair taken back to back cannot drift much, and asks exactly whether
    the open rate held is at least the closed one."""
    say(f"### The wall, pair by pair (P2): wrk closed, then loadfleet open at wrk's rate, "
        f"{SECONDS_RUN} s each, {ROUNDS} pairs")
    say()
    say("loadfleet holds wrk's rate with zero unsent and send-lag p99 <= 1 ms "
        "(the ladder's rule), for as long as wrk ran.")
    say()
    say("| pair | wrk closed req/s | loadfleet offered req/s | completed req/s | unsent | "
        "send-lag p99 ms | pool-wait p99 ms | req per CPU-s (wrk / loadfleet) | "
        f"target's CPU {TARGET_CPU} busy (wrk / loadfleet) | held |")
    say("|---:|---:|---:|---:|---:|---:|---:|---|---|:--:|")
    held, target = 0, []
    for i in range(ROUNDS):
        busy = BusyDuring(TARGET_CPU, SECONDS_RUN)
        w = wrk(nginx, SECONDS_RUN, f"wall-wrk-{i}")
        w_busy = busy.share()
        rate = int(w["rps"]) // 1000 * 1000
        busy = BusyDuring(TARGET_CPU, SECONDS_RUN)
        r = loadfleet(nginx, rate, SECONDS_RUN, f"wall-loadfleet-{i}")
        r_busy = busy.share()
        target.append(w_busy)
        ok = holds(r)
        held += ok
        say(f"| {i + 1} | {w['rps']:.0f} | {rate} | {r['rps']:.0f} | {r['unsent']} | "
            f"{r['lag_p99_ms']} | {r.get('pool_wait_p99_ms', '')} | "
            f"{per_cpu(w):.0f} / {per_cpu(r):.0f} | {w_busy:.1%} / {r_busy:.1%} | "
            f"{'yes' if ok else 'no'} |")
    say()
    say(f"P2 pair by pair (goal: held in most pairs): loadfleet held wrk's closed rate "
        f"in **{held} of {ROUNDS}**")
    if med(target) >= 0.95:
        say()
        say(f"Under wrk the target's core was {med(target):.0%} busy (median): wrk's rate is "
            "about all the target serves, so holding it open loads the target to the brim: a "
            "queue that a stall of either side starts drains only as fast as the target has "
            "room to spare.")
    say()


def part_accuracy():
    """The 10 ms testbed measured by both tools, next to the same testbed
    with no delay: the difference is the delay as the tools see it, free of
    the machine's idle round trip (two cross-CPU wake-ups, which a loaded
    virtual machine makes slow)."""
    say(f"### Accuracy (P3): testbed --delay 10ms on CPU {TARGET_CPU}, 200 req/s for 10 s, "
        f"generator on CPU {GEN_CPU}")
    say()
    say("| tool | p50 ms | p99 ms | p99.9 ms | p50 error ms | p99.9 error ms | "
        "p50 with no delay ms | 10 ms delay as measured (p50 difference) |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    results = {}
    for delay in ["0ms", "10ms"]:
        tb, url = start_testbed("--delay", delay)
        try:
            for tool in ["loadfleet", "oha"]:
                if tool == "oha":
                    r = oha(url, 200, 10, f"accuracy-oha-{delay}")
                else:
                    r = loadfleet(url, 200, 10, f"accuracy-loadfleet-{delay}",
                                  extra=("--warmup", "1s"))
                results[(tool, delay)] = r
        finally:
            stop(tb)
    for tool in ["loadfleet", "oha"]:
        r, base = results[(tool, "10ms")], results[(tool, "0ms")]
        p50, p99, p999 = r.get("p50_ms"), r.get("p99_ms"), r.get("p999_ms")
        say(f"| {tool} | {p50:.3f} | {p99:.3f} | {p999:.3f} | {p50 - 10:+.3f} | "
            f"{p999 - 10:+.3f} | {base['p50_ms']:.3f} | {p50 - base['p50_ms']:.3f} |")
    say()
    say("Goal: p50 within 0.3 ms of 10 ms, p99.9 within 2 ms.")
    say()


def part_large():
    """Answers larger than a socket takes in unread, from nginx's files:
    each tool's latency, alternating. A reader that sleeps through them
    (a tick) holds the server back at the full receive window and times
    their ends by its own wake-up."""
    www = OUT / "large-answers"
    www.mkdir(parents=True, exist_ok=True)
    cases = [("4m", 4 << 20, 50), ("1m", 1 << 20, 200)]
    # What start_nginx waits for.
    (www / "index.html").write_text("ok\n")
    for name, size, _ in cases:
        (www / name).write_bytes(b"x" * size)
    say(f"### Large answers: nginx files on CPU {TARGET_CPU}, generator on CPU {GEN_CPU}, "
        "5 s a run, 2 alternating rounds")
    say()
    say("| answer | req/s | round | tool | p50 ms | p99 ms |")
    say("|---|---:|---:|---|---:|---:|")
    nginx, url = start_nginx(OUT / "nginx-files", root=www)
    try:
        for name, size, rate in cases:
            for rnd in range(2):
                tools = ["loadfleet", "oha"] if rnd % 2 == 0 else ["oha", "loadfleet"]
                for tool in tools:
                    tag = f"large-{tool}-{name}-{rnd}"
                    run = oha if tool == "oha" else loadfleet
                    r = run(url + name, rate, 5, tag)
                    say(f"| {size >> 20} MiB | {rate} | {rnd + 1} | {tool} | "
                        f"{r.get('p50_ms') or float('nan'):.3f} | "
                        f"{r.get('p99_ms') or float('nan'):.3f} |")
    finally:
        stop(nginx)
    say()


def part_memory(nginx):
    say("### Memory (P4): the agent's RSS")
    say()
    say("| run | in flight (max) | agent RSS at end MiB | agent peak RSS MiB |")
    say("|---|---:|---:|---:|")
    for secs in [MEMORY_SHORT, MEMORY_LONG]:
        r = loadfleet(nginx, RATE, secs, f"memory-{secs}s", watch=True)
        say(f"| {RATE} req/s for {secs} s against nginx | {r.get('max_in_flight')} | "
            f"{r['rss_last_mib']:.1f} | {r['rss_peak_mib']:.1f} |")
    # 10,000 requests in flight: 5,000 req/s into a 2 s service delay, each
    # on its own connection.
    tb, url = start_testbed("--delay", "2s")
    try:
        r = loadfleet(url, 5000, 6, "memory-inflight", connections=12000, max_in_flight=20000,
                      watch=True)
        say(f"| 5000 req/s for 6 s into a 2 s delay (testbed), 12,000 connections allowed | "
            f"{r.get('max_in_flight')} | {r['rss_last_mib']:.1f} | {r['rss_peak_mib']:.1f} |")
    finally:
        stop(tb)
    say()
    say("Goals: flat in run length (within 10%); under 64 MiB at 10,000 in flight.")
    say()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    versions = []
    for tool in (["oha", "--version"], ["nginx", "-v"]):
        p = subprocess.run(tool, capture_output=True, text=True)
        versions.append((p.stdout + p.stderr).strip().splitlines()[0])
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    versions.append((wrk_v.stdout + wrk_v.stderr).strip().splitlines()[0].split(" [")[0])
    say(f"Machine: {os.cpu_count()} CPUs, {cpu}, {os.uname().release}; "
        f"load average before: {os.getloadavg()[0]:.1f}")
    say(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  loadfleet {rev}  "
        + ", ".join(versions))
    wake, late_p50, late_p99 = wake_cost()
    say(f"One sleep and wake-up of a thread on CPU {GEN_CPU} costs it {wake:.1f} µs of CPU: "
        f"at the open loop's 2,000 ticks a second (500 µs), {wake * 2000 / 1e4:.1f}% of a core; "
        f"it comes {late_p50:.0f} µs late (p50), {late_p99:.0f} µs (p99)")
    say()
    _, nginx = start_nginx(OUT / "nginx")
    try:
        runs = part_peers(nginx) if "peers" in PARTS else None
        if "tls" in PARTS:
            part_tls()
        if "ladder" in PARTS:
            held = part_ladder(nginx)
            if runs:
                closed = med([r["rps"] for r in runs["wrk"]])
                say(f"P2 (goal >= 1): loadfleet's highest open rate held / wrk's closed "
                    f"req/s = {held['loadfleet']} / {closed:.0f} = "
                    f"**{held['loadfleet'] / closed:.2f}**")
                say()
        if "wall" in PARTS:
            part_wall(nginx)
        if "accuracy" in PARTS:
            part_accuracy()
        if "large" in PARTS:
            part_large()
        if "memory" in PARTS:
            part_memory(nginx)
    finally:
        for p in list(children):
            stop(p)
        (OUT.parent / "peers.md").write_text("\n".join(lines) + "\n")
    say(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
