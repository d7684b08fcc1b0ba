#!/usr/bin/env bash
# The whole test suite (README: "Run the tests"). Needs only Rust; installs the rest itself:
# - cmake (builds librdkafka for the rdkafka client tests), libssl-dev and pkg-config (its
#   bundled curl) and kcat (old-client test), from Debian when missing and apt-get is usable;
# - Apache Kafka's jars (the version in scripts/kafka-version) from Maven Central with
#   scripts/kafka-jars.sh into target/kafka/, Java 17 and Maven from Debian when missing, for
#   the Kafka CLI tool tests and DumpLogSegments checks; once fetched those tests are required
#   (RUNNEL_KAFKA_LIB), they print SKIP only where the jars cannot be had;
# - Chromium and ChromeDriver from Debian (the dashboard's real-browser test) and schemathesis
#   from PyPI into target/py (the OpenAPI fuzz test). Once installed, those tests are required:
#   RUNNEL_REQUIRE_BROWSER / RUNNEL_REQUIRE_TOOLS make them fail instead of skip;
# - as root, RUNNEL_REQUIRE_MOUNT: the disk-full test mounts a tmpfs and fails (not SKIPs) if it cannot;
# - the wasm32-wasip2 target (rustup), for the transform examples and test guests.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v kcat >/dev/null || need_apt+=(kcat)
command -v g++ >/dev/null || need_apt+=(g++)
# libssl-dev: curl-sys builds librdkafka's bundled curl (rdkafka-sys `curl-static`) against it.
[[ -f /usr/include/openssl/ssl.h ]] || need_apt+=(libssl-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
[[ -x /usr/bin/chromium ]] || need_apt+=(chromium)
[[ -x /usr/bin/chromedriver ]] || need_apt+=(chromium-driver)
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
# javac: tests/kafka_streams.rs compiles its Kafka Streams application.
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
if ((${#need_apt[@]})); then
    if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
        echo "installing ${need_apt[*]} from Debian"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "warning: missing ${need_apt[*]} and cannot apt-get install them" >&2
    fi
fi

# As root the disk-full test (tests/resource_limits.rs) can mount its tmpfs: then it is required.
if [[ $(id -u) == 0 ]]; then
    export RUNNEL_REQUIRE_MOUNT=1
fi

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    export RUNNEL_REQUIRE_BROWSER=1
fi

# schemathesis in a venv of our own (never the system's site-packages).
venv=target/py
if [[ ! -x $venv/bin/schemathesis ]] && command -v python3 >/dev/null; then
    echo "installing schemathesis into $venv"
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q schemathesis; } ||
        echo "warning: cannot install schemathesis; its test will SKIP" >&2
fi
if [[ -x $venv/bin/schemathesis ]]; then
    export RUNNEL_SCHEMATHESIS=$PWD/$venv/bin/schemathesis RUNNEL_REQUIRE_TOOLS=1
fi

# WebAssembly guests (examples/, tests/guests/) build for wasm32-wasip2.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
    echo "installing the wasm32-wasip2 target"
    rustup target add wasm32-wasip2
fi

if kafka_lib=$(bash scripts/kafka-jars.sh); then
    export RUNNEL_KAFKA_LIB=$kafka_lib
else
    echo "warning: Kafka jars unavailable; the Kafka tool tests will SKIP" >&2
fi

log=$(mktemp)
# Tests that cannot run here record themselves (tests/support `skip`): libtest counts them as
# passed, this script counts them as skipped.
RUNNEL_SKIP_LOG=$(mktemp)
export RUNNEL_SKIP_LOG
trap 'rm -f "$log" "$RUNNEL_SKIP_LOG"' EXIT
set +e
cargo test --workspace --all-targets --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
skipped=$(wc -l <"$RUNNEL_SKIP_LOG")
if ((skipped)); then
    echo "skipped (could not run here):"
    sed 's/^/  /' "$RUNNEL_SKIP_LOG"
fi
# One closing line over every test binary (cargo prints one "test result" line per binary, the
# last of which is often an empty doc-test run).
awk -v s="$skipped" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "%d passed, %d skipped, %d failed\n", p - s, s, f }' "$log"
exit "$status"
