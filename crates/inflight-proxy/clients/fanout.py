"""Calls URL COUNT times at once, one thread per call, and prints what came back as JSON."""

import argparse
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor


def call(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            response.read()
            return "ok"
    except urllib.error.HTTPError as error:
        return str(error.code)
    except urllib.error.URLError as error:
        return type(error.reason).__name__
    except (OSError, http.client.HTTPException) as error:
        return type(error).__name__


def http_url(text):
    try:
        if urllib.parse.urlsplit(text).scheme in ("http", "https"):
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"not an http:// or https:// URL: {text!r}")


def at_least_one(text):
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"not a whole number of at least 1: {text!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url", type=http_url)
    parser.add_argument("count", nargs="?", type=at_least_one, default=500)
    args = parser.parse_args()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.count) as pool:
        results = Counter(pool.map(call, [args.url] * args.count))
    elapsed = time.perf_counter() - started

    ok = results.pop("ok", 0)
    failed = sum(results.values())
    print(json.dumps({"ok": ok, "failed": failed, "failed_by_status": dict(results),
                      "elapsed_s": round(elapsed, 3)}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
