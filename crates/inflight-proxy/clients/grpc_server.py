"""A real gRPC server (grpcio) for the proxy's tests: service demo.Records, raw bytes, no
generated code.

    python3 grpc_server.py CAPACITY

Methods: Get (unary, 20 ms), Export (unary, 200 ms), Watch (server streaming: three messages
20 ms apart). At most CAPACITY calls run at once; one more is refused at once with
RESOURCE_EXHAUSTED "busy", with no queue, like a service that sheds load. Prints its port, then
serves until stdin closes.
"""
import sys
import threading
import time
from concurrent import futures

import grpc

capacity = int(sys.argv[1]) if len(sys.argv) > 1 else 6
slots = threading.BoundedSemaphore(capacity)
lock = threading.Lock()
counts = {"served": 0, "refused": 0}


def admitted(context):
    if not slots.acquire(blocking=False):
        with lock:
            counts["refused"] += 1
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy")
    return True


def unary(delay):
    def handle(request, context):
        admitted(context)
        try:
            time.sleep(delay)
            with lock:
                counts["served"] += 1
            return request
        finally:
            slots.release()

    return handle


def watch(request, context):
    admitted(context)
    try:
        for i in range(3):
            time.sleep(0.02)
            yield bytes([i]) + request
        with lock:
            counts["served"] += 1
    finally:
        slots.release()


def stats(request, context):
    with lock:
        return ("%d %d" % (counts["served"], counts["refused"])).encode()


identity = (lambda b: b, lambda b: b)
handlers = {
    "Get": grpc.unary_unary_rpc_method_handler(unary(0.02), *identity),
    "Export": grpc.unary_unary_rpc_method_handler(unary(0.2), *identity),
    "Watch": grpc.unary_stream_rpc_method_handler(watch, *identity),
    "Stats": grpc.unary_unary_rpc_method_handler(stats, *identity),
}
server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("demo.Records", handlers),))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
