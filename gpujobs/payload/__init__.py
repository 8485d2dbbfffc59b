"""Packing calls and results: cloudpickle by value, HMAC-authenticated envelopes.

A packed call is ``cloudpickle.dumps((fn, args, kwargs))``. Results and remote
exceptions travel back inside an envelope ``MAGIC + hmac_sha256(key, body) + body``
and are verified *before* anything is unpickled (:func:`open_envelope`).

One idea per module: :mod:`.envelope` (keys, seal / open), :mod:`.call` (pack / unpack a
call), :mod:`.modules` (the user's modules a call needs), :mod:`.shipping` (serving them in
the rank), :mod:`.sources` (source lines for remote tracebacks), :mod:`.outcome` (what a
rank sends back). The names below are the package's public ones.
"""
from __future__ import annotations

from .call import pack_call, unpack_call
from .envelope import MAGIC, derive_key, new_key, open_envelope, seal
from .modules import needed_modules
from .outcome import Outcome, is_collateral
from .shipping import _ShippedFinder, install_modules
from .sources import SOURCES_LIMIT, collect_sources, register_sources, restore_filenames


__all__ = ["MAGIC", "new_key", "derive_key", "seal", "open_envelope", "pack_call", "unpack_call",
           "needed_modules", "install_modules", "collect_sources", "register_sources",
           "restore_filenames", "SOURCES_LIMIT", "Outcome", "is_collateral", "_ShippedFinder"]
