"""The metadata store: one async interface, two backends (etcd and embedded).

Everything durable that is not entry data lives here. Use :func:`open_store`
to get a backend from a URL; program against :class:`api.MetadataStore`. Where each kind of
metadata lives is in :mod:`magnetar.metadata.keys` (and docs/metadata.md).

URLs:

``etcd://host:port[,host:port...][?timeout=SECONDS][&tls=true]``
    etcd v3 over gRPC; ``timeout`` bounds every operation (default 5 s); ``tls=true``
    connects over TLS (Pulsar's ``etcd:https://...`` becomes this), trusting the system's
    roots unless ``open_store`` is given TLS settings (which imply TLS: trusted CAs, a client
    certificate for etcd's ``--client-cert-auth``).
``embedded:///absolute/dir[?history=REVISIONS]`` or ``embedded:relative/dir``
    the in-process store kept in that directory; ``history`` is how many revisions of
    watch history are kept (default 100000).
"""

from __future__ import annotations

import urllib.parse

from magnetar.common import grpctls
from magnetar.metadata import api

__all__ = ["api", "open_store"]


def _query(url: str, query: str, allowed: set[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, values in urllib.parse.parse_qs(
        query, keep_blank_values=True, strict_parsing=bool(query)
    ).items():
        if name not in allowed:
            raise ValueError(f"metadata store URL {url!r}: unknown parameter {name!r}")
        if len(values) != 1:
            raise ValueError(f"metadata store URL {url!r}: parameter {name!r} given twice")
        params[name] = values[0]
    return params


def _positive(url: str, name: str, text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"metadata store URL {url!r}: {name}={text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"metadata store URL {url!r}: {name} must be positive, got {text!r}")
    return value


def parse_etcd_endpoints(url: str, hosts: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` -> [(host, port)]; IPv6 hosts go in brackets."""
    endpoints: list[tuple[str, int]] = []
    for item in hosts.split(","):
        item = item.strip()
        if item.startswith("["):
            host, sep, rest = item[1:].partition("]")
            port_text = rest[1:] if sep and rest.startswith(":") else ""
        else:
            host, _, port_text = item.rpartition(":")
        if not host or not port_text:
            raise ValueError(f"metadata store URL {url!r}: endpoint {item!r} must be host:port")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"metadata store URL {url!r}: bad port in {item!r}")
        endpoints.append((host, int(port_text)))
    return endpoints


async def open_store(url: str, *, tls: grpctls.ClientTlsConfig | None = None) -> api.MetadataStore:
    """Open the metadata store named by ``url`` (see the module docstring); ``tls``: how to
    speak TLS to etcd.

    Raises ValueError naming the problem for a malformed URL or unusable TLS files (TLS
    settings for an embedded store included), StoreUnavailableError when etcd does not answer
    within the deadline (a refused TLS handshake included).
    """
    if not isinstance(url, str) or ":" not in url:
        raise ValueError(f"metadata store URL {url!r}: expected etcd://host:port or embedded:<dir>")
    scheme, _, rest = url.partition(":")
    rest, _, query = rest.partition("?")
    if scheme == "etcd":
        if not rest.startswith("//"):
            raise ValueError(f"metadata store URL {url!r}: expected etcd://host:port[,...]")
        hosts, _, path = rest[2:].partition("/")
        if path:
            raise ValueError(f"metadata store URL {url!r}: an etcd URL takes no path")
        if not hosts:
            raise ValueError(f"metadata store URL {url!r}: no etcd endpoint given")
        params = _query(url, query, {"timeout", "tls"})
        from magnetar.metadata import etcd

        endpoints = [etcd.Endpoint(h, p) for h, p in parse_etcd_endpoints(url, hosts)]
        timeout = _positive(url, "timeout", params.get("timeout", str(etcd.DEFAULT_TIMEOUT)), float)
        use_tls = params.get("tls", "false")
        if use_tls not in ("true", "false"):
            raise ValueError(f"metadata store URL {url!r}: tls must be true or false")
        if use_tls == "true" and tls is None:
            tls = grpctls.ClientTlsConfig()
        if use_tls == "false" and "tls" in params and tls is not None:
            raise ValueError(f"metadata store URL {url!r} says tls=false but TLS files are set")
        client_tls = tls.open() if tls is not None else None
        return await etcd.EtcdStore.open(endpoints, op_timeout=timeout, tls=client_tls)
    if scheme == "embedded":
        if tls is not None:
            raise ValueError(
                f"metadata store URL {url!r}: TLS settings apply to etcd, not an embedded store"
            )
        if rest.startswith("//"):
            authority, slash, path = rest[2:].partition("/")
            if authority:
                raise ValueError(
                    f"metadata store URL {url!r}: use embedded:///absolute/dir or "
                    "embedded:relative/dir (no host)"
                )
            directory = slash + path
        else:
            directory = rest
        directory = urllib.parse.unquote(directory)
        if not directory or directory == "/":
            raise ValueError(f"metadata store URL {url!r}: no directory given")
        params = _query(url, query, {"history"})
        from magnetar.metadata import embedded

        history = embedded.DEFAULT_HISTORY
        if "history" in params:
            history = int(_positive(url, "history", params["history"], int))
        return await embedded.EmbeddedStore.open(directory, history=history)
    raise ValueError(
        f"metadata store URL {url!r}: unknown scheme {scheme!r} (expected etcd or embedded)"
    )
