"""``%%gpujob`` (run a cell as a gang job) and ``%gpujobs`` (queue view, configuration)."""
from __future__ import annotations

import sys
import threading
from typing import Any

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

import gpujobs
from gpujobs.errors import GpuJobsError, Spelling
from gpujobs.spec import FRAMEWORKS

from .cell import cell_job_name, compile_cell


def _names(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _prompt_count(shell: Any) -> int | None:
    """The number in this cell's ``In [N]`` prompt: IPython's own count for ``Out[N]``
    (``execution_count`` is already N + 1 while the cell runs in IPython 9, N in 8)."""
    hook = getattr(shell, "displayhook", None)
    count = getattr(hook, "prompt_count", None)
    return count if isinstance(count, int) and count > 0 else None


#: how the cell's flags spell an error's fix (gpujobs.errors.Fix); the rest (commands, fields
#: the cell cannot set) stays in Python's words, which the notebook runs as written
MAGIC_SPELLING = Spelling.flags(
    fields={"gpus": "--gpus {v}", "nodes": "--nodes {v}", "framework": "--framework {v}",
            "queue": "--queue {v}", "priority": "--priority {v}", "name": "--name {v}",
            "image": "--image {v}", "volume": "--volume {v}", "backend": "--backend {v}"},
    commands={})


@magics_class
class GpuJobMagics(Magics):
    """Holds the magic-level configuration (default backend) for one shell."""

    def __init__(self, shell: Any = None):
        super().__init__(shell)
        self.backend: str | None = None
        self.cells = 0

    @property
    def _user_ns(self) -> dict[str, Any]:
        """The notebook's namespace (a magic always runs inside a shell)."""
        assert self.shell is not None
        return self.shell.user_ns

    # ------------------------------------------------------------------ %%gpujob
    @magic_arguments.magic_arguments()
    @magic_arguments.argument("--gpus", type=int, default=1,
                              help="GPUs in total (one rank per GPU; CPU ranks where no GPU exists)")
    @magic_arguments.argument("--nodes", type=int, default=1, help="nodes (pods) to spread over")
    @magic_arguments.argument("--framework", default="ddp", choices=FRAMEWORKS,
                              help="ddp, fsdp, ray or mpi (default ddp)")
    @magic_arguments.argument("--queue", default=None, help="queue (local queue / Kueue LocalQueue)")
    @magic_arguments.argument("--priority", default=None, help="priority class name")
    @magic_arguments.argument("--return", dest="returns", default=None, metavar="A,B",
                              help="names the cell assigns, copied back from rank 0")
    @magic_arguments.argument("-o", "--out", default=None, metavar="NAME",
                              help="store the Job handle in this variable")
    @magic_arguments.argument("--wait", action="store_true",
                              help="block until the job ends (Ctrl-C stops waiting; the job "
                                   "keeps running)")
    @magic_arguments.argument("--name", default=None, help="job name")
    @magic_arguments.argument("--image", default=None,
                              help="container image of the pods (Kubernetes; MPI jobs need one)")
    @magic_arguments.argument("--volume", default=None, metavar="CLAIM[:PATH]",
                              help="PersistentVolumeClaim mounted into every pod (Kubernetes); "
                                   "ctx.checkpoint_dir goes there and survives preemption")
    @magic_arguments.argument("--backend", default=None, help="backend (local, kubernetes)")
    @cell_magic
    def gpujob(self, line: str, cell: str) -> Any:
        """Run this cell on every rank of a gang job; names it reads are shipped by value.

        Returns at once with a live widget (the Job); ``--wait`` blocks.
        """
        __tracebackhide__ = True  # noqa: F841 - IPython hides this frame
        args = magic_arguments.parse_argstring(self.gpujob, line)
        returns = _names(args.returns)
        if args.out is not None and not args.out.isidentifier():
            raise UsageError(f"%%gpujob -o: {args.out!r} is not a Python name")
        self.cells += 1
        count = _prompt_count(self.shell) or self.cells
        cellfn = compile_cell(cell, self._user_ns, shell=self.shell, returns=returns,
                              name=f"cell_{count}")
        try:
            job = gpujobs.submit(cellfn.fn, gpus=args.gpus, nodes=args.nodes,
                                 framework=args.framework, queue=args.queue,
                                 priority=args.priority, image=args.image, volume=args.volume,
                                 name=args.name or cell_job_name(cell, count, returns),
                                 backend=args.backend or self.backend)
        except GpuJobsError as exc:  # refused before anything was created
            raise UsageError(f"%%gpujob: {exc.render(MAGIC_SPELLING)}") from None
        if args.out:
            self._user_ns[args.out] = job
        if not args.wait:
            if returns:
                threading.Thread(target=self._collect, args=(job, returns), daemon=True,
                                 name=f"gpujobs-return-{job.id}").start()
            return job
        from IPython.display import display
        try:
            display(job)
            status = job.backend.wait(job.id, None)
        except KeyboardInterrupt:  # the job keeps running: one line, no traceback
            from gpujobs.handle import interrupted_line
            cancel = (f"{args.out}.cancel()" if args.out else
                      f"import gpujobs; gpujobs.attach({job.id!r}).cancel()")
            print(interrupted_line(job.id, cancel), file=sys.stderr)
            return None
        from gpujobs.views import display_mode
        if display_mode() == "text":  # a terminal shows no live view: say how it ended
            print(status.summary())
        if status.phase != "succeeded":
            failure = job.exception()
            if failure is not None:
                raise failure
            raise UsageError(f"%%gpujob: job {job.id} ended {status.phase}: {status.message}")
        if returns:
            self._assign(job.result(), returns)
        return None

    def _assign(self, value: Any, returns: tuple[str, ...]) -> None:
        if not isinstance(value, dict):
            return
        for n in returns:
            if n in value:
                self._user_ns[n] = value[n]

    def _collect(self, job: Any, returns: tuple[str, ...]) -> None:
        """Background: when the job succeeds, copy rank 0's returned names into the namespace."""
        try:
            if job.wait().phase == "succeeded":
                self._assign(job.result(), returns)
        except Exception:
            pass  # the widget and job.exception() show what went wrong

    # ------------------------------------------------------------------ %gpujobs
    @line_magic
    def gpujobs(self, line: str) -> Any:
        """``%gpujobs jobs`` | ``%gpujobs queue [NAME] [--all]`` | ``%gpujobs backend [NAME]``."""
        words = line.split()
        verb = words[0] if words else "jobs"
        rest = words[1:]
        try:
            if verb == "jobs" and len(rest) <= 1:
                return gpujobs.jobs(rest[0] if rest else None, backend=self.backend)
            if verb == "queue" and len([w for w in rest if w != "--all"]) <= 1:
                names = [w for w in rest if w != "--all"]
                return gpujobs.queue(names[0] if names else None, backend=self.backend,
                                     all="--all" in rest)
            if verb == "backend" and len(rest) <= 1:
                if rest:
                    from gpujobs.backends import get_backend
                    get_backend(rest[0])  # unknown names fail here, before anything changes
                    self.backend = rest[0]
                from gpujobs.backends import default_backend_name
                print(f"%%gpujob submits to backend {self.backend or default_backend_name()!r}")
                return None
        except GpuJobsError as exc:
            raise UsageError(f"%gpujobs {verb}: {exc}") from None
        raise UsageError("%gpujobs: use '%gpujobs jobs [QUEUE]', '%gpujobs queue [NAME] [--all]' or "
                         "'%gpujobs backend [NAME]'")
