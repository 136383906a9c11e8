#!/usr/bin/env bash
# `inflight proxy` against HAProxy and nginx: builds `inflight` and `proxy-bench` in release mode
# and runs `proxy-bench run` (crates/inflight-bench), which does the rest.
#
#   scripts/bench-proxy.sh [--duration S] [--warmup S] [--rate N] [--json FILE] [--keep-logs]
#                          [--no-cgroup] [--repeats N] [--idle-connections N] [--only LIST] ...
#
# Every flag goes to `proxy-bench run` (`proxy-bench run --help` lists them). As root, HAProxy
# and nginx are installed first when missing (Debian packages); BENCH_PROXY_BASE_PORT, if set,
# is passed as --base-port. Tables on stdout, progress on stderr, the JSON document in
# target/bench-proxy/ unless --json says where.
set -euo pipefail
cd "$(dirname "$0")/.."

for arg in "$@"; do
    case "$arg" in
    -h | --help)
        sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
        echo
        exec cargo run --release --locked -q -p inflight-bench --bin proxy-bench -- run --help
        ;;
    esac
done

missing=()
command -v haproxy >/dev/null || missing+=(haproxy)
command -v nginx >/dev/null || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench-proxy: installing ${missing[*]}" >&2
    apt-get update -qq
    # The packages' own services are not started here (nor wanted).
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "bench-proxy: building inflight and proxy-bench (release)" >&2
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release --locked -q -p inflight-cli -p inflight-bench --bin inflight --bin proxy-bench

extra=()
if [ -n "${BENCH_PROXY_BASE_PORT:-}" ]; then
    extra+=(--base-port "$BENCH_PROXY_BASE_PORT")
fi
exec "$CARGO_TARGET_DIR/release/proxy-bench" run \
    --inflight "$CARGO_TARGET_DIR/release/inflight" "${extra[@]}" "$@"
