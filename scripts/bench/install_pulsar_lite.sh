#!/usr/bin/env bash
# pulsar-lite (a Rust Pulsar-compatible broker, PyPI) for the side-by-side benchmarks
# (issue 7), in its own venv so its pins never meet ours. Idempotent: skipped when the pinned
# version is already installed. Prints the path of the broker binary on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VERSION="${PULSAR_LITE_VERSION:-0.2.0}"
VENV="$ROOT/.cache/pulsar-lite-venv"
log() { printf '[pulsar-lite] %s\n' "$*" >&2; }

PY=""
for cand in python3.11 python3.12 python3.13 python3; do
    command -v "$cand" >/dev/null 2>&1 && { PY=$(command -v "$cand"); break; }
done
[ -n "$PY" ] || { echo "install_pulsar_lite: python3 is required" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
fi
have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pulsar-lite"))' 2>/dev/null || true)
if [ "$have" != "$VERSION" ]; then
    start=$(date +%s)
    log "pip install pulsar-lite==$VERSION"
    "$VENV/bin/pip" install -q --disable-pip-version-check "pulsar-lite==$VERSION"
    log "installed in $(( $(date +%s) - start )) s"
fi
# The wheel ships the broker binary inside the package (pulsar_lite/bin/pulsar-lite).
BIN=$("$VENV/bin/python" -c 'import pathlib, pulsar_lite; print(pathlib.Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite")')
[ -x "$BIN" ] || { echo "install_pulsar_lite: no broker binary at $BIN" >&2; exit 1; }
echo "$BIN"
