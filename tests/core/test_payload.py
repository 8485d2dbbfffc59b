"""Envelopes: results are authenticated before anything is unpickled."""
from __future__ import annotations

import pickle

import pytest

from gpujobs.errors import RemoteError, ResultAuthError
from gpujobs.payload import Outcome, new_key, open_envelope, seal


class Boom(Exception):
    pass


def test_roundtrip_and_tamper_refused():
    key = new_key()
    blob = seal({"a": 1}, key)
    assert open_envelope(blob, key) == {"a": 1}
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(ResultAuthError, match="not unpickled"):
        open_envelope(tampered, key)
    with pytest.raises(ResultAuthError):
        open_envelope(blob, new_key())
    with pytest.raises(ResultAuthError, match="malformed"):
        open_envelope(b"junk", key)


def test_forged_pickle_is_never_loaded(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    key = new_key()
    forged = b"GPJ1" + b"\0" * 32 + pickle.dumps(Evil())
    with pytest.raises(ResultAuthError):
        open_envelope(forged, key)
    assert not marker.exists()


def test_outcome_reraises_own_type_with_rank_and_traceback():
    try:
        raise Boom("bad things")
    except Boom as exc:
        out = Outcome.failure(3, exc)
    exc = out.exception()
    assert type(exc) is Boom and str(exc) == "bad things"
    assert exc.rank == 3 and "raise Boom" in exc.remote_traceback
    assert any("rank 3" in n for n in exc.__notes__)


def test_outcome_unpicklable_exception_becomes_remote_error():
    out = Outcome(rank=1, ok=False, exc_bytes=b"not a pickle", exc_type="mod.Weird",
                  exc_message="odd", traceback="tb")
    exc = out.exception()
    assert isinstance(exc, RemoteError) and exc.type_name == "mod.Weird" and exc.rank == 1


def test_lost_peer_errors_are_collateral():
    assert Outcome.failure(0, RuntimeError("Gloo connectFullMesh failed ... Connection closed by peer")).collateral
    assert not Outcome.failure(0, ValueError("bad learning rate")).collateral


def test_an_outcome_sealed_before_the_rank_package_still_opens():
    """Results kept on disk name the class where it was then (gpujobs.payload.outcome)."""
    import hashlib
    import hmac
    import pickle

    from gpujobs.payload import MAGIC, Outcome, new_key, open_envelope
    old = pickle.dumps(Outcome.success(0, 42), protocol=2).replace(
        b"gpujobs.rank.outcome", b"gpujobs.payload.outcome")
    assert b"gpujobs.payload.outcome" in old
    key = new_key()
    blob = MAGIC + hmac.new(key, old, hashlib.sha256).digest() + old
    outcome = open_envelope(blob, key)
    assert isinstance(outcome, Outcome) and outcome.value == 42
