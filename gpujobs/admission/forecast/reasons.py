"""Why a workload waits, in words: who holds the quota, who is ahead, what it needs and what
is free (:func:`waiting_reasons`), and the small wording helpers (:func:`duration` …)."""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Iterable, Mapping

from ...status import ordinal
from ..engine import DEFAULT_PRIORITIES, Engine
from ..model import INF, ClusterQueue, normalize_quota
from .inputs import AHEAD_SHOWN, BLOCKED_BY_MAX, SOURCES, Forecast, Job, Snapshot


def priority_rank(snap: Snapshot, p) -> int:
    prios = DEFAULT_PRIORITIES if snap.priorities is None else snap.priorities
    if p is None:
        p = snap.default_priority
        if p is None:
            return prios.get("normal", 0)
    if isinstance(p, int):
        return p
    return prios.get(p, 0)


def _num(x: float) -> str:
    if x == INF:
        return "unlimited"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def amount_text(a: float, r: str) -> str:
    if r == "gpu":
        return f"{_num(a)} GPU" + ("" if a == 1 else "s")
    if r == "memory" and a >= 2 ** 20:  # bytes (Kubernetes quantities)
        return f"{a / 2 ** 30:.3g} GiB memory"
    return f"{_num(a)} {r}"


def duration(seconds: float) -> str:
    """'45 s', '12 min', '2.5 h' (for reasons)."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _nominal(cq: ClusterQueue) -> dict[str, dict[str, float]]:
    """{flavor: {resource: nominal}} over all of the queue's resource groups."""
    out: dict[str, dict[str, float]] = {}
    groups = cq.resource_groups if cq.resource_groups is not None else [cq.quota or {}]
    for g in groups:
        for f, res in normalize_quota(g, cq.name).items():
            out.setdefault(f, {}).update(res)
    return out


class _QueueFacts:
    """Free quota, cohort lending and holders of one ClusterQueue at the snapshot."""

    def __init__(self, snap: Snapshot, eng: Engine, cq: ClusterQueue):
        self.cq = cq
        self.quota = _nominal(cq)
        self.usage = eng.usage(cq.name)
        self.nominal = {(f, r): a for f, res in self.quota.items() for r, a in res.items()}
        self.members = [q for q in snap.queues if cq.cohort and q.cohort == cq.cohort]
        self._coh_free = self._cohort_free(snap, eng) if cq.cohort else {}

    def _cohort_free(self, snap: Snapshot, eng: Engine) -> dict:
        """Per (flavor, resource): what the cohort could lend this queue right now."""
        own = {}
        for c in snap.cohorts:
            if c.name == self.cq.cohort:
                own = {(f, r): a for f, res in normalize_quota(c.quota, c.name).items()
                       for r, a in res.items()}
        requestable = defaultdict(float, own)
        used: defaultdict[Any, float] = defaultdict(float)
        for m in self.members:
            mq = _nominal(m)
            ll = normalize_quota(m.lending_limit, m.name)
            mu = eng.usage(m.name)
            for f, res in mq.items():
                for r, n in res.items():
                    lend = min(n, ll.get(f, {}).get(r, n)) if ll else n
                    requestable[(f, r)] += lend
                    used[(f, r)] += max(0.0, mu.get((f, r), 0.0) - (n - lend))
        bl = normalize_quota(self.cq.borrowing_limit, self.cq.name)
        ll = normalize_quota(self.cq.lending_limit, self.cq.name)
        out = {}
        for (f, r), n in self.nominal.items():
            u = self.usage.get((f, r), 0.0)
            lend = min(n, ll.get(f, {}).get(r, n)) if ll else n
            g = n - lend
            blim = bl.get(f, {}).get(r, INF) if bl else INF
            room = max(0.0, g - u) + max(0.0, requestable[(f, r)] - used[(f, r)])
            out[(f, r)] = max(0.0, min(n + blim - u, room))  # all it could take now
        return out

    def free(self, r: str) -> tuple[float, float, str]:
        """(free within nominal, cohort lends, flavor) for resource ``r``, best flavor."""
        best = (0.0, 0.0, next(iter(self.quota), "default"))
        for f in self.quota:
            if (f, r) not in self.nominal:
                continue
            fr = (f, r)
            own = max(0.0, self.nominal[fr] - self.usage.get(fr, 0.0))
            if self.cq.cohort:  # its unused nominal quota may be lent out to a borrower
                room = self._coh_free.get(fr, 0.0)
                own = min(own, room)
                cand = (own, room - own, f)
            else:
                cand = (own, 0.0, f)
            if cand[0] + cand[1] > best[0] + best[1] or best == (0.0, 0.0, best[2]):
                best = cand
        return best

    def borrowers(self, eng: Engine) -> list[tuple[str, float]]:
        """Other cohort members above their nominal quota: (queue, amount over)."""
        out = []
        for m in self.members:
            if m.name == self.cq.name:
                continue
            mq = _nominal(m)
            mu = eng.usage(m.name)
            over = sum(max(0.0, mu.get((f, r), 0.0) - n) for f, res in mq.items() for r, n in res.items())
            if over > 0:
                out.append((m.name, over))
        return out


def waiting_reasons(snap: Snapshot, eng: Engine, jobs: dict[str, Job], ends: dict,
             preempts: Mapping[str, list[str]], stopping: set[str],
             only: set[str] | None) -> dict[str, Forecast]:
    now = snap.now
    cqs = {q.name: q for q in snap.queues}
    facts: dict[str, _QueueFacts] = {}
    victims_of: dict[str, list[str]] = defaultdict(list)
    for j in snap.running:
        if j.preempted_by and j.stops_at is not None:
            victims_of[j.preempted_by].append(j.id)
    for by, vs in preempts.items():
        for v in vs:
            if v not in victims_of[by]:
                victims_of[by].append(v)

    def holder(wid: str) -> str:
        j = jobs[wid]
        end, src = ends.get(wid, (None, "unknown"))
        if wid in stopping:
            return f"{j.label} (stopping, preempted)"
        if end is None:
            ran = now - (j.started if j.started is not None else now)
            return f"{j.label} (running {duration(ran)}, end unknown)"
        return f"{j.label} (running, ~{duration(end - now)} left)"

    def holders_sorted(ids: Iterable[str]) -> list[str]:
        return sorted(ids, key=lambda w: (ends.get(w, (None,))[0] is None, ends.get(w, (INF,))[0] or INF, w))

    out: dict[str, Forecast] = {}
    for name, cq in cqs.items():
        order = eng.pending(name)
        if not order:
            continue
        if only is not None and not (only & set(order)):
            continue
        f = facts.setdefault(name, _QueueFacts(snap, eng, cq))
        running_here = holders_sorted(eng.admitted(name))
        borrow = f.borrowers(eng)
        borrow_ids = {b: holders_sorted(eng.admitted(b)) for b, _ in borrow}
        head = order[0]
        # the same for every job of this queue: computed once
        running_txt = [holder(x) for x in running_here[:AHEAD_SHOWN]]
        if len(running_here) > AHEAD_SHOWN:
            running_txt.append(f"+{len(running_here) - AHEAD_SHOWN} more running")
        borrow_txt = {}
        for b, over in borrow:
            who = ", ".join(holder(x) for x in borrow_ids[b][:AHEAD_SHOWN])
            borrow_txt[b] = f"{b} borrows {_num(over)} from cohort {cq.cohort}" + (f": {who}" if who else "")
        free_of = {}
        amt_of: dict[str, str] = {}
        prio_of: dict[str, int] = {}

        def amt(x: str) -> str:
            t_ = amt_of.get(x)
            if t_ is None:
                tot = jobs[x].workload.total()
                tot = {"gpu": tot["gpu"]} if tot.get("gpu") else tot  # GPUs say it; else all
                t_ = amt_of[x] = ", ".join(amount_text(v, r) for r, v in tot.items())
            return t_

        def prio_(x: str) -> int:
            p_ = prio_of.get(x)
            if p_ is None:
                p_ = prio_of[x] = priority_rank(snap, jobs[x].workload.priority)
            return p_
        for i, wid in enumerate(order):
            if only is not None and wid not in only:
                continue
            j = jobs[wid]
            need = j.workload.total()
            parts = []
            blocked: list[str] = []
            needs = []
            fits_alone = True
            for k, (r, a) in enumerate(sorted(need.items(), key=lambda kv: kv[0] != "gpu")):
                if r not in free_of:
                    free_of[r] = f.free(r)
                free, lends, _ = free_of[r]
                short = a > free + lends + 1e-9
                if short:
                    fits_alone = False
                elif k and r != "gpu":
                    continue  # besides GPUs (or the first resource), only what is short is named
                coh = f" (cohort {cq.cohort} lends {_num(lends)})" if cq.cohort else ""
                needs.append(f"needs {amount_text(a, r)}, {amount_text(free, r) if r == 'memory' else _num(free)} "
                             f"free in {name}{coh}")
            parts.append("; ".join(needs) if needs else "needs nothing")
            vics = [v for v in victims_of.get(wid, ()) if v in stopping]
            if vics:
                parts.append("waiting for " + ", ".join(
                    f"{jobs[v].label} to stop (preempted for it)" for v in vics))
                blocked += vics
            if cq.strategy == "StrictFIFO" and i > 0 and wid not in victims_of:
                msg = f"{name} is StrictFIFO: its head {jobs[head].label} ({amt(head)}) must start first"
                if fits_alone:
                    msg = "it would fit now, but " + msg
                parts.append(msg)
                blocked.append(head)
            if borrow and not fits_alone:
                for b, _over in borrow:
                    rec = cq.reclaim_within_cohort
                    parts.append(borrow_txt[b]
                                 + (f" ({name} does not reclaim: reclaim_within_cohort=Never)"
                                    if rec == "Never" else
                                    " (not reclaimable: it would need to borrow itself, or "
                                    "their priority is not lower)" if not vics else ""))
                    blocked += borrow_ids[b]
            ahead = []
            if not fits_alone or vics:
                ahead += running_txt
                blocked += running_here
            prio = prio_(wid)
            for k in range(max(0, i - AHEAD_SHOWN), i):
                x = order[k]
                other = jobs[x]
                ap = prio_(x)
                tag = f", {other.workload.priority}" if ap > prio and other.workload.priority is not None else \
                    (", higher priority" if ap > prio else "")
                ahead.append(f"{other.label} ({ordinal(k + 1)}{tag}, {amt(x)})")
            if i > AHEAD_SHOWN:
                ahead.insert(len(ahead) - AHEAD_SHOWN, f"{i - AHEAD_SHOWN} more queued ahead")
            blocked += order[max(0, i - BLOCKED_BY_MAX):i]
            if ahead:
                parts.append("ahead: " + ", ".join(ahead))
            seen: dict[str, None] = {}
            for x in blocked:
                seen.setdefault(x, None)
            out[wid] = Forecast(wid, None, "", "; ".join(parts), tuple(seen), position=i + 1)
    return out


# ---------------------------------------------------------------- basis text
def basis_text(counts: tuple, start: float, now: float) -> str:
    if start <= now + 1e-9:
        return "quota free now"
    parts = []
    names = {"progress": "progress rate", "history": "history of similar jobs",
             "learned": "declared limit x the user's usual share of it",
             "limit": "declared limit + grace", "stop": "victims' usual stop time"}
    stops = arrivals = ""
    for src, n in zip(SOURCES, counts):
        if n and src == "stop":
            stops = names[src] + (f" ({n} jobs)" if n > 1 else "")
        elif n and src == "arrival":
            arrivals = f"{n} expected arrival{'s' if n > 1 else ''} start{'' if n > 1 else 's'} first"
        elif n and src in names:
            parts.append(f"{names[src]} ({n} jobs)" if n > 1 else names[src])
    tail = "".join(f"; {x}" for x in (stops, arrivals) if x)
    if not parts:
        return (stops or "victims' grace periods") + (f"; {arrivals}" if arrivals else "")
    return "expected ends from " + ", ".join(parts) + tail


def _clock(t: float) -> str:
    lt = time.localtime(t)
    same_day = lt[:3] == time.localtime()[:3]
    return time.strftime("%H:%M:%S" if same_day else "%b %d %H:%M", lt)
