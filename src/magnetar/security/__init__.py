"""Pulsar's security model: TLS contexts, token keys, authentication providers and the
authorization rules, with no I/O of a broker in them (docs/security.md).

Why a package of its own: the broker's two listeners (binary protocol and HTTP), the proxy,
``magnetar tokens`` and ``magnetar admin`` all need the same pieces, and none of them should
carry a second copy of token or certificate handling.
"""
