"""Resume after preemption (in the spirit of submitit's ``Checkpointable``).

When a higher-priority job needs the GPUs, the local agent (and Kueue on Kubernetes)
sends SIGTERM to every rank; ``gpujobs.context().should_stop()`` turns True; after the
job's ``grace_period_s`` the ranks are killed. The job is requeued and, when admitted
again, runs the *same function from the start* with the same ``checkpoint_dir`` and
``GPUJOBS_RESTARTS`` (``ctx.restarts``) one higher. These helpers make that a resume:

``resumable`` — a loop that saves on stop and starts where it left off::

    def train(n_steps):
        loop = gpujobs.checkpoint.resumable(n_steps, state={"w": 0.0})
        for step in loop:                 # after a restart: continues at the saved step
            loop.state["w"] += step       # keep everything you need in loop.state
        return loop.state["w"]            # same result as an uninterrupted run

``Checkpointable`` — a callable class whose public attributes are the state::

    class Train(gpujobs.checkpoint.Checkpointable):
        def __init__(self):
            self.w = 0.0
        def run(self, n_steps):
            for step in self.steps(n_steps):
                self.w += step
            return self.w

    gpujobs.submit(Train(), 1000, gpus=2)

In multi-rank jobs the stop decision is agreed by all ranks (an all-reduce of the flag
each step when torch.distributed is initialised), so no rank is left waiting in a
collective; rank 0 writes the checkpoint (``ctx.save``: atomic, ``checkpoint_dir/<name>.pt``).
Use ``every=N`` to also save every N steps (against crashes, not only preemption).
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from .context import context


class Preempted(BaseException):
    """Raised out of a resumable loop once its state is saved: the rank ends, the job is
    requeued and resumes. A BaseException so ``except Exception`` in user code lets it pass."""


def _agreed_stop(local: bool) -> bool:
    import sys
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        import torch
        # NCCL groups take only CUDA tensors; gloo takes CPU ones.
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([1.0 if local else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
    return local


class resumable:  # noqa: N801 - used like a function: ``for step in resumable(...)``
    """Iterate ``steps`` (an int n = range(n), or a sequence), resuming from a checkpoint.

    ``state``: what must survive (any picklable object, e.g. a dict of tensors / state_dicts);
    after a restart ``loop.state`` is the saved one. ``name``: checkpoint file stem.
    ``every``: also save every N steps. ``sync``: agree on stopping across ranks (default on).
    """

    def __init__(self, steps: int | Iterable[int], state: Any = None, *, name: str = "resumable",
                 every: int | None = None, sync: bool = True):
        self.ctx = context()
        self.steps = range(steps) if isinstance(steps, int) else list(steps)
        self.name = name
        self.every = every
        self.sync = sync
        saved = self.ctx.load(name)
        self.position = 0
        self.state = state
        self.resumed = saved is not None
        if saved is not None:
            self.position = int(saved["position"])
            self.state = saved["state"]

    def save(self) -> None:
        if self.ctx.rank == 0:
            self.ctx.save({"position": self.position, "state": self.state}, self.name)

    def _stop(self) -> bool:
        local = self.ctx.should_stop()
        return _agreed_stop(local) if self.sync else local

    def __iter__(self) -> Iterator[int]:
        while self.position < len(self.steps):
            yield self.steps[self.position]
            self.position += 1
            if self.every and self.position % self.every == 0:
                self.save()
            if self.position < len(self.steps) and self._stop():
                self.save()
                raise Preempted(f"stopped after {self.position} of {len(self.steps)} steps; "
                                f"state saved to {self.ctx.checkpoint_dir}")


class Checkpointable:
    """Base class for resumable callables: public attributes are the state.

    Implement ``run(*args, **kwargs)`` and loop with ``self.steps(n)``; calling the object
    first restores the attributes saved by a preempted run.
    """

    checkpoint_name = "checkpointable"

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        vars(self).update(state)

    def steps(self, steps: int | Iterable[int], every: int | None = None) -> Iterator[int]:
        loop = resumable(steps, self.state_dict(), name=self.checkpoint_name, every=every)
        if loop.resumed:
            self.load_state_dict(loop.state)
        for step in loop:
            yield step
            loop.state = self.state_dict()

    def run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)


_CHECKPOINT_NAMES = frozenset({"checkpoint_dir", "resumable", "Checkpointable", "checkpoint"})


def uses_checkpoints(fn: Any) -> bool:
    """Whether ``fn`` (a function, a bound method or a Checkpointable) names gpujobs' checkpoint
    helpers or ``ctx.checkpoint_dir`` in its code (nested functions included): used to warn at
    submit when checkpoints would not survive preemption."""
    if isinstance(fn, Checkpointable):
        return True
    return _names_any(fn, _CHECKPOINT_NAMES)


def watches_preemption(fn: Any) -> bool:
    """Whether ``fn`` asks ``should_stop()`` (so it may return within its grace period) or uses
    checkpoints: on Kubernetes such a job gets a default checkpoint claim, where its returned
    outcome is kept for the requeued run."""
    return uses_checkpoints(fn) or _names_any(fn, frozenset({"should_stop"}))


def _names_any(fn: Any, names: frozenset[str]) -> bool:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:
        code = getattr(vars(type(fn)).get("__call__"), "__code__", None)
    todo, seen = [code] if code is not None else [], 0
    while todo and seen < 1000:
        c = todo.pop()
        seen += 1
        if names & set(c.co_names):
            return True
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return False
