#!/usr/bin/env bash
# Builds (once, cached) the pinned helm v3 from the Go module proxy.
source "$(dirname "$0")/lib.sh"
build_helm
cached_bin helm "$HELM_VERSION"; echo
