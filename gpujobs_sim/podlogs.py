"""Pod logs of the simulated cluster: per-pod byte buffers the kubelet appends to and the
fake apiserver's ``/log`` endpoint reads (``follow`` waits on them). Each line's arrival time is
kept, as the container runtime stamps every line it writes to the node's log file, for
``timestamps=true`` (:meth:`PodLogs.timestamped`)."""
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
        self._starts: dict[tuple[str, str], list[tuple[int, float]]] = {}  # (line offset, time)
        self._previous: dict[tuple[str, str], bytes] = {}  # the last terminated instance's log
        self._cond = threading.Condition()

    def append(self, namespace: str, pod: str, text: str | bytes) -> None:
        import time
        data = text.encode() if isinstance(text, str) else text
        key = (namespace, pod)
        with self._cond:
            buf = self._bufs.setdefault(key, bytearray())
            at = self._dropped[key] + len(buf)
            starts = self._starts.setdefault(key, [])
            now = time.time()
            if data and (not buf or buf.endswith(b"\n")):
                starts.append((at, now))
            starts.extend((at + i + 1, now) for i, b in enumerate(data[:-1]) if b == 0x0A)
            buf.extend(data)
            if len(buf) > self.limit:
                cut = len(buf) - self.limit
                del buf[:cut]
                self._dropped[key] += cut
                self._starts[key] = [s for s in starts if s[0] >= self._dropped[key]]
            self._cond.notify_all()

    def timestamped(self, namespace: str, pod: str) -> bytes:
        """The log with each line prefixed by its arrival time, as the API server's
        ``timestamps=true`` gives it (RFC 3339 with nanoseconds, UTC, then one space)."""
        import datetime as dt
        with self._cond:
            key = (namespace, pod)
            buf, dropped = bytes(self._bufs.get(key, b"")), self._dropped[key]
            starts = [s for s in self._starts.get(key, []) if s[0] >= dropped]  # (a restart drops)
        out = []
        for i, (off, t) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else dropped + len(buf)
            stamp = dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
            out.append(f"{stamp}000Z ".encode() + buf[off - dropped:end - dropped])
        return b"".join(out)

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
            self._starts.pop((namespace, pod), None)
            self._previous.pop((namespace, pod), None)
            self._cond.notify_all()
