"""The secured standalone of the security suites (tests/support/secured.py), one per module,
set up as the official Python client's tests set up Apache Pulsar.

``MAGNETAR_SECURITY_AGAINST=pulsar`` (``make test-security-pulsar``) runs the same suites
against Apache Pulsar standalone configured with the same keys, to check that Magnetar's
answers are Pulsar's; tests of what only Magnetar has (its log lines, its TLS counters)
skip there with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.procs import started
from tests.support.secured import Secured, SecuredBase, SecuredPulsar

AGAINST = os.environ.get("MAGNETAR_SECURITY_AGAINST", "magnetar")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBase]:
    base = tmp_path_factory.mktemp("secured")
    target: SecuredBase = SecuredPulsar(base) if AGAINST == "pulsar" else Secured(base)
    with started(target) as proc:  # type: ignore[type-var]
        proc.set_up_like_the_client_tests()
        yield proc


def magnetar_only(reason: str) -> pytest.MarkDecorator:
    """For a test of something Apache Pulsar does not have or does differently (documented
    in docs/security.md)."""
    return pytest.mark.skipif(AGAINST == "pulsar", reason=f"Magnetar only: {reason}")
