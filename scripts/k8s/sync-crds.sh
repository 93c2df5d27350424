#!/usr/bin/env bash
# crds/ is the one source of the CRD YAML; the chart ships byte-identical copies
# (helm installs files under a chart's crds/ before its templates). Run after editing crds/.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p helm/magnetar/crds
cp crds/*.yaml helm/magnetar/crds/
echo "[sync-crds] helm/magnetar/crds/ updated from crds/"
