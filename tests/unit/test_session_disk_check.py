"""The session's disk check (tests/conftest.py): a disk already past the bookies' read-only
threshold stops the run at once with the cause named, instead of every producing suite
waiting for writable bookies until its timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.conftest as root_conftest


def test_a_disk_past_the_read_only_threshold_stops_the_session(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    over = root_conftest.read_only_threshold() + 0.01
    monkeypatch.setattr(root_conftest.disk, "used_fraction", lambda path: over)
    with pytest.raises(pytest.exit.Exception) as stopped:
        root_conftest.pytest_sessionstart(request.session)
    assert "bookies are read-only above 95%" in str(stopped.value)
    assert "free space" in str(stopped.value)


def test_a_disk_with_room_lets_the_session_run(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(root_conftest.disk, "used_fraction", lambda path: seen.append(path) or 0.5)
    root_conftest.pytest_sessionstart(request.session)
    assert seen  # the check measured, and let the session go on
