"""The ``magnetar`` command: standalone, broker, bookie, admin, perf.

Each subcommand parses its flags here and hands over to the component's launcher.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from magnetar import __version__


def _standalone(args: argparse.Namespace) -> int:
    print(
        "magnetar standalone: the broker is not built yet (see the brokers issue); "
        "the metadata store and storage layers are under construction.",
        file=sys.stderr,
    )
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magnetar", description=__doc__)
    parser.add_argument("--version", action="version", version=f"magnetar {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("standalone", help="broker + bookie + embedded metadata in one process")
    p.add_argument("--data-dir", default="data/standalone")
    p.add_argument("--port", type=int, default=6650)
    p.add_argument("--http-port", type=int, default=8080)
    p.add_argument("--advertised-address", default="127.0.0.1")
    p.set_defaults(func=_standalone)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
