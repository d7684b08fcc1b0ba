#!/usr/bin/env bash
# Runs one of Apache Kafka's tools with the jars of scripts/kafka-jars.sh, as the release's
# bin/kafka-<tool>.sh would.
#
# Usage: scripts/kafka-tool.sh TOOL [args...]
#   TOOL: topics, consumer-groups, console-producer, console-consumer, configs, get-offsets,
#         delete-records, producer-perf-test, consumer-perf-test, dump-log, metadata-quorum,
#         reassign-partitions, leader-election, transactions, acls, or a main class
#   e.g. scripts/kafka-tool.sh topics --bootstrap-server 127.0.0.1:9092 --list
#   RUNNEL_KAFKA_LIB   the jar directory (default: target/kafka/<scripts/kafka-version>/lib)
#   KAFKA_HEAP_OPTS    (default -Xmx512M) and KAFKA_OPTS are passed to java, as bin/ does
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lib=${RUNNEL_KAFKA_LIB:-$root/target/kafka/$(tr -d '[:space:]' <"$root/scripts/kafka-version")/lib}

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
[[ -f $lib/COMPLETE ]] || { echo "kafka-tool: no Kafka jars in $lib (run scripts/kafka-jars.sh)" >&2; exit 1; }

tool=$1
shift
case $tool in
    topics) main=org.apache.kafka.tools.TopicCommand ;;
    consumer-groups) main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    console-producer) main=org.apache.kafka.tools.ConsoleProducer ;;
    console-consumer) main=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    configs) main=org.apache.kafka.tools.ConfigCommand ;;
    get-offsets) main=org.apache.kafka.tools.GetOffsetShell ;;
    delete-records) main=org.apache.kafka.tools.DeleteRecordsCommand ;;
    producer-perf-test) main=org.apache.kafka.tools.ProducerPerformance ;;
    consumer-perf-test) main=org.apache.kafka.tools.ConsumerPerformance ;;
    dump-log) main=org.apache.kafka.tools.DumpLogSegments ;;
    metadata-quorum) main=org.apache.kafka.tools.MetadataQuorumCommand ;;
    reassign-partitions) main=org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
    leader-election) main=org.apache.kafka.tools.LeaderElectionCommand ;;
    transactions) main=org.apache.kafka.tools.TransactionsCommand ;;
    acls) main=org.apache.kafka.tools.AclCommand ;;
    *.*) main=$tool ;;
    *) echo "kafka-tool: unknown tool '$tool' (see --help)" >&2; exit 2 ;;
esac

# Tools log WARN and above to stderr, as the release's tools-log4j2 configuration does; stdout
# stays the tool's own output.
log_config=$lib/../tools-log4j2.properties
if [[ ! -f $log_config ]]; then
    cat >"$log_config.tmp.$$" <<'PROPS'
status = error
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
PROPS
    mv "$log_config.tmp.$$" "$log_config"
fi
# shellcheck disable=SC2086 # the *_OPTS are word lists, as in Kafka's bin/kafka-run-class.sh
exec "${JAVA:-java}" ${KAFKA_HEAP_OPTS:--Xmx512M} -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$log_config" ${KAFKA_OPTS:-} -cp "$lib/*" "$main" "$@"
