#!/usr/bin/env python3
"""A minimal OTLP/HTTP metrics receiver for tests/outputs_otlp.rs: decodes
each POST /v1/metrics with the `opentelemetry-proto` package from PyPI (an
independent implementation of the protobuf schema) and prints one line per
request:

    EXPORT {"resource": {...}, "metrics": {NAME: {"kind": ..., "unit": ...,
            "points": [{"attributes": {...}, ...}]}}}

It prints `LISTENING <port>` once it accepts requests, and runs until
killed. Exit status 3 when the module is missing (.ci/run installs it).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
except ImportError as e:  # pragma: no cover - reported to the Rust test
    print(f"MISSING opentelemetry-proto: {e}", file=sys.stderr)
    sys.exit(3)


def attrs(kvs):
    return {kv.key: kv.value.string_value for kv in kvs}


def decode(body):
    req = metrics_service_pb2.ExportMetricsServiceRequest()
    req.ParseFromString(body)
    out = {"resource": {}, "metrics": {}}
    for rm in req.resource_metrics:
        out["resource"].update(attrs(rm.resource.attributes))
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                entry = {"kind": kind, "unit": m.unit, "points": []}
                if kind in ("sum", "gauge"):
                    data = getattr(m, kind)
                    for p in data.data_points:
                        v = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                        entry["points"].append({"attributes": attrs(p.attributes), "value": v})
                    if kind == "sum":
                        entry["monotonic"] = data.is_monotonic
                        entry["temporality"] = data.aggregation_temporality
                elif kind == "exponential_histogram":
                    for p in m.exponential_histogram.data_points:
                        entry["points"].append({
                            "attributes": attrs(p.attributes),
                            "count": p.count,
                            "sum": p.sum,
                            "scale": p.scale,
                            "zero_count": p.zero_count,
                            "offset": p.positive.offset,
                            "bucket_counts": list(p.positive.bucket_counts),
                            "min": p.min,
                            "max": p.max,
                        })
                out["metrics"][m.name] = entry
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            line = json.dumps(decode(body), sort_keys=True)
        except Exception as e:  # a body the schema does not take
            print(f"BAD {e}", flush=True)
            self.send_response(400)
            self.end_headers()
            return
        print(f"EXPORT {line}", flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"LISTENING {server.server_address[1]}", flush=True)
server.serve_forever()
