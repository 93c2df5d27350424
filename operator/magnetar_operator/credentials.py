"""The reconcile steps of ``spec.tls`` and ``spec.auth``: certificates and tokens in Secrets.

Why: the components mount their certificates and keys from Secrets
(``builders.security``), which must exist and be valid before the pods start, and must be
renewed before they expire. Each step reads what is stored, decides with the pure
functions of ``pki`` and ``tokens``, and writes only what changed (server-side apply), so
running it every resync is cheap and a renewal happens at the first pass inside the margin.

* TLS with a cert-manager issuer: Certificate resources; cert-manager issues and renews.
* TLS without one: the operator's CA (``<cluster>-ca``) signs each component's
  certificate; a certificate is issued again when it is missing, was not signed by the
  current CA, is for other names (bookies added) or expires within ``renewBefore``. The
  processes re-read the files Kubernetes updates in place (docs/security.md): nothing
  restarts.
* Auth: the signing key Secret (generated when absent) and ``<cluster>-tokens`` with the
  operator's, the brokers' and the proxy's super-user tokens, minted again when the key changes.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar_operator import conditions, pki, tokens
from magnetar_operator.builders import proxy, security
from magnetar_operator.builders.common import Owner
from magnetar_operator.conditions import Condition
from magnetar_operator.kube import ApiError, Kube
from magnetar_operator.spec import ClusterSpec


@dataclass(frozen=True)
class Target:
    """The cluster whose Secrets a step reconciles, and where its events go."""

    kube: Kube
    owner: Owner
    spec: ClusterSpec
    event: Callable[[str, str, str], None]


CERT_BEGIN = b"-----BEGIN CERTIFICATE-----"


def _data(secret: Mapping[str, Any] | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}


def _first_cert(bundle: bytes) -> bytes:
    """The first certificate of a PEM bundle (the current CA of ``ca.crt``)."""
    start = bundle.find(CERT_BEGIN)
    second = bundle.find(CERT_BEGIN, start + 1)
    return bundle[start:] if second < 0 else bundle[start:second]


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def _ca(
    run: Target, clock: dt.datetime, renew_before: dt.timedelta
) -> tuple[pki.KeyPair, bytes]:
    """The operator's CA for this cluster and the trust bundle (current CA, plus the
    previous one while it is valid): created the first time, replaced inside the margin."""
    owner, kube = run.owner, run.kube
    name = security.ca_secret_name(owner)
    stored = _data(await kube.get("v1", "Secret", owner.namespace, name))
    bundle = stored.get(security.CA_CERT, b"")
    current = pki.KeyPair(_first_cert(bundle), stored.get(security.CA_KEY, b"")) if bundle else None
    reason = None
    if current is None or not current.key:
        reason = "missing"
    else:
        try:
            if not pki.key_matches(current.cert, current.key):
                reason = "the key does not belong to the certificate"
            elif pki.not_after(current.cert) - clock <= renew_before:
                reason = "expires within the renewal margin"
        except ValueError as err:
            reason = f"unreadable ({err})"
    if reason is None and current is not None:
        return current, bundle
    ca = pki.create_ca(f"{owner.name} CA ({owner.namespace})", now=clock)
    previous = current.cert if current is not None and reason != "missing" else None
    bundle = pki.ca_bundle(ca.cert, previous, now=clock)
    await kube.apply(
        security.secret(owner, "ca", name, {security.CA_CERT: bundle, security.CA_KEY: ca.key})
    )
    run.event("Normal", "CAIssued", f"{name}: a new CA ({reason})")
    return ca, bundle


async def step_tls(run: Target) -> Condition | None:
    spec, owner, kube = run.spec, run.owner, run.kube
    if not spec.tls.enabled:
        return None
    proxy_service = (
        await kube.get("v1", "Service", owner.namespace, proxy.service_name(owner))
        if spec.proxy.enabled
        else None
    )
    subjects = security.subjects(
        owner, spec, proxy_addresses=security.service_addresses(proxy_service)
    )
    if spec.tls.issuer is not None:
        return await _cert_manager(run, subjects)
    clock = now()
    renew_before = dt.timedelta(seconds=spec.tls.renew_before_s)
    ca, bundle = await _ca(run, clock, renew_before)
    earliest: dt.datetime | None = None
    for subject in subjects:
        stored = _data(await kube.get("v1", "Secret", owner.namespace, subject.secret))
        current = (
            pki.KeyPair(stored[security.TLS_CERT], stored[security.TLS_KEY])
            if stored.get(security.TLS_CERT) and stored.get(security.TLS_KEY)
            else None
        )
        reason = pki.why_reissue(
            current, ca_cert=ca.cert, names=subject.names, now=clock, renew_before=renew_before
        )
        if reason is not None:
            current = pki.issue(
                ca,
                common_name=subject.common_name,
                names=subject.names,
                now=clock,
                lifetime=dt.timedelta(seconds=spec.tls.duration_s),
            )
            run.event("Normal", "CertificateIssued", f"{subject.secret}: {reason}")
        assert current is not None
        if reason is not None or stored.get(security.CA_CERT) != bundle:
            await kube.apply(
                security.tls_secret(owner, subject, cert=current.cert, key=current.key, ca=bundle)
            )
        expiry = pki.not_after(current.cert)
        earliest = expiry if earliest is None else min(earliest, expiry)
    assert earliest is not None
    return Condition(
        conditions.CERTIFICATES_READY,
        True,
        "Issued",
        f"{len(subjects)} certificates from the operator's CA; the first expires "
        f"{earliest.strftime('%Y-%m-%dT%H:%M:%SZ')}",
    )


async def _cert_manager(run: Target, subjects: list[security.Subject]) -> Condition:
    owner = run.owner
    try:
        for subject in subjects:
            await run.kube.apply(security.certificate(owner, run.spec, subject))
    except ApiError as e:
        if not e.not_found:
            raise
        return Condition(
            conditions.CERTIFICATES_READY,
            False,
            "CertManagerMissing",
            "spec.tls.issuerRef is set but the Certificate CRD (cert-manager.io/v1) is not "
            "installed",
        )
    waiting = []
    for subject in subjects:
        stored = _data(await run.kube.get("v1", "Secret", owner.namespace, subject.secret))
        if not (stored.get(security.TLS_CERT) and stored.get(security.CA_CERT)):
            waiting.append(subject.secret)
    if waiting:
        return Condition(
            conditions.CERTIFICATES_READY,
            False,
            "WaitingForCertManager",
            f"cert-manager has not issued {', '.join(waiting)} yet",
        )
    return Condition(
        conditions.CERTIFICATES_READY,
        True,
        "Issued",
        f"{len(subjects)} certificates from cert-manager ({run.spec.tls.issuer.name})"
        if run.spec.tls.issuer
        else "issued",
    )


async def step_auth(run: Target) -> tuple[Condition | None, tokens.Verification]:
    """The AuthReady condition and how brokers verify tokens (the key they mount)."""
    spec, owner, kube = run.spec, run.owner, run.kube
    if not spec.auth.enabled:
        return None, tokens.NO_VERIFICATION
    name = security.signing_secret_name(owner, spec)
    stored = await kube.get("v1", "Secret", owner.namespace, name)
    if stored is None:
        data = tokens.generate_secret_key()
        await kube.apply(security.secret(owner, "auth", name, data))
        run.event("Normal", "SigningKeyCreated", f"{name}: a new HS256 token signing key")
    else:
        data = _data(stored)
    try:
        key = tokens.signing_key(data)
    except ValueError as err:
        cond = Condition(conditions.AUTH_READY, False, "SigningKeyInvalid", f"{name}: {err}")
        return cond, tokens.NO_VERIFICATION
    tokens_name = security.tokens_secret_name(owner)
    have = _data(await kube.get("v1", "Secret", owner.namespace, tokens_name))
    want = dict(have)
    for item, role in security.minted_tokens(spec):
        if not tokens.valid_for(have.get(item, b"").decode(), key, role):
            want[item] = tokens.mint(key, role).encode()
    if want != have:
        await kube.apply(security.secret(owner, "auth", tokens_name, want))
        run.event("Normal", "TokensIssued", f"{tokens_name}: super-user tokens minted")
    cond = Condition(
        conditions.AUTH_READY,
        True,
        "TokensIssued",
        f"{key.algorithm} signing key {name}; tokens in {tokens_name}",
    )
    return cond, key.verification
