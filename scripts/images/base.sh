#!/usr/bin/env bash
# Builds the images' base locally from Debian packages, with no image registry: a Debian
# bookworm minbase rootfs made by debootstrap (installed with apt when missing) with Python
# 3.11 (python3, python3-venv) and CA certificates, imported with `docker import` as
# magnetar/debian-base:<suite>-<digest> (also tagged magnetar/debian-base:<suite>, the
# Dockerfiles' default). Cached: the tag carries a digest of the suite, packages and recipe, and an
# existing image with that tag is reused (`docker rmi` it to rebuild). Prints the image name
# on its last line. The mirror is the host's apt mirror (MAGNETAR_DEBIAN_MIRROR overrides).
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=bookworm
packages=python3,python3-venv,ca-certificates
recipe=1   # bump when what the rootfs holds changes in a way the package list does not show
digest=$(echo "$suite $packages $recipe" | sha256sum | cut -c1-12)
image="magnetar/debian-base:${suite}-${digest}"
alias="magnetar/debian-base:${suite}"   # the Dockerfiles' default BASE_IMAGE
if docker image inspect "$image" >/dev/null 2>&1; then
    docker tag "$image" "$alias"
    echo "$image"
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "[images] installing debootstrap (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
mirror=${MAGNETAR_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    # the mirror the host's apt uses (deb822 or one-line format); debootstrap's default otherwise
    mirror=$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -oE '[a-z]+://[^[:space:]]+' | head -1 || true)
fi
state=.cache/images
mkdir -p "$state"
rootfs=$(mktemp -d "$state/rootfs.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT
echo "[images] debootstrap $suite ($packages) -> $image (log: $state/debootstrap.log)" >&2
start=$(date +%s)
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" ${mirror:+"$mirror"} \
    >"$state/debootstrap.log" 2>&1; then
    tail -20 "$state/debootstrap.log" >&2
    exit 1
fi
# a smaller image: no package caches or lists, no docs or man pages
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/var/log/*.log
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$image" >/dev/null
docker tag "$image" "$alias"
echo "[images] $image built in $(( $(date +%s) - start ))s" >&2
echo "$image"
