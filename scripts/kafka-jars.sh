#!/usr/bin/env bash
# Fetches the Apache Kafka jars the test suite runs Kafka's own tools from (kafka-topics,
# kafka-consumer-groups, the console producer/consumer, DumpLogSegments): the version pinned in
# scripts/kafka-version, from Maven Central through `mvn`, into target/kafka/<version>/lib.
#
# Usage: scripts/kafka-jars.sh    prints the lib directory on its last line; exit 0 iff it is usable
#   KAFKA_VERSION=X.Y.Z           another version than the pinned one (for trying a new release)
#   FORCE=1                       fetch again even if the cache is complete
#
# The cache is complete once lib/COMPLETE exists (written last), so a rerun is offline and
# instant, and an interrupted fetch is redone rather than half used. Needs Java 17+ (Kafka 4's
# tools) and Maven 3; Maven keeps its own download cache in ~/.m2.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${KAFKA_VERSION:-$(tr -d '[:space:]' <"$root/scripts/kafka-version")}
lib=$root/target/kafka/$version/lib
# The logging backend of Kafka's release tarball (log4j2 behind slf4j 2); without one the
# tools print SLF4J's "no providers" warning instead of their own log lines.
slf4j=2.0.17
log4j=2.24.3

if [[ ${FORCE:-0} != 1 && -f $lib/COMPLETE && -f $lib/kafka-streams-$version.jar ]]; then
    echo "$lib"
    exit 0
fi
command -v java >/dev/null || { echo "kafka-jars: java not found (Kafka $version's tools need Java 17+)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "kafka-jars: mvn not found (apt-get install maven)" >&2; exit 1; }
java_version=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ { print $2 }')
if ((${java_version%%.*} < 17)); then
    echo "kafka-jars: Kafka $version's tools need Java 17+, found $java_version" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/runnel-kafka-jars.XXXXXX")
trap 'rm -rf "$work"' EXIT
deps=""
# kafka-tools holds every tool the suite runs (in the pinned version DumpLogSegments too),
# and pulls the storage and metadata modules they need; no Scala core.
# kafka-streams: the exactly-once Streams application of tests/kafka_streams.rs.
for artifact in kafka-tools kafka-clients kafka-streams; do
    deps+="<dependency><groupId>org.apache.kafka</groupId><artifactId>$artifact</artifactId><version>$version</version></dependency>"
done
deps+="<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$slf4j</version></dependency>"
deps+="<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$log4j</version></dependency>"
deps+="<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$log4j</version></dependency>"
cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>runnel.test</groupId><artifactId>kafka-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>$deps</dependencies>
</project>
POM

echo "kafka-jars: resolving Apache Kafka $version from Maven Central" >&2
rm -rf "$lib"
mkdir -p "$lib"
if ! mvn -B -q -f "$work/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DoutputDirectory="$lib" -DincludeScope=runtime >"$work/mvn.log" 2>&1; then
    grep -m5 -E 'ERROR' "$work/mvn.log" | cut -c1-300 | sed 's/^/  mvn: /' >&2
    echo "kafka-jars: Kafka $version did not resolve" >&2
    exit 1
fi
for jar in "kafka-tools-$version.jar" "kafka-clients-$version.jar" "kafka-streams-$version.jar"; do
    [[ -f $lib/$jar ]] || { echo "kafka-jars: $jar missing after resolution" >&2; exit 1; }
done
echo "$version" >"$lib/COMPLETE"
echo "kafka-jars: $(ls "$lib"/*.jar | wc -l) jars in $lib" >&2
echo "$lib"
