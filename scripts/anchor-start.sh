#!/usr/bin/env bash
# Starts a release `runnel serve` for ../shared/bench/kafka/run-anchor.sh (START=this script):
# prints "READY pid=<pid> startup_ms=<ms> rss_kb=<kb> data=<dir>" once the Kafka port answers.
#   PORT=9092 (Kafka listener on 127.0.0.1; the raft listener uses PORT+1)
#   RUNNEL_BIN=target/release/runnel   DATA_DIR=<new temp dir>
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-9092}
BIN=${RUNNEL_BIN:-target/release/runnel}
[[ -x $BIN ]] || cargo build --release -p runnel-broker --bin runnel
DATA=${DATA_DIR:-$(mktemp -d /tmp/runnel-anchor.XXXXXX)}
RUN=${XDG_CACHE_HOME:-$HOME/.cache}/runnel-anchor; mkdir -p "$RUN"
t0=$(date +%s%3N)
setsid "$BIN" serve --data-dir "$DATA/data" --kafka-listen "127.0.0.1:$PORT" \
    --controller-listen "127.0.0.1:$((PORT + 1))" --num-partitions 1 >"$DATA/out.log" 2>"$DATA/err.log" </dev/null &
PID=$!
echo "$PID" > "$RUN/runnel.pid"; echo "$DATA" > "$RUN/runnel.datadir"
for _ in $(seq 600); do
    grep -q '^READY' "$DATA/out.log" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || { echo "runnel exited during startup:" >&2; tail -20 "$DATA/err.log" >&2; exit 1; }
    sleep 0.05
done
grep -q '^READY' "$DATA/out.log" || { echo "runnel not ready after 30s" >&2; exit 1; }
ms=$(( $(date +%s%3N) - t0 ))
echo "READY pid=$PID startup_ms=$ms rss_kb=$(awk '/^VmRSS/{print $2}' /proc/$PID/status) data=$DATA"
