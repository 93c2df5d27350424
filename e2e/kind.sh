#!/usr/bin/env bash
# Magnetar on kind: create a cluster, build and load the images, `helm install` the chart
# with a minimal PulsarCluster, wait for Ready. Needs a working container runtime.
#   e2e/kind.sh up      create cluster + install (idempotent)
#   e2e/kind.sh down    delete the cluster
# Env: KIND_CLUSTER (default magnetar-e2e), NAMESPACE (default magnetar).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/k8s/lib.sh
CLUSTER=${KIND_CLUSTER:-magnetar-e2e}
NS=${NAMESPACE:-magnetar}

runtime() {
    if docker info >/dev/null 2>&1; then echo docker
    elif podman info >/dev/null 2>&1; then echo podman
    else return 1; fi
}

up() {
    local rt
    rt=$(runtime) || { log "no working container runtime (docker/podman): cannot run kind"; exit 2; }
    bash scripts/k8s/install-e2e-tools.sh >/dev/null
    local kind helm kubectl
    kind=$(cached_bin kind "$KIND_VERSION")
    helm=$(cached_bin helm "$HELM_VERSION")
    kubectl=$(cached_bin kubectl "$KUBERNETES_VERSION")
    export KIND_EXPERIMENTAL_PROVIDER=$rt
    if ! "$kind" get clusters | grep -qx "$CLUSTER"; then
        "$kind" create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" --wait 120s
    fi
    # the newcomer's path of docs/kubernetes.md: the images under the chart's default names
    # (kind users have registry access: the official Python base), loaded into the node, and
    # the chart with no --set
    BASE_IMAGE="${BASE_IMAGE:-python:3.11-slim}" bash scripts/images/build.sh broker bookie operator etcd
    local version
    version=$(sed -nE 's/^__version__ = "(.*)"/\1/p' src/magnetar/__init__.py)
    for image in broker bookie operator; do
        "$kind" load docker-image --name "$CLUSTER" "magnetar/$image:$version"
    done
    "$kind" load docker-image --name "$CLUSTER" "magnetar/etcd:$ETCD_VERSION"
    "$helm" upgrade --install magnetar helm/magnetar --namespace "$NS" --create-namespace \
        -f helm/magnetar/ci/values-cluster-minimal.yaml --wait
    "$kubectl" -n "$NS" wait pulsarcluster/dev --for=condition=Ready --timeout=10m
    log "ready: pulsar://dev-broker.$NS.svc:6650 (kubectl -n $NS port-forward svc/dev-broker 6650 8080)"
}

down() {
    local kind
    kind=$(cached_bin kind "$KIND_VERSION")
    [ -x "$kind" ] && "$kind" delete cluster --name "$CLUSTER" || true
}

case "${1:-up}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 64 ;;
esac
