#!/usr/bin/env bash
# `make images`: builds magnetar/{broker,bookie,operator,spark,minio}:<version> from images/*/Dockerfile,
# and magnetar/etcd:<pinned etcd version> (scripts/images/etcd.sh) -- the names the chart and
# the PulsarCluster CRD use by default, so nothing needs overriding on a local cluster.
#   * Docker: scripts/images/docker.sh (installs Debian's docker.io / starts dockerd if needed).
#   * Base: BASE_IMAGE if set (e.g. python:3.11-slim, for a user with registry access), else
#     the Debian bookworm base scripts/images/base.sh builds locally (cached by tag).
#   * Context: a staging copy of what the images need (pyproject.toml, README.md, src/ with
#     the generated protobuf modules, operator/, images/, spark-on-k8s/) in .cache/images/context, so the
#     build works with the classic builder and BuildKit alike and sends megabytes, not the
#     repository's caches. Python dependencies come from PyPI inside the build.
# Args: the images to build (default: broker bookie operator spark etcd, and minio once built). Env: MAGNETAR_IMAGE_PREFIX
# (default magnetar), MAGNETAR_IMAGE_TAG (default the package version).
set -euo pipefail
cd "$(dirname "$0")/../.."
images=("$@")
# magnetar/minio (the chart's optional S3 server) joins the default set once `make minio`
# has built the binary (make test builds it before the images).
minio_bin=$(ls -d .cache/k8s-bin/minio-*/minio 2>/dev/null | tail -1 || true)
if [ ${#images[@]} -eq 0 ]; then
    images=(broker bookie operator spark etcd)
    if [ -n "$minio_bin" ]; then images+=(minio); else echo "[images] magnetar/minio skipped: run make minio first"; fi
fi
bash scripts/images/docker.sh
bash scripts/gen_proto.sh
base=${BASE_IMAGE:-$(bash scripts/images/base.sh | tail -1)}
prefix=${MAGNETAR_IMAGE_PREFIX:-magnetar}
tag=${MAGNETAR_IMAGE_TAG:-$(sed -nE 's/^__version__ = "(.*)"/\1/p' src/magnetar/__init__.py)}

ctx=.cache/images/context
rm -rf "$ctx"
mkdir -p "$ctx"
cp pyproject.toml README.md "$ctx/"
tar -c --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' src operator images spark-on-k8s \
    | tar -x -C "$ctx"
for name in "${images[@]}"; do
    if [ "$name" = minio ]; then
        [ -n "$minio_bin" ] || { echo "[images] no MinIO binary: run make minio first" >&2; exit 1; }
        cp "$minio_bin" "$ctx/images/minio/minio"
    fi
done
# pip in the build stage trusts the CAs this host added locally (none on most machines)
cp /usr/local/share/ca-certificates/*.crt "$ctx/images/build-ca/" 2>/dev/null || true

# The classic builder unless BuildKit can run here (buildx present); the Dockerfiles need
# nothing BuildKit-only.
if [ -z "${DOCKER_BUILDKIT:-}" ]; then
    if docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=1; else export DOCKER_BUILDKIT=0; fi
fi
for name in "${images[@]}"; do
    if [ "$name" = etcd ]; then
        # the pinned etcd binary, not a Dockerfile: needs Go the first time (or the cached binary)
        if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] \
            || ls .cache/k8s-bin/etcd-*/etcd >/dev/null 2>&1; then
            echo "[images] $(bash scripts/images/etcd.sh) ready"
        else
            echo "[images] $prefix/etcd skipped: Go is needed to build etcd (or set a PulsarCluster's spec.image.etcd)"
        fi
        continue
    fi
    start=$(date +%s)
    echo "[images] building $prefix/$name:$tag on $base"
    docker build --force-rm --build-arg BASE_IMAGE="$base" -f "$ctx/images/$name/Dockerfile" \
        -t "$prefix/$name:$tag" "$ctx" >.cache/images/build-"$name".log 2>&1 \
        || { tail -30 .cache/images/build-"$name".log >&2; exit 1; }
    size=$(docker image inspect -f '{{.Size}}' "$prefix/$name:$tag")
    echo "[images] $prefix/$name:$tag built in $(( $(date +%s) - start ))s ($(( size / 1024 / 1024 )) MiB)"
    # Every rebuild leaves the image the tag named before, untagged, and a new build-stage
    # image: left alone they filled tens of GB of a disk the bookies also measure (they turn
    # read-only at 95%). Those untagged images of this one go; of its build stage, only the
    # newest (the layer cache of the next build) stays. Images still tagged are kept.
    docker images -q -f dangling=true -f "label=org.opencontainers.image.title=magnetar-$name" \
        | xargs -r docker rmi >/dev/null 2>&1 || true
    docker images -q -f dangling=true -f "label=io.magnetar.stage=build-$name" | tail -n +2 \
        | xargs -r docker rmi >/dev/null 2>&1 || true
done
