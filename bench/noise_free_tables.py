"""The tables bench/noise_free.py prints: one per figure, a row per protocol
and tool, each run in its own column so that the spread shows.

`results` maps (protocol, tool, mode, rate, run) to a run's outcome:
completed requests, offered requests, the count read for its mode
(instructions, calls by syscall, or rusage) and, for the agent, its
send-lag p99 and unsent count from the report. The flow part's runs come
apart, to flow_tables.
"""

import statistics

PROTOCOLS = {"http1": "HTTP/1.1 (nginx)", "h2c": "HTTP/2 h2c (nginx)",
             "grpc": "gRPC unary (testbed)"}
TOOL_NAMES = {("http1", "oha"): "oha -q", ("h2c", "oha"): "oha --http2 -q",
              ("h2c", "h2load"): "h2load --rps", "agent": "loadfleet agent"}
TOOL_ORDER = ["agent", "oha", "h2load"]
# nghttp2's h2load.cc: rps_watcher.repeat = std::max(0.01, 1. / config.rps).
H2LOAD_NOTE = ("h2load's `--rps` paces each connection on a timer of at least 10 ms: at "
               "1,000 req/s it sends 10 requests at once every 10 ms (each up to 10 ms late), so "
               "a burst shares its wake-up and its writes (the agent wakes for arrivals 500 µs "
               "apart, `--wake-quantum`).")
# A run that completed less than this share of what it offered did not
# hold its rate: its per-request figure is marked.
HELD = 0.97


def name(proto, tool):
    return TOOL_NAMES.get((proto, tool)) or TOOL_NAMES.get(tool, tool)


def fmt(x, digits):
    if x is None:
        return "–"
    if abs(x) < 0.5 * 10 ** -digits:
        x = 0.0
    return f"{x:,.0f}" if digits == 0 else f"{x:,.{digits}f}"


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def ratio(a, b, digits=2):
    return fmt(a / b, digits) if a is not None and b else "–"


def syscalls(count):
    return sum(count.values())


def switches(count):
    return count["voluntary_switches"] + count["involuntary_switches"]


def cpu(count):
    return count["user_s"] + count["system_s"]


class Figures:
    def __init__(self, results, low, high, fast):
        self.r, self.low, self.high, self.fast = results, low, high, fast
        self.runs = sorted({k[4] for k in results}) or [0]

    def rows(self, mode):
        """(protocol, tool) pairs with any run in this mode, in table order."""
        have = {(k[0], k[1]) for k in self.r if k[2] == mode}
        return [(p, t) for p in PROTOCOLS for t in TOOL_ORDER if (p, t) in have]

    def marginal(self, proto, tool, mode, run, metric, rates=None):
        """(metric at high - at low) / (requests at high - at low): the cost
        of one more request, free of start-up and of what every second
        costs whatever the rate (ticks, snapshots). `rates` is another
        (low, high) pair."""
        low, high = rates or (self.low, self.high)
        lo = self.r.get((proto, tool, mode, low, run))
        hi = self.r.get((proto, tool, mode, high, run))
        if not lo or not hi or hi["completed"] <= lo["completed"]:
            return None
        return (metric(hi["count"]) - metric(lo["count"])) / (hi["completed"] - lo["completed"])

    def per_request(self, proto, tool, mode, rate, run, metric, scale=1.0):
        """metric / requests over a whole run, with "†" when the run did not
        hold its rate."""
        x = self.r.get((proto, tool, mode, rate, run))
        if not x or not x["completed"]:
            return None, ""
        mark = "" if x["completed"] >= HELD * x["offered"] else " †"
        return metric(x["count"]) * scale / x["completed"], mark

    def marginal_table(self, mode, metric, digits, title, note):
        lines = [title, "", note, "",
                 "| protocol | tool | " + " | ".join(f"run {i + 1}" for i in self.runs)
                 + " | agent / this tool |",
                 "|---|---|" + "---:|" * len(self.runs) + "---:|"]
        for proto, tool in self.rows(mode):
            vals = [self.marginal(proto, tool, mode, i, metric) for i in self.runs]
            agent = mean(self.marginal(proto, "agent", mode, i, metric) for i in self.runs)
            rel = "–" if tool == "agent" else ratio(agent, mean(vals))
            lines.append(f"| {PROTOCOLS[proto]} | {name(proto, tool)} | "
                         + " | ".join(fmt(v, digits) for v in vals) + f" | {rel} |")
        return lines + [""]

    def pairs_table(self, mode, metric, digits, title, note):
        """Marginal figures between two pairs of rates (low → high, high →
        fast), each run in its column, and the agent's against each peer."""
        pairs = [(self.low, self.high), (self.high, self.fast)]
        cols = [(pair, i) for pair in pairs for i in self.runs]
        lines = [title, "", note, "",
                 "| protocol | tool | " + " | ".join(f"{a:,} → {b:,} req/s, run {i + 1}"
                                                   for (a, b), i in cols)
                 + " | agent / this tool (" + ", ".join(f"{a:,} → {b:,}" for a, b in pairs) + ") |",
                 "|---|---|" + "---:|" * len(cols) + "---:|"]
        for proto, tool in self.rows(mode):
            cells, rels = [], []
            for pair in pairs:
                vals = [self.marginal(proto, tool, mode, i, metric, pair) for i in self.runs]
                cells += [fmt(v, 2) for v in vals]
                agent = mean(self.marginal(proto, "agent", mode, i, metric, pair)
                             for i in self.runs)
                rels.append("–" if tool == "agent" else ratio(agent, mean(vals)))
            lines.append(f"| {PROTOCOLS[proto]} | {name(proto, tool)} | " + " | ".join(cells)
                         + " | " + " / ".join(rels) + " |")
        return lines + [""]

    def rate_table(self, rates, metric, digits, title, note, scale=1.0):
        cols = [(rate, i) for rate in rates for i in self.runs]
        lines = [title, "", note, "",
                 "| protocol | tool | " + " | ".join(f"{rate:,} req/s, run {i + 1}" for rate, i in cols)
                 + " | agent / this tool (" + ", ".join(f"{r:,}" for r in rates) + ") |",
                 "|---|---|" + "---:|" * len(cols) + "---:|"]
        marked = False
        for proto, tool in self.rows("rusage"):
            cells, rels = [], []
            for rate in rates:
                vals = []
                for i in self.runs:
                    v, mark = self.per_request(proto, tool, "rusage", rate, i, metric, scale)
                    marked |= bool(mark)
                    vals.append(v)
                    cells.append(fmt(v, digits) + mark)
                agent = mean(self.per_request(proto, "agent", "rusage", rate, i, metric, scale)[0]
                             for i in self.runs)
                rels.append("–" if tool == "agent" else ratio(agent, mean(vals)))
            lines.append(f"| {PROTOCOLS[proto]} | {name(proto, tool)} | " + " | ".join(cells)
                         + " | " + " / ".join(rels) + " |")
        if marked:
            lines += ["", f"† completed under {HELD:.0%} of the requests offered: the tool did not "
                      "hold the rate, so the figure is for fewer requests than asked."]
        return lines + [""]

    def syscall_breakdown(self, proto):
        """Calls by syscall per request: over the whole run at the high rate,
        and marginal between the low and the high one."""
        tools = [t for p, t in self.rows("strace") if p == proto]
        if not tools:
            return []
        names = set()
        for t in tools:
            for i in self.runs:
                for rate in (self.low, self.high):
                    x = self.r.get((proto, t, "strace", rate, i))
                    names |= set(x["count"]) if x else set()

        def whole(t, s, i):
            return self.per_request(proto, t, "strace", self.high, i, lambda c: c.get(s, 0))[0]

        def marg(t, s, i):
            return self.marginal(proto, t, "strace", i, lambda c: c.get(s, 0))

        def cell(f, t, s):
            return " / ".join(fmt(f(t, s, i), 2) for i in self.runs)

        # Calls a request costs nothing of (start-up, once a run) are noise here.
        shown = [s for s in names
                 if any((whole(t, s, i) or 0) >= 0.005 for t in tools for i in self.runs)]
        shown.sort(key=lambda s: [-(mean(whole(t, s, i) for i in self.runs) or 0) for t in tools])
        runs = " / ".join(f"run {i + 1}" for i in self.runs)
        lines = [f"#### {PROTOCOLS[proto]}: calls per request by syscall ({runs})", "",
                 "| syscall | " + " | ".join(
                     f"{name(proto, t)} at {self.high:,} req/s | {name(proto, t)} marginal"
                     for t in tools) + " |",
                 "|---|" + "---:|---:|" * len(tools)]
        for s in shown:
            lines.append(f"| {s} | " + " | ".join(f"{cell(whole, t, s)} | {cell(marg, t, s)}"
                                                 for t in tools) + " |")
        lines.append("| **all** | " + " | ".join(
            " / ".join(fmt(self.per_request(proto, t, "strace", self.high, i, syscalls)[0], 2)
                       for i in self.runs) + " | "
            + " / ".join(fmt(self.marginal(proto, t, "strace", i, syscalls), 2) for i in self.runs)
            for t in tools) + " |")
        return lines + [""]

    def lag_table(self):
        rows = [p for p, t in self.rows("rusage") if t == "agent"]
        if not rows:
            return []
        cols = [(rate, i) for rate in (self.low, self.fast) for i in self.runs]
        lines = ["### The agent's send-lag p99 (ms, from its report)", "",
                 "How late requests left against their schedule; untraced runs. "
                 "Unsent requests (late past --max-lag, or never sent) in brackets.", "",
                 "| protocol | " + " | ".join(f"{rate:,} req/s, run {i + 1}" for rate, i in cols) + " |",
                 "|---|" + "---:|" * len(cols)]
        for proto in rows:
            cells = []
            for rate, i in cols:
                x = self.r.get((proto, "agent", "rusage", rate, i))
                cells.append("–" if not x else fmt(x["lag_p99_ms"], 3)
                             + (f" ({x['unsent']:,})" if x["unsent"] else ""))
            lines.append(f"| {PROTOCOLS[proto]} | " + " | ".join(cells) + " |")
        return lines + [""]


def coordinator_table(c, lengths):
    """Per size: instructions (callgrind) and CPU µs (untraced) per agent-
    second, each only where every agent finished and the merge was exact;
    then the cost of one more snapshot, the double difference between the
    two smallest sizes counted and the two lengths."""
    if not c:
        return []
    short, long_ = lengths[0], lengths[-1]
    runs = sorted({k[3] for k in c})

    def bad(*xs):
        lost = max(x["lost"] for x in xs)
        if lost:
            return f"– ({lost:,} agents lost)"
        return None if all(x["exact"] for x in xs) else "– (merge not exact)"

    def per_second(mode, n, i, scale):
        a, b = c.get((mode, n, short, i)), c.get((mode, n, long_, i))
        if not a or not b:
            return "not run"
        if bad(a, b) or b["snapshots"] <= a["snapshots"]:
            return bad(a, b) or "–"
        return fmt((b["count"] - a["count"]) * scale / (b["snapshots"] - a["snapshots"]), 0)

    lines = ["### The coordinator: work per merged agent snapshot", "",
             "The coordinator (its whole process) against `bench/scale.sh`'s swarm: real gRPC "
             "sessions, one snapshot per agent per second with about 930 distinct latency "
             f"values. Per agent-second: (count at {long_} s − at {short} s) / (snapshots at "
             f"{long_} s − at {short} s), its snapshot merged with that second's heartbeats and "
             "a share of what each second costs the coordinator; joins and the report left out. "
             "A figure stands only where every agent finished and the merged report equalled "
             "what the swarm sent. Instructions under callgrind at small sizes only: slowed ~35 "
             "times the coordinator misses its own deadlines (a snapshot is taken 400 ms after "
             "its second, an agent silent 2.5 s is lost) from a few tens of agents on two vCPUs. "
             "CPU from the untraced runs' rusage: 10 ms ticks, moves with the machine's load.", "",
             "| agents | " + " | ".join(f"instructions per agent-second, run {i + 1}" for i in runs)
             + " | " + " | ".join(f"CPU µs per agent-second (indicative), run {i + 1}" for i in runs)
             + " |", "|---:|" + "---:|" * (2 * len(runs))]
    for n in sorted({k[1] for k in c}):
        cells = [per_second("callgrind", n, i, 1) for i in runs]
        cells += [per_second("rusage", n, i, 1e6) for i in runs]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    counted = sorted({k[1] for k in c if k[0] == "callgrind"})
    if len(counted) >= 2:
        n1, n2 = counted[0], counted[-1]
        vals = []
        for i in runs:
            xs = [c.get(("callgrind", n, d, i)) for n in (n1, n2) for d in (short, long_)]
            if not all(xs) or bad(*xs):
                vals.append("–" if not all(xs) else bad(*xs))
                continue
            (a1, b1), (a2, b2) = xs[:2], xs[2:]
            snaps = (b2["snapshots"] - a2["snapshots"]) - (b1["snapshots"] - a1["snapshots"])
            ir = (b2["count"] - a2["count"]) - (b1["count"] - a1["count"])
            vals.append(fmt(ir / snaps, 0) if snaps > 0 else "–")
        lines += ["", f"One more snapshot merged, free of what each second costs whatever the "
                  f"number of agents (the difference between {n1} and {n2} agents of the "
                  f"difference between {short} s and {long_} s): **"
                  + "** / **".join(vals) + "** instructions (" + " / ".join(
                      f"run {i + 1}" for i in runs) + ")."]
    return lines + [""]


def render(results, coordinator, low, high, fast, lengths):
    f = Figures(results, low, high, fast)
    out = []
    if f.rows("callgrind"):
        out += f.marginal_table(
            "callgrind", lambda ir: ir, 0,
            f"### User-space instructions per request (callgrind, marginal {low:,} → {high:,} req/s)",
            "Every thread of the tool's process; the kernel's work is not in it.")
    if f.rows("strace"):
        out += f.marginal_table(
            "strace", syscalls, 2,
            f"### Syscalls per request (strace -f -c, marginal {low:,} → {high:,} req/s)",
            "Every thread of the tool's process, failed calls included.")
        if any(t == "h2load" for _, t in f.rows("strace")):
            out += [H2LOAD_NOTE, ""]
        for proto in PROTOCOLS:
            out += f.syscall_breakdown(proto)
    if f.rows("perf"):
        out += f.pairs_table(
            "perf", lambda n: n, 2,
            "### Syscalls per request, untraced (perf's in-kernel count, marginal)",
            "`perf stat -e raw_syscalls:sys_enter` over every thread of the tool's process: "
            "each call counted as it enters the kernel, the process running at full speed. "
            f"Marginal between {low:,} and {high:,} req/s, and between {high:,} and "
            f"{fast:,} req/s, where a tool shares its wake-ups among more requests.")
    if f.rows("rusage"):
        out += f.rate_table(
            [high, fast], switches, 3, "### Context switches per request",
            "ru_nvcsw + ru_nivcsw of the tool's process (wait4), whole run, untraced.")
        out += f.rate_table(
            [fast], cpu, 2, f"### CPU seconds per 100,000 requests at {fast:,} req/s (indicative)",
            "User + system time of the tool's process (wait4), whole run. Unlike the counts "
            "above it moves with the machine's load and speed.", scale=100_000)
        out += f.lag_table()
    out += coordinator_table(coordinator, lengths)
    return out


# The flow part's shapes (bench/noise_free.py SHAPES), as the tables name them.
SHAPE_NAMES = {
    "request": "a request: `POST /login`",
    "full": "a flow: login (capture token) → cart_add (check status == 201), cookies",
    "bare": "the flow without capture and check, cookies",
    "jarless": "the flow without capture, check or cookies (cart answered 401)",
}


def flow_tables(fr, low, high, mem_low, mem_high, delay, secs):
    """`fr` maps (shape, "agent", mode, rate, run) to a run of bench/
    noise_free.py's flow part: instructions per arrival and per step, what
    each of a flow's parts adds, and peak RSS per arrival in flight."""
    runs = sorted({k[4] for k in fr})
    if not runs:
        return []
    out = []

    def marginal(shape, i, unit):
        lo = fr.get((shape, "agent", "callgrind", low, i))
        hi = fr.get((shape, "agent", "callgrind", high, i))
        if not lo or not hi or hi[unit] <= lo[unit]:
            return None
        return (hi["count"] - lo["count"]) / (hi[unit] - lo[unit])

    shapes = [s for s in SHAPE_NAMES if any(k[0] == s and k[2] == "callgrind" for k in fr)]
    if shapes:
        head = " / ".join(f"run {i + 1}" for i in runs)
        out += [f"### A flow's instructions (callgrind, marginal {low:,} → {high:,} arrivals/s)",
                "", "The agent's process, user space, against `loadfleet-testbed --shop`. An "
                "arrival is a request or a flow of two steps; a step is one request. Failed: "
                "flows ended by a failed step, and unsent arrivals and steps, at the higher "
                "rate.", "",
                f"| each arrival is | per arrival ({head}) | per step ({head}) | failed, unsent |",
                "|---|---:|---:|---:|"]
        for shape in shapes:
            per = " / ".join(fmt(marginal(shape, i, "completed"), 0) for i in runs)
            step = " / ".join(fmt(marginal(shape, i, "steps"), 0) for i in runs)
            hi = [fr.get((shape, "agent", "callgrind", high, i)) for i in runs]
            bad = " / ".join("–" if not x else f"{x['failures']:,}, {x['unsent']:,}" for x in hi)
            out.append(f"| {SHAPE_NAMES[shape]} | {per} | {step} | {bad} |")

        def diff(a, b, times=1):
            vals = []
            for i in runs:
                x, y = marginal(a, i, "completed"), marginal(b, i, "completed")
                vals.append(None if x is None or y is None else x - times * y)
            return " / ".join(fmt(v, 0) for v in vals)

        out += ["", f"| what it adds, per flow | instructions ({head}) |", "|---|---:|",
                "| the flow itself: the jarless flow − two requests | "
                + diff("jarless", "request", 2) + " |",
                "| the cookie jar: the bare flow − the jarless one | "
                + diff("bare", "jarless") + " |",
                "| one capture and one check: the full flow − the bare one | "
                + diff("full", "bare") + " |", ""]

    mem = [s for s in SHAPE_NAMES if any(k[0] == s and k[2] == "rusage" for k in fr)]
    if mem:
        out += [f"### Memory per arrival in flight ({mem_low:,} → {mem_high:,} arrivals/s "
                f"for {secs} s, every answer held {delay})", "",
                "The agent's peak RSS (ru_maxrss, wait4) at the higher rate less at the lower, "
                "over the difference in arrivals in flight at once (the report's largest "
                "`max_in_flight`): each arrival on its own connection. Unsent: arrivals and "
                "steps never sent at the higher rate.", "",
                "| each arrival is | run | in flight | peak RSS MiB | bytes per arrival in "
                "flight | unsent |", "|---|---:|---:|---:|---:|---:|"]
        for shape in mem:
            for i in runs:
                lo = fr.get((shape, "agent", "rusage", mem_low, i))
                hi = fr.get((shape, "agent", "rusage", mem_high, i))
                if not lo or not hi:
                    out.append(f"| {SHAPE_NAMES[shape]} | {i + 1} | – | – | – | – |")
                    continue
                a, b = lo["count"]["max_rss_kib"], hi["count"]["max_rss_kib"]
                n = hi["in_flight"] - lo["in_flight"]
                out.append(f"| {SHAPE_NAMES[shape]} | {i + 1} | {lo['in_flight']:,} → "
                           f"{hi['in_flight']:,} | {a / 1024:.1f} → {b / 1024:.1f} | "
                           f"{fmt((b - a) * 1024 / n if n > 0 else None, 0)} | "
                           f"{hi['unsent']:,} |")
        out.append("")
    return out
