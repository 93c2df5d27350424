#!/usr/bin/env bash
# Images the local cluster itself needs, built here (nothing pulled from a registry):
#   * magnetar/pause:<v>   - the pod sandbox: scripts/k8s/cluster/pause.c compiled statically
#                            with gcc, `docker import`ed with ENTRYPOINT /pause
#   * magnetar/coredns:<v> - the CoreDNS binary scripts/k8s/install-node.sh built, alone in a
#                            rootfs, `docker import`ed
#   * magnetar/etcd:<v>    - the pinned etcd as /usr/local/bin/etcd, a PulsarCluster's default
#                            etcd image (scripts/images/etcd.sh, also part of `make images`)
# Cached: an image is rebuilt only when its tag is missing from docker. Prints the tags.
source "$(dirname "$0")/lib.sh"
PAUSE_TAG=magnetar/pause:3.10-local
COREDNS_TAG=magnetar/coredns:${COREDNS_VERSION}-local
bash "$ROOT/scripts/images/docker.sh" >&2

if ! docker image inspect "$PAUSE_TAG" >/dev/null 2>&1; then
    work=$(mktemp -d)
    gcc -static -O2 -s -o "$work/pause" "$K8S_SCRIPTS/cluster/pause.c"
    tar -C "$work" -c pause | docker import --change 'ENTRYPOINT ["/pause"]' - "$PAUSE_TAG" >/dev/null
    rm -rf "$work"
    log "built $PAUSE_TAG"
fi
if ! docker image inspect "$COREDNS_TAG" >/dev/null 2>&1; then
    work=$(mktemp -d)
    cp "$(cached_bin coredns "$COREDNS_VERSION")" "$work/coredns"
    mkdir -p "$work/etc/coredns" "$work/tmp"
    tar -C "$work" -c . | docker import --change 'ENTRYPOINT ["/coredns"]' - "$COREDNS_TAG" >/dev/null
    rm -rf "$work"
    log "built $COREDNS_TAG"
fi
ETCD_TAG=$(bash "$ROOT/scripts/images/etcd.sh")
echo "$PAUSE_TAG"
echo "$COREDNS_TAG"
echo "$ETCD_TAG"
