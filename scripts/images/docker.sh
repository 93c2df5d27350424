#!/usr/bin/env bash
# Makes `docker` usable: installs Debian's docker.io (dockerd + containerd + runc) with apt when
# dockerd is missing, and starts dockerd when no daemon answers. Idempotent: does nothing when
# `docker info` already works. The daemon it starts logs to .cache/images/dockerd.log and its
# pid is in .cache/images/dockerd.pid (stop it with `scripts/images/docker.sh stop`; a daemon
# this script did not start is never stopped). Needs root (the project's machines run as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
state=.cache/images
mkdir -p "$state"
log="$state/dockerd.log"
pidfile="$state/dockerd.pid"

if [ "${1:-}" = stop ]; then
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        kill "$(cat "$pidfile")"
        for _ in $(seq 1 30); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 1; done
        echo "[images] dockerd stopped"
    fi
    rm -f "$pidfile"
    exit 0
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "[images] no docker daemon answers and starting one needs root" >&2
    exit 1
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "[images] installing Debian's docker.io (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >>"$log" 2>&1 || true
    apt-get install -y -qq --no-install-recommends docker.io >>"$log" 2>&1
fi
if ! command -v docker >/dev/null 2>&1; then
    echo "[images] docker.io installed but no docker client on PATH" >&2
    exit 1
fi
# A dockerd that died leaves its pid files behind; once a pid is reused by another process,
# a new dockerd refuses to start ("pid file found") or waits for a containerd that is not
# there. Remove each only when its pid is not the daemon it names.
for stale in /var/run/docker.pid:dockerd /var/run/docker/containerd/containerd.pid:containerd; do
    file=${stale%%:*} comm=${stale##*:}
    if [ -f "$file" ] && [ "$(cat "/proc/$(cat "$file")/comm" 2>/dev/null)" != "$comm" ]; then
        echo "[images] removing stale $file (pid $(cat "$file") is not a $comm)"
        rm -f "$file"
    fi
done
echo "[images] starting dockerd (log: $log)"
# setsid: the daemon outlives this script and the make target that ran it.
setsid dockerd >>"$log" 2>&1 < /dev/null &
echo $! >"$pidfile"
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "[images] dockerd is up (pid $(cat "$pidfile"))"
        exit 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then break; fi
    sleep 1
done
echo "[images] dockerd did not come up; last lines of $log:" >&2
tail -20 "$log" >&2
exit 1
