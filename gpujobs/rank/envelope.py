"""Sealed envelopes: ``MAGIC + hmac_sha256(key, body) + body``, verified *before* anything is
unpickled (:func:`open_envelope`); per-job keys (:func:`new_key`, :func:`derive_key`)."""
from __future__ import annotations

import hashlib
import hmac
import pickle
import secrets
from typing import Any

import cloudpickle

from ..errors import ResultAuthError


MAGIC = b"GPJ1"
_DIGEST = 32


def new_key() -> bytes:
    """A fresh per-job HMAC key."""
    return secrets.token_bytes(32)


def derive_key(key: bytes, context: str) -> bytes:
    """The key of one job (``context``: its id) from a longer-lived key: a sealed call or
    result of one job does not verify as another job's."""
    return hmac.new(key, b"gpujobs-job:" + context.encode(), hashlib.sha256).digest()


def seal(obj: Any, key: bytes) -> bytes:
    """Pickle ``obj`` and prefix the HMAC of the pickle."""
    body = cloudpickle.dumps(obj)
    return MAGIC + hmac.new(key, body, hashlib.sha256).digest() + body


def open_envelope(blob: bytes, key: bytes) -> Any:
    """Verify the HMAC, then unpickle. Raise ResultAuthError if anything is off."""
    return pickle.loads(verified_body(blob, key))


def verified_body(blob: bytes, key: bytes) -> bytes:
    """The pickle inside ``blob`` once its HMAC verifies under ``key`` (not unpickled: the
    local agent checks a result is the job's without importing the user's modules).
    Raise ResultAuthError if anything is off."""
    if len(blob) < len(MAGIC) + _DIGEST or not blob.startswith(MAGIC):
        raise ResultAuthError("result envelope is malformed; refusing to unpickle it")
    mac, body = blob[len(MAGIC):len(MAGIC) + _DIGEST], blob[len(MAGIC) + _DIGEST:]
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise ResultAuthError("result failed authentication (HMAC mismatch); it was not "
                              "unpickled. It was changed after the job wrote it, or was "
                              "written by something else.")
    return body
