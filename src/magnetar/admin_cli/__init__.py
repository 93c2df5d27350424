"""``magnetar admin``: a pulsar-admin-like command line for the admin REST API v2.

An HTTP client only -- it imports nothing of the broker (a unit test checks it): verbs and
flags follow pulsar-admin where they exist (``tenants create -r ops``,
``namespaces set-retention public/ns --time 10m --size 1G``,
``topics create-partitioned-topic t -p 4``, ``topics reset-cursor t -s sub --time 1h`` ...).
Output is readable text (tables) by default, JSON with ``--output json``; an HTTP error prints
``magnetar admin: <status> <reason>`` and exits 1, a bad argument exits 2.

Modules: :mod:`.commands` (the verbs: arguments -> request), :mod:`.functions` (the
``functions`` verbs, admin API v3), :mod:`.client` (HTTP),
:mod:`.convert` (times, sizes, names), :mod:`.render` (text output).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from magnetar.admin_cli import commands, connection, render
from magnetar.admin_cli import functions as functions  # registers the functions verbs
from magnetar.admin_cli.client import AdminCliError

__all__ = ["build_parser", "main", "run"]

build_parser = commands.build_parser


def run(args: argparse.Namespace) -> int:
    """Run the parsed command: print the answer, return the exit status."""
    try:
        request = commands.request_for(args)
        result = connection.client(args).call(request)
    except AdminCliError as err:
        print(f"magnetar admin: {err}", file=sys.stderr)
        return err.status
    text = render.render(result, args.output)
    if text:
        print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="magnetar admin", description=__doc__)
    build_parser(parser)
    return run(parser.parse_args(argv))
