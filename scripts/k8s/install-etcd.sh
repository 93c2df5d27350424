#!/usr/bin/env bash
# Builds (once, cached) the pinned etcd. Optional: kube-apiserver v1.34 works with
# Debian bookworm's etcd 3.4.23 (what the tests use when no built etcd is cached); build
# this where the system etcd is missing or older.
source "$(dirname "$0")/lib.sh"
build_etcd
cached_bin etcd "$ETCD_VERSION"; echo
