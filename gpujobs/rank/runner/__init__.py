"""The one runner: the code that runs inside every rank, locally or in a pod.

It loads the authenticated payload, sets up the framework (torch.distributed,
MPI or Ray, see :mod:`gpujobs.rank.runner.frameworks`), calls ``fn``, and sends back
the outcome (value or exception with remote traceback) through the result sink:

- ``dir:PATH`` (local backend): ``PATH/outcome-<rank>.bin``
- ``log`` (Kubernetes): a ``GPUJOBS-RESULT <rank> <base64>`` line on stdout, read
  from the pod log by the client (needs no permission beyond reading logs; the markers are
  :mod:`gpujobs.rank.wire`'s).

Environment: RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK/NODE_RANK, MASTER_ADDR,
MASTER_PORT (torch), and gpujobs' own (:class:`gpujobs.rank.contract.RankEnv`: job id, framework,
payload file, key or key file, result sink, return-all, checkpoint folder, restarts …).

Modules: ``frameworks`` (set-up and teardown per framework), ``runlogs`` (a rank's log kept
beside its checkpoints).
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import signal
import sys
from pathlib import Path

from .. import contract
from ..contract import OUTCOME, FAILURE, STACKS, STACKPID, STARTED, RankEnv
from ..filemodes import open_private, replace_private, write_private
from ..wire import RESULT_MARKER, STACKS_MARKER


def read_key(rank_env: RankEnv | None = None) -> bytes:
    """The job's key: :data:`~gpujobs.rank.contract.KEY` / the key file, derived for the job named
    by the key context when set (Kubernetes: the file holds the submitter's namespace key)."""
    rank_env = rank_env or RankEnv.from_env()
    if os.environ.get(contract.KEY):
        key = bytes.fromhex(os.environ[contract.KEY])
    else:
        key = bytes.fromhex(Path(rank_env.key_file or "").read_text().strip())
    context = rank_env.key_context
    if not context:
        return key
    from ..envelope import derive_key  # cloudpickle: imported where a rank needs it
    return derive_key(key, context)


def read_payload(path: str) -> bytes:
    """The sealed call; a ``.b64`` file (a pod annotation projected by Kubernetes) is base64."""
    data = Path(path).read_bytes()
    return base64.b64decode(data) if path.endswith(".b64") else data


def outcome_path(directory: Path | str, rank: int) -> Path:
    return Path(directory) / OUTCOME.name(rank)


def result_dir() -> Path | None:
    """The directory of a ``dir:`` result sink (local backend), None for the ``log`` sink."""
    return contract.result_sink_dir(RankEnv.from_env().result_sink)


def write_outcome(blob: bytes, rank: int) -> None:
    directory = result_dir()
    if directory is not None:
        replace_private(outcome_path(directory, rank), blob, sync=True)
    else:
        line = f"{RESULT_MARKER} {rank} {base64.b64encode(blob).decode()}\n"
        sys.stdout.write("\n" + line)
        _termination_message(line)
    sys.stdout.flush()
    sys.stderr.flush()


TERMINATION_MESSAGE_LIMIT = 4096
"""The kubelet keeps at most 4096 bytes of a container's termination message (and 12 KiB for all
of a pod's containers; kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/
#customizing-the-termination-message)."""


def _termination_message(line: str) -> None:
    """Also append the result line to the container's termination message file
    (:data:`~gpujobs.rank.contract.TERMINATION_LOG`, /dev/termination-log in a pod) when the file stays within the
    kubelet's 4096 bytes: the kubelet copies it into the pod's status, where it outlives the log
    (rotation, a lost node's logs, a sidecar). A larger result is only in the log."""
    path = RankEnv.from_env().termination_log
    if not path:
        return
    data = line.encode()
    try:
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if size + len(data) > TERMINATION_MESSAGE_LIMIT:
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)  # one small write with O_APPEND: ranks of a pod do not interleave
        finally:
            os.close(fd)
    except OSError:
        pass


def _write_failure_marker(outcome) -> None:
    """Plain JSON beside the sealed outcome, so the launcher can tell cause from collateral
    without unpickling anything."""
    directory = result_dir()
    if directory is not None:
        try:
            write_private(directory / FAILURE.name(outcome.rank), json.dumps(
                {"type": outcome.exc_type, "collateral": outcome.collateral,
                 "message": (outcome.exc_message or "").strip()[:500]}))
        except OSError:
            pass


def mark_started(rank: int) -> None:
    """Say that this rank reached the job's function: start-up (imports, the gang's
    rendezvous) is over (the local agent names ranks that take long to get here)."""
    directory = result_dir()
    if directory is not None:
        try:
            write_private(directory / STARTED.name(rank), b"")
        except OSError:
            pass


def set_title(title: str, short: str | None = None) -> None:
    """Show ``title`` in ps/top (Linux): the comm name (prctl PR_SET_NAME: ``short``, 15 bytes) and the
    command line (the process's own argv area, as setproctitle does; /proc/self/stat says
    where it is). Best effort: nothing happens elsewhere."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p((short or title).encode()[:15]), 0, 0, 0)
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
        text = title.encode()[:end - start - 1]
        ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)
    except Exception:  # noqa: BLE001 - a title is cosmetic
        pass


_KEEP: list = []  # files faulthandler writes to (they must stay open)


def enable_faulthandler(rank: int) -> None:
    """A segfault or abort leaves every thread's Python stack in the rank's log (stderr); and,
    with a ``dir:`` sink, SIGUSR2 dumps all threads' stacks into ``stacks-<rank>.txt`` for
    ``job.stacks()`` (``stackpid-<rank>`` says which pid to signal: no ptrace needed)."""
    import faulthandler
    try:
        faulthandler.enable(file=sys.stderr, all_threads=True)
    except (ValueError, OSError, AttributeError):  # stderr without a file descriptor
        pass
    directory = result_dir()
    if directory is None or not hasattr(signal, "SIGUSR2"):
        return
    try:
        fh = open_private(directory / STACKS.name(rank), "a")
        faulthandler.register(signal.SIGUSR2, file=fh, all_threads=True, chain=False)
        _KEEP.append(fh)
        replace_private(directory / STACKPID.name(rank),
                        json.dumps({"pid": os.getpid(), "rank": rank, "created": _created()}))
    except (OSError, ValueError, RuntimeError):
        pass


def watch_stack_requests(rank: int, key: bytes, path: str, interval: float = 0.25) -> None:
    """Kubernetes: answer ``job.stacks()`` without exec. The client writes a nonce into a pod
    annotation that a downwardAPI volume projects at ``path``; on each new nonce this thread
    dumps every thread's stack and prints ``GPUJOBS-STACKS <rank> <nonce> <base64>`` on
    stdout (the pod log), the stacks sealed with the job's key like results."""
    import threading

    def loop() -> None:
        import faulthandler
        import tempfile
        from ..envelope import seal
        last = ""
        while True:
            try:
                with open(path) as fh:
                    nonce = fh.read().strip()
            except OSError:
                nonce = ""
            if nonce and nonce != last and len(nonce) <= 64:
                last = nonce
                try:
                    with tempfile.TemporaryFile("w+") as fh:
                        faulthandler.dump_traceback(file=fh, all_threads=True)
                        fh.seek(0)
                        text = _without_this_thread(fh.read())
                    blob = seal({"nonce": nonce, "rank": rank, "stacks": text}, key)
                    sys.stdout.write(f"\n{STACKS_MARKER} {rank} {nonce} "
                                     f"{base64.b64encode(blob).decode()}\n")
                    sys.stdout.flush()
                except Exception:  # noqa: BLE001 - never disturb the rank
                    pass
            time.sleep(interval)

    import time
    threading.Thread(target=loop, daemon=True, name="gpujobs-stacks").start()


def _without_this_thread(dump: str) -> str:
    import re
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump.strip())
    return "\n".join(b for b in blocks if "watch_stack_requests" not in b) + "\n"


def _created() -> float | None:
    """This process's start time as psutil reports it (so a reused pid is never signalled)."""
    try:
        import psutil
        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - psutil missing: the pid alone
        return None


def _log_failure(outcome) -> None:
    """The rank's own error with its full traceback; a peer's collateral error as one line
    (its full traceback is still in the outcome: ``exc.remote_traceback``)."""
    if outcome.collateral:
        import re
        msg = (outcome.exc_message.strip().splitlines() or [""])[0]
        msg = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", msg)[:300]
        sys.stderr.write(f"gpujobs: rank {outcome.rank} stopped because a peer rank failed "
                         f"({outcome.exc_type.rsplit('.', 1)[-1]}: {msg}); the failing rank's "
                         f"log holds the cause\n")
    else:
        sys.stderr.write(outcome.traceback)


def wait_for_launch(gate: Path, token: str, rank: int) -> None:
    """A local rank, before anything of the job runs: record this process (pid, start time)
    in the job's pids/ folder, where a restarted agent finds it, then wait at the start gate
    until the agent has recorded the launch (``go``). A fenced launch (a new agent took over
    before that; :func:`gpujobs.rank.contract.launch_state`) exits here, having run nothing."""
    import time

    pid = os.getpid()
    try:
        import psutil
        started = psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - the agent then matches the pid alone
        started = 0.0
    pid_dir = gate.parent / contract.PIDS_DIR
    record = pid_dir / contract.PROCESS.name(pid)
    try:
        pid_dir.mkdir(mode=0o700, exist_ok=True)
        replace_private(record, json.dumps({"pid": pid, "start": started, "rank": rank,
                                            "launch": token}))
    except OSError as exc:
        print(f"gpujobs: cannot record this rank's pid in {pid_dir}: {exc}", file=sys.stderr)
    # Recorded before the gate is read: a new agent either sees this file (and ends this
    # process) or has fenced the gate already (this process ends itself): never neither.
    every = 0.005
    while True:
        try:
            state = contract.launch_state(gate.read_text(), token)
        except FileNotFoundError:
            state = "fenced"
        except OSError:
            state = "wait"
        if state == "go":
            return
        if state == "fenced":
            print(f"gpujobs: rank {rank} of a launch the agent no longer runs (a restarted "
                  f"agent starts the job afresh); it exits without running the job", flush=True)
            os._exit(0)
        time.sleep(every)
        every = min(every * 1.5, 0.1)


def main() -> int:
    from ..context import JobContext, _set_current
    from ..envelope import open_envelope, seal
    from ..outcome import Outcome
    from ..shipping import unpack_call
    from . import frameworks

    env = os.environ
    rank = int(env.get("RANK") or env.get("OMPI_COMM_WORLD_RANK") or env.get("PMI_RANK") or 0)
    world = int(env.get("WORLD_SIZE") or env.get("OMPI_COMM_WORLD_SIZE") or env.get("PMI_SIZE") or 1)
    local_rank = int(env.get("LOCAL_RANK") or env.get("OMPI_COMM_WORLD_LOCAL_RANK") or 0)
    node_rank = int(env.get("GROUP_RANK", env.get("NODE_RANK", "0")))
    told = RankEnv.from_env(env)
    if told.launch_file and told.launch:
        wait_for_launch(Path(told.launch_file), told.launch, rank)
    framework = told.framework or "ddp"
    key = read_key(told)
    ctx = JobContext(job_id=told.job_id or "", rank=rank, world_size=world,
                     local_rank=local_rank, node_rank=node_rank, device="cpu",
                     checkpoint_dir=Path(told.checkpoint_dir or contract.DEFAULT_CHECKPOINT_DIR),
                     framework=framework, restarts=told.restarts or 0)
    # Preemption / cancel: SIGTERM only announces; the launcher kills after the grace period.
    signal.signal(signal.SIGTERM, lambda *_: ctx.request_stop())
    if told.grace_s is not None and result_dir() is None and not told.command:
        exit_before_sigkill(ctx, told.grace_s)
    _set_current(ctx)
    set_title(f"gpujobs {ctx.job_id} rank {rank}", f"r{rank} {ctx.job_id}")
    enable_faulthandler(rank)
    if result_dir() is None and told.stack_request:
        watch_stack_requests(rank, key, told.stack_request)

    if result_dir() is None:  # Kubernetes: earlier runs' logs; a run that returned in its grace
        from .runlogs import replay_and_keep
        replay_and_keep(ctx.checkpoint_dir, rank)
        _replay_kept_outcome(ctx)  # is not run again

    if told.command:
        mark_started(rank)
        return _run_command(list(told.command), ctx, key, told)

    setup = None
    try:
        fn, args, kwargs = unpack_call(open_envelope(read_payload(told.payload or ""), key))
        setup = frameworks.setup(framework, ctx)
        mark_started(ctx.rank)
        value = fn(*args, **kwargs)
        outcome = Outcome.success(ctx.rank, value)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
        outcome = Outcome.failure(ctx.rank, exc)
    ctx._flush_progress()  # the final step reaches the final status
    rank = ctx.rank
    if not outcome.ok:
        _write_failure_marker(outcome)
    blob = b""
    if not outcome.ok or rank == 0 or told.return_all:
        try:
            blob = seal(outcome, key)
        except Exception as exc:  # the return value itself cannot be pickled
            outcome = Outcome.failure(rank, TypeError(
                f"the function's return value cannot be pickled: {exc}"))
            blob = seal(outcome, key)
    if outcome.ok and ctx.should_stop() and result_dir() is None:
        _keep_outcome(ctx, blob)  # before the result line: the pod may go right after
    if blob:
        write_outcome(blob, rank)
    if outcome.ok:
        frameworks.teardown(framework, setup)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skips interpreter teardown: ~0.4 s per gang, no atexit aborts
    _log_failure(outcome)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(contract.STOPPED_EXIT if ctx.should_stop() and result_dir() is None else 1)


def _keep_outcome(ctx, blob: bytes) -> None:
    """A run that returned after the stop was announced (preemption's grace period) on
    Kubernetes: its outcome goes into the checkpoint folder (:data:`~gpujobs.rank.contract.KEPT_OUTCOME`),
    where the requeued run finds it when the folder is on a volume (``--volume``): the job ends
    with this result instead of running again. Without a volume the folder goes with the pod."""
    try:
        ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.checkpoint_dir / contract.KEPT_OUTCOME.format(rank=ctx.rank)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full folder: the run is repeated, as without a volume


def _replay_kept_outcome(ctx) -> None:
    """Exit with the kept outcome of a run that returned in its grace period (see _keep_outcome),
    when rank 0 kept one: the function is not run again."""
    if not (ctx.checkpoint_dir / contract.KEPT_OUTCOME.format(rank=0)).is_file():
        return
    try:
        blob = (ctx.checkpoint_dir / contract.KEPT_OUTCOME.format(rank=ctx.rank)).read_bytes()
    except OSError:
        blob = b""
    sys.stderr.write(f"gpujobs: rank {ctx.rank}: the job returned during its grace period before it was "
                     "requeued; its result is kept and the function is not run again\n")
    if blob:
        write_outcome(blob, ctx.rank)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_command(argv: list[str], ctx, key: bytes, told: RankEnv) -> int:
    """Command jobs (CLI scripts, sbatch bodies): run ``argv`` in this rank, pass on its exit code.

    ``python``/``python3`` means this interpreter (the job's venv). SIGTERM is forwarded.
    Rank 0's result is the exit code 0 when every rank succeeds.
    """
    from ..envelope import seal
    from ..outcome import Outcome

    if argv and argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]
    env = None
    if os.path.basename(argv[0]).startswith("python"):  # its segfaults leave a stack too
        env = dict(os.environ, PYTHONFAULTHANDLER="1")
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as exc:
        sys.stderr.write(f"gpujobs: cannot run {argv[0]!r}: {exc}\n")
        sys.stderr.flush()
        os._exit(127)

    def stop(*_: object) -> None:
        ctx.request_stop()
        proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    if told.grace_s is not None and result_dir() is None:
        exit_before_sigkill(ctx, told.grace_s, proc)
    code = proc.wait()
    if code == 0:
        if ctx.rank == 0 or told.return_all:
            write_outcome(seal(Outcome.success(ctx.rank, 0), key), ctx.rank)
        sys.stdout.flush()
        os._exit(0)
    if ctx.should_stop() and result_dir() is None:  # stopped: whatever the command's own code
        os._exit(contract.STOPPED_EXIT)
    os._exit(code if code > 0 else 128 - code)


def exit_before_sigkill(ctx, grace_s: float, child: subprocess.Popen | None = None) -> None:
    """Kubernetes: once the stop is announced (SIGTERM), a rank whose function (or command
    ``child``) still runs exits :data:`~gpujobs.rank.contract.STOPPED_EXIT` shortly before the
    kubelet's SIGKILL ends the grace period (:func:`~gpujobs.rank.contract.stop_exit_after`):
    the SIGKILL's 137 matched a batch/v1 Job's FailJob rule and failed a preempted job.

    A daemon thread counts down. It learns of the SIGTERM from the signal's wakeup fd, which the
    interpreter writes as the signal arrives: the Python-level handler runs only when the main
    thread is back in Python (not while it waits in a rendezvous or a long C call). Call from the
    main thread; should someone replace the wakeup fd, the flag the handler sets still counts."""
    import select
    import threading
    import time

    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: the flag alone
        os.close(w)

    def watch() -> None:
        while not ctx.should_stop():
            if select.select([r], [], [], 0.2)[0] and signal.SIGTERM in os.read(r, 64):
                break
        time.sleep(contract.stop_exit_after(grace_s))
        # os.write, not sys.stderr: the main thread may hold the stream's lock, blocked in a write
        os.write(2, (f"gpujobs: rank {ctx.rank}: still running near the end of its {grace_s:g} s grace "
                     f"period after the stop: it exits {contract.STOPPED_EXIT} before the SIGKILL, and "
                     f"the job runs again when it is requeued (save a checkpoint and return once "
                     f"gpujobs.context().should_stop() is True to keep its work)\n").encode())
        if child is not None:
            child.kill()
        os._exit(contract.STOPPED_EXIT)

    threading.Thread(target=watch, name="gpujobs-grace", daemon=True).start()
