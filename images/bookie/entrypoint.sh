#!/bin/sh
# Runs `magnetar "$@"`. With MAGNETAR_RACK_FILE set (rack awareness on), waits up to
# MAGNETAR_RACK_WAIT seconds (default 120) for the operator's rack map to name this pod's
# rack (the operator writes it once the pod is on a node) and adds --rack=<value>.
set -eu
if [ -n "${MAGNETAR_RACK_FILE:-}" ]; then
    waited=0
    while [ ! -s "$MAGNETAR_RACK_FILE" ] && [ "$waited" -lt "${MAGNETAR_RACK_WAIT:-120}" ]; do
        sleep 2
        waited=$((waited + 2))
    done
    if [ -s "$MAGNETAR_RACK_FILE" ]; then
        set -- "$@" "--rack=$(cat "$MAGNETAR_RACK_FILE")"
    else
        echo "magnetar-bookie: no rack in $MAGNETAR_RACK_FILE after ${waited}s; using the default rack" >&2
    fi
fi
exec magnetar "$@"
