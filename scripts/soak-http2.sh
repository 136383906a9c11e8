#!/usr/bin/env bash
# `inflight proxy` in front of an nginx HTTP/2 (h2c) upstream that closes its connection every
# KEEPALIVE_REQUESTS requests, loaded by h2load: counts the answers that were not 200, and the
# proxy's own replies by reason. Builds `inflight` in release mode first.
#
#   scripts/soak-http2.sh [REQUESTS] [KEEPALIVE_REQUESTS] [ROUNDS]
#
# Defaults: 300000 requests a round, 100 requests a connection (nginx's default before 1.19.10;
# 1000 since), 4 rounds; 16 client connections with 4 streams each, a budget of 64 with a call
# timeout of 3 s. Needs nginx and h2load (Debian: nginx, nghttp2-client). Ports 22500-22502 on
# 127.0.0.1, or SOAK_BASE_PORT and the two after it. SOAK_INFLIGHT names another `inflight` to
# run (nothing is built then). Exits 1 if any answer was not 200.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
-h | --help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
requests=${1:-300000}
keepalive=${2:-100}
rounds=${3:-4}
base=${SOAK_BASE_PORT:-22500}
for tool in nginx h2load curl; do
    command -v "$tool" >/dev/null || { echo "soak-http2: $tool is missing" >&2; exit 2; }
done

inflight=${SOAK_INFLIGHT:-target/release/inflight}
[ -n "${SOAK_INFLIGHT:-}" ] || cargo build --release --locked -q -p inflight-cli
dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $dir/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  keepalive_requests $keepalive;
  server {
    listen 127.0.0.1:$base http2;
    location / { return 200 "ok\n"; }
  }
}
CONF
cat >"$dir/proxy.toml" <<CONF
[proxy]
admin = "127.0.0.1:$((base + 2))"

[budgets.soak]
max_concurrent = 64
call_timeout = "3s"
upstream = "http://127.0.0.1:$base"
upstream_http2 = true
listen = "127.0.0.1:$((base + 1))"
CONF

nginx -c "$dir/nginx.conf" >"$dir/nginx.out" 2>&1 &
pids+=($!)
"$inflight" proxy --config "$dir/proxy.toml" >"$dir/proxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$((base + 1))/" >/dev/null 2>&1 && break
    sleep 0.1
done

bad=0
for round in $(seq "$rounds"); do
    line=$(timeout 600 h2load -n "$requests" -c 16 -m 4 "http://127.0.0.1:$((base + 1))/" | grep '^status codes:')
    ok=$(echo "$line" | sed -E 's/^status codes: ([0-9]+) 2xx.*/\1/')
    echo "round $round: $line"
    bad=$((bad + requests - ok))
done
echo "not 200: $bad of $((requests * rounds)), keepalive_requests $keepalive"
curl -s "http://127.0.0.1:$((base + 2))/metrics" | grep -E '^inflight_proxy_replies_total\{.*\} [1-9]' || true
grep -v -E '^inflight proxy: (open files|soak listening|admin listening|ready)' "$dir/proxy.log" | head -5 || true
[ "$bad" = 0 ]
