#!/usr/bin/env bash
# Builds (once, cached) the pinned MinIO server from the Go module proxy into
# .cache/k8s-bin/minio-<version>/minio: the real S3 server the offload tests start on a free
# loopback port (tests/support/minio.py). Prints the binary's path. The first build takes
# minutes (MinIO has many dependencies); later runs only print the cached path.
source "$(dirname "$0")/lib.sh"
go_build minio "$MINIO_VERSION" github.com/minio/minio github.com/minio/minio "-s -w"
cached_bin minio "$MINIO_VERSION"; echo
