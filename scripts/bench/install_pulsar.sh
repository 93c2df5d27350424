#!/usr/bin/env bash
# Apache Pulsar jars assembled from Maven Central, for the side-by-side benchmarks and the
# client suites:
#   scripts/bench/install_pulsar.sh                                 the standalone (bench/peers/pom.xml)
#   scripts/bench/install_pulsar.sh bench/peers/pulsar-perf-pom.xml pulsar-perf
# `mvn dependency:copy-dependencies` on the pom puts what it needs at run time into
# .cache/<name>-<version>/lib (name: pulsar for the standalone, else the second argument; the
# version is the pom's pulsar.version; the Maven repository itself is .cache/m2). Idempotent:
# skipped when the lib directory is complete (a stamp is written last). Prints the lib
# directory on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
POM="$ROOT/${1:-bench/peers/pom.xml}"
NAME=${2:-pulsar}
VERSION=$(sed -n 's:.*<pulsar.version>\(.*\)</pulsar.version>.*:\1:p' "$POM")
DEST="$ROOT/.cache/$NAME-$VERSION"
STAMP="$DEST/.complete"
log() { printf '[%s] %s\n' "$NAME" "$*" >&2; }

for tool in java mvn; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install_pulsar: $tool is required (Java 17 + Maven)" >&2; exit 1; }
done
want=$(cat "$POM" "$ROOT/bench/peers/maven-settings.xml" | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    echo "$DEST/lib"
    exit 0
fi
start=$(date +%s)
log "assembling $NAME $VERSION from Maven Central into $DEST/lib"
rm -rf "$DEST/lib"
mkdir -p "$DEST"
# Maven's own repository lives in .cache/m2 so a second run (and `make clean`) stay local.
mvn -B -q -s "$ROOT/bench/peers/maven-settings.xml" -Dmaven.repo.local="$ROOT/.cache/m2" \
    -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$DEST/lib" -DincludeScope=runtime >&2
ls "$DEST/lib"/*.jar >/dev/null 2>&1 || { echo "install_pulsar: no jars in $DEST/lib" >&2; exit 1; }
if [ "$NAME" = pulsar ] && [ ! -f "$DEST/lib/pulsar-broker-$VERSION.jar" ]; then
    echo "install_pulsar: pulsar-broker-$VERSION.jar missing in $DEST/lib" >&2; exit 1
fi
echo "$want" > "$STAMP"
log "done in $(( $(date +%s) - start )) s ($(ls "$DEST/lib" | wc -l) jars, $(du -sh "$DEST/lib" | cut -f1))"
echo "$DEST/lib"
