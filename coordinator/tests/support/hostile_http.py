"""A hostile HTTP/1.1 target for flows' captures, checks and cookie jar,
written with the standard library only (not by the code under test).

  GET /big       a 10 MiB JSON body whose only key is at its end
  GET /deep      100,000 nested JSON arrays
  GET /aaaa      100 KiB of "a" then "b": a backtracking regex's worst case
  GET /storm     1,000 Set-Cookie headers: more headers than a head may have
  GET /many      90 Set-Cookie headers and one 8 KiB cookie
  GET /cookies   {"count": N}: how many cookies the request carried
  GET /seen?Q    200; counts Q (a flow's data row, as its steps render it)
  GET /__stats   one "path count" line per path served, and "seen?Q count"
                 per query

It prints "listening on HOST:PORT" when ready and serves until killed.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BIG = b'{"pad": "' + b"x" * (10 * 1024 * 1024) + b'", "token": "deep-inside"}'
DEEP = b"[" * 100_000 + b"]" * 100_000
AAAA = b"a" * (100 * 1024) + b"b"
COUNTS = {}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, headers=()):
        self.send_response(200)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path != "/__stats":
            key = "seen?" + self.path.split("?", 1)[1] if path == "/seen" else path
            with LOCK:
                COUNTS[key] = COUNTS.get(key, 0) + 1
        if path == "/big":
            self.answer(BIG, [("Content-Type", "application/json")])
        elif path == "/deep":
            self.answer(DEEP, [("Content-Type", "application/json")])
        elif path == "/aaaa":
            self.answer(AAAA)
        elif path in ("/storm", "/many"):
            n = 1000 if path == "/storm" else 90
            headers = [("Set-Cookie", f"c{i}=v{i}; Path=/") for i in range(n)]
            headers.append(("Set-Cookie", "huge=" + "h" * 8192 + "; Path=/"))
            self.answer(b"{}", headers)
        elif path == "/cookies":
            line = self.headers.get("Cookie", "")
            count = len([c for c in line.split(";") if c.strip()])
            huge = "huge=" in line
            self.answer(json.dumps({"count": count, "huge": huge}).encode())
        elif path == "/seen":
            self.answer(b"seen")
        elif path == "/__stats":
            with LOCK:
                text = "".join(f"{p} {n}\n" for p, n in sorted(COUNTS.items()))
            self.answer(text.encode())
        else:
            self.send_error(404)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    host, port = server.server_address
    print(f"listening on {host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
