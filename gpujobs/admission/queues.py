"""The engine's pending queues: Kueue's queue manager, kept apart from the scheduling cycle.

Kueue v0.19.2 keeps the two in separate packages: ``pkg/cache/queue`` (``manager.go``,
``cluster_queue.go``, ``inadmissible_workloads.go``: which LocalQueue feeds which ClusterQueue,
the pending heap of every ClusterQueue, ``Pop`` with the ``StrictFIFO`` / ``BestEffortFIFO``
queueing strategies and the sticky preemptor, inadmissible workloads set aside until quota is
released, ``Pending`` counts) and ``pkg/scheduler`` (``scheduler.go``: the cycle that takes the
``Heads`` and admits, preempts or waits). Here :class:`Queues` is the first and
:class:`~.engine.Engine` the second, which holds one.

Per ClusterQueue (fields of :class:`~.quota.QueueNode`): pending workloads in one heap per request *shape* (equal
shapes fit or fail alike: Kueue's scheduling equivalence) with lazily dropped stale items, one
sorted list of keys for positions, ``parked`` (shape -> the head that could not be admitted:
Kueue's inadmissible workloads), ``stalled`` (every head is parked), ``sticky`` and ``hold``.
Keys order a queue: ``(-priority, timestamp, seq, id)``, timestamp being the creation time or,
after an eviction under the ``Eviction`` requeuing strategy, the eviction time.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Iterable, Mapping

from ..errors import SpecError
from .model import ClusterQueue, Workload
from .quota import Entry, Key, QueueNode


class Queues:
    """LocalQueue -> ClusterQueue names, pending heaps, heads, parking and positions, over the
    engine's ClusterQueues (``cqs``, name -> node) and workloads (``entries``, id -> entry),
    which it reads but does not own."""

    def __init__(self, cqs: Mapping[str, QueueNode], entries: Mapping[str, Entry]):
        self._cqs = cqs
        self._entries = entries
        self._lq: dict[str, str] = {}
        self._seq = 0
        self._shapes: dict[tuple, int] = {}  # request shape -> its number

    # ------------------------------------------------------- LocalQueues
    def map_local_queues(self, spec: ClusterQueue) -> None:
        """Point the ClusterQueue's own name and its LocalQueues at it (Kueue AddLocalQueue)."""
        for lq in (spec.name, *spec.local_queues):
            if self._lq.get(lq, spec.name) != spec.name:
                raise SpecError("local_queues", f"{lq!r} points to two queues", "rename one")
            self._lq[lq] = spec.name

    def cluster_queue_of(self, queue: str) -> str:
        """The ClusterQueue a LocalQueue (or ClusterQueue) name points to; SpecError if unknown."""
        if queue not in self._lq:
            raise SpecError("queue", f"unknown queue {queue!r}; known: {', '.join(sorted(self._lq))}",
                            "use a known queue, or define it in a [[local.queues]] table of the config "
                            "file (docs/configuration.md)")
        return self._lq[queue]

    @property
    def queue_names(self) -> list[str]:
        return sorted(self._lq)

    # ------------------------------------------------------- keys and shapes
    def key(self, prio: int, timestamp: float, wid: str) -> Key:
        """A queue key; ``seq`` keeps equal priorities and timestamps in arrival order."""
        self._seq += 1
        return (-prio, timestamp, self._seq, wid)

    def shape(self, w: Workload, podsets: list) -> int:
        """The request shape (Kueue's equivalence hash: per pod set its totals, plus node
        selectors and tolerations when any pod set has them, as flavors may then differ), as a
        number: equal shapes get the same one (a cheap key for the heaps and parking)."""
        if len(podsets) == 1:
            shape: tuple = (tuple(sorted(podsets[0][1].items())),)
        else:
            shape = tuple(tuple(sorted(reqs.items())) for _, reqs in podsets)
        if any(ps.node_selector or ps.tolerations for ps in w.podsets):
            shape += tuple((tuple(sorted((ps.node_selector or {}).items())), repr(ps.tolerations))
                           for ps in w.podsets)
        n = self._shapes.get(shape)
        if n is None:
            n = self._shapes[shape] = len(self._shapes)
        return n

    # ------------------------------------------------------- heaps
    def push(self, e: Entry) -> None:
        """Queue ``e`` (again): pending, with its current key."""
        e.state = "pending"
        e.version += 1
        e.cq.tops = None
        heapq.heappush(e.cq.heaps.setdefault(e.shape, []), (e.key, e.version))
        insort(e.cq.sorted, e.key)
        e.cq.stalled = False

    def drop(self, e: Entry) -> None:
        """``e`` is no longer pending (its heap item goes stale and is dropped lazily)."""
        lst = e.cq.sorted
        i = bisect_left(lst, e.key)
        if i < len(lst) and lst[i] == e.key:
            del lst[i]
        e.version += 1  # its heap item becomes stale
        e.cq.tops = None

    def take(self, e: Entry) -> None:
        """``e`` leaves its queue to be admitted (its heap item popped when it is on top)."""
        self.drop(e)
        heap = e.cq.heaps.get(e.shape)
        if heap and heap[0][0] == e.key:
            heapq.heappop(heap)

    def _shape_head(self, cq: QueueNode, shape: int) -> Entry | None:
        heap = cq.heaps.get(shape)
        while heap:
            key, version = heap[0]
            e = self._entries.get(key[3])
            if e is not None and e.state == "pending" and e.version == version:
                return e
            heapq.heappop(heap)
        cq.heaps.pop(shape, None)
        return None

    # ------------------------------------------------------- heads, parking
    def head(self, cq: QueueNode) -> Entry | None:
        """The ClusterQueue's head for this cycle: the first pending workload whose shape is not
        parked (BestEffortFIFO), or the first one unless it is parked (StrictFIFO). In a
        BestEffortFIFO queue a workload whose preemptions are under way stays the head until it
        is admitted (Kueue's sticky preemptor workload, kueue#6929)."""
        st = cq.sticky
        if st is not None:
            if st.state == "pending" and st.w.id in self._entries and cq.parked.get(st.shape) != st.key:
                return st
            cq.sticky = None
        tops = cq.tops
        if tops is None:
            cq.tops = tops = self._tops(cq)
        if not tops:
            return None
        best = None
        parked = cq.parked
        for key, shape, e in tops:
            if parked and parked.get(shape) == key:
                continue
            best = e
            break
        if cq.spec.strategy == "StrictFIFO" and best is not tops[0][2]:
            return None
        return best

    def _tops(self, cq: QueueNode) -> list:
        """[(key, shape, entry)] of every shape's first pending workload, first key first (kept
        on ``cq.tops`` until a heap of the queue changes)."""
        tops = []
        entries = self._entries
        for shape, heap in list(cq.heaps.items()):
            e = None
            if heap:  # the valid item on top, inline (the common case); else drop stale ones
                key, version = heap[0]
                e = entries.get(key[3])
            if e is None or e.state != "pending" or e.version != version:
                e = self._shape_head(cq, shape)  # stale items on top: drop them
                if e is None:
                    continue
                key = e.key
            tops.append((key, shape, e))
        tops.sort(key=lambda t: t[0])
        return tops

    @staticmethod
    def park(e: Entry) -> None:
        """Set the head ``e`` aside until quota is released in its cohort tree (its shape waits)."""
        e.cq.parked[e.shape] = e.key

    def unpark(self, cq: QueueNode) -> None:
        """Quota was released in ``cq``'s cohort tree: every queue of the tree may move again
        (Kueue QueueInadmissibleWorkloads after a workload finishes)."""
        for member in (cq.cohort.root.all_cqs if cq.cohort else (cq,)):
            member.parked.clear()
            member.stalled = False
            member.hold = {}

    def retry_strict(self) -> None:
        """Kueue retries a StrictFIFO head every cycle: its queue is unparked at each schedule()."""
        for cq in self._cqs.values():
            if cq.spec.strategy == "StrictFIFO" and cq.parked:
                cq.parked.clear()
                cq.stalled = False
                cq.hold = {}

    # ------------------------------------------------------- positions
    def positions(self, queue: str) -> dict[str, int]:
        """Pending workloads of a queue by id -> 1-based position (1 = next). A LocalQueue
        name gives positions within that LocalQueue, a ClusterQueue name within the CQ."""
        cq = self._cqs[self.cluster_queue_of(queue)]
        if queue == cq.name and queue not in cq.spec.local_queues:
            return {k[3]: i for i, k in enumerate(cq.sorted, 1)}
        ids = (k[3] for k in cq.sorted)
        return {wid: i for i, wid in enumerate((x for x in ids if self._entries[x].w.queue == queue), 1)}

    def position(self, wid: str) -> int | None:
        """1-based position of a pending workload in its ClusterQueue (None unless pending)."""
        e = self._entries.get(wid)
        if e is None or e.state != "pending":
            return None
        return bisect_left(e.cq.sorted, e.key) + 1

    def pending_counts(self, queue: str) -> tuple[int, int]:
        """(active, inadmissible) pending workloads of a queue's ClusterQueue: Kueue's
        ``pending_workloads`` metric; inadmissible ones are set aside with their shape."""
        cq = self._cqs[self.cluster_queue_of(queue)]
        parked = sum(1 for k in cq.sorted if self._entries[k[3]].shape in cq.parked)
        return len(cq.sorted) - parked, parked

    def pending(self, queue: str | None = None) -> list[str]:
        cqs: Iterable[QueueNode] = self._cqs.values() if queue is None else \
            [self._cqs[self.cluster_queue_of(queue)]]
        return [k[3] for cq in cqs for k in cq.sorted]
