#!/usr/bin/env python3
"""The targets the benchmarks load: nginx and the built-in testbed, pinned
to TARGET_CPU (the generators get GEN_CPU), each started as a child of the
benchmark and stopped by its PID.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("BIN_DIR", ROOT / "target" / "release"))
GEN_CPU = os.environ.get("GEN_CPU", "0")
TARGET_CPU = os.environ.get("TARGET_CPU", "1")

# What start_nginx and start_testbed started and stop has not stopped yet.
children = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(url, timeout=10.0):
    import ssl
    import urllib.request
    # The TLS target's certificate is self-signed: only whether it answers
    # matters here.
    unchecked = ssl._create_unverified_context()
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=1, context=unchecked).read()
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"bench: {url} did not answer within {timeout}s")


def wait_listening(port, timeout=10.0):
    """For a server that speaks no HTTP/1.1 (h2c by prior knowledge): that
    it accepts connections is all that is checked."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"bench: nothing listening on 127.0.0.1:{port} within {timeout}s")


def start_nginx(where, tls=False, root=None, http2=False):
    """nginx `return 200` on TARGET_CPU, as (process, url); with `tls`, over
    TLS with a self-signed certificate made here (the generators skip its
    check); with `root`, serving that directory's files instead; with
    `http2`, HTTP/2 without TLS by prior knowledge (h2c) only. Its
    configuration and logs go to the folder `where`."""
    d = Path(where)
    (d / "logs").mkdir(parents=True, exist_ok=True)
    port = free_port()
    listen, certs = " http2" if http2 else "", ""
    if tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(d / "key.pem"),
                        "-out", str(d / "cert.pem"), "-days", "2", "-subj", "/CN=localhost"],
                       check=True, capture_output=True)
        listen = " ssl" + listen
        certs = f"ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;"
    serve = f"root {root};" if root else 'return 200 "ok\\n";'
    (d / "nginx.conf").write_text(f"""
worker_processes 1;
daemon off;
error_log {d}/logs/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 20000; }}
http {{
    access_log off;
    keepalive_requests 10000000;
    http2_max_concurrent_streams 1000;
    keepalive_timeout 300s;
    sendfile on;
    server {{
        listen 127.0.0.1:{port}{listen} backlog=4096;
        {certs}
        location / {{ {serve} }}
    }}
}}
""")
    p = subprocess.Popen(["taskset", "-c", TARGET_CPU, "nginx", "-c", str(d / "nginx.conf"),
                          "-p", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children.append(p)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
    if http2:
        wait_listening(port)
    else:
        wait_http(url)
    return p, url


def start_testbed(*args):
    p = subprocess.Popen([str(BIN / "loadfleet-testbed"), "--listen", "127.0.0.1:0",
                          "--cpus", TARGET_CPU, "--workers", "1", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    children.append(p)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise SystemExit(f"bench: testbed said {line!r}")
    return p, f"http://{line.split()[-1]}/"


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in children:
        children.remove(p)


def serve_nginx(argv):
    """`targets.py nginx DIR [--http2]`, for the shell benchmarks: starts
    nginx as start_nginx does, prints its URL, and stops it by its PID when
    told to (SIGTERM or SIGINT) or when it exits."""
    if not argv or argv[0].startswith("-") or set(argv[1:]) - {"--http2"}:
        raise SystemExit("usage: targets.py nginx DIR [--http2]")
    p, url = start_nginx(argv[0], http2="--http2" in argv[1:])
    # Only passed on: waiting for nginx here, inside a handler that
    # interrupted the wait below, would deadlock on Popen's own lock.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: p.send_signal(signal.SIGTERM))
    print(url, flush=True)
    p.wait()
    children.remove(p)


if __name__ == "__main__":
    if sys.argv[1:2] != ["nginx"]:
        raise SystemExit("usage: targets.py nginx DIR [--http2]")
    serve_nginx(sys.argv[2:])
