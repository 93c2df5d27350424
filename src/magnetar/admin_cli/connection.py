"""Where ``magnetar admin`` connects and as whom: flags, then ``client.conf``, as pulsar-admin.

Why this module exists: a user of a secured cluster configures pulsar-admin once, in a
``client.conf`` (``webServiceUrl``, ``authPlugin``, ``authParams``,
``tlsTrustCertsFilePath``, ``tlsAllowInsecureConnection``, ``tlsEnableHostnameVerification``)
named by ``--client-conf`` or the ``PULSAR_CLIENT_CONF`` environment variable, and overrides
it with ``--auth-plugin``, ``--auth-params``, ``--tls-trust-cert-path``,
``--tls-allow-insecure`` and ``--tls-enable-hostname-verification``. The same file works for
both tools. The client is the client layer's (:mod:`magnetar.client.admin`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Final

from magnetar.admin_cli.client import AdminCliError, Client

DEFAULT_URL: Final = "http://127.0.0.1:8080"
_CONF_KEYS: Final = {
    "webServiceUrl": "admin_url",
    "authPlugin": "auth_plugin",
    "authParams": "auth_params",
    "tlsTrustCertsFilePath": "tls_trust_cert_path",
    "tlsAllowInsecureConnection": "tls_allow_insecure",
    "tlsEnableHostnameVerification": "tls_enable_hostname_verification",
}
"""client.conf keys this tool uses; the file's other keys (brokerServiceUrl, ...) are for
clients and are left alone, as pulsar-admin does."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--client-conf",
        default=None,
        metavar="FILE",
        help="a Pulsar client.conf (default: $PULSAR_CLIENT_CONF if set)",
    )
    parser.add_argument("--auth-plugin", default=None, help="e.g. ...AuthenticationToken, token")
    parser.add_argument("--auth-params", default=None, help="e.g. token:<jwt>, file:///path")
    parser.add_argument("--tls-trust-cert-path", default=None, help="CA file to verify https")
    parser.add_argument(
        "--tls-allow-insecure",
        action="store_const",
        const="true",
        default=None,
        help="do not verify the broker's certificate",
    )
    parser.add_argument(
        "--tls-enable-hostname-verification",
        action="store_const",
        const="true",
        default=None,
        help="check the broker certificate's host name",
    )


def read_client_conf(path: Path) -> dict[str, str]:
    """The keys of a client.conf that this tool uses (Java properties: key=value lines)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise AdminCliError(f"cannot read the client configuration {path}: {err}", 2) from None
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        dest = _CONF_KEYS.get(key.strip())
        if dest is not None and value.strip():
            out[dest] = value.strip()
    return out


def settings(args: argparse.Namespace) -> dict[str, str]:
    """The connection settings: flags over the client.conf over the defaults."""
    conf_path = args.client_conf or os.environ.get("PULSAR_CLIENT_CONF")
    merged = read_client_conf(Path(conf_path)) if conf_path else {}
    for dest in _CONF_KEYS.values():
        value = getattr(args, dest, None)
        if value is not None:
            merged[dest] = value
    merged.setdefault("admin_url", DEFAULT_URL)
    return merged


def client(args: argparse.Namespace) -> Client:
    """The HTTP client the command line and client.conf describe."""
    conf = settings(args)
    return Client.of(
        conf["admin_url"],
        auth_plugin=conf.get("auth_plugin"),
        auth_params=conf.get("auth_params"),
        tls_trust_certs_file=conf.get("tls_trust_cert_path"),
        tls_allow_insecure=_true(conf.get("tls_allow_insecure")),
        tls_verify_hostname=_true(conf.get("tls_enable_hostname_verification")),
    )


def _true(value: str | None) -> bool:
    return (value or "false").strip().lower() == "true"
