"""A slow upstream for the proxy's quick starts: every request takes 200 ms (or the seconds
given after the port), any number at once, and GET /peak says the most requests it has seen at
once.

    python3 examples/slow_upstream.py 8000
    python3 examples/slow_upstream.py 8000 1
"""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
now = peak = 0


class Slow(BaseHTTPRequestHandler):
    def do_GET(self):
        global now, peak
        if self.path == "/peak":
            return self.answer(f"peak {peak}\n")
        with lock:
            now += 1
            peak = max(peak, now)
        time.sleep(delay)
        with lock:
            now -= 1
        self.answer("done\n")

    def answer(self, text):
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
ThreadingHTTPServer(("127.0.0.1", port), Slow).serve_forever()
