"""Builds Magnetar's compiled hot paths: the modules below, compiled by mypyc into C extensions.

Run by ``make setup`` (scripts/setup.sh) with the venv's Python. The build goes to
``.cache/native/<key>/``, where the key hashes everything that shapes it (the module list,
their sources, this script, the Python and mypy versions), and the venv's site-packages gets
``magnetar_native`` pointing at it. So a build runs once per change of a compiled module and
switching branches back finds the earlier build in the cache.

The package loads the build itself (``magnetar/native.py``, docs/architecture.md "Compiled
hot paths"): only when every compiled module's source is still the one it was built from,
else it warns and runs the pure-Python modules, which stay importable either way
(``MAGNETAR_NATIVE=0`` picks them on purpose).

    .venv/bin/python scripts/native.py           # build if needed, link, print the key
    .venv/bin/python scripts/native.py --check   # exit 1 if the linked build is not current
    .venv/bin/python scripts/native.py --off     # unlink: the pure-Python modules run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
CACHE = ROOT / ".cache" / "native"
GROUP = "magnetar_native"

# The modules on the publish, store and dispatch paths (docs/benchmarks.md, issue 24: what the
# profiles show). A module compiled here must keep to what mypyc compiles the same as Python:
# tests/unit/structure/test_slice_bounds.py guards the one difference found so far.
MODULES: tuple[str, ...] = (
    # the wire codec
    "magnetar/wire/frames.py",
    "magnetar/wire/commands.py",
    "magnetar/common/stats.py",
    # broker: the connection, the producer
    "magnetar/broker/transport.py",
    "magnetar/broker/connection.py",
    "magnetar/broker/producer.py",
    "magnetar/broker/dedup.py",
    # dispatch: the subscriptions' read-ahead, dispatchers, consumers, acknowledgements
    "magnetar/broker/consumers.py",
    "magnetar/broker/subscriptions/dispatch.py",
    "magnetar/broker/subscriptions/dispatchers.py",
    "magnetar/broker/subscriptions/consumer.py",
    "magnetar/broker/subscriptions/entries.py",
    "magnetar/broker/subscriptions/acknowledgements.py",
    # managed ledger: the writer, the reader and its tail cache
    "magnetar/managed_ledger/writer.py",
    "magnetar/managed_ledger/reader.py",
    "magnetar/managed_ledger/cache.py",
    # the ledger client
    "magnetar/ledger/handle.py",
    "magnetar/ledger/bookie_client.py",
    "magnetar/ledger/metadata.py",
    "magnetar/ledger/entry.py",
    # the bookie: service, journal, entry log, index, write cache
    "magnetar/bookie/service.py",
    "magnetar/bookie/storage/journal.py",
    "magnetar/bookie/storage/entrylog.py",
    "magnetar/bookie/storage/index.py",
    "magnetar/bookie/storage/cache.py",
    "magnetar/bookie/storage/db.py",
)


def module_name(rel: str) -> str:
    return rel[: -len(".py")].replace("/", ".")


def source_digest(rel: str) -> str:
    return hashlib.sha256((SRC / rel).read_bytes()).hexdigest()


def build_key() -> str:
    import mypy.version

    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(sys.version.encode())
    h.update(sysconfig.get_platform().encode())
    h.update(mypy.version.__version__.encode())
    for rel in MODULES:
        h.update(rel.encode())
        h.update(source_digest(rel).encode())
    return h.hexdigest()[:20]


SETUP = """
from setuptools import setup
from mypyc.build import mypycify
setup(name={group!r}, ext_modules=mypycify({paths!r}, opt_level="3", group_name={group!r}))
"""


def build(dest: Path) -> None:
    """mypyc on MODULES into ``dest`` (atomically: a half build never gets the final name)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="native-", dir=dest.parent) as tmp:
        out = Path(tmp) / "out"
        paths = [str(Path("src") / rel) for rel in MODULES]
        script = Path(tmp) / "setup_native.py"
        script.write_text(SETUP.format(group=GROUP, paths=paths))
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        # cwd = the repository: mypyc reads pyproject.toml's [tool.mypy] (strict, mypy_path).
        cmd = [sys.executable, str(script), "-q", "build_ext"]
        cmd += ["--build-lib", str(out), "--build-temp", str(Path(tmp) / "build")]
        cmd += ["--parallel", str(os.cpu_count() or 1)]
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        files: dict[str, str] = {}
        for so in sorted(out.rglob("*.so")):
            rel = so.relative_to(out)
            name = ".".join((*rel.parent.parts, rel.name.split(".", 1)[0]))
            files[name] = rel.as_posix()
        missing = [module_name(rel) for rel in MODULES if module_name(rel) not in files]
        if missing:
            raise SystemExit(f"native: mypyc built no extension for {', '.join(missing)}")
        manifest = {
            "group": GROUP,
            "python": sys.version.split()[0],
            "sources": {module_name(rel): source_digest(rel) for rel in MODULES},
            "files": files,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        out.rename(dest)


def site_link() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / GROUP


def link(target: Path | None) -> None:
    path = site_link()
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if target is not None:
        path.symlink_to(target, target_is_directory=True)


def prune(keep: Path, limit: int = 4) -> None:
    """Keeps the newest ``limit`` builds (the linked one always)."""
    builds = sorted(
        (p for p in CACHE.iterdir() if p.is_dir() and not p.name.startswith("native-")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in builds[limit:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 unless the build is current")
    group.add_argument("--off", action="store_true", help="unlink the build (pure Python runs)")
    args = parser.parse_args()
    if args.off:
        link(None)
        print("native: unlinked; the pure-Python modules run")
        return 0
    key = build_key()
    dest = CACHE / key
    if args.check:
        current = site_link().resolve() == dest.resolve() and (dest / "manifest.json").exists()
        print(f"native: {'current' if current else 'not current'} ({key})")
        return 0 if current else 1
    if not (dest / "manifest.json").exists():
        print(f"[setup] compiling {len(MODULES)} modules with mypyc (cached as {key})", flush=True)
        build(dest)
    dest.touch()
    link(dest)
    prune(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
