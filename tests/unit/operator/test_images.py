"""images/*: Dockerfiles that follow the house rules (local Debian base, non-root, health
check, exec-form entrypoint), checked as text (tests/images builds and runs them), and the
bookie entrypoint's rack handling, run for real with a stand-in `magnetar`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.operator.schemas import ROOT

IMAGES = ["broker", "bookie", "operator"]


@pytest.mark.parametrize("name", IMAGES)
def test_dockerfile_rules(name: str) -> None:
    text = (ROOT / "images" / name / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and base.group(1) == "magnetar/debian-base:bookworm", (
        "the base built locally from Debian packages (scripts/images/base.sh)"
    )
    assert ":latest" not in text
    # nothing that needs a registry or BuildKit: no frontend image, no COPY --chmod
    assert not re.search(r"^# *syntax=", text, re.M)
    assert "--chmod" not in text
    assert "_gen" not in (ROOT / "images" / name / "Dockerfile.dockerignore").read_text(), (
        "the generated protobuf modules are part of the package"
    )
    final = text.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^USER 10001:10001$", final, re.M), "non-root in the final stage"
    assert "HEALTHCHECK" in final
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", final, re.M)
    assert entry and entry.group(1).startswith('["'), "exec-form entrypoint"
    assert not re.search(r"^ADD ", text, re.M), "COPY, never ADD"
    assert (ROOT / "images" / name / "Dockerfile.dockerignore").is_file()


def test_bookie_entrypoint_adds_the_rack(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "magnetar"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    rack = tmp_path / "racks" / "c-bookie-0"
    rack.parent.mkdir()
    rack.write_text("/rack-b")
    script = str(ROOT / "images/bookie/entrypoint.sh")
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["sh", script, "bookie", "--port=3181"],
        env={**env, "MAGNETAR_RACK_FILE": str(rack)},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    assert out.stdout.split() == ["bookie", "--port=3181", "--rack=/rack-b"]
    missing = subprocess.run(
        ["sh", script, "bookie"],
        env={**env, "MAGNETAR_RACK_FILE": str(tmp_path / "nope"), "MAGNETAR_RACK_WAIT": "0"},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    assert missing.stdout.split() == ["bookie"] and "default rack" in missing.stderr
    plain = subprocess.run(
        ["sh", script, "bookie"], env=env, capture_output=True, text=True, check=True, timeout=10
    )
    assert plain.stdout.split() == ["bookie"]


def test_operator_entrypoint_runs_kopf() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar_operator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "--standalone" in out.stdout and "--namespace" in out.stdout
