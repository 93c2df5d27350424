#!/usr/bin/env bash
# Runs the official Go client's conformance suite (tests/clients/go) against a broker:
#   scripts/clients/go-suite.sh SERVICE_URL ADMIN_URL [go test args...]
# apache/pulsar-client-go and its dependencies come from the Go module proxy into the repo's
# .cache/go-mod (build cache .cache/go-build), pinned by tests/clients/go/go.sum.
# Against a secured broker (pulsar+ssl:// and https:// URLs), MAGNETAR_TLS_TRUST_CERTS (the CA's
# PEM file, hostnames verified) and MAGNETAR_AUTH_TOKEN (a super-user's token) are read by the
# suite from the environment; unset, the clients are plain ones.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
[ $# -ge 2 ] || { echo "usage: $0 SERVICE_URL ADMIN_URL [go test args...]" >&2; exit 2; }
SERVICE_URL=$1 ADMIN_URL=$2
shift 2
GO=$(command -v go || ls /usr/local/go/bin/go 2>/dev/null || true)
[ -n "$GO" ] || { echo "go-suite: Go is required" >&2; exit 3; }
export GOMODCACHE="$ROOT/.cache/go-mod" GOCACHE="$ROOT/.cache/go-build" GOFLAGS=-mod=readonly
cd "$ROOT/tests/clients/go"
MAGNETAR_SERVICE_URL="$SERVICE_URL" MAGNETAR_ADMIN_URL="$ADMIN_URL" \
    exec "$GO" test -count=1 -p 1 -v -timeout 8m "$@" ./...
