"""A gRPC server from PyPI's grpcio, as the target of tests/grpc.rs.

It is written by hand with no generated code, so no protoc is needed: the
service's FileDescriptorProto is built with descriptor_pb2, message classes
come from it, and the same descriptors are served by grpcio-reflection and
written as a descriptor set file (--descriptor-out).

Service fixture.v1.Fixture:
  Ok(Req) -> Reply        always OK
  Limited(Req) -> Reply   RESOURCE_EXHAUSTED for exactly --exhausted-share of
                          the calls (spread evenly), OK for the others
  Slow(Req) -> Reply      sleeps --delay, then OK

It prints `listening on 127.0.0.1:PORT` once serving, and on SIGTERM (or
SIGINT) two lines: `counts {json}`, calls per method and status name, and
`received {json}`, calls per method and the `name` field of their request:
its own ground truth for the test to hold the report and the plan against.
"""

import argparse
import json
import signal
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection

PACKAGE = "fixture.v1"
SERVICE = PACKAGE + ".Fixture"


def file_descriptor():
    f = descriptor_pb2.FileDescriptorProto()
    f.name = "fixture/v1/fixture.proto"
    f.package = PACKAGE
    f.syntax = "proto3"
    FD = descriptor_pb2.FieldDescriptorProto
    req = f.message_type.add(name="Req")
    req.field.add(name="name", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL, json_name="name")
    req.field.add(name="id", number=2, type=FD.TYPE_INT64, label=FD.LABEL_OPTIONAL, json_name="id")
    reply = f.message_type.add(name="Reply")
    reply.field.add(name="message", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL, json_name="message")
    svc = f.service.add(name="Fixture")
    for method in ("Ok", "Limited", "Slow"):
        svc.method.add(name=method, input_type="." + PACKAGE + ".Req", output_type="." + PACKAGE + ".Reply")
    return f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--exhausted-share", type=float, default=0.25)
    ap.add_argument("--delay", type=float, default=0.5, help="seconds Slow sleeps")
    ap.add_argument("--descriptor-out", help="write the FileDescriptorSet here")
    ap.add_argument("--no-reflection", action="store_true")
    args = ap.parse_args()

    fdp = file_descriptor()
    if args.descriptor_out:
        fds = descriptor_pb2.FileDescriptorSet()
        fds.file.append(fdp)
        with open(args.descriptor_out, "wb") as out:
            out.write(fds.SerializeToString())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    Req = message_factory.GetMessageClass(pool.FindMessageTypeByName(PACKAGE + ".Req"))
    Reply = message_factory.GetMessageClass(pool.FindMessageTypeByName(PACKAGE + ".Reply"))

    lock = threading.Lock()
    counts = {}
    received = {}
    limited_calls = [0]

    def count(method, status):
        with lock:
            per = counts.setdefault(method, {})
            per[status] = per.get(status, 0) + 1

    def receive(method, request):
        with lock:
            per = received.setdefault(method, {})
            per[request.name] = per.get(request.name, 0) + 1

    def ok(request, context):
        receive("Ok", request)
        count("Ok", "OK")
        return Reply(message="hello " + request.name)

    def limited(request, context):
        receive("Limited", request)
        with lock:
            n = limited_calls[0]
            limited_calls[0] += 1
        share = args.exhausted_share
        # Call n is refused when the running quota crosses a whole number:
        # exactly floor(calls * share) refusals, spread evenly.
        if int((n + 1) * share) > int(n * share):
            count("Limited", "RESOURCE_EXHAUSTED")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "limited")
        count("Limited", "OK")
        return Reply(message="ok " + str(request.id))

    def slow(request, context):
        receive("Slow", request)
        time.sleep(args.delay)
        count("Slow", "OK")
        return Reply(message="slow")

    def handler(fn):
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=Req.FromString, response_serializer=Reply.SerializeToString
        )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE, {"Ok": handler(ok), "Limited": handler(limited), "Slow": handler(slow)}
            ),
        )
    )
    if not args.no_reflection:
        reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server, pool=pool)
    port = server.add_insecure_port("127.0.0.1:%d" % args.port)
    server.start()
    print("listening on 127.0.0.1:%d" % port, flush=True)

    done = threading.Event()

    def stop(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # Bounded: a test that forgets the server does not leave it forever.
    done.wait(timeout=600)
    server.stop(0).wait()
    with lock:
        print("counts " + json.dumps(counts, sort_keys=True), flush=True)
        print("received " + json.dumps(received, sort_keys=True), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
