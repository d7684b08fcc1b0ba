#!/usr/bin/env bash
# Regenerate broker/tests/fixtures/kafka-segments/ end to end:
#   setup.sh (Kafka jars) -> start.sh (fresh single-node KRaft broker)
#   -> make_golden_segments.py produce (create topics, produce, read back)
#   -> stop.sh (clean shutdown; KEEP_DATA=1 so the log dirs survive)
#   -> make_golden_segments.py finalize (copy partition dirs, DumpLogSegments,
#      manifest.json) -> remove the broker's data dir.
# The broker is stopped (by the harness PID file) on any failure.
#
#   HARNESS=/work/shared/bench/kafka  the Apache Kafka anchor harness
#   PORT=19092                        client port (controller uses PORT+1)
#   OUT=<repo>/broker/tests/fixtures/kafka-segments
set -euo pipefail
HARNESS=${HARNESS:-/work/shared/bench/kafka}
PORT=${PORT:-19092}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/broker/tests/fixtures/kafka-segments}
STATE_HOME=${KAFKA_ANCHOR_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kafka-anchor}
RUN=$STATE_HOME/run
PY=$ROOT/scripts/make_golden_segments.py

bash "$HARNESS/setup.sh"
python3 -c 'import confluent_kafka' 2>/dev/null || pip install confluent-kafka

if [[ -f $RUN/kafka.pid ]] && kill -0 "$(cat "$RUN/kafka.pid")" 2>/dev/null; then
    echo "a harness broker is already running (pid $(cat "$RUN/kafka.pid")); not touching it" >&2
    exit 1
fi

work=$(mktemp -d /tmp/golden-segments.XXXXXX)
running=0
cleanup() {
    local rc=$?
    if [[ $running == 1 ]]; then
        echo "cleanup: stopping the broker we started" >&2
        bash "$HARNESS/stop.sh" || true   # removes its /tmp/kafka-anchor.* data dir
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT INT TERM

running=1
PORT=$PORT bash "$HARNESS/start.sh" | tee "$work/start.out"
DATA=$(sed -n 's/.* data=//p' "$work/start.out")
[[ -d $DATA/kraft ]] || { echo "no data dir from start.sh" >&2; exit 1; }

python3 "$PY" produce "127.0.0.1:$PORT" --state "$work/state.json"

KEEP_DATA=1 bash "$HARNESS/stop.sh"
running=0

mkdir -p "$OUT"
python3 "$PY" finalize --state "$work/state.json" --data-dir "$DATA/kraft" --out "$OUT" \
    --kafka-lib "$STATE_HOME/lib"
[[ $DATA == /tmp/kafka-anchor.* ]] && rm -rf "$DATA"
du -ab "$OUT" | sort -k2
