#!/usr/bin/env bash
# Apache Pulsar standalone for the side-by-side benchmarks (issue 7), assembled from Maven
# Central with bench/peers/pom.xml: `mvn dependency:copy-dependencies` puts pulsar-broker and
# everything it needs at run time into .cache/pulsar-<version>/lib (the Maven repository
# itself is .cache/m2). Idempotent: skipped when the lib directory is complete (a stamp is
# written last). Prints the lib directory on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
POM="$ROOT/bench/peers/pom.xml"
VERSION=$(sed -n 's:.*<pulsar.version>\(.*\)</pulsar.version>.*:\1:p' "$POM")
DEST="$ROOT/.cache/pulsar-$VERSION"
STAMP="$DEST/.complete"
log() { printf '[pulsar] %s\n' "$*" >&2; }

for tool in java mvn; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install_pulsar: $tool is required (Java 17 + Maven)" >&2; exit 1; }
done
want=$(cat "$POM" "$ROOT/bench/peers/maven-settings.xml" | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    echo "$DEST/lib"
    exit 0
fi
start=$(date +%s)
log "assembling Apache Pulsar $VERSION standalone from Maven Central into $DEST/lib"
rm -rf "$DEST/lib"
mkdir -p "$DEST"
# Maven's own repository lives in .cache/m2 so a second run (and `make clean`) stay local.
mvn -B -q -s "$ROOT/bench/peers/maven-settings.xml" -Dmaven.repo.local="$ROOT/.cache/m2" \
    -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$DEST/lib" -DincludeScope=runtime >&2
[ -f "$DEST/lib/pulsar-broker-$VERSION.jar" ] || { echo "install_pulsar: pulsar-broker-$VERSION.jar missing in $DEST/lib" >&2; exit 1; }
echo "$want" > "$STAMP"
log "done in $(( $(date +%s) - start )) s ($(ls "$DEST/lib" | wc -l) jars, $(du -sh "$DEST/lib" | cut -f1))"
echo "$DEST/lib"
