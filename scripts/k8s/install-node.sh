#!/usr/bin/env bash
# Builds (once, cached in .cache/k8s-bin/<name>-<version>/) what `make cluster-up` needs beyond
# the control plane the k8s suite already builds: kubelet, kube-scheduler, kube-proxy, kubeadm
# and kubectl from k8s.io/kubernetes in ONE `go build` (they share most packages), and CoreDNS
# with `go install`. Everything comes from the Go module proxy at the versions in versions.env.
# Parallelism stays low (-p ${GO_BUILD_P:-2}): the project's machines have 2 shared cores.
source "$(dirname "$0")/lib.sh"

build_k8s_node_cmds() {
    local names=(kubelet kube-scheduler kube-proxy kubeadm kubectl) missing=() n
    for n in "${names[@]}"; do
        [ -x "$(cached_bin "$n" "$KUBERNETES_VERSION")" ] || missing+=("$n")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "kubelet, kube-scheduler, kube-proxy, kubeadm, kubectl $KUBERNETES_VERSION: cached"
        return 0
    fi
    command -v go >/dev/null || { log "go not found (need Go >= 1.24)"; return 1; }
    local work pkgs=() replaces=() t0=$SECONDS
    work=$(mktemp -d "${TMPDIR:-/tmp}/magnetar-gobuild.XXXXXX")
    mapfile -t replaces < <(k8s_staging_replaces)
    {
        echo "module magnetar.local/build/k8s-node"
        echo
        echo "go 1.24.0"
        echo
        echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
        for r in "${replaces[@]}"; do echo "replace $r"; done
    } >"$work/go.mod"
    for n in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$n"); done
    log "building ${missing[*]} $KUBERNETES_VERSION (one go build; minutes the first time)"
    mkdir -p "$work/out"
    if ! (cd "$work" && go build -p "${GO_BUILD_P:-2}" -trimpath -ldflags "$(k8s_ldflags)" \
        -o "$work/out/" "${pkgs[@]}"); then
        rm -rf "$work"
        log "building ${missing[*]} failed"
        return 1
    fi
    for n in "${missing[@]}"; do
        mkdir -p "$(dirname "$(cached_bin "$n" "$KUBERNETES_VERSION")")"
        mv "$work/out/$n" "$(cached_bin "$n" "$KUBERNETES_VERSION")"
    done
    rm -rf "$work"
    log "${missing[*]} built in $((SECONDS - t0))s"
}

build_coredns() {
    local out
    out=$(cached_bin coredns "$COREDNS_VERSION")
    if [ -x "$out" ]; then
        log "coredns $COREDNS_VERSION: cached"
        return 0
    fi
    local work t0=$SECONDS
    work=$(mktemp -d "${TMPDIR:-/tmp}/magnetar-gobuild.XXXXXX")
    log "building coredns $COREDNS_VERSION (go install; minutes the first time)"
    if ! (cd "$work" && GOBIN="$work" GOFLAGS=-buildvcs=false go install -p "${GO_BUILD_P:-2}" \
        -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"); then
        rm -rf "$work"
        log "building coredns failed"
        return 1
    fi
    mkdir -p "$(dirname "$out")"
    mv "$work/coredns" "$out"
    rm -rf "$work"
    log "coredns built in $((SECONDS - t0))s"
}

build_k8s_node_cmds
build_coredns
# etcd for the cluster: the pinned one (3.5), built once (the system's 3.4 would do for the
# apiserver, but the cluster runs what versions.env pins).
build_etcd
