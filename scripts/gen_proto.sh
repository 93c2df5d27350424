#!/usr/bin/env bash
# Generates Python modules (+ .pyi stubs) from proto/*.proto into the packages that own them.
# Output goes to src/magnetar/<pkg>/_gen/ (git-ignored); rerun only when a .proto changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export PATH="$(pwd)/.venv/bin:$PATH"   # protoc plugins (mypy-protobuf)
shopt -s nullglob
# proto/<package>/<name>.proto -> src/magnetar/<package>/_gen/<name>_pb2.py
for dir in proto/*/; do
    pkg=$(basename "$dir")
    files=("$dir"*.proto)
    [ ${#files[@]} -gt 0 ] || continue
    out="src/magnetar/$pkg/_gen"
    stamp="$out/.stamp"
    want=$(cat "${files[@]}" scripts/gen_proto.sh | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then continue; fi
    rm -rf "$out"; mkdir -p "$out"
    "$PY" -m grpc_tools.protoc -I "$dir" --python_out="$out" --mypy_out="$out" --mypy_grpc_out="$out" \
        --grpc_python_out="$out" "${files[@]}"
    # generated gRPC modules import siblings absolutely; make them package-relative
    sed -i -E 's/^import ([a-z_0-9]+_pb2) as /from . import \1 as /' "$out"/*.py
    touch "$out/__init__.py"
    echo "$want" > "$stamp"
done
