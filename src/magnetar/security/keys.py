"""Key and secret material in the forms Pulsar's configuration accepts.

Pulsar's ``tokenSecretKey``, ``tokenPublicKey`` and ``basicAuthConf`` take a value that is
``file:///path``, ``data:;base64,...`` (or ``data:,text``), a path to an existing file, or the
material itself base64-encoded. :func:`read` turns any of them into bytes and says which
form failed when none fits.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from pathlib import Path


class KeyMaterialError(ValueError):
    """Key material that cannot be read; the message names the value's form."""


def read(value: str, *, what: str) -> bytes:
    """The bytes ``value`` designates (see the module docstring); ``what`` names the
    setting in errors."""
    text = value.strip()
    if not text:
        raise KeyMaterialError(f"{what}: empty value")
    if text.startswith("file:"):
        url_path = urllib.parse.urlparse(text).path
        return _read_file(Path(urllib.parse.unquote(url_path)), what)
    if text.startswith("data:"):
        return _data_url(text, what)
    if Path(text).is_file():
        return _read_file(Path(text), what)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyMaterialError(
            f"{what}: {text[:40]!r} is neither file://, data:, an existing file nor base64"
        ) from None


def _read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise KeyMaterialError(f"{what}: cannot read {path}: {err.strerror or err}") from None


def _data_url(text: str, what: str) -> bytes:
    header, sep, payload = text[len("data:") :].partition(",")
    if not sep:
        raise KeyMaterialError(f"{what}: a data: URL needs a ',' before its payload")
    if header.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise KeyMaterialError(f"{what}: the data: URL's base64 payload is invalid") from None
    return urllib.parse.unquote_to_bytes(payload)
