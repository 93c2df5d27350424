# Shared helpers for scripts/k8s/*.sh: paths, logging, and a cached builder for Go commands
# whose modules carry `replace` directives (k8s.io/kubernetes, etcd), which `go install
# pkg@version` refuses. The builder writes a tiny go.mod that requires the module at the
# pinned version and maps every replaced module to its published version, then `go build`s
# the command. Results are cached in .cache/k8s-bin/<name>-<version>/<name>.
# shellcheck shell=bash
set -euo pipefail
K8S_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$K8S_SCRIPTS/../.." && pwd)"
BIN_CACHE="${MAGNETAR_K8S_BIN:-$ROOT/.cache/k8s-bin}"
# shellcheck source=versions.env
source "$K8S_SCRIPTS/versions.env"
export PATH="$PATH:/usr/local/go/bin"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0

log() { printf '[k8s-tools] %s\n' "$*" >&2; }

# cached_bin NAME VERSION -> path of the cached binary (may not exist yet)
cached_bin() { printf '%s/%s-%s/%s' "$BIN_CACHE" "$1" "$2" "$1"; }

# go_build NAME VERSION MODULE PACKAGE LDFLAGS [REPLACE_LINE...]
# Builds PACKAGE (inside MODULE@VERSION) into the cache unless it is already there.
go_build() {
    local name=$1 version=$2 module=$3 package=$4 ldflags=$5
    shift 5
    local out
    out=$(cached_bin "$name" "$version")
    if [ -x "$out" ]; then
        log "$name $version: cached at $out"
        return 0
    fi
    command -v go >/dev/null || { log "go not found (need Go >= 1.24)"; return 1; }
    local work
    work=$(mktemp -d "${TMPDIR:-/tmp}/magnetar-gobuild.XXXXXX")
    {
        echo "module magnetar.local/build/$name"
        echo
        echo "go 1.24.0"
        echo
        echo "require $module $version"
        for r in "$@"; do echo "replace $r"; done
    } >"$work/go.mod"
    log "building $name $version from $package (this can take minutes)"
    local t0=$SECONDS
    if ! (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$work/$name" "$package"); then
        rm -rf "$work"
        log "building $name failed"
        return 1
    fi
    mkdir -p "$(dirname "$out")"
    mv "$work/$name" "$out"
    rm -rf "$work"
    log "$name $version built in $((SECONDS - t0))s -> $out"
}

# The staging modules that k8s.io/kubernetes replaces with ./staging/src/... paths.
k8s_staging_replaces() {
    local v=$KUBERNETES_STAGING_VERSION m
    for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
        cloud-provider cluster-bootstrap code-generator component-base component-helpers \
        controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
        endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
        kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
        sample-apiserver sample-cli-plugin sample-controller; do
        echo "k8s.io/$m => k8s.io/$m $v"
    done
}

k8s_ldflags() {
    local v=$KUBERNETES_VERSION
    local minor=${v#v1.}
    minor=${minor%%.*}
    echo "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}

# build_k8s_cmd NAME: kube-apiserver | kube-controller-manager
build_k8s_cmd() {
    local name=$1 replaces=()
    mapfile -t replaces < <(k8s_staging_replaces)
    go_build "$name" "$KUBERNETES_VERSION" k8s.io/kubernetes "k8s.io/kubernetes/cmd/$name" \
        "$(k8s_ldflags)" "${replaces[@]}"
}

# build_helm: helm's go.mod has no replace directives, but the same builder keeps it cached.
build_helm() {
    local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" pkg
    # Helm's default capabilities (`helm template`/`lint` without a cluster) come from
    # ldflags, as in helm's own Makefile; without them it assumes Kubernetes 1.20.
    for pkg in pkg/lint/rules pkg/chartutil; do
        ld+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$HELM_KUBE_MINOR"
    done
    go_build helm "$HELM_VERSION" helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm "$ld"
}

# build_etcd: etcd's server module replaces its sibling modules with ../api etc.
build_etcd() {
    local v=$ETCD_VERSION m replaces=() minor patch
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3 raft/v3; do
        replaces+=("go.etcd.io/etcd/$m => go.etcd.io/etcd/$m $v")
    done
    # client/v2 is versioned v2.3MM.P for etcd v3.MM.P (v3.5.21 -> v2.305.21).
    minor=${v#v3.}; minor=${minor%%.*}; patch=${v##*.}
    replaces+=("go.etcd.io/etcd/client/v2 => go.etcd.io/etcd/client/v2 v2.3$(printf %02d "$minor").$patch")
    go_build etcd "$v" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 "-s -w" "${replaces[@]}"
}

# build_kind / build_kubectl: only for e2e/ (kind needs a container runtime to be useful).
build_kind() {
    go_build kind "$KIND_VERSION" sigs.k8s.io/kind sigs.k8s.io/kind "-s -w"
}

build_kubectl() {
    build_k8s_cmd kubectl
}
