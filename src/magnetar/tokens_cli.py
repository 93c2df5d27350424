"""``magnetar tokens``: keys and tokens for token authentication, as ``pulsar tokens``.

Verbs and flags follow ``pulsar tokens`` so scripts written for it work:
``create-secret-key [-a HS256] [-o FILE] [-b]``, ``create-key-pair [-a RS256]
--output-private-key F --output-public-key F``, ``create (--secret-key K | --private-key K)
--subject ROLE [--expiry-time 1y] [-a ALG] [--headers k=v,...]``, ``show (-i TOKEN | -f FILE)``
and ``validate (--secret-key K | --public-key K) (-i TOKEN | -f FILE)``. Keys are given as
the broker takes them (``file:///path``, ``data:...``, a path or base64: tokenSecretKey /
tokenPublicKey); the signing and checking are PyJWT's (:mod:`magnetar.security.tokens`).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from pathlib import Path

from magnetar.security import keys, tokens

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def expiry(text: str) -> int:
    """``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``1y``, or plain seconds."""
    m = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30m, 12h, 1d, 1y)")
    return int(m.group(1)) * _UNITS_S[m.group(2) or "s"]


def build_parser(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("create-secret-key", help="a random secret key (tokenSecretKey)")
    p.add_argument("-a", "--signature-algorithm", default="HS256", choices=tokens.SECRET_ALGORITHMS)
    p.add_argument("-o", "--output", help="write the key to this file (else stdout)")
    p.add_argument("-b", "--base64", action="store_true", help="base64-encode the key")
    p = verbs.add_parser("create-key-pair", help="a private/public key pair (tokenPublicKey)")
    p.add_argument(
        "-a",
        "--signature-algorithm",
        default="RS256",
        choices=tokens.RSA_ALGORITHMS + tokens.EC_ALGORITHMS,
    )
    p.add_argument("--output-private-key", required=True)
    p.add_argument("--output-public-key", required=True)
    p = verbs.add_parser("create", help="a signed token for a role")
    key = p.add_mutually_exclusive_group(required=True)
    key.add_argument("-sk", "--secret-key", help="file:///path, data:..., path or base64")
    key.add_argument("-pk", "--private-key", help="file:///path, data:..., path or base64")
    p.add_argument("-s", "--subject", required=True, help="the role")
    p.add_argument("-e", "--expiry-time", type=expiry, help="e.g. 1y, 30d, 12h (none: never)")
    p.add_argument("-a", "--signature-algorithm", default=None)
    p.add_argument("--headers", default="", help="extra JWT headers: k=v,k2=v2")
    for name, help_text in (("show", "a token's header and claims"), ("validate", "check one")):
        p = verbs.add_parser(name, help=help_text)
        given = p.add_mutually_exclusive_group()
        given.add_argument("-i", "--token", help="the token")
        given.add_argument("-f", "--token-file", help="a file holding the token")
        if name == "validate":
            key = p.add_mutually_exclusive_group(required=True)
            key.add_argument("-sk", "--secret-key")
            key.add_argument("-pk", "--public-key")


def _write(path: str, data: bytes) -> None:
    target = Path(path)
    target.write_bytes(data)
    target.chmod(0o600)


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token).strip()
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return sys.stdin.read().strip()


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (ValueError, OSError) as err:
        print(f"magnetar tokens: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.verb == "create-secret-key":
        secret = tokens.create_secret_key(args.signature_algorithm)
        data = base64.b64encode(secret) if args.base64 else secret
        if args.output:
            _write(args.output, data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return 0
    if args.verb == "create-key-pair":
        private, public = tokens.create_key_pair(args.signature_algorithm)
        _write(args.output_private_key, private)
        Path(args.output_public_key).write_bytes(public)
        return 0
    if args.verb == "create":
        headers = dict(item.split("=", 1) for item in args.headers.split(",") if "=" in item)
        signing: bytes | tokens.PrivateKey
        if args.secret_key:
            signing = keys.read(args.secret_key, what="--secret-key")
        else:
            signing = tokens.load_private_key(keys.read(args.private_key, what="--private-key"))
        print(
            tokens.create(
                subject=args.subject,
                key=signing,
                algorithm=args.signature_algorithm,
                expires_in_s=args.expiry_time,
                headers=headers or None,
            )
        )
        return 0
    token = _token(args)
    if args.verb == "show":
        header, claims = tokens.show(token)
        print(json.dumps(header))
        print("---")
        print(json.dumps(claims))
        return 0
    checking: bytes | tokens.PublicKey
    if args.secret_key:
        checking = keys.read(args.secret_key, what="--secret-key")
    else:
        checking = tokens.load_public_key(keys.read(args.public_key, what="--public-key"))
    try:
        role, _ = tokens.Validator(checking).validate(token)
    except tokens.TokenError as err:
        print(f"magnetar tokens: invalid: {err}", file=sys.stderr)
        return 1
    _, claims = tokens.show(token)
    print(json.dumps(claims))
    return 0 if role else 1
