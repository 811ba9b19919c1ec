#!/usr/bin/env python3
"""How each open-model generator actually paces its requests on the wire.

An open-model tool promises arrivals at given instants; what it puts on the
wire shows how closely it keeps that promise, and how much of its CPU
figure it buys with lateness. This captures the requests (packets to nginx
carrying data) with tcpdump while each tool sends 20,000 req/s for 4 s,
and reports, over the middle 2 s, how they bunch: the number of bursts
(runs of requests with no pause longer than 100 us), their mean size, and
the pause between them. A generator that paces every 250 us sends ~5
requests per burst; one on a 1 ms timer sends ~20 every millisecond or
more, each up to that much after its instant.

Usage: bench/pacing.py   (root, for tcpdump; BIN_DIR as for peers.py;
RATE=20000). Installs tcpdump from Debian if missing. Same layout as
bench/peers.py: nginx on CPU 1, the generator on CPU 0, 64 connections.
"""

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

RATE = int(os.environ.get("RATE", "20000"))


def ensure_tcpdump():
    if shutil.which("tcpdump"):
        return
    subprocess.run(["apt-get", "install", "-y", "-qq", "tcpdump"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                   stdout=subprocess.DEVNULL)


def capture(tool, url, port):
    """Runs `tool` against url while capturing; returns request send times."""
    pcap = peers.OUT / f"pacing-{tool}.pcap"
    dump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-w", str(pcap), "-B", "65536", "-Z", "root",
         f"tcp dst port {port} and tcp[tcpflags] & tcp-push != 0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    try:
        if tool == "oha":
            peers.oha(url, RATE, 4, "pacing-oha")
        else:
            peers.loadfleet(url, RATE, 4, "pacing-loadfleet")
    finally:
        time.sleep(0.5)
        dump.terminate()
        dump.wait()
    out = subprocess.run(["tcpdump", "-r", str(pcap), "-tt", "-n"], capture_output=True,
                         text=True, check=True).stdout
    pcap.unlink()
    return sorted(float(line.split()[0]) for line in out.splitlines()
                  if line[:1].isdigit())


def bunching(times):
    if not times:
        raise SystemExit("bench: no requests captured")
    t0 = times[0]
    mid = [t for t in times if t0 + 1.0 <= t < t0 + 3.0]
    gaps = [(b - a) * 1e6 for a, b in zip(mid, mid[1:])]
    pauses = sorted(g for g in gaps if g > 100)
    if not pauses:
        return len(mid), 1, len(mid), float("nan"), float("nan")
    bursts = len(pauses) + 1
    return (len(mid), bursts, len(mid) / bursts, statistics.median(pauses),
            pauses[int(len(pauses) * 0.99)])


def main():
    ensure_tcpdump()
    peers.OUT.mkdir(parents=True, exist_ok=True)
    _, url = peers.start_nginx(peers.OUT / "nginx")
    port = url.rsplit(":", 1)[1].strip("/")
    print(f"### Pacing on the wire at {RATE} req/s (middle 2 s of 4)\n")
    print("| tool | requests | bursts | requests per burst | pause p50 us | pause p99 us |")
    print("|---|---:|---:|---:|---:|---:|")
    try:
        for tool in ("loadfleet", "oha"):
            n, bursts, size, p50, p99 = bunching(capture(tool, url, port))
            print(f"| {tool} | {n} | {bursts} | {size:.1f} | {p50:.0f} | {p99:.0f} |", flush=True)
    finally:
        for p in list(peers.children):
            peers.stop(p)


if __name__ == "__main__":
    main()
