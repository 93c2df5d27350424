#!/usr/bin/env bash
# Installs everything Magnetar needs on a fresh Debian machine: system packages via apt,
# a Python venv with the project and its dev tools, and generated code. Idempotent: each
# step is skipped when its result is already there (stamps live in .cache/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CACHE="$ROOT/.cache"
VENV="$ROOT/.venv"
mkdir -p "$CACHE"

log() { printf '[setup] %s\n' "$*"; }

# --- system packages -------------------------------------------------------------------
# etcd-server: Debian bookworm ships etcd 3.4.23; it serves the v3 API our client speaks,
# and it is the one etcd the machine's package registry provides (the metadata contract
# tests run against it).
# openjdk-17-jre-headless: the JVM of the optional PySpark data source (src/magnetar/spark).
# prometheus: the real Prometheus the metrics tests scrape with (tests/support/prometheus.py;
# its service is not started: the tests run their own on free loopback ports).
APT_PKGS=(etcd-server etcd-client openjdk-17-jre-headless prometheus)
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    local SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    log "apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
apt_install "${APT_PKGS[@]}"
# The Debian package starts no daemon inside containers; make sure none of ours is left
# running either way (tests start their own etcd on free ports).
# --- Python --------------------------------------------------------------------------------
PY=""
for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        PY=$(command -v "$cand"); break
    fi
done
[ -n "$PY" ] || { echo "setup: Python >= 3.11 is required" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv with $PY"
    "$PY" -m venv "$VENV"
fi
stamp="$CACHE/pip.stamp"
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing Python dependencies"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e ".[dev,k8s,spark,functions]"
    echo "$want" > "$stamp"
fi
# --- generated code ------------------------------------------------------------------------
make -s proto
# --- compiled hot paths --------------------------------------------------------------------
# mypyc (it comes with mypy) compiles the modules scripts/native.py lists into C extensions,
# cached in .cache/native by a hash of their sources (about two minutes on two cores, once per
# change). The package loads them only while those sources are unchanged
# (src/magnetar/native.py). MAGNETAR_NATIVE=0 skips the build; the pure-Python modules run.
if [ "${MAGNETAR_NATIVE:-1}" != 0 ]; then
    command -v gcc >/dev/null 2>&1 || apt_install gcc
    "$VENV/bin/python" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        || apt_install python3-dev
    "$VENV/bin/python" scripts/native.py || {
        echo "setup: the compiled build failed (above); MAGNETAR_NATIVE=0 make setup skips it" >&2
        exit 1
    }
fi
log "ready"
