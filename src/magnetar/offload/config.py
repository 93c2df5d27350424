"""Where offloaded ledgers go and how the offloader talks to it.

Why: one validated value carries everything the S3 client, the offloader and the reader
need, and it is built either directly (tests, the standalone) or from Pulsar's broker.conf
names (:meth:`S3Config.from_properties`), so a Pulsar configuration keeps its meaning.

Credentials, in this order: keys given explicitly (``access_key_id``/``secret_access_key``),
else a credentials file in the AWS shared-credentials format (``credentials_file``, section
``profile`` or ``default``), else boto3's standard chain (the ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` variables, ``AWS_SHARED_CREDENTIALS_FILE``,
``~/.aws/credentials``, instance roles).
"""

from __future__ import annotations

import configparser
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.offload.errors import OffloadConfigError

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB
"""S3's smallest multipart part (all but the last): the smallest block."""
MAX_PART_SIZE = 5 * 1024 * MiB

DRIVERS = ("aws-s3", "S3")
"""Pulsar's names for its S3 offload drivers: ``aws-s3`` for AWS, ``S3`` for an
S3-compatible store at ``endpoint_url``; both are served by boto3 here."""

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class S3Config:
    bucket: str
    driver: str = "aws-s3"
    region: str = "us-east-1"
    endpoint_url: str | None = None
    """None: AWS's endpoint for ``region``; else e.g. ``http://127.0.0.1:9000``."""
    path_style: bool | None = None
    """True: ``endpoint/bucket/key``; False: ``bucket.endpoint/key``; None: boto3 decides."""
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    credentials_file: str | None = None
    profile: str | None = None
    key_prefix: str = ""
    """Prepended to every object key (e.g. ``cluster-a/``) so clusters can share a bucket."""
    block_size: int = 64 * MiB
    """Target size of a data block = one multipart part (Pulsar's default 64 MiB)."""
    read_cache_bytes: int = 128 * MiB
    """Bound of the readers' block cache (shared by every offloaded ledger read)."""
    upload_concurrency: int = 2
    """Parts uploaded at once while the next block is being filled."""
    max_connections: int = 8
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = 3
    """boto3's attempts per request (retries with backoff on throttling and 5xx)."""
    verify_etag: bool = True
    """Compare S3's ETags with the MD5s of what was sent (off for stores whose ETags are not
    MD5s, e.g. with SSE-KMS)."""

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise OffloadConfigError(
                f"managedLedgerOffloadDriver must be one of {', '.join(DRIVERS)}, "
                f"got {self.driver!r}"
            )
        if not _BUCKET.match(self.bucket or "") or ".." in self.bucket:
            raise OffloadConfigError(
                f"bucket must be an S3 bucket name (3-63 characters: a-z, 0-9, '.', '-'), "
                f"got {self.bucket!r}"
            )
        if self.endpoint_url is not None:
            url = urllib.parse.urlsplit(self.endpoint_url)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise OffloadConfigError(
                    f"endpoint must be an http(s) URL, got {self.endpoint_url!r}"
                )
        elif self.driver == "S3":
            raise OffloadConfigError("driver S3 (S3-compatible store) needs an endpoint URL")
        if not self.region:
            raise OffloadConfigError("region must not be empty")
        if not MIN_PART_SIZE <= self.block_size <= MAX_PART_SIZE:
            raise OffloadConfigError(
                f"block size must be between {MIN_PART_SIZE} (S3's smallest multipart part) "
                f"and {MAX_PART_SIZE} bytes, got {self.block_size}"
            )
        if self.read_cache_bytes < 0:
            raise OffloadConfigError(f"read cache bytes must be >= 0, got {self.read_cache_bytes}")
        for name in ("upload_concurrency", "max_connections", "max_attempts"):
            if getattr(self, name) < 1:
                raise OffloadConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise OffloadConfigError("S3 timeouts must be > 0")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise OffloadConfigError("give both the access key id and the secret access key")
        if self.key_prefix.startswith("/"):
            raise OffloadConfigError(f"key prefix must not start with '/': {self.key_prefix!r}")

    def credentials(self) -> Credentials | None:
        """Explicit credentials (given, or read from ``credentials_file``); None: boto3's
        standard chain finds them."""
        if self.access_key_id is not None and self.secret_access_key is not None:
            return Credentials(self.access_key_id, self.secret_access_key, self.session_token)
        if self.credentials_file is None:
            return None
        return read_credentials_file(self.credentials_file, self.profile or "default")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> S3Config:
        """From Pulsar's broker.conf names (``s3ManagedLedgerOffload*`` or the generic
        ``managedLedgerOffload*``), plus Magnetar's ``magnetarOffload*`` for what Pulsar's
        S3 driver configures elsewhere."""

        def get(*names: str) -> str | None:
            for n in names:
                v = props.get(n)
                if v is not None and str(v).strip() != "":
                    return str(v).strip()
            return None

        def integer(value: str | None, name: str, default: int) -> int:
            if value is None:
                return default
            try:
                return int(value)
            except ValueError:
                raise OffloadConfigError(f"{name} must be an integer, got {value!r}") from None

        bucket = get("s3ManagedLedgerOffloadBucket", "managedLedgerOffloadBucket")
        if bucket is None:
            raise OffloadConfigError("s3ManagedLedgerOffloadBucket is not set")
        path_style = get("magnetarOffloadPathStyle")
        if path_style is not None and path_style.lower() not in ("true", "false"):
            raise OffloadConfigError(
                f"magnetarOffloadPathStyle must be true or false: {path_style}"
            )
        return cls(
            bucket=bucket,
            driver=get("managedLedgerOffloadDriver") or "aws-s3",
            region=get("s3ManagedLedgerOffloadRegion", "managedLedgerOffloadRegion") or "us-east-1",
            endpoint_url=get(
                "s3ManagedLedgerOffloadServiceEndpoint", "managedLedgerOffloadServiceEndpoint"
            ),
            path_style=None if path_style is None else path_style.lower() == "true",
            credentials_file=get("magnetarOffloadCredentialsFile"),
            profile=get("magnetarOffloadCredentialsProfile"),
            key_prefix=get("magnetarOffloadKeyPrefix") or "",
            block_size=integer(
                get(
                    "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
                    "managedLedgerOffloadMaxBlockSizeInBytes",
                ),
                "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
                64 * MiB,
            ),
            read_cache_bytes=integer(
                get("magnetarOffloadReadCacheBytes"), "magnetarOffloadReadCacheBytes", 128 * MiB
            ),
            connect_timeout_s=integer(
                get("magnetarOffloadConnectTimeoutMs"), "magnetarOffloadConnectTimeoutMs", 5000
            )
            / 1000,
            read_timeout_s=integer(
                get("magnetarOffloadReadTimeoutMs"), "magnetarOffloadReadTimeoutMs", 30000
            )
            / 1000,
            max_attempts=integer(
                get("magnetarOffloadMaxAttempts"), "magnetarOffloadMaxAttempts", 3
            ),
        )


def read_credentials_file(path: str, profile: str) -> Credentials:
    """Keys of ``profile`` in an AWS shared-credentials file (INI: ``aws_access_key_id``,
    ``aws_secret_access_key``, optional ``aws_session_token``)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as err:
        raise OffloadConfigError(f"cannot read credentials file {path}: {err}") from err
    except configparser.Error as err:
        raise OffloadConfigError(f"credentials file {path} is not INI: {err}") from err
    if not parser.has_section(profile):
        raise OffloadConfigError(f"credentials file {path} has no [{profile}] section")
    section = parser[profile]
    key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
    if not key or not secret:
        raise OffloadConfigError(
            f"credentials file {path} [{profile}] needs aws_access_key_id and aws_secret_access_key"
        )
    return Credentials(key.strip(), secret.strip(), (section.get("aws_session_token") or None))
