#!/usr/bin/env bash
# `make k8s-tools`: every binary the k8s test suites need, built once from the Go module
# proxy at the versions pinned in versions.env and cached in .cache/k8s-bin. Builds run one
# after another (they share Go's build cache; the first kube-apiserver build takes minutes).
set -euo pipefail
here="$(dirname "$0")"
"$here/install-kube-apiserver.sh"
"$here/install-kube-controller-manager.sh"
"$here/install-helm.sh"
# etcd: the system one (Debian's 3.4.23, installed by scripts/setup.sh) serves
# kube-apiserver v1.34; build the pinned one only where there is none.
if ! command -v etcd >/dev/null 2>&1; then
    "$here/install-etcd.sh"
fi
