"""An unmodified grpcio client for the proxy's tests: THREADS threads each make CALLS calls of
METHOD of demo.Records at TARGET (host:port), and print one JSON line: the count of each status,
one message per status, and the messages streamed for Watch.

    python3 grpc_client.py 127.0.0.1:7002 Get 32 10
"""
import json
import sys
import threading
from collections import Counter

import grpc

target, method, threads, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
channel = grpc.insecure_channel(target)
path = "/demo.Records/" + method
if method == "Watch":
    stub = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
else:
    stub = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
statuses = Counter()
messages = {}
streamed = Counter()
lock = threading.Lock()


def run():
    for _ in range(calls):
        try:
            if method == "Watch":
                n = sum(1 for _ in stub(b"x", timeout=10))
                with lock:
                    streamed[n] += 1
            else:
                stub(b"x", timeout=10)
            code, message = "OK", ""
        except grpc.RpcError as e:
            code, message = e.code().name, e.details() or ""
        with lock:
            statuses[code] += 1
            messages.setdefault(code, message)


workers = [threading.Thread(target=run) for _ in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"statuses": statuses, "messages": messages, "streamed": streamed}))
