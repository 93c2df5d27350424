"""The compiled hot paths (scripts/native.py builds them, src/magnetar/native.py loads them).

The suite is meant to run against the compiled build (``make test`` runs ``make setup``, which
builds it), and the pure-Python modules must stay importable and correct: ``make test`` runs
the unit tests a second time with ``MAGNETAR_NATIVE=0``. A build whose sources changed is
never loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from magnetar import native

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("native_build", ROOT / "scripts" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMPILED = sorted(_script().module_name(rel) for rel in _script().MODULES)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(
    os.environ.get(native.ENV) == "0", reason="MAGNETAR_NATIVE=0: the pure-Python modules run"
)
def test_the_suite_runs_against_the_compiled_build() -> None:
    status = native.status()
    assert list(status.modules) == COMPILED, (
        f"the compiled build is not in use ({status.reason}): `make setup` builds it"
    )
    for name in COMPILED:
        file = importlib.import_module(name).__file__ or ""
        assert file.endswith(".so") and "magnetar_native" in file, (name, file)


def test_the_pure_python_modules_load_with_magnetar_native_0() -> None:
    code = (
        "import importlib, magnetar.native as n\n"
        f"names = {COMPILED!r}\n"
        "files = [importlib.import_module(m).__file__ for m in names]\n"
        "print(n.status().reason)\n"
        "print('\\n'.join(files))\n"
    )
    out = _run(code, MAGNETAR_NATIVE="0")
    assert out.returncode == 0, out.stderr
    reason, *files = out.stdout.splitlines()
    assert reason == "MAGNETAR_NATIVE=0"
    assert len(files) == len(COMPILED)
    assert all(f.endswith(".py") and "/src/magnetar/" in f for f in files), files


def test_a_build_whose_sources_changed_is_not_loaded(tmp_path: Path) -> None:
    """One compiled module's source differs from the build's: nothing compiled loads (the
    others would call the old code of that one in C), and stderr says what to run."""
    build = tmp_path / native.GROUP
    build.mkdir()
    sources = {name: "0" * 64 for name in COMPILED[:1]}
    package = ROOT / "src"
    for name in COMPILED[1:]:
        path = package.joinpath(*name.split(".")).with_suffix(".py")
        sources[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = {
        "group": native.GROUP,
        "python": sys.version.split()[0],
        "sources": sources,
        # a stale build is refused before any of its files is looked at
        "files": {name: "missing.so" for name in COMPILED},
    }
    (build / "manifest.json").write_text(json.dumps(manifest))
    code = (
        "import magnetar.native as n, magnetar.wire.frames as f\n"
        "print(n.status().modules, n.status().reason)\n"
        "print(f.__file__)\n"
    )
    out = _run(code, PYTHONPATH=str(tmp_path), MAGNETAR_NATIVE="1")
    assert out.returncode == 0, out.stderr
    status, frames = out.stdout.splitlines()
    assert status == f"() compiled build is stale ({COMPILED[0]} changed)"
    assert frames.endswith("/src/magnetar/wire/frames.py")
    assert COMPILED[0] in out.stderr and "make setup" in out.stderr


def test_the_version_names_the_build() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "--version"],
        env={**os.environ, "MAGNETAR_NATIVE": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.stdout.strip().endswith("pure Python (MAGNETAR_NATIVE=0)"), out
