#!/usr/bin/env bash
# Builds (once, cached) the pinned kube-controller-manager: the tests need its garbage
# collector (owner-referenced cleanup) and StatefulSet/Deployment controllers (pods).
source "$(dirname "$0")/lib.sh"
build_k8s_cmd kube-controller-manager
cached_bin kube-controller-manager "$KUBERNETES_VERSION"; echo
