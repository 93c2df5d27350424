"""The ``OffloadReady`` check: write, read back and delete a probe object in the offload bucket.

Why a module of its own: a PulsarCluster's offload is ready only when S3 accepts what the
brokers will do with it -- the endpoint answers, the credentials are accepted and the
bucket exists. The operator imports nothing of the data plane (an import-linter contract),
so this is its own small boto3 check, the same steps as the brokers'
``magnetar.offload.offloader.Offloader.probe``. Failures carry S3's own error code and
message, which become the condition's message.

The credentials come from the PulsarCluster's ``spec.offload.credentialsSecret``, whose keys
the broker pods receive as environment variables: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and optionally ``AWS_SESSION_TOKEN``.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
OPTIONAL_KEY = "AWS_SESSION_TOKEN"
PROBE_PREFIX = "magnetar-operator-probe/"


class ProbeError(Exception):
    """The probe failed; the message says at which step and what S3 answered."""


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Target:
    endpoint: str | None
    """None: AWS; else an S3-compatible store (path-style URLs)."""
    bucket: str
    region: str
    credentials: Credentials
    timeout_s: float = 5.0


def credentials_of(secret: Mapping[str, Any]) -> Credentials:
    """The AWS keys of a Secret object (``data`` base64, or ``stringData``); ValueError
    naming what is missing or malformed."""
    data: dict[str, str] = {}
    for k, v in (secret.get("data") or {}).items():
        try:
            data[k] = base64.b64decode(v, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError(f"Secret key {k} is not base64 text") from None
    data.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    name = (secret.get("metadata") or {}).get("name", "?")
    missing = [k for k in KEYS if not data.get(k)]
    if missing:
        raise ValueError(f"Secret {name!r} lacks {', '.join(missing)}")
    return Credentials(data[KEYS[0]], data[KEYS[1]], data.get(OPTIONAL_KEY) or None)


def _client(target: Target) -> Any:
    c = target.credentials
    return boto3.session.Session().client(
        "s3",
        endpoint_url=target.endpoint,
        region_name=target.region,
        aws_access_key_id=c.access_key_id,
        aws_secret_access_key=c.secret_access_key,
        aws_session_token=c.session_token,
        config=botocore.config.Config(
            s3={"addressing_style": "path" if target.endpoint else "auto"},
            connect_timeout=target.timeout_s,
            read_timeout=target.timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
        ),
    )


def _why(err: Exception) -> str:
    if isinstance(err, botocore.exceptions.ClientError):
        error = err.response.get("Error", {})
        code = error.get("Code") or err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"S3 answered {code}: {error.get('Message') or code}"
    return f"{type(err).__name__}: {err}"


def probe(target: Target) -> None:
    """Put, get (compared) and delete one probe object; ProbeError on any failure (blocking:
    run it in a thread)."""
    where = f"s3://{target.bucket}"
    key = f"{PROBE_PREFIX}{uuid.uuid4()}"
    body = f"magnetar operator offload probe {key}".encode()
    try:
        s3 = _client(target)
    except (botocore.exceptions.BotoCoreError, ValueError) as err:
        raise ProbeError(f"S3 client for {target.endpoint or 'AWS'}: {_why(err)}") from err
    step = "write"
    try:
        s3.put_object(Bucket=target.bucket, Key=key, Body=body)
        step = "read back"
        got = s3.get_object(Bucket=target.bucket, Key=key)["Body"].read()
        if got != body:
            raise ProbeError(f"probe {where}/{key} read back differs from what was written")
        step = "delete"
        s3.delete_object(Bucket=target.bucket, Key=key)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
        raise ProbeError(f"probe {step} of {where}/{key}: {_why(err)}") from err
