"""Packing calls and results: cloudpickle by value, HMAC-authenticated envelopes.

A packed call is ``cloudpickle.dumps((fn, args, kwargs))``. Results and remote
exceptions travel back inside an envelope ``MAGIC + hmac_sha256(key, body) + body``
and are verified *before* anything is unpickled (:func:`open_envelope`).

The submitting side: :mod:`.call` (pack a call), :mod:`.modules` (the user's modules a call
needs). What a rank also runs lives in the rank package (:mod:`gpujobs.rank`):
:mod:`~gpujobs.rank.envelope` (keys, seal / open), :mod:`~gpujobs.rank.shipping` (unpack a
call, serve its modules in the rank), :mod:`~gpujobs.rank.sources` (source lines for remote
tracebacks), :mod:`~gpujobs.rank.outcome` (what a rank sends back); the names below are
re-exported here, the package's public ones.
"""
from __future__ import annotations

from .call import pack_call
from ..rank.envelope import MAGIC, derive_key, new_key, open_envelope, seal
from .modules import needed_modules
from ..rank.outcome import Outcome, is_collateral
from ..rank.shipping import _ShippedFinder, install_modules, unpack_call
from ..rank.sources import SOURCES_LIMIT, collect_sources, register_sources, restore_filenames


__all__ = ["MAGIC", "new_key", "derive_key", "seal", "open_envelope", "pack_call", "unpack_call",
           "needed_modules", "install_modules", "collect_sources", "register_sources",
           "restore_filenames", "SOURCES_LIMIT", "Outcome", "is_collateral", "_ShippedFinder"]
