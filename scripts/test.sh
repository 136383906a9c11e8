#!/usr/bin/env bash
# Everything CI runs, in order: set-up checks, formatting, lints, tests, benchmark builds.
#
#   scripts/test.sh
#
# Runs as root in CI: the CPU tests create real cgroups with a CPU quota (and remove them). As a
# normal user those tests say they were skipped and the rest still runs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s (at %d s)\n' "$*" "$SECONDS"; }

# A clean checkout builds everything once: incremental builds only cost time here, and line
# tables are all the debug information a failing test's backtrace needs.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

step "toolchain"
if ! command -v cargo >/dev/null; then
    echo "error: cargo not found; install Rust (https://rustup.rs) and retry" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        rustup component add "$component"
    fi
done
cargo --version
rustc --version

step "cgroups (the CPU-quota tests need a writable cpu controller)"
if [ "$(id -u)" = 0 ]; then
    grep -E ' - cgroup2? ' /proc/self/mountinfo | awk '{print "  " $5 " (" $9 ")"}' || true
else
    echo "  not root: tests that create cgroups will be skipped"
fi

step "redis-server, redis-sentinel and openssl (the fleet budget's tests run real ones on loopback: a server, a cluster, sentinels, a TLS server with certificates made by openssl)"
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null \
    || ! command -v redis-sentinel >/dev/null || ! command -v openssl >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq redis-server redis-tools redis-sentinel openssl >/dev/null; }; then
            echo "  could not install redis-server: its tests will say they skipped"
        fi
    else
        echo "  redis-server missing and cannot be installed here: its tests will say they skipped"
    fi
fi
if command -v redis-server >/dev/null; then
    redis-server --version
fi
if command -v redis-sentinel >/dev/null; then
    echo "  redis-sentinel: $(command -v redis-sentinel)"
fi

step "chromium (the proxy's live page is checked in a real headless browser)"
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq chromium >/dev/null; }; }; then
            echo "  could not install chromium: the page's browser test will say it skipped"
        fi
    else
        echo "  chromium missing and cannot be installed here: the page's browser test will say it skipped"
    fi
fi
if command -v chromium >/dev/null; then
    chromium --version 2>/dev/null || true
fi

step "nginx (a real HTTP/2 upstream of the proxy in its tests)"
if ! command -v nginx >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq nginx >/dev/null; }; }; then
            echo "  could not install nginx: its test will say it skipped"
        fi
    else
        echo "  nginx missing and cannot be installed here: its test will say it skipped"
    fi
fi
if command -v nginx >/dev/null; then
    nginx -v 2>&1 | sed 's/^/  /'
fi

step "grpcio (a real gRPC server and client run through the proxy in its tests)"
if ! python3 -c "import grpc" 2>/dev/null; then
    if ! python3 -m pip install -q grpcio >/dev/null 2>&1; then
        echo "  could not install grpcio from PyPI: the gRPC interop test will say it skipped"
    fi
fi
python3 -c "import grpc; print('  grpcio', grpc.__version__)" 2>/dev/null || true

step "runtimes (the probe's rules are checked against the JDKs, Go, Python and Node found here)"
# Debian's golang-go takes under a minute; without it the Go case says it skipped.
if ! command -v go >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    install_go() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null; }
    if ! { install_go || { apt-get update -qq && install_go; }; }; then
        echo "  could not install golang-go: the Go case will say it skipped"
    fi
fi
for runtime in java go python3 node; do
    if command -v "$runtime" >/dev/null; then
        echo "  $runtime: $(command -v "$runtime")"
    else
        echo "  $runtime: not installed, its case will say it skipped"
    fi
done

step "cargo fmt --check"
cargo fmt --all --check

step "module layering (no module reaches up into one that uses it)"
python3 scripts/check-layers.py --self-test
python3 scripts/check-layers.py --all

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The library's optional integrations (tower, metrics, tracing) and its smallest build.
cargo clippy -p inflight --all-targets --all-features --locked -- -D warnings
cargo clippy -p inflight --no-default-features --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked
cargo test -p inflight --all-features --locked

step "loom models (a permit that comes back reaches a waiter in every interleaving; a planted lost waiter fails them)"
# The class queue's and the permits' own code over loom's atomics and locks (inflight's `sync`
# module), every interleaving loom can reach: no preemption bound is needed, the three models
# take seconds. In a target folder of their own, as `--cfg loom` changes every crate's build.
# Then again with the bug planted that they exist to catch (a plain load in
# `ClassQueue::returned` where the pairing needs a read-modify-write): they must fail, on a
# waiter left next to a free permit, or they no longer check the pairing.
loom_models() {
    RUSTFLAGS="--cfg loom -C debug_assertions $*" \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/loom" \
        cargo test -p inflight --lib --profile loom --no-default-features --locked -- loom_models
}
loom_models
planted_log=$(mktemp)
if loom_models --cfg inflight_planted_lost_waiter >"$planted_log" 2>&1; then
    cat "$planted_log"
    echo "error: the loom models passed with a lost waiter planted in ClassQueue::returned" >&2
    exit 1
fi
if ! grep -q "left next to a free permit" "$planted_log"; then
    cat "$planted_log"
    echo "error: with the lost waiter planted, the loom models failed for another reason" >&2
    exit 1
fi
echo "  with the lost waiter planted, the models fail as they must:"
grep "left next to a free permit" "$planted_log" | sed 's/^/    /'
rm -f "$planted_log"

step "cargo package (every crate packages, and builds from its package alone)"
# Packages every crate (a path dependency without a version fails here), then builds the
# packages from their unpacked .crate files alone, in a scratch workspace whose [patch] points
# each of our crates at its package: a file read from outside a crate fails here. (cargo's own
# verify builds each package against a local registry, at about twice the cost here: our
# crates compile again for every package that depends on them.) The whole workspace builds
# once, with its features unified; then each library a user adds builds alone, with only the
# features it asks for, as it would in their project. The verify builds share the target folder
# with the steps above, so only what differs compiles again. --allow-dirty lets the script run
# on a working tree with uncommitted changes; CI's checkout is clean anyway.
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
rm -f "$target_dir"/package/*.crate
cargo package --workspace --no-verify --locked --allow-dirty
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
packages="$scratch/packages"
mkdir -p "$packages"
members=()
for crate_file in "$target_dir"/package/*.crate; do
    tar xzf "$crate_file" -C "$packages"
    members+=("$(basename "$crate_file" .crate)")
done
{
    echo "[workspace]"
    echo "resolver = \"2\""
    printf 'members = ['
    printf '"%s", ' "${members[@]}"
    echo "]"
    echo
    echo "[patch.crates-io]"
    for member in "${members[@]}"; do
        echo "${member%-*} = { path = \"$member\" }"
    done
} >"$packages/Cargo.toml"
cp Cargo.lock "$packages/Cargo.lock"
(
    cd "$packages"
    CARGO_TARGET_DIR="$target_dir" cargo build --workspace --locked --quiet
    for library in inflight inflight-cpu inflight-redis; do
        CARGO_TARGET_DIR="$target_dir" cargo build -p "$library" --locked --quiet
    done
    echo "  built from their packages: ${members[*]}"
    # The workspace README's snippets are inflight-redis's doctests: they run from its package
    # too, with inflight from its own package.
    CARGO_TARGET_DIR="$target_dir" cargo test -p inflight-redis --doc --locked --quiet
)

step "cargo install (the installed binary works away from the repository)"
# A debug build through the same target folder, so this reuses what the steps above built; the
# release build users get differs only in optimisation. The binary runs from an empty folder
# outside the repository, where no lab/ is found: the lab must use its built-in files.
install_dir="$scratch/install"
CARGO_TARGET_DIR="$target_dir" cargo install --path crates/inflight-cli \
    --locked --debug --quiet --root "$install_dir/root"
mkdir -p "$install_dir/cwd"
cp examples/budgets.toml "$install_dir/cwd/budgets.toml"
(
    cd "$install_dir/cwd"
    bin="$install_dir/root/bin/inflight"
    "$bin" --version
    "$bin" lab run --help | grep "Strategies in .*c2" >/dev/null \
        || { echo "error: lab run --help lists no strategies" >&2; exit 1; }
    "$bin" check-config budgets.toml
    "$bin" lab run --no-limit --strategies c2 --scenarios healthy --records 20 --repeats 1 \
        --time-scale 0.2 --out out >/dev/null
    for origin in strategies_origin scenarios_origin; do
        grep -q "\"$origin\": \"built-in\"" out/results.json \
            || { echo "error: the installed lab did not use its built-in files ($origin)" >&2; exit 1; }
    done
    echo "  installed inflight ran from $PWD with its built-in lab files"
)

step "cargo doc (the library's links resolve)"
RUSTDOCFLAGS="-D warnings" cargo doc -p inflight --no-deps --all-features --locked

step "cargo check --benches"
cargo check --workspace --benches --locked

step "done"
