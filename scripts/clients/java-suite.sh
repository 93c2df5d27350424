#!/usr/bin/env bash
# Runs the official Java client's conformance suite (tests/clients/java) against a broker:
#   scripts/clients/java-suite.sh SERVICE_URL ADMIN_URL [maven args...]
# e.g. -Dpulsar.client.version=3.0.12 runs it with the 3.0 LTS client, -Dtest=AckTest one class.
# Maven's repository is the repo's .cache/m2 (Maven Central only, bench/peers/maven-settings.xml).
# The first run resolves dependencies online; later runs are offline once a stamp records
# that the pom's dependencies for that client version are complete.
# JAVA_SUITE_BUILD_DIR (default tests/clients/java/target) is Maven's build directory: classes
# and surefire-reports; the pytest wrapper gives each run its own.
# Against a secured broker (pulsar+ssl:// and https:// URLs), MAGNETAR_TLS_TRUST_CERTS (the CA's
# PEM file, hostnames verified) and MAGNETAR_AUTH_TOKEN (a super-user's token) reach the suite as
# -Dmagnetar.tlsTrustCertsFile / -Dmagnetar.authToken; unset, the clients are plain ones.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
[ $# -ge 2 ] || { echo "usage: $0 SERVICE_URL ADMIN_URL [maven args...]" >&2; exit 2; }
SERVICE_URL=$1 ADMIN_URL=$2
shift 2
for tool in java mvn; do
    command -v "$tool" >/dev/null 2>&1 || { echo "java-suite: $tool is required (Java 17 + Maven)" >&2; exit 3; }
done
POM="$ROOT/tests/clients/java/pom.xml"
SETTINGS="$ROOT/bench/peers/maven-settings.xml"
mkdir -p "$ROOT/.cache"
want=$( (cat "$POM" "$SETTINGS"; printf '%s\n' "$@") | sha256sum | cut -d' ' -f1)
stamp="$ROOT/.cache/java-suite.$want.stamp"
BUILD_DIR=${JAVA_SUITE_BUILD_DIR:-$ROOT/tests/clients/java/target}
offline=()
[ -f "$stamp" ] && offline=(-o)
secured=()
[ -n "${MAGNETAR_TLS_TRUST_CERTS:-}" ] && secured+=(-Dmagnetar.tlsTrustCertsFile="$MAGNETAR_TLS_TRUST_CERTS")
[ -n "${MAGNETAR_AUTH_TOKEN:-}" ] && secured+=(-Dmagnetar.authToken="$MAGNETAR_AUTH_TOKEN")
mvn -B -q "${offline[@]}" "${secured[@]}" -s "$SETTINGS" -Dmaven.repo.local="$ROOT/.cache/m2" -f "$POM" \
    -Dmagnetar.serviceUrl="$SERVICE_URL" -Dmagnetar.adminUrl="$ADMIN_URL" -Dmagnetar.buildDir="$BUILD_DIR" \
    -Dsurefire.failIfNoSpecifiedTests=false "$@" test && rc=0 || rc=$?
# Dependencies resolved once are enough to go offline next time, whatever the tests said.
[ -d "$BUILD_DIR/test-classes" ] && touch "$stamp"
exit $rc
