"""The compiled hot paths: loads the mypyc build of ``make setup`` in place of the sources.

``scripts/native.py`` compiles the modules on the publish, store and dispatch paths into C
extensions and links the build into the venv as ``magnetar_native`` (a directory with the
extensions and a manifest of the sources they were built from). ``magnetar/__init__.py``
calls :func:`install` before any of those modules is imported; it puts a finder in front of
the import system that answers for exactly the compiled modules.

The build is used whole or not at all. Compiled modules of one build call each other
directly in C, so one module run from its edited source beside the others compiled would
still run its old code through them: if any compiled module's source differs from the one
it was built from, nothing compiled is loaded, the pure-Python modules run, and a warning
names the module and the command that rebuilds (``make setup``). ``MAGNETAR_NATIVE=0`` runs
the pure-Python modules on purpose. docs/architecture.md, "Compiled hot paths".
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final

GROUP: Final = "magnetar_native"
ENV: Final = "MAGNETAR_NATIVE"


@dataclass(frozen=True, slots=True)
class Status:
    """What :func:`install` found: ``modules`` is empty when the sources run."""

    modules: tuple[str, ...]
    reason: str


_status = Status((), "not installed")


def status() -> Status:
    """Which modules run compiled in this process, and why."""
    return _status


def describe() -> str:
    """One line for ``magnetar --version`` and the standalone's ready message."""
    if _status.modules:
        return f"{len(_status.modules)} hot-path modules compiled (mypyc)"
    return f"pure Python ({_status.reason})"


class _Finder:
    """A meta-path finder for the compiled modules of one build (and its shared library)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self._files.get(name)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, str(file))
        return importlib.util.spec_from_file_location(name, file, loader=loader)


def _build_dir() -> Path | None:
    for entry in sys.path:
        candidate = Path(entry or ".") / GROUP
        if (candidate / "manifest.json").is_file():
            return candidate
    return None


def _stale(sources: dict[str, str], package: Path) -> list[str]:
    stale: list[str] = []
    for name, digest in sources.items():
        source = package.parent.joinpath(*name.split(".")).with_suffix(".py")
        try:
            current = hashlib.sha256(source.read_bytes()).hexdigest()
        except OSError:
            current = ""
        if current != digest:
            stale.append(name)
    return stale


def install() -> Status:
    """Loads the compiled build if there is a current one; idempotent."""
    global _status
    if _status.reason != "not installed":
        return _status
    if os.environ.get(ENV, "1") == "0":
        _status = Status((), f"{ENV}=0")
        return _status
    root = _build_dir()
    if root is None:
        _status = Status((), "no compiled build (make setup builds one)")
        return _status
    try:
        manifest = json.loads((root / "manifest.json").read_text())
        sources: dict[str, str] = manifest["sources"]
        files = {name: root / rel for name, rel in manifest["files"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _status = Status((), f"unreadable compiled build at {root}: {exc}")
        return _status
    package = Path(__file__).resolve().parent
    stale = _stale(sources, package)
    if stale or manifest.get("python") != sys.version.split()[0]:
        what = ", ".join(stale) if stale else f"Python {manifest.get('python')}"
        _status = Status((), f"compiled build is stale ({what} changed)")
        print(
            f"magnetar: not loading the compiled build: {what} changed since it was built; "
            "the pure-Python modules run (make setup rebuilds it)",
            file=sys.stderr,
        )
        return _status
    loaded = [name for name in sources if name in sys.modules]
    if loaded:
        _status = Status((), f"imported before the compiled build: {', '.join(loaded)}")
        return _status
    sys.meta_path.insert(0, _Finder(files))
    _status = Status(tuple(sorted(sources)), f"compiled build at {root}")
    return _status
