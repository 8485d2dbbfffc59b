"""The ``gpujobs`` verbs. Each takes the parsed arguments and returns an exit code."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..backends import default_backend_name, get_backend
from ..backends.base import ChecksQueues
from ..errors import BackendUnavailable, JobError, SpecError
from ..status import JobStatus
from . import exitcodes, output
from .targets import builders_for, shape


# ---------------------------------------------------------------- helpers
def backend_for(name: str | None, job_id: str | None = None):
    """The backend (a job id with '/' is a Kubernetes namespace/name); load failures → exit 3."""
    if name is None and job_id and "/" in job_id:
        name = "kubernetes"
    try:
        return get_backend(name)
    except ImportError as exc:
        raise BackendUnavailable(f"backend {name or default_backend_name()!r} cannot be loaded: {exc}") from None


def job_ref(args: argparse.Namespace, job_id: str) -> str:
    if getattr(args, "namespace", None) and "/" not in job_id and \
            (args.backend or default_backend_name()) in ("kubernetes", "k8s", "kube"):
        return f"{args.namespace}/{job_id}"
    return job_id


def apply_common(b, args: argparse.Namespace):
    if args.queue:
        b = b.queue(args.queue)
    if args.priority:
        b = b.priority(args.priority)
    if args.name:
        b = b.name(args.name)
    if args.image:
        b = b.image(args.image)
    if getattr(args, "volume", None):
        from ..spec import Volume
        v = Volume.parse(args.volume)
        b = b.volume(v.claim, v.mount_path)
    if args.env:
        pairs = {}
        for item in args.env:
            k, eq, v = item.partition("=")
            if not eq:
                raise SpecError("--env", f"{item!r} is not KEY=VALUE", "write --env KEY=VALUE")
            pairs[k] = v
        b = b.env(**pairs)
    opts: dict[str, Any] = {}
    if getattr(args, "max_runtime", None) is not None:
        opts["max_runtime_s"] = args.max_runtime
    if args.backend:
        opts["backend"] = args.backend
    if args.namespace:
        opts["namespace"] = args.namespace
    if getattr(args, "kind", None):
        opts["kind"] = args.kind
    return b.options(**opts) if opts else b


def make_builders(args: argparse.Namespace, force_sbatch: bool = False):
    kind, builders = builders_for(args.target, list(args.args or []), mapping=args.mapping,
                                  framework=args.framework if force_sbatch or args.framework else None)
    if force_sbatch and kind != "sbatch":
        raise SpecError("FILE", f"{args.target!r} is not an sbatch script (no #SBATCH lines)",
                        "use `gpujobs submit` for scripts and functions")
    if kind == "sbatch":
        if args.gpus is not None or args.nodes is not None or args.procs_per_node is not None:
            raise SpecError("--gpus/--nodes", "an sbatch script sets its own shape with #SBATCH lines",
                            "edit the directives instead")
    else:
        builders = [shape(b, args.framework or "ddp", 1 if args.gpus is None else args.gpus,
                          args.nodes or 1, args.procs_per_node) for b in builders]
        if kind == "script" and (args.backend or default_backend_name()) == "local":
            builders = [b.options(working_dir=os.getcwd()) for b in builders]
    return kind, [apply_common(b, args) for b in builders]


def wait_for(backend, job_id: str, progress: output.Progress) -> JobStatus:
    unsubscribe = None
    try:
        unsubscribe = backend.subscribe(job_id, progress.update)
    except Exception:
        pass
    try:
        while True:
            st = backend.wait(job_id, timeout=1.0)
            progress.update(st)
            if st.terminal:
                return st
    finally:
        if unsubscribe is not None:
            try:
                unsubscribe()
            except Exception:
                pass


def follow_logs(backend, job_id: str) -> None:
    """Print the job's log lines as they come, until it ends (to stdout, like ``logs -f``)."""
    try:
        for line in backend.logs(job_id, follow=True):
            sys.stdout.write(line if line.endswith("\n") else line + "\n")
            sys.stdout.flush()
    except BrokenPipeError:
        pass


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


# ---------------------------------------------------------------- verbs
def cmd_submit(args: argparse.Namespace, force_sbatch: bool = False) -> int:
    from ..handle import Job
    kind, builders = make_builders(args, force_sbatch)
    specs = [b.spec() for b in builders]          # every spec checked before anything is created
    backend = backend_for(specs[0].backend)
    ids = [backend.submit(s) for s in specs]
    if args.follow:
        args.wait = True
    if not args.wait:
        if args.output in ("json", "yaml"):
            output.dump([backend.status(i).to_dict() for i in ids] if len(ids) > 1
                        else backend.status(ids[0]).to_dict(), args.output)
        else:
            for i in ids:
                print(i if args.output == "name" else f"submitted {i}")
        return exitcodes.OK
    for i in ids:  # the id first, on stderr (stdout stays the result / -o output)
        sys.stderr.write(f"submitted {i}" + ("" if args.follow else f" (logs: gpujobs logs {i} -f)")
                         + "\n")
    sys.stderr.flush()
    progress = output.Progress(live=False if args.follow else
                               None if args.progress == "auto" else args.progress == "live")
    finals: list[JobStatus] = []
    results: dict[str, Any] = {}
    try:
        for job_id in ids:
            if args.follow:
                follow_logs(backend, job_id)
            finals.append(wait_for(backend, job_id, progress))
    except KeyboardInterrupt:
        progress.close()
        from ..handle import interrupted_line
        sys.stderr.write(interrupted_line(ids, f"gpujobs cancel {' '.join(ids)}") + "\n")
        return exitcodes.INTERRUPTED
    finally:
        progress.close()
    code = exitcodes.OK
    for st, spec in zip(finals, specs):
        if st.phase != "succeeded":
            code = exitcodes.JOB_FAILED
        if spec.fn is not None:
            try:
                results[st.job_id] = Job(st.job_id, backend, spec=spec).result(timeout=0)
            except JobError as exc:
                code = exitcodes.JOB_FAILED
                sys.stderr.write(f"gpujobs: job {st.job_id}: {exc}\n")
            except Exception as exc:  # the remote exception, re-raised as its own type
                code = exitcodes.JOB_FAILED
                rank = getattr(exc, "rank", None)
                sys.stderr.write(f"gpujobs: job {st.job_id} raised {type(exc).__name__}: {exc}"
                                 + (f" (rank {rank})" if rank is not None else "") + "\n")
        elif st.phase != "succeeded":
            sys.stderr.write(f"gpujobs: job {st.job_id} {st.phase}" + (f": {st.message}" if st.message else "") + "\n")
    if args.output in ("json", "yaml"):
        docs = []
        for st in finals:
            d = st.to_dict()
            if st.job_id in results:
                d["result"] = _jsonable(results[st.job_id])
            docs.append(d)
        output.dump(docs if len(docs) > 1 else docs[0], args.output)
    else:
        for st in finals:
            line = st.job_id if args.output == "name" else st.summary()
            if st.job_id in results and args.output != "name":
                line += f"\nresult: {results[st.job_id]!r}"
            print(line)
    return code


def cmd_plan(args: argparse.Namespace) -> int:
    """`gpujobs plan TARGET [submit's options]`: the what-if, nothing submitted."""
    args.wait = False
    _, builders = make_builders(args)
    specs = [b.spec() for b in builders]  # every spec checked first, as submit does
    plans = [b.plan() for b in builders]
    if args.output in ("json", "yaml"):
        docs = [p.to_dict() for p in plans]
        output.dump(docs if len(docs) > 1 else docs[0], args.output)
    else:
        for spec, p in zip(specs, plans):
            print(output.plan_lines(spec.display_name, p))
    # a job that can never fit: the plan is printed, and the exit is submit's refusal's (2)
    return exitcodes.USAGE if any(p.never for p in plans) else exitcodes.OK


def cmd_queue(args: argparse.Namespace) -> int:
    backend = backend_for(args.backend)
    if args.queue and backend.name == "kubernetes" and isinstance(backend, ChecksQueues):
        # (local: jobs() checks its queues itself)
        backend.check_queue(args.queue, args.namespace)  # a misspelt LocalQueue: exit 2, not an empty table
    statuses = backend.jobs(args.queue)
    if args.namespace:
        statuses = [s for s in statuses if s.extra.get("namespace", args.namespace) == args.namespace
                    and (s.backend != "kubernetes" or s.job_id.startswith(args.namespace + "/"))]
    if not args.all:
        statuses = [s for s in statuses if not s.terminal]
    statuses = output.sort_jobs(statuses)
    if args.output in ("json", "yaml"):
        output.dump([s.to_dict() for s in statuses], args.output)
    elif args.output == "name":
        for s in statuses:
            print(s.job_id)
    else:
        headers, rows = output.job_rows(statuses, wide=args.output == "wide")
        print(output.table(rows, headers))
    return exitcodes.OK


def cmd_status(args: argparse.Namespace) -> int:
    docs = []
    for raw in args.job:
        job_id = job_ref(args, raw)
        st = backend_for(args.backend, job_id).status(job_id)
        if args.output in ("json", "yaml"):
            docs.append(st.to_dict())
        elif args.output == "name":
            print(st.phase)
        else:
            print(output.status_lines(st))
    if docs:
        output.dump(docs if len(docs) > 1 else docs[0], args.output)
    return exitcodes.OK


def cmd_logs(args: argparse.Namespace) -> int:
    job_id = job_ref(args, args.job)
    backend = backend_for(args.backend, job_id)
    backend.status(job_id)  # not found → exit 4 before printing anything
    try:
        for line in backend.logs(job_id, rank=args.rank, follow=args.follow):
            sys.stdout.write(line if line.endswith("\n") else line + "\n")
            if args.follow:
                sys.stdout.flush()
    except BrokenPipeError:
        pass
    except KeyboardInterrupt:
        from ..handle import interrupted_line
        sys.stderr.write(interrupted_line(job_id, f"gpujobs cancel {job_id}") + "\n")
        return exitcodes.INTERRUPTED
    return exitcodes.OK


def cmd_stack(args: argparse.Namespace) -> int:
    """``gpujobs stack JOB [--rank N]``: every rank's Python stacks (as py-spy dump, no ptrace)."""
    from ..handle import Job
    job_id = job_ref(args, args.job)
    backend = backend_for(args.backend, job_id)
    stacks = Job(job_id, backend).stacks(rank=args.rank, timeout=args.timeout)
    if args.output in ("json", "yaml"):
        output.dump({str(r): text for r, text in stacks.items()}, args.output)
        return exitcodes.OK if stacks else exitcodes.JOB_FAILED
    for rank, text in stacks.items():
        print(f"=== rank {rank} ===")
        print(text.rstrip() + "\n")
    if not stacks:
        sys.stderr.write(f"gpujobs: no rank of {job_id} answered within {args.timeout:g} s\n")
        return exitcodes.JOB_FAILED
    return exitcodes.OK


def cmd_cancel(args: argparse.Namespace) -> int:
    for raw in args.job:
        job_id = job_ref(args, raw)
        backend = backend_for(args.backend, job_id)
        before = backend.status(job_id)
        backend.cancel(job_id)
        print(f"{job_id} already {before.phase}" if before.terminal else f"cancelled {job_id}")
    return exitcodes.OK


def cmd_render(args: argparse.Namespace) -> int:
    args.wait, args.backend = False, None
    _, builders = make_builders(args)
    specs = [b.spec() for b in builders]
    job_only = getattr(args, "job_only", False)
    notes: list[str] = []
    from ..backends import kubernetes
    objs: dict[tuple, dict] = {}  # the shared objects once, however many tasks an array has
    for s in specs:
        for o in kubernetes.render_objects(s, args.kind, job_only=job_only, notes=notes):
            objs.setdefault((o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]), o)
    if args.output == "json":
        output.dump(list(objs.values()), "json")
    else:
        sys.stdout.write(kubernetes.to_yaml(list(objs.values())))
    for line in dict.fromkeys(notes):
        sys.stderr.write(f"gpujobs: {line}\n")
    return exitcodes.OK


def cmd_admin_rbac(args: argparse.Namespace) -> int:
    """The namespaced Role gpujobs needs and a RoleBinding to ``--user``, for ``kubectl apply -f -``."""
    from ..backends import kubernetes
    objs = kubernetes.user_manifests(args.namespace, args.user)
    if args.output == "json":
        output.dump({"apiVersion": "v1", "kind": "List", "items": objs}, "json")
    else:
        import yaml
        sys.stdout.write(yaml.safe_dump_all(objs, sort_keys=False))
    return exitcodes.OK


def cmd_admin_mpi_image(args: argparse.Namespace) -> int:
    """gpujobs' MPI image's Dockerfile, for ``docker build -t TAG --build-arg PYTHON=X.Y -``."""
    from ..backends import kubernetes
    sys.stdout.write(kubernetes.MPI_DOCKERFILE)
    return exitcodes.OK


def cmd_admin_queues(args: argparse.Namespace) -> int:
    import warnings
    from .. import admin
    if (args.table is None) == (args.slurm_conf is None):
        raise SpecError("admin queues", "give a TABLE.yaml or --slurm-conf FILE (one of them)",
                        "gpujobs admin queues teams.yaml  |  gpujobs admin queues --slurm-conf slurm.conf")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", admin.SlurmConfWarning)
        if args.emit_table:
            if args.slurm_conf is None:
                raise SpecError("--table", "prints the table made from a slurm.conf", "add --slurm-conf FILE")
            data: Any = admin.table_from_slurm_conf(args.slurm_conf, args.namespace or "default", args.cohort)
        else:
            data = admin.render_queues(args.table, slurm_conf=args.slurm_conf,
                                       namespace=args.namespace or "default", cohort=args.cohort)
    for w in caught:
        sys.stderr.write(f"warning: {w.message}\n")
    if args.output == "json":
        output.dump(data, "json")
    else:
        import yaml
        if isinstance(data, list):
            sys.stdout.write(yaml.safe_dump_all(data, sort_keys=False))
        else:
            sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    return exitcodes.OK


def cmd_admin_trainer_runtimes(args: argparse.Namespace) -> int:
    """gpujobs' ClusterTrainingRuntimes, for ``kubectl apply -f -`` (render.kubeflow.training_runtimes)."""
    from ..backends import kubernetes
    objs = kubernetes.training_runtimes(**({"image": args.image} if args.image else {}))
    if args.output == "json":
        output.dump(objs, "json")
    else:
        import yaml
        sys.stdout.write(yaml.safe_dump_all(objs, sort_keys=False))
    return exitcodes.OK


def _running_local_jobs() -> list[str]:
    """Ids of the local jobs that have ranks (what stopping the agent cancels); never starts
    an agent."""
    from ..backends import local
    backend = local.LocalBackend()
    if not backend.client.running():
        return []
    try:
        return [st.job_id for st in backend.jobs() if st.phase in ("starting", "running")]
    except Exception:  # noqa: BLE001 - the stop itself must still happen
        return []


def cmd_agent_stop(args: argparse.Namespace) -> int:
    from ..backends import local
    running = _running_local_jobs()
    result = local.stop_agent()
    from ..config import gpujobs_home
    home = gpujobs_home()
    if home.is_dir():
        (home / local.STOPPED_MARKER).write_text("stopped by `gpujobs agent stop`\n")
    if result is False or result == 0:
        print("no local agent was running")
    else:
        print("stopped the local agent" + (f" (pid {result})" if isinstance(result, int) and
                                            not isinstance(result, bool) else "")
              + (f"; its running jobs were cancelled: {', '.join(running)}" if running
                 else "; no job was running"))
    print("it stays stopped: open views (notebook widgets, `gpujobs status`) show the saved "
          "state and queued jobs wait; the next `gpujobs submit` (or gpujobs.submit) starts it")
    return exitcodes.OK
