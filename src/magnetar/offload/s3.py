"""The S3 calls the offloader makes, through boto3, run off the event loop.

Why: boto3 is synchronous; every call runs in this client's own thread pool (bounded by
``max_connections``, which is also botocore's connection-pool size) so the broker's event
loop never blocks on S3. botocore's exceptions are translated here, once, into
:mod:`magnetar.offload.errors` with the bucket/key and S3's own code and message.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import boto3
import botocore.config
import botocore.exceptions

from magnetar.offload.config import S3Config
from magnetar.offload.errors import (
    NoSuchBucketError,
    ObjectNotFoundError,
    OffloadError,
    S3AccessDeniedError,
    S3RequestError,
    S3UnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client as Boto3S3Client

T = TypeVar("T")

_DENIED = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "AllAccessDisabled",
        "InvalidSecurity",
    }
)
_UNAVAILABLE = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "XMinioServerNotInitialized",
        "XMinioStorageFull",
        "503",
        "500",
    }
)
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})


def _translate(err: BaseException, what: str) -> OffloadError:
    if isinstance(err, OffloadError):
        return err
    if isinstance(err, botocore.exceptions.ClientError):
        error = err.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "") or code)
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        text = f"{what}: S3 answered {code or status}: {message}"
        if code == "NoSuchBucket":
            return NoSuchBucketError(text)
        if code in _DENIED or status == 403:
            return S3AccessDeniedError(text)
        if code in _NOT_FOUND:
            return ObjectNotFoundError(text)
        if code in _UNAVAILABLE or status >= 500:
            return S3UnavailableError(text)
        return S3RequestError(text)
    if isinstance(
        err, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return S3AccessDeniedError(f"{what}: no S3 credentials found: {err}")
    if isinstance(
        err,
        botocore.exceptions.ConnectionError
        | botocore.exceptions.HTTPClientError
        | botocore.exceptions.ReadTimeoutError,
    ):
        return S3UnavailableError(f"{what}: S3 unreachable or too slow: {err}")
    if isinstance(err, botocore.exceptions.BotoCoreError):
        return S3RequestError(f"{what}: {err}")
    if isinstance(err, OSError):
        return S3UnavailableError(f"{what}: {err}")
    raise err


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    metadata: Mapping[str, str]


def md5_b64(data: bytes | bytearray | memoryview) -> tuple[bytes, str]:
    """(MD5 digest, its base64 for Content-MD5)."""
    digest = hashlib.md5(data, usedforsecurity=False).digest()
    return digest, base64.b64encode(digest).decode()


class S3Client:
    """One bucket, as the offloader uses it."""

    def __init__(self, config: S3Config) -> None:
        self.config = config
        self.bucket = config.bucket
        creds = config.credentials()
        session = boto3.session.Session(
            aws_access_key_id=creds.access_key_id if creds else None,
            aws_secret_access_key=creds.secret_access_key if creds else None,
            aws_session_token=creds.session_token if creds else None,
            region_name=config.region,
        )
        style: Literal["path", "virtual", "auto"] = (
            "auto" if config.path_style is None else "path" if config.path_style else "virtual"
        )
        self._client: Boto3S3Client = session.client(
            "s3",
            endpoint_url=config.endpoint_url,
            config=botocore.config.Config(
                region_name=config.region,
                connect_timeout=config.connect_timeout_s,
                read_timeout=config.read_timeout_s,
                retries={"max_attempts": config.max_attempts, "mode": "standard"},
                max_pool_connections=config.max_connections,
                s3={"addressing_style": style},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.max_connections, thread_name_prefix="offload-s3"
        )
        self._closed = False

    async def _run(self, what: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
        if self._closed:
            raise S3RequestError(f"{what}: the S3 client is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, **kwargs))
        except Exception as err:
            raise _translate(err, what) from err

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    # --- objects --------------------------------------------------------------------------

    async def head_bucket(self) -> None:
        """Raises NoSuchBucketError, S3AccessDeniedError, S3UnavailableError..."""
        try:
            await self._run(f"bucket {self.bucket}", self._client.head_bucket, Bucket=self.bucket)
        except ObjectNotFoundError as err:  # HEAD answers a bare 404: no error code
            raise NoSuchBucketError(f"bucket {self.bucket} does not exist ({err})") from err

    async def put(self, key: str, body: bytes, metadata: Mapping[str, str] | None = None) -> str:
        """Store ``body`` (with Content-MD5, so S3 rejects a damaged upload); its ETag."""
        _, b64 = md5_b64(body)
        out = await self._run(
            f"put {self._where(key)}",
            self._client.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentMD5=b64,
            Metadata=dict(metadata or {}),
        )
        return str(out.get("ETag", "")).strip('"')

    async def head(self, key: str) -> ObjectInfo:
        out = await self._run(
            f"head {self._where(key)}", self._client.head_object, Bucket=self.bucket, Key=key
        )
        return ObjectInfo(
            key,
            int(out.get("ContentLength", 0)),
            str(out.get("ETag", "")).strip('"'),
            dict(out.get("Metadata", {})),
        )

    async def get(self, key: str, first: int | None = None, last: int | None = None) -> bytes:
        """The object, or bytes ``first..last`` (inclusive) of it with a ranged GET."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        what = f"get {self._where(key)}"
        if first is not None and last is not None:
            kwargs["Range"] = f"bytes={first}-{last}"
            what += f" bytes {first}-{last}"

        def fetch() -> bytes:
            out = self._client.get_object(**kwargs)
            body = out["Body"]
            try:
                return body.read()
            finally:
                body.close()

        data = await self._run(what, fetch)
        if first is not None and last is not None and len(data) != last - first + 1:
            raise S3UnavailableError(
                f"{what}: got {len(data)} bytes instead of {last - first + 1} (cut short)"
            )
        return data

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (missing ones are fine); raises when S3 refused any."""
        for start in range(0, len(keys), 1000):
            chunk = list(keys[start : start + 1000])
            out = await self._run(
                f"delete {len(chunk)} objects in s3://{self.bucket}",
                self._client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
            )
            errors = out.get("Errors", [])
            if errors:
                e = errors[0]
                raise S3RequestError(
                    f"delete {self._where(str(e.get('Key')))}: S3 answered "
                    f"{e.get('Code')}: {e.get('Message')} ({len(errors)} keys refused)"
                )

    async def list_keys(self, prefix: str) -> list[str]:
        def run() -> list[str]:
            found: list[str] = []
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                found.extend(str(o["Key"]) for o in page.get("Contents", []))
            return found

        return await self._run(f"list s3://{self.bucket}/{prefix}", run)

    # --- multipart ------------------------------------------------------------------------

    async def start_multipart(self, key: str, metadata: Mapping[str, str]) -> str:
        out = await self._run(
            f"start multipart upload {self._where(key)}",
            self._client.create_multipart_upload,
            Bucket=self.bucket,
            Key=key,
            Metadata=dict(metadata),
        )
        return str(out["UploadId"])

    async def upload_part(
        self, key: str, upload_id: str, number: int, body: bytes
    ) -> tuple[str, bytes]:
        """Upload part ``number`` (Content-MD5 checked by S3); (ETag, MD5 digest)."""

        def run() -> tuple[str, bytes]:
            digest, b64 = md5_b64(body)
            out = self._client.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ContentMD5=b64,
            )
            return str(out.get("ETag", "")).strip('"'), digest

        return await self._run(f"upload part {number} of {self._where(key)}", run)

    async def complete_multipart(self, key: str, upload_id: str, etags: Sequence[str]) -> str:
        out = await self._run(
            f"complete multipart upload {self._where(key)}",
            self._client.complete_multipart_upload,
            Bucket=self.bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={
                "Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]
            },
        )
        return str(out.get("ETag", "")).strip('"')

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            await self._run(
                f"abort multipart upload {self._where(key)}",
                self._client.abort_multipart_upload,
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
            )
        except ObjectNotFoundError:
            pass  # already completed or aborted

    async def list_multipart(self, prefix: str) -> list[tuple[str, str]]:
        """(key, upload id) of the multipart uploads in progress under ``prefix``."""

        def run() -> list[tuple[str, str]]:
            found: list[tuple[str, str]] = []
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                found.extend((str(u["Key"]), str(u["UploadId"])) for u in page.get("Uploads", []))
            return found

        return await self._run(f"list multipart uploads s3://{self.bucket}/{prefix}", run)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown, True)
        self._client.close()
