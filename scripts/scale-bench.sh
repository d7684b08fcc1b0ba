#!/usr/bin/env bash
# Scale benchmark (issue 16): N partitions on one node, Runnel and Apache Kafka side by side.
#
# For each side: start a fresh node on a temp dir and loopback ports, run the client steps of
# broker/examples/scale.rs (create N/P topics of P partitions in batched CreateTopics requests,
# until every partition has a leader; produce M records to every partition, acks=all; read them
# all back, each exactly once; the broker's RSS, descriptors and maps from /proc/PID; one
# /metrics scrape on Runnel), then SIGTERM it (time to exit), restart it on the same data dir
# (time from process start until Metadata shows every partition led and a sample of partitions
# returns its records), kill -9 it, restart it again the same way, and stop it. Prints one table.
#
# Usage: scripts/scale-bench.sh [options]
#   --partitions N            total partitions (default 5000)
#   --partitions-per-topic P  partitions per topic (default 10: N/10 topics)
#   --records M               records per partition (default 10)
#   --size B                  record value bytes (default 100)
#   --create-batch T          topics per CreateTopics request (default 1000)
#   --sample S                partitions the restart probe reads (default 100)
#   --timeout-s S             deadline of every wait, each step (default 600)
#   --no-kafka | --no-runnel  skip that side (the Kafka side needs the harness below)
#   --kafka-nofile N          run Kafka under `prlimit --nofile=N:N` (root; needed above ~19,000
#                             partitions when the inherited limit is 20,000)
#   --runnel-nofile N         the same for Runnel
#   --max-map-count N         `sysctl -w vm.max_map_count=N` for the run (machine-wide; restored on
#                             exit; Kafka maps 2 index files per partition, default limit 65,530)
#   --kafka-heap OPTS         KAFKA_HEAP_OPTS of the Kafka node (harness default "-Xmx1G -Xms1G")
#   --runnel-port P           Runnel: Kafka listener P, controller P+1, HTTP P+2 (default 25092)
#   --kafka-port P            Kafka: listener P, controller P+1 (default 26092)
#   --runnel-bin PATH         a prebuilt `runnel` (default: build, then copy into the work dir)
#   --scale-bin PATH          a prebuilt scale example (same)
#   --tmpfs SIZE              put the work dir (both sides' data) on a tmpfs of SIZE (root; e.g.
#                             8g): takes the disk and its filesystem's state out of the figures
#                             (on this machine's ext4, creating inodes soon after many were
#                             deleted costs milliseconds each, whoever creates them)
#   --keep                    keep the work dir (data dirs and logs) and print its path
# Environment:
#   KAFKA_HARNESS      the Apache Kafka anchor harness (default /work/shared/bench/kafka): its
#                      start.sh formats and starts the first Kafka node; the restarts relaunch the
#                      very command line it ran (read from /proc/PID/cmdline) on the same data dir,
#                      since start.sh always formats and stop.sh has no kill -9
#   KAFKA_ANCHOR_HOME  the harness's state dir, whose lib/ holds the Kafka jars and so picks the
#                      version (default ~/.cache/kafka-anchor-44, Kafka 4.4.0)
#   CARGO_TARGET_DIR   where the build lands (default target/)
# Every wait has a deadline; a side that fails says which step and why, and the table shows
# FAILED from there on. Only the processes this script started are signalled, by PID.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PARTITIONS=5000 PER_TOPIC=10 RECORDS=10 SIZE=100 CREATE_BATCH=1000 SAMPLE=100 TIMEOUT=600
RUN_KAFKA=1 RUN_RUNNEL=1 KAFKA_NOFILE="" RUNNEL_NOFILE="" MAX_MAP_COUNT="" KAFKA_HEAP=""
RUNNEL_PORT=25092 KAFKA_PORT=26092 RUNNEL_BIN="" SCALE_BIN="" KEEP=0 TMPFS="" MOUNTED=0
HARNESS=${KAFKA_HARNESS:-/work/shared/bench/kafka}
export KAFKA_ANCHOR_HOME=${KAFKA_ANCHOR_HOME:-$HOME/.cache/kafka-anchor-44}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
    case $1 in
        --partitions) PARTITIONS=$2; shift ;;
        --partitions-per-topic) PER_TOPIC=$2; shift ;;
        --records) RECORDS=$2; shift ;;
        --size) SIZE=$2; shift ;;
        --create-batch) CREATE_BATCH=$2; shift ;;
        --sample) SAMPLE=$2; shift ;;
        --timeout-s) TIMEOUT=$2; shift ;;
        --no-kafka) RUN_KAFKA=0 ;;
        --no-runnel) RUN_RUNNEL=0 ;;
        --kafka-nofile) KAFKA_NOFILE=$2; shift ;;
        --runnel-nofile) RUNNEL_NOFILE=$2; shift ;;
        --max-map-count) MAX_MAP_COUNT=$2; shift ;;
        --kafka-heap) KAFKA_HEAP=$2; shift ;;
        --runnel-port) RUNNEL_PORT=$2; shift ;;
        --kafka-port) KAFKA_PORT=$2; shift ;;
        --runnel-bin) RUNNEL_BIN=$2; shift ;;
        --scale-bin) SCALE_BIN=$2; shift ;;
        --keep) KEEP=1 ;;
        --tmpfs) TMPFS=$2; shift ;;
        -h | --help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage ;;
    esac
    shift
done
((PARTITIONS > 0 && PER_TOPIC > 0 && PARTITIONS % PER_TOPIC == 0)) \
    || { echo "--partitions $PARTITIONS must be a positive multiple of --partitions-per-topic $PER_TOPIC" >&2; exit 2; }

WORK=$(mktemp -d /tmp/runnel-scale.XXXXXX)
declare -A RES=()     # "side:key" -> figure
declare -A FAILED=()  # side -> "step: error"
BOOTSTRAP=""          # the side being measured
OURS=()               # PIDs of the brokers we started (the only ones cleanup may signal)
OLD_MAP_COUNT=""

now_ms() { date +%s%3N; }
log() { echo "== $*" >&2; }

# alive PID: the process exists and is not a zombie.
alive() {
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $state && $state != Z ]]
}

# wait_exit PID SECONDS: 0 once PID is gone (sets WAITED_MS), 1 at the deadline.
wait_exit() {
    local t0 deadline
    t0=$(now_ms); deadline=$((t0 + $2 * 1000))
    while alive "$1"; do
        (($(now_ms) < deadline)) || return 1
        sleep 0.01
    done
    WAITED_MS=$(($(now_ms) - t0))
}

cleanup() {
    local pid
    for pid in "${OURS[@]}"; do
        if alive "$pid"; then
            log "cleanup: killing broker pid $pid (started by this run)"
            kill -KILL "$pid" 2>/dev/null
        fi
    done
    if [[ -n $OLD_MAP_COUNT ]]; then sysctl -qw vm.max_map_count="$OLD_MAP_COUNT"; fi
    if ((MOUNTED)); then
        cd / && umount "$WORK" && rmdir "$WORK"
    elif ((KEEP)); then log "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
if [[ -n $TMPFS ]]; then
    mount -t tmpfs -o size="$TMPFS" tmpfs "$WORK" || { echo "cannot mount a tmpfs on $WORK (root?)" >&2; exit 1; }
    MOUNTED=1
    log "work dir on a tmpfs of $TMPFS"
fi
trap 'exit 130' INT TERM

fail() {  # fail SIDE STEP MESSAGE: the first failure of a side is the one reported
    [[ -n ${FAILED[$1]:-} ]] || FAILED[$1]="$2: $3"
    log "$1 FAILED at $2: $3"
}

# --- binaries ------------------------------------------------------------------------------
# The target dir may be shared with other worktrees, whose builds overwrite target/release/runnel:
# build, then copy both binaries at once and use the copies.
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ -z $RUNNEL_BIN || -z $SCALE_BIN ]]; then
    log "building (cargo build --release -p runnel-broker --bin runnel --example scale)"
    cargo build --release -p runnel-broker --bin runnel --example scale >&2 || { echo "build failed" >&2; exit 1; }
    mkdir -p "$WORK/bin"
    [[ -n $RUNNEL_BIN ]] || { cp "$TARGET/release/runnel" "$WORK/bin/runnel"; RUNNEL_BIN=$WORK/bin/runnel; }
    [[ -n $SCALE_BIN ]] || { cp "$TARGET/release/examples/scale" "$WORK/bin/scale"; SCALE_BIN=$WORK/bin/scale; }
fi
[[ -x $RUNNEL_BIN && -x $SCALE_BIN ]] || { echo "missing $RUNNEL_BIN or $SCALE_BIN" >&2; exit 1; }

# --- limits --------------------------------------------------------------------------------
NOFILE_SOFT=$(ulimit -Sn) NOFILE_HARD=$(ulimit -Hn) MAP_COUNT=$(sysctl -n vm.max_map_count)
if [[ -n $MAX_MAP_COUNT ]]; then
    OLD_MAP_COUNT=$MAP_COUNT
    sysctl -qw vm.max_map_count="$MAX_MAP_COUNT" || { echo "cannot set vm.max_map_count (root?)" >&2; OLD_MAP_COUNT=""; }
    MAP_COUNT=$(sysctl -n vm.max_map_count)
fi
log "limits: RLIMIT_NOFILE $NOFILE_SOFT/$NOFILE_HARD (Kafka ${KAFKA_NOFILE:-inherited}, Runnel ${RUNNEL_NOFILE:-inherited}), vm.max_map_count $MAP_COUNT"
kafka_nofile=${KAFKA_NOFILE:-$NOFILE_HARD}
if ((RUN_KAFKA && PARTITIONS + 1000 > kafka_nofile)); then
    log "warning: Kafka keeps ~1 descriptor per partition: $PARTITIONS partitions need --kafka-nofile above $kafka_nofile"
fi
if ((RUN_KAFKA && 2 * PARTITIONS + 5000 > MAP_COUNT)); then
    log "warning: Kafka maps up to 2 index files per partition: $PARTITIONS partitions may need --max-map-count above $MAP_COUNT"
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# run_tool SIDE PHASE BROKER_PID ARGS...: runs the scale tool, streams its SCALE lines, stores
# them as RES[SIDE:PHASE.key]; stops it (our child) if the broker exits meanwhile or if it
# outlives every deadline it has. Returns the tool's status (2: the broker died).
run_tool() {
    local side=$1 phase=$2 bpid=$3 out tpid tailpid rc guard line key value
    shift 3
    out=$WORK/$side-$phase.out
    "$SCALE_BIN" --phase "${phase%%-*}" --bootstrap "$BOOTSTRAP" --partitions "$PARTITIONS" --partitions-per-topic "$PER_TOPIC" \
        --records "$RECORDS" --size "$SIZE" --timeout-s "$TIMEOUT" --pid "$bpid" "$@" >"$out" 2>"$out.err" &
    tpid=$!
    tail -n +1 -f --pid="$tpid" "$out" 2>/dev/null | grep --line-buffered '^SCALE' | sed -u "s/^SCALE /   [$side $phase] /" >&2 &
    tailpid=$!
    guard=$(($(now_ms) + (5 * TIMEOUT + 60) * 1000))
    rc=""
    while kill -0 "$tpid" 2>/dev/null; do
        if ! alive "$bpid"; then
            sleep 0.5  # let the tool report the broken connection if it can
            kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; rc=2; break
        fi
        if (($(now_ms) > guard)); then
            kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; rc=3; break
        fi
        sleep 0.2
    done
    if [[ -z $rc ]]; then wait "$tpid"; rc=$?; fi
    # Only the tail: the brokers are children of this shell too.
    wait "$tailpid" 2>/dev/null
    while IFS= read -r line; do
        [[ $line == SCALE\ *=* ]] || continue
        line=${line#SCALE }; key=${line%%=*}; value=${line#*=}
        RES[$side:$phase.$key]=$value
    done <"$out"
    case $rc in
        0) ;;
        2) RES[$side:$phase.error]="broker pid $bpid exited during the step ${RES[$side:$phase.error]:-}" ;;
        3) RES[$side:$phase.error]="scale tool still running after every deadline; stopped" ;;
        *) [[ -n ${RES[$side:$phase.error]:-} ]] || RES[$side:$phase.error]="scale tool exited $rc: $(tail -3 "$out.err" | tr '\n' ' ')" ;;
    esac
    return "$rc"
}

# measure_stop SIDE KEY PID SIGNAL: signals PID (ours) and stores the ms until it exited.
measure_stop() {
    local side=$1 key=$2 pid=$3 sig=$4
    kill "-$sig" "$pid" 2>/dev/null
    if wait_exit "$pid" "$TIMEOUT"; then
        RES[$side:$key]=$WAITED_MS
        return 0
    fi
    fail "$side" "$key" "pid $pid did not exit within ${TIMEOUT}s of SIG$sig; killed"
    kill -KILL "$pid" 2>/dev/null; wait_exit "$pid" 30
    return 1
}

# restart_and_probe SIDE KEY LAUNCH_FUNCTION: launches the node, probes until it serves; stores
# RES[SIDE:KEY] = ms from launch to serving. Leaves the node's PID in NODE_PID.
restart_and_probe() {
    local side=$1 key=$2 launch=$3 t0 serving
    t0=$(now_ms)
    "$launch" || { fail "$side" "$key" "launch failed"; return 1; }
    if ! run_tool "$side" "probe-$key" "$NODE_PID" --sample "$SAMPLE"; then
        fail "$side" "$key" "${RES[$side:probe-$key.error]:-}$(node_log_tail "$side")"
        return 1
    fi
    serving=${RES[$side:probe-$key.serving_epoch_ms]}
    RES[$side:$key]=$((serving - t0))
    RES[$side:$key.metadata]=$((${RES[$side:probe-$key.metadata_epoch_ms]} - t0))
    RES[$side:$key.listening]=$((${RES[$side:probe-$key.listening_epoch_ms]} - t0))
}

node_log_tail() {  # the node log's last error lines, to explain a failure
    local f lines
    case $1 in
        runnel) f=$WORK/runnel/err.log ;;
        kafka) f=$WORK/kafka/logs/server.log ;;
    esac
    [[ -f $f ]] || return 0
    lines=$(grep -E 'ERROR|FATAL|Exception|Too many open files|panicked' "$f" | tail -2 | cut -c1-300 | tr '\n' ' ')
    [[ -z $lines ]] || echo " (node log: $lines)"
}

# --- Runnel ----------------------------------------------------------------------------------
runnel_launch() {
    local n=${#OURS[@]} pidfile
    pidfile=$WORK/runnel/pid.$n
    local -a prl=()
    [[ -n $RUNNEL_NOFILE ]] && prl=(prlimit "--nofile=$RUNNEL_NOFILE:$RUNNEL_NOFILE" --)
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "${prl[@]}" "$RUNNEL_BIN" serve \
        --data-dir "$WORK/runnel/data" --kafka-listen "127.0.0.1:$RUNNEL_PORT" \
        --controller-listen "127.0.0.1:$((RUNNEL_PORT + 1))" --http-listen "127.0.0.1:$((RUNNEL_PORT + 2))" \
        --max-broker-partitions "$((PARTITIONS + 1000))" \
        >>"$WORK/runnel/out.log" 2>>"$WORK/runnel/err.log" </dev/null &
    disown  # no job-control notice when we kill it; alive() polls /proc
    for _ in $(seq 500); do [[ -s $pidfile ]] && break; sleep 0.01; done
    NODE_PID=$(cat "$pidfile" 2>/dev/null) || return 1
    OURS+=("$NODE_PID")
}

run_runnel() {
    local side=runnel
    BOOTSTRAP=127.0.0.1:$RUNNEL_PORT
    mkdir -p "$WORK/runnel"
    for p in "$RUNNEL_PORT" $((RUNNEL_PORT + 1)) $((RUNNEL_PORT + 2)); do
        port_free "$p" || { fail $side start "port $p in use (--runnel-port)"; return; }
    done
    log "Runnel: $RUNNEL_BIN ($("$RUNNEL_BIN" --version 2>/dev/null)), data $WORK/runnel/data"
    local t0 deadline
    t0=$(now_ms); deadline=$((t0 + TIMEOUT * 1000))
    runnel_launch || { fail $side start "no pid"; return; }
    until grep -q '^READY' "$WORK/runnel/out.log" 2>/dev/null; do
        alive "$NODE_PID" || { fail $side start "exited: $(tail -3 "$WORK/runnel/err.log" | tr '\n' ' ')"; return; }
        (($(now_ms) < deadline)) || { fail $side start "no READY line within ${TIMEOUT}s"; return; }
        sleep 0.01
    done
    RES[$side:first_start]=$(($(now_ms) - t0))
    run_node_steps $side runnel_launch \
        --metrics-url "http://127.0.0.1:$((RUNNEL_PORT + 2))/metrics"
}

# --- Kafka -----------------------------------------------------------------------------------
KAFKA_ARGV=()
kafka_launch() {  # a restart: the harness's own java command line, on the same data dir
    local n=${#OURS[@]} pidfile
    pidfile=$WORK/kafka/pid.$n
    local -a prl=()
    [[ -n $KAFKA_NOFILE ]] && prl=(prlimit "--nofile=$KAFKA_NOFILE:$KAFKA_NOFILE" --)
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "${prl[@]}" "${KAFKA_ARGV[@]}" \
        >>"$WORK/kafka/logs/console.out" 2>&1 </dev/null &
    disown  # no job-control notice when we kill it; alive() polls /proc
    for _ in $(seq 500); do [[ -s $pidfile ]] && break; sleep 0.01; done
    NODE_PID=$(cat "$pidfile" 2>/dev/null) || return 1
    OURS+=("$NODE_PID")
}

run_kafka() {
    local side=kafka version
    BOOTSTRAP=127.0.0.1:$KAFKA_PORT
    if [[ ! -x $HARNESS/start.sh ]]; then fail $side start "no Kafka harness at $HARNESS (KAFKA_HARNESS)"; return; fi
    version=$(cat "$KAFKA_ANCHOR_HOME/lib/KAFKA_VERSION" 2>/dev/null) \
        || { fail $side start "no Kafka jars in $KAFKA_ANCHOR_HOME/lib (run $HARNESS/setup.sh with KAFKA_ANCHOR_HOME set)"; return; }
    local pinned
    pinned=$(tr -d '[:space:]' <"$ROOT/scripts/kafka-version")
    [[ $version == "$pinned" ]] || log "warning: Kafka $version from $KAFKA_ANCHOR_HOME, not the pinned $pinned"
    RES[$side:version]=$version
    for p in "$KAFKA_PORT" $((KAFKA_PORT + 1)); do
        port_free "$p" || { fail $side start "port $p in use (--kafka-port)"; return; }
    done
    log "Kafka $version: $HARNESS/start.sh, jars $KAFKA_ANCHOR_HOME/lib, data $WORK/kafka${KAFKA_NOFILE:+, nofile $KAFKA_NOFILE}"
    local -a prl=()
    [[ -n $KAFKA_NOFILE ]] && prl=(prlimit "--nofile=$KAFKA_NOFILE:$KAFKA_NOFILE" --)
    local out=$WORK/kafka-start.out
    mkdir -p "$WORK/kafka"
    # start.sh refuses to run while its PID file names a live broker, and records ours there.
    PORT=$KAFKA_PORT DATA_DIR=$WORK/kafka READY_TIMEOUT=$TIMEOUT KAFKA_HEAP_OPTS=${KAFKA_HEAP:-${KAFKA_HEAP_OPTS:-}} \
        timeout $((TIMEOUT + 120)) "${prl[@]}" bash "$HARNESS/start.sh" >"$out" 2>&1
    local rc=$? ready pid
    ready=$(grep '^READY' "$out")
    pid=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' <<<"$ready")
    [[ -z $pid ]] && pid=$(cat "$KAFKA_ANCHOR_HOME/run/kafka.pid" 2>/dev/null)
    if [[ -n $pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'; then OURS+=("$pid"); fi
    if ((rc != 0)) || [[ -z $ready ]]; then fail $side start "start.sh exited $rc: $(tail -3 "$out" | tr '\n' ' ')"; return; fi
    NODE_PID=$pid
    RES[$side:first_start]=$(sed -n 's/.*startup_ms=\([0-9]*\).*/\1/p' <<<"$ready")
    mapfile -d '' KAFKA_ARGV <"/proc/$pid/cmdline"
    run_node_steps $side kafka_launch
    # The harness's PID file names a broker that is gone now; leave its state as stop.sh would.
    [[ $(cat "$KAFKA_ANCHOR_HOME/run/kafka.pid" 2>/dev/null) == "$pid" ]] && rm -f "$KAFKA_ANCHOR_HOME/run/kafka.pid"
}

# run_node_steps SIDE LAUNCH [LOAD ARGS...]: load, clean stop, restart, kill -9, restart, stop.
run_node_steps() {
    local side=$1 launch=$2
    shift 2
    log "$side: load ($PARTITIONS partitions, $((PARTITIONS / PER_TOPIC)) topics, $RECORDS records each)"
    if ! run_tool "$side" load "$NODE_PID" --create-batch "$CREATE_BATCH" "$@"; then
        fail "$side" "load" "${RES[$side:load.error]:-}$(node_log_tail "$side")"
        alive "$NODE_PID" && kill -KILL "$NODE_PID"
        return
    fi
    log "$side: clean shutdown (SIGTERM)"
    measure_stop "$side" shutdown "$NODE_PID" TERM || return
    log "$side: restart after the clean stop"
    restart_and_probe "$side" restart_clean "$launch" || { alive "$NODE_PID" && kill -KILL "$NODE_PID"; return; }
    log "$side: kill -9"
    measure_stop "$side" kill "$NODE_PID" KILL || return
    log "$side: restart after kill -9"
    restart_and_probe "$side" restart_killed "$launch" || { alive "$NODE_PID" && kill -KILL "$NODE_PID"; return; }
    log "$side: final stop"
    measure_stop "$side" shutdown_after_restart "$NODE_PID" TERM
}

((RUN_RUNNEL)) && run_runnel
((RUN_KAFKA)) && run_kafka

# --- table -----------------------------------------------------------------------------------
SIDES=()
((RUN_RUNNEL)) && SIDES+=(runnel)
((RUN_KAFKA)) && SIDES+=(kafka)

cell() {  # cell SIDE KEY [FORMAT]: the figure, or FAILED / - when absent
    local v=${RES[$1:$2]:-}
    if [[ -z $v ]]; then
        [[ -n ${FAILED[$1]:-} ]] && echo "FAILED" || echo "-"
    else
        case ${3:-} in
            s) awk -v ms="$v" 'BEGIN { printf "%.2f", ms / 1000 }' ;;
            mb) awk -v kb="$v" 'BEGIN { printf "%.0f", kb / 1024 }' ;;
            *) echo "$v" ;;
        esac
    fi
}
row() {  # row LABEL KEY [FORMAT]
    local line="| $1 |" side
    for side in "${SIDES[@]}"; do line+=" $(cell "$side" "$2" "${3:-}") |"; done
    echo "$line"
}

echo
echo "Scale benchmark: $PARTITIONS partitions ($((PARTITIONS / PER_TOPIC)) topics x $PER_TOPIC, RF 1), $RECORDS records of $SIZE B each, $CREATE_BATCH topics per CreateTopics, one node on loopback, $(nproc) cores, data on $(if [[ -n $TMPFS ]]; then echo "a tmpfs"; else df -T "$WORK" | awk 'NR == 2 { print $2 }'; fi)"
header="| |" rule="|---|"
for side in "${SIDES[@]}"; do
    case $side in
        runnel) header+=" Runnel $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null) |" ;;
        kafka) header+=" Apache Kafka ${RES[kafka:version]:-} |" ;;
    esac
    rule+="---|"
done
echo "$header"
echo "$rule"
row "first start to ready (ms)" first_start
row "create: CreateTopics requests (s)" load.create_requests_s
row "create: until all partitions led (s)" load.create_s
row "create errors" load.create_errors
row "produce, acks=all (s)" load.produce_s
row "produce errors" load.produce_errors
row "fetch all back (s)" load.fetch_s
row "records read once (of $((PARTITIONS * RECORDS)))" load.fetch_records
row "RSS after create (MB)" load.created_rss_kb mb
row "RSS after produce+fetch (MB)" load.loaded_rss_kb mb
row "peak RSS (MB)" load.loaded_hwm_kb mb
row "open fds after create" load.created_fds
row "open fds after produce+fetch" load.loaded_fds
row "memory maps after produce+fetch" load.loaded_maps
row "threads after produce+fetch" load.loaded_threads
row "/metrics scrape (ms, median of 3)" load.metrics_ms
row "/metrics size (bytes)" load.metrics_bytes
row "clean shutdown, SIGTERM to exit (s)" shutdown s
row "restart after clean stop: serving (s)" restart_clean s
row "  of which: all partitions led (s)" restart_clean.metadata s
row "restart after kill -9: serving (s)" restart_killed s
row "  of which: all partitions led (s)" restart_killed.metadata s
row "RSS after kill -9 restart (MB)" probe-restart_killed.restarted_rss_kb mb
row "open fds after kill -9 restart" probe-restart_killed.restarted_fds
row "shutdown after restart (s)" shutdown_after_restart s
echo
echo "Serving = Metadata shows all $PARTITIONS partitions led and $SAMPLE sampled partitions return their $RECORDS records; times from process start."
if ((RUN_KAFKA)); then
    echo "Kafka: $HARNESS/start.sh (single-node KRaft, its server.properties), jars $KAFKA_ANCHOR_HOME/lib; restarts relaunch its java command line on the same data dir${KAFKA_NOFILE:+; RLIMIT_NOFILE $KAFKA_NOFILE}."
fi
status=0
for side in "${SIDES[@]}"; do
    for key in load.create_error_kinds load.produce_error_kinds; do
        [[ -z ${RES[$side:$key]:-} ]] || echo "$side $key: ${RES[$side:$key]}"
    done
    if [[ -n ${FAILED[$side]:-} ]]; then
        echo "$side FAILED at ${FAILED[$side]}"
        status=1
    fi
done
exit $status
