#!/usr/bin/env bash
# A local N-node Runnel cluster of release binaries for benchmarks (the counterpart of
# ../shared/bench/kafka/cluster.sh): every node a voter, on loopback.
#   scripts/runnel-cluster.sh start [N]   (default 3) prints READY with the bootstrap list
#   scripts/runnel-cluster.sh stop        stops the nodes it started (by their PIDs)
# Node i (1..N): Kafka 127.0.0.1:BASE_PORT+2(i-1), raft the port after it, HTTP HTTP_BASE+i-1.
#   BASE_PORT=19092  HTTP_BASE=18080  RF=N (default replication factor)  MIN_ISR=2
#   RUNNEL_BIN=target/release/runnel  DATA_DIR=<new temp dir>  EXTRA_ARGS=""
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${XDG_CACHE_HOME:-$HOME/.cache}/runnel-cluster; mkdir -p "$RUN"
BASE_PORT=${BASE_PORT:-19092}
HTTP_BASE=${HTTP_BASE:-18080}
case "${1:-}" in
start)
    N=${2:-3}
    BIN=${RUNNEL_BIN:-target/release/runnel}
    [[ -x $BIN ]] || cargo build --release -p runnel-broker --bin runnel
    DATA=${DATA_DIR:-$(mktemp -d /tmp/runnel-cluster.XXXXXX)}
    voters=""; bootstrap=""
    for i in $(seq "$N"); do
        port=$((BASE_PORT + 2 * (i - 1)))
        voters+="${voters:+,}$i@127.0.0.1:$((port + 1))"
        bootstrap+="${bootstrap:+,}127.0.0.1:$port"
    done
    : > "$RUN/pids"
    for i in $(seq "$N"); do
        port=$((BASE_PORT + 2 * (i - 1)))
        mkdir -p "$DATA/$i"
        # shellcheck disable=SC2086
        setsid "$BIN" serve --node-id "$i" --voters "$voters" --data-dir "$DATA/$i/data" \
            --kafka-listen "127.0.0.1:$port" --controller-listen "127.0.0.1:$((port + 1))" \
            --http-listen "127.0.0.1:$((HTTP_BASE + i - 1))" \
            --default-replication-factor "${RF:-$N}" --min-insync-replicas "${MIN_ISR:-2}" ${EXTRA_ARGS:-} \
            >"$DATA/$i/out.log" 2>"$DATA/$i/err.log" </dev/null &
        echo $! >> "$RUN/pids"
    done
    for i in $(seq "$N"); do
        for _ in $(seq 600); do
            grep -q '^READY' "$DATA/$i/out.log" 2>/dev/null && break
            sleep 0.05
        done
        grep -q '^READY' "$DATA/$i/out.log" || { echo "node $i not ready after 30 s:" >&2; tail -20 "$DATA/$i/err.log" >&2; exit 1; }
    done
    echo "$DATA" > "$RUN/datadir"
    echo "READY bootstrap=$bootstrap http=http://127.0.0.1:$HTTP_BASE pids=$(paste -sd, "$RUN/pids") data=$DATA"
    ;;
stop)
    [[ -f $RUN/pids ]] || { echo "no cluster started" >&2; exit 0; }
    while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$RUN/pids"
    while read -r pid; do
        for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    done < "$RUN/pids"
    rm -f "$RUN/pids"
    echo STOPPED
    ;;
*) echo "usage: $0 start [N] | stop" >&2; exit 2 ;;
esac
