"""Pod logs of the simulated cluster: per-pod byte buffers the kubelet appends to and the
fake apiserver's ``/log`` endpoint reads (``follow`` waits on them)."""
from __future__ import annotations

import collections
import threading

__all__ = ["PodLogs"]


class PodLogs:
    """Per-pod log buffers, bounded (the head is dropped past ``limit`` bytes)."""

    def __init__(self, limit: int = 4 << 20):
        self.limit = limit
        self._bufs: dict[tuple[str, str], bytearray] = {}
        self._dropped: dict[tuple[str, str], int] = collections.defaultdict(int)
        self._previous: dict[tuple[str, str], bytes] = {}  # the last terminated instance's log
        self._cond = threading.Condition()

    def append(self, namespace: str, pod: str, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        with self._cond:
            buf = self._bufs.setdefault((namespace, pod), bytearray())
            buf.extend(data)
            if len(buf) > self.limit:
                cut = len(buf) - self.limit
                del buf[:cut]
                self._dropped[(namespace, pod)] += cut
            self._cond.notify_all()

    def read(self, namespace: str, pod: str, offset: int = 0) -> tuple[bytes, int]:
        """Bytes from absolute ``offset`` on, and the new offset."""
        with self._cond:
            buf = self._bufs.get((namespace, pod), bytearray())
            dropped = self._dropped[(namespace, pod)]
            start = max(offset - dropped, 0)
            return bytes(buf[start:]), dropped + len(buf)

    def restarted(self, namespace: str, pod: str) -> None:
        """The container restarted: its log so far becomes the previous instance's (what
        ``pods/log?previous=true`` answers; the kubelet keeps one terminated instance) and the
        new instance's log starts empty."""
        with self._cond:
            key = (namespace, pod)
            self._previous[key] = bytes(self._bufs.get(key, b""))
            self._dropped[key] += len(self._bufs.get(key, b""))
            self._bufs[key] = bytearray()
            self._cond.notify_all()

    def previous(self, namespace: str, pod: str) -> bytes | None:
        with self._cond:
            return self._previous.get((namespace, pod))

    def wait(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def forget(self, namespace: str, pod: str) -> None:
        with self._cond:
            self._bufs.pop((namespace, pod), None)
            self._dropped.pop((namespace, pod), None)
            self._previous.pop((namespace, pod), None)
            self._cond.notify_all()
