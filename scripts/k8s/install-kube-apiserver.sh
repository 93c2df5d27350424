#!/usr/bin/env bash
# Builds (once, cached) the pinned kube-apiserver from the Go module proxy.
source "$(dirname "$0")/lib.sh"
build_k8s_cmd kube-apiserver
cached_bin kube-apiserver "$KUBERNETES_VERSION"; echo
