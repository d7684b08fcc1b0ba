#!/usr/bin/env bash
# Stops the runnel started by anchor-start.sh (SIGTERM by its PID, waits for a clean exit).
set -uo pipefail
RUN=${XDG_CACHE_HOME:-$HOME/.cache}/runnel-anchor
PID=$(cat "$RUN/runnel.pid" 2>/dev/null) || exit 0
kill -TERM "$PID" 2>/dev/null || exit 0
for _ in $(seq 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
rm -f "$RUN/runnel.pid"
if [[ -z ${KEEP_DATA:-} ]]; then rm -rf "$(cat "$RUN/runnel.datadir" 2>/dev/null)"; fi
