#!/usr/bin/env bash
# magnetar/etcd:<ETCD_VERSION> (scripts/k8s/versions.env): the default etcd image of a
# PulsarCluster (spec.image.etcd), part of `make images`. The pinned etcd binary, built once
# from the Go module proxy (scripts/k8s/install-etcd.sh, cached in .cache/k8s-bin), alone in
# a rootfs as /usr/local/bin/etcd, `docker import`ed: nothing pulled from a registry.
# Cached: rebuilt only when the tag is missing from Docker. Prints the tag.
# Env: MAGNETAR_IMAGE_PREFIX (default magnetar).
set -euo pipefail
source "$(dirname "$0")/../k8s/lib.sh"
tag=${MAGNETAR_IMAGE_PREFIX:-magnetar}/etcd:$ETCD_VERSION
if ! docker image inspect "$tag" >/dev/null 2>&1; then
    bin=$(cached_bin etcd "$ETCD_VERSION")
    [ -x "$bin" ] || bash "$ROOT/scripts/k8s/install-etcd.sh" >&2
    work=$(mktemp -d)
    mkdir -p "$work/usr/local/bin" "$work/tmp" "$work/var/lib/etcd"
    chmod 1777 "$work/tmp"
    cp "$bin" "$work/usr/local/bin/etcd"
    tar -C "$work" -c . | docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
        --change 'ENTRYPOINT ["/usr/local/bin/etcd"]' - "$tag" >/dev/null
    rm -rf "$work"
    log "built $tag"
fi
echo "$tag"
