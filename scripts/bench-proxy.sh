#!/usr/bin/env bash
# `inflight proxy` against HAProxy and nginx, side by side in one run, each held to one CPU.
#
#   scripts/bench-proxy.sh [--duration S] [--warmup S] [--rate N] [--json FILE] [--keep-logs]
#                          [--no-cgroup]
#
# What it does:
#   - installs haproxy and nginx (Debian packages) when missing (needs root), builds `inflight`
#     and `proxy-bench` in release mode;
#   - starts one upstream (`proxy-bench upstream`: 200 with 100 bytes at once on /, after 20 ms
#     on /slow, counting the most requests it serves at once) and, in front of it, `inflight
#     proxy`, HAProxy and nginx, each configured as a 1-CPU sidecar (HAProxy `nbthread 1`, nginx
#     `worker_processes 1`, inflight choosing its runtime from the quota: one CPU gives a
#     single-threaded runtime; the script prints its thread count) and each in its own cgroup with a quota of one CPU
#     (cgroup v2 `cpu.max = "100000 100000"`, or cgroup v1 `cpu.cfs_quota_us = 100000` per
#     `cpu.cfs_period_us = 100000` where v2 has no cpu controller); where neither can be
#     written (or with --no-cgroup) it says so and pins each proxy with `taskset -c 1` instead;
#   - measures, with the same load generator for every proxy and for going direct:
#     1. requests/s at saturation: closed loop, 64 connections;
#     2. the latency each proxy adds, p50 and p99, against going direct, in an open loop at a
#        fixed rate well below saturation (--rate, or a quarter of the slowest proxy's case-1
#        throughput, at most 2000/s), latency measured from each request's scheduled send;
#     3. a budget of 6 over the 20 ms upstream with 64 closed-loop clients, where Little's law
#        gives 300/s: inflight `max_concurrent = 6` with a queue for 64, HAProxy `maxconn 6`
#        with `timeout queue`, nginx `max_conns=6` (open-source nginx has no upstream queue, so
#        it answers the rest with 502 at once: counted as non-2xx); the upstream's peak
#        concurrency, and the p99 wait (2xx latency p99 minus the 20 ms service time);
#     4. memory per idle client connection: the resident memory of each proxy's processes
#        (nginx's master and worker summed) before and after 1,000 keep-alive connections that
#        each made one request and then stay idle;
#   - prints the tables and the goals (throughput at least HAProxy's, added p99 no more than
#     HAProxy's, exactly 6 at the upstream) on stdout, progress on stderr, and writes every
#     measurement to a JSON file (--json; default target/bench-proxy/DATE.json).
#
# The load generator is the project's own (`proxy-bench load`, in crates/inflight-bench), not
# wrk or oha: wrk has no open loop at a fixed rate, and one tool that does the closed loop, the
# open loop with latency from the scheduled time, and the idle connections held while memory is
# read means every proxy, and the direct baseline, meets exactly the same client.
#
# Only 127.0.0.1 is used. Every load step is bounded (warm-up + duration, and a `timeout` over
# it); the run takes about 3 minutes after the builds with the defaults. Everything started is
# stopped, and every cgroup removed, on exit or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DURATION=10
WARMUP=2
RATE=
JSON_OUT=
KEEP_LOGS=0
NO_CGROUP=0
CONNECTIONS=64
IDLE_CONNECTIONS=1000
BUDGET=6
SLOW_MS=20
BASE_PORT=${BENCH_PROXY_BASE_PORT:-18070}

usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; }
die() {
    echo "bench-proxy: $*" >&2
    exit 2
}
positive() { [[ $2 =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v v="$2" 'BEGIN { exit !(v > 0) }' || die "$1 needs a positive number, got '$2'"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --duration) positive "$1" "${2-}" && DURATION=$2 && shift 2 ;;
    --warmup) [[ ${2-} =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--warmup needs a number, got '${2-}'"; WARMUP=$2; shift 2 ;;
    --rate) positive "$1" "${2-}" && RATE=$2 && shift 2 ;;
    --json) [ -n "${2-}" ] || die "--json needs a file"; JSON_OUT=$2; shift 2 ;;
    --keep-logs) KEEP_LOGS=1; shift ;;
    --no-cgroup) NO_CGROUP=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
    esac
done

say() { printf '==> %s\n' "$*" >&2; }
STARTED=$(date +%s)

# ---- tools ---------------------------------------------------------------------------------
say "tools"
missing=()
command -v haproxy >/dev/null || missing+=(haproxy)
command -v nginx >/dev/null || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${missing[*]}: run as root to install them, or install them yourself"
    echo "  installing ${missing[*]}" >&2
    apt-get update -qq
    # The packages' own services are not started here (nor wanted).
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
HAPROXY_VERSION=$(haproxy -v 2>&1 | sed -n 1p)
NGINX_VERSION=$(nginx -v 2>&1 | sed -n 1p)
echo "  $HAPROXY_VERSION" >&2
echo "  $NGINX_VERSION" >&2

say "build (release): inflight, proxy-bench"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release --locked -q -p inflight-cli -p inflight-bench --bin inflight --bin proxy-bench
INFLIGHT=$CARGO_TARGET_DIR/release/inflight
BENCH=$CARGO_TARGET_DIR/release/proxy-bench
BUILT=$(date +%s)

# 1,000 idle clients plus the proxies' own sockets: each process needs more than the usual 1024.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((IDLE_CONNECTIONS * 3)) ] ||
    die "open files limit $(ulimit -n) is below $((IDLE_CONNECTIONS * 3)): raise it (ulimit -n) and retry"

WORK=$(mktemp -d /tmp/bench-proxy.XXXXXX)
RUNS=$WORK/runs.jsonl
PIDS=()
CGROUPS=()

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    for cg in "${CGROUPS[@]}"; do
        for _ in $(seq 20); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
        [ -d "$cg" ] && echo "bench-proxy: could not remove cgroup $cg" >&2
    done
    if [ "$KEEP_LOGS" = 1 ] || [ "$status" != 0 ]; then
        echo "bench-proxy: logs and configs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- one CPU each --------------------------------------------------------------------------
# Finds a cpu controller to put each proxy under a quota of one CPU; sets CPU_LIMIT (what is
# used, for the report) and CG_KIND/CG_ROOT.
CG_KIND=none
CG_ROOT=
if [ "$(id -u)" = 0 ] && [ "$NO_CGROUP" = 0 ]; then
    for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
        if [ -f "$root/cgroup.controllers" ] && grep -qw cpu "$root/cgroup.controllers"; then
            if grep -qw cpu "$root/cgroup.subtree_control" 2>/dev/null ||
                echo +cpu >"$root/cgroup.subtree_control" 2>/dev/null; then
                CG_KIND=v2 CG_ROOT=$root
                break
            fi
        fi
    done
    if [ "$CG_KIND" = none ] && [ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] 2>/dev/null; then
        CG_KIND=v1 CG_ROOT=/sys/fs/cgroup/cpu
    elif [ "$CG_KIND" = none ] && [ -w /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us ] 2>/dev/null; then
        CG_KIND=v1 CG_ROOT=/sys/fs/cgroup/cpu,cpuacct
    fi
fi

# Makes the cgroup for proxy $1 and prints its path; fails when it cannot be written.
make_cgroup() {
    local cg=$CG_ROOT/inflight-bench-proxy-$$-$1
    mkdir "$cg" 2>/dev/null || return 1
    CGROUPS+=("$cg")
    if [ "$CG_KIND" = v2 ]; then
        echo "100000 100000" >"$cg/cpu.max" 2>/dev/null || return 1
    else
        echo 100000 >"$cg/cpu.cfs_period_us" 2>/dev/null || return 1
        echo 100000 >"$cg/cpu.cfs_quota_us" 2>/dev/null || return 1
    fi
    CGROUP_PATH=$cg
}

if [ "$CG_KIND" != none ] && make_cgroup probe; then
    rmdir "$CGROUP_PATH" && unset 'CGROUPS[-1]'
    if [ "$CG_KIND" = v2 ]; then
        CPU_LIMIT="cgroup v2 cpu.max = \"100000 100000\" (one CPU) per proxy"
    else
        CPU_LIMIT="cgroup v1 cpu.cfs_quota_us = 100000 per cpu.cfs_period_us = 100000 (one CPU) per proxy; the cgroup v2 hierarchy here has no cpu controller"
    fi
else
    CG_KIND=none
    if [ "$NO_CGROUP" = 1 ]; then
        CPU_LIMIT="taskset -c 1 per proxy (--no-cgroup): each proxy is pinned to CPU 1 instead of given a quota"
    else
        CPU_LIMIT="taskset -c 1 per proxy: no cgroup cpu controller could be written (not root, or none mounted writable), so each proxy is pinned to CPU 1 instead of given a quota"
    fi
fi
say "CPU limit: $CPU_LIMIT"

# Starts proxy $1 (the rest is its command line) under its CPU limit, in the background, with
# its output in $WORK/$1.log; sets STARTED_PID.
launch() {
    local name=$1
    shift
    if [ "$CG_KIND" != none ]; then
        [ -d "$CG_ROOT/inflight-bench-proxy-$$-$name" ] || make_cgroup "$name" ||
            die "cannot create the cgroup for $name"
        local cg=$CG_ROOT/inflight-bench-proxy-$$-$name
        # The shell joins the cgroup, then becomes the proxy: no instruction of it runs outside.
        sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@" >"$WORK/$name.log" 2>&1 &
    else
        taskset -c 1 "$@" >"$WORK/$name.log" 2>&1 &
    fi
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
}

# Waits until something accepts connections on 127.0.0.1:$1 (10 s at most).
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    die "nothing listens on 127.0.0.1:$1 after 10 s; see $WORK"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

UP_PORT=$BASE_PORT
P_INFLIGHT=$((BASE_PORT + 1)) P_INFLIGHT_SIX=$((BASE_PORT + 2))
P_HAPROXY=$((BASE_PORT + 3)) P_HAPROXY_SIX=$((BASE_PORT + 4))
P_NGINX=$((BASE_PORT + 5)) P_NGINX_SIX=$((BASE_PORT + 6))
for p in $(seq "$BASE_PORT" $((BASE_PORT + 6))); do
    port_free "$p" || die "127.0.0.1:$p is in use: stop what listens there, or set BENCH_PROXY_BASE_PORT"
done

# ---- the upstream and the proxies ----------------------------------------------------------
say "upstream on 127.0.0.1:$UP_PORT (/ at once, /slow after $SLOW_MS ms)"
"$BENCH" upstream --listen "127.0.0.1:$UP_PORT" --slow-ms "$SLOW_MS" --exit-after 1800 \
    >"$WORK/upstream.log" 2>&1 &
PIDS+=("$!")
wait_port "$UP_PORT"

cat >"$WORK/budgets.toml" <<EOF
[budgets.wide]
max_concurrent = 1024
max_queued = 1024
permit_timeout = "5s"
call_timeout = "10s"
upstream = "http://127.0.0.1:$UP_PORT"
listen = "127.0.0.1:$P_INFLIGHT"

[budgets.six]
max_concurrent = $BUDGET
max_queued = $CONNECTIONS
permit_timeout = "5s"
call_timeout = "10s"
upstream = "http://127.0.0.1:$UP_PORT"
listen = "127.0.0.1:$P_INFLIGHT_SIX"
EOF

cat >"$WORK/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 4000

defaults
    mode http
    option http-keep-alive
    option forwardfor
    timeout connect 5s
    timeout client 120s
    timeout server 30s
    timeout http-request 30s
    timeout http-keep-alive 120s
    timeout queue 5s

frontend wide
    bind 127.0.0.1:$P_HAPROXY
    default_backend wide

frontend six
    bind 127.0.0.1:$P_HAPROXY_SIX
    default_backend six

backend wide
    http-reuse always
    server up 127.0.0.1:$UP_PORT maxconn 1024

backend six
    http-reuse always
    server up 127.0.0.1:$UP_PORT maxconn $BUDGET
EOF

mkdir -p "$WORK/nginx/tmp"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
master_process on;
user root;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;

events { worker_connections 8192; }

http {
    access_log off;
    client_body_temp_path $WORK/nginx/tmp/body;
    proxy_temp_path $WORK/nginx/tmp/proxy;
    fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
    scgi_temp_path $WORK/nginx/tmp/scgi;
    keepalive_timeout 120s;
    keepalive_requests 1000000;

    upstream wide {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    upstream six {
        server 127.0.0.1:$UP_PORT max_conns=$BUDGET;
        keepalive $BUDGET;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$P_NGINX;
        location / {
            proxy_pass http://wide;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
    }
    server {
        listen 127.0.0.1:$P_NGINX_SIX;
        location / {
            proxy_pass http://six;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
    }
}
EOF
haproxy -c -q -f "$WORK/haproxy.cfg" || die "haproxy refused its config ($WORK/haproxy.cfg)"
nginx -t -q -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" ||
    die "nginx refused its config ($WORK/nginx/nginx.conf)"
"$INFLIGHT" check-config "$WORK/budgets.toml" >/dev/null || die "inflight check-config refused $WORK/budgets.toml"

threads() { ls "/proc/$1/task" | wc -l; }

# Starts the three proxies; sets PID_INFLIGHT, PID_HAPROXY, PID_NGINX.
start_proxies() {
    launch inflight "$INFLIGHT" proxy --config "$WORK/budgets.toml"
    PID_INFLIGHT=$STARTED_PID
    launch haproxy haproxy -db -f "$WORK/haproxy.cfg"
    PID_HAPROXY=$STARTED_PID
    launch nginx nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log"
    PID_NGINX=$STARTED_PID
    for p in "$P_INFLIGHT" "$P_INFLIGHT_SIX" "$P_HAPROXY" "$P_HAPROXY_SIX" "$P_NGINX" "$P_NGINX_SIX"; do
        wait_port "$p"
    done
    for _ in $(seq 100); do grep -q "inflight proxy: ready" "$WORK/inflight.log" && break; sleep 0.1; done
    grep -q "inflight proxy: ready" "$WORK/inflight.log" || die "inflight proxy did not get ready; see $WORK/inflight.log"
}

stop_proxies() {
    local pid
    for pid in "$PID_INFLIGHT" "$PID_HAPROXY" "$PID_NGINX"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "$PID_INFLIGHT" "$PID_HAPROXY" "$PID_NGINX"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}

say "proxies: inflight on :$P_INFLIGHT/:$P_INFLIGHT_SIX, haproxy on :$P_HAPROXY/:$P_HAPROXY_SIX, nginx on :$P_NGINX/:$P_NGINX_SIX"
start_proxies
# With one CPU to use, inflight runs on a single-threaded runtime: one thread in all.
INFLIGHT_WORKERS=$(threads "$PID_INFLIGHT")
NGINX_WORKERS=$(pgrep -P "$PID_NGINX" | wc -l || true)
echo "  inflight: $INFLIGHT_WORKERS thread(s)" >&2
echo "  haproxy: $(threads "$PID_HAPROXY") thread(s)" >&2
echo "  nginx: master and $NGINX_WORKERS worker process(es)" >&2
if [ "$CG_KIND" != none ] && [ "$INFLIGHT_WORKERS" != 1 ]; then
    echo "  warning: inflight's runtime did not size itself to the one-CPU quota ($INFLIGHT_WORKERS threads)" >&2
fi

# One load step: case, who, URL, then proxy-bench load flags.
load() {
    local case=$1 who=$2 url=$3
    shift 3
    timeout --kill-after=5 "$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN { print int(d + w + 30) }')" \
        "$BENCH" load --url "$url" --duration "$DURATION" --warmup "$WARMUP" \
        --upstream "127.0.0.1:$UP_PORT" --case "$case" --proxy "$who" --out "$RUNS" "$@"
}

# ---- 1. saturation -------------------------------------------------------------------------
say "1/4 saturation: closed loop, $CONNECTIONS connections, ${WARMUP} s warm-up + ${DURATION} s each"
load saturation direct "http://127.0.0.1:$UP_PORT/" --connections "$CONNECTIONS"
load saturation inflight "http://127.0.0.1:$P_INFLIGHT/" --connections "$CONNECTIONS" --pid "$PID_INFLIGHT"
load saturation haproxy "http://127.0.0.1:$P_HAPROXY/" --connections "$CONNECTIONS" --pid "$PID_HAPROXY"
load saturation nginx "http://127.0.0.1:$P_NGINX/" --connections "$CONNECTIONS" --pid "$PID_NGINX"

# ---- 2. added latency ----------------------------------------------------------------------
if [ -z "$RATE" ]; then
    # A quarter of the slowest proxy's saturation throughput, in hundreds, at most 2000/s.
    RATE=$(grep '"case":"saturation"' "$RUNS" | grep -v '"proxy":"direct"' |
        sed -n 's/.*"ok_per_s":\([0-9.]*\).*/\1/p' |
        awk 'NR == 1 || $1 < min { min = $1 } END { r = int(min / 4 / 100) * 100; if (r > 2000) r = 2000; if (r < 100) r = 100; print r }')
fi
say "2/4 added latency: open loop at $RATE/s, $CONNECTIONS connections"
load latency direct "http://127.0.0.1:$UP_PORT/" --connections "$CONNECTIONS" --rate "$RATE"
load latency inflight "http://127.0.0.1:$P_INFLIGHT/" --connections "$CONNECTIONS" --rate "$RATE" --pid "$PID_INFLIGHT"
load latency haproxy "http://127.0.0.1:$P_HAPROXY/" --connections "$CONNECTIONS" --rate "$RATE" --pid "$PID_HAPROXY"
load latency nginx "http://127.0.0.1:$P_NGINX/" --connections "$CONNECTIONS" --rate "$RATE" --pid "$PID_NGINX"

# ---- 3. a budget of 6 over 20 ms -----------------------------------------------------------
say "3/4 budget of $BUDGET over the $SLOW_MS ms upstream: closed loop, $CONNECTIONS clients"
load budget inflight "http://127.0.0.1:$P_INFLIGHT_SIX/slow" --connections "$CONNECTIONS" --pid "$PID_INFLIGHT"
load budget haproxy "http://127.0.0.1:$P_HAPROXY_SIX/slow" --connections "$CONNECTIONS" --pid "$PID_HAPROXY"
load budget nginx "http://127.0.0.1:$P_NGINX_SIX/slow" --connections "$CONNECTIONS" --pid "$PID_NGINX"

# ---- 4. idle connections -------------------------------------------------------------------
say "4/4 memory: $IDLE_CONNECTIONS idle keep-alive connections per proxy, fresh processes"
stop_proxies
start_proxies
for spec in "inflight:$P_INFLIGHT:$PID_INFLIGHT" "haproxy:$P_HAPROXY:$PID_HAPROXY" "nginx:$P_NGINX:$PID_NGINX"; do
    IFS=: read -r who port pid <<<"$spec"
    # A few requests first, so the memory before already has the upstream pool in it.
    timeout 20 "$BENCH" load --url "http://127.0.0.1:$port/" --connections 4 --duration 0.5 --warmup 0 \
        --case idle --proxy "$who" --out "$WORK/warm.jsonl" 2>/dev/null
    timeout --kill-after=5 60 "$BENCH" idle --url "http://127.0.0.1:$port/" \
        --connections "$IDLE_CONNECTIONS" --pid "$pid" --settle 2 --case idle --proxy "$who" --out "$RUNS"
done

# ---- report --------------------------------------------------------------------------------
[ -n "$JSON_OUT" ] || JSON_OUT=$CARGO_TARGET_DIR/bench-proxy/$(date -u +%Y-%m-%dT%H%M%SZ).json
mkdir -p "$(dirname "$JSON_OUT")"
FINISHED=$(date +%s)
echo >&2
"$BENCH" report "$RUNS" --json "$JSON_OUT" \
    --meta "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --meta "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --meta "machine=$(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)" \
    --meta "load_average_at_end=$(cut -d' ' -f1-3 /proc/loadavg)" \
    --meta "cpu_limit=$CPU_LIMIT" \
    --meta "inflight_threads=$INFLIGHT_WORKERS" \
    --meta "haproxy=$HAPROXY_VERSION" \
    --meta "nginx=$NGINX_VERSION" \
    --meta "duration_s=$DURATION" --meta "warmup_s=$WARMUP" --meta "rate_per_s=$RATE" \
    --meta "run_seconds_after_build=$((FINISHED - BUILT))"
echo
echo "CPU limit: $CPU_LIMIT; inflight: $INFLIGHT_WORKERS thread(s)"
echo "JSON: $JSON_OUT"
say "done in $((FINISHED - STARTED)) s ($((FINISHED - BUILT)) s after the builds)"
