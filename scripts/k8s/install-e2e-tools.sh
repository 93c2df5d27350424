#!/usr/bin/env bash
# Builds (once, cached) kind and kubectl for e2e/ (plus helm). Only useful where a container
# runtime (Docker or Podman) works; the e2e tests skip with a message otherwise.
source "$(dirname "$0")/lib.sh"
build_helm
build_kind
build_kubectl
