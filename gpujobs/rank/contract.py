"""The rank contract: what a launcher tells a rank, and where a local job's files lie.

Every ``GPUJOBS_*`` environment variable gpujobs writes or reads is named here once, and so
is every file of a local job folder. Writers (the local launchers, the pod renderer, the pod
bootstrap, the simulated kubelet) build a :class:`RankEnv` and call :meth:`RankEnv.to_env`;
the one reader, the runner, calls :meth:`RankEnv.from_env`. Upstream controllers' variables
(``RANK``, ``MASTER_ADDR``, ``OMPI_*`` …) are not gpujobs' and are not named here.

Standard library only: this module is shipped into pods and imported by the pod bootstrap.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping

# ------------------------------------------------------------------ what a rank is told
JOB_ID = "GPUJOBS_JOB_ID"
"""The job's id: ``ctx.job_id``; the local MPI/Ray clean-up finds a job's processes by it."""
FRAMEWORK = "GPUJOBS_FRAMEWORK"
"""ddp, fsdp, ray or mpi: which framework the runner sets up before calling the function."""
PAYLOAD = "GPUJOBS_PAYLOAD"
"""Path of the sealed call (a ``.b64`` file is base64: a pod annotation projected as a file)."""
KEY = "GPUJOBS_KEY"
"""The job's HMAC key in hex (tests only; launchers pass :data:`KEY_FILE`, never the key)."""
KEY_FILE = "GPUJOBS_KEY_FILE"
"""Path of the file holding the HMAC key in hex."""
KEY_CONTEXT = "GPUJOBS_KEY_CONTEXT"
"""When set, the job id the key file's key is derived for (Kubernetes: a namespace key)."""
RESULT_SINK = "GPUJOBS_RESULT_SINK"
"""Where outcomes go: ``dir:PATH`` (local: files in PATH) or ``log`` (pod log lines)."""
RETURN_ALL = "GPUJOBS_RETURN_ALL"
"""``1``: every rank sends back its outcome, not only rank 0 (``.return_all()``)."""
CHECKPOINT_DIR = "GPUJOBS_CHECKPOINT_DIR"
"""The job's checkpoint folder: ``ctx.checkpoint_dir``, kept across preemption restarts."""
RESTARTS = "GPUJOBS_RESTARTS"
"""How many times the job was requeued before this run (``ctx.restarts``)."""
COMMAND = "GPUJOBS_COMMAND"
"""A JSON list: the program each rank runs instead of a function (command jobs)."""
DEVICE = "GPUJOBS_DEVICE"
"""``cpu``: CPU ranks (gloo), whatever torch finds; unset or ``auto``: GPUs when visible."""
TERMINATION_LOG = "GPUJOBS_TERMINATION_LOG"
"""A pod's termination message file: the result line is appended there too when it fits."""
STACK_REQUEST = "GPUJOBS_STACK_REQUEST"
"""A pod's projected stack-request annotation: a new nonce there asks for ``job.stacks()``."""
RENDEZVOUS_FILE = "GPUJOBS_RENDEZVOUS_FILE"
"""The FileStore a local torch gang meets through (no port)."""
LAUNCH_FILE = "GPUJOBS_LAUNCH_FILE"
"""A local rank's start gate (:data:`LAUNCH_FILE_NAME`): it runs nothing until its launch is let go."""
LAUNCH = "GPUJOBS_LAUNCH"
"""The token of the launch a local rank belongs to (see :func:`launch_state`)."""
GRACE_S = "GPUJOBS_GRACE_S"
"""Kubernetes: the pod's grace period, the seconds between the stop's SIGTERM and the kubelet's
SIGKILL. A rank whose function has not returned by then exits :data:`STOPPED_EXIT` just before
(:func:`stop_exit_after`), not 137 from the SIGKILL."""
LOG_DIR = "GPUJOBS_LOG_DIR"
"""The local MPI wrapper's log folder (``rank-N.log`` per rank)."""
MPI_DNS_WAIT_S = "GPUJOBS_MPI_DNS_WAIT_S"
"""Seconds an MPIJob launcher waits for its workers' host names to resolve (default 60)."""
MPI_DEVICES = "GPUJOBS_MPI_DEVICES"
"""Local MPI GPUs per rank, ``"0,1;2,3"``: rank r sees the r-th group."""
PHASE_FILE = "GPUJOBS_PHASE_FILE"
"""A file the driver writes its start-up phase to ("starting Ray head"), shown as the message."""
RAY_ADDRESS = "GPUJOBS_RAY_ADDRESS"
"""The Ray cluster the driver joins (``auto`` in a RayJob); unset: a private local instance."""
RAY_NUM_CPUS = "GPUJOBS_RAY_NUM_CPUS"
"""CPUs of the private local Ray instance."""
RAY_NUM_GPUS = "GPUJOBS_RAY_NUM_GPUS"
"""GPUs of the private local Ray instance."""
RAY_TEMP_DIR = "GPUJOBS_RAY_TEMP_DIR"
"""The private local Ray instance's temp folder (this job's only)."""
RAY_OBJECT_STORE_BYTES = "GPUJOBS_RAY_OBJECT_STORE_BYTES"
"""Object store size of the private local Ray instance."""
RAY_VERSION = "GPUJOBS_RAY_VERSION"
"""The submitter's Ray version; the driver refuses a different one."""
RAY_LAUNCHER_CLEANS = "GPUJOBS_RAY_LAUNCHER_CLEANS"
"""``1``: the launcher ends Ray after the driver, so the driver skips ``ray.shutdown()``."""

# --------------------------------------------------- settings ranks, agent and pods read
PROGRESS_INTERVAL = "GPUJOBS_PROGRESS_INTERVAL"
"""Seconds between two progress reports of a rank (default 1)."""
METRICS_INTERVAL = "GPUJOBS_METRICS_INTERVAL"
"""Seconds between two metrics samples (default 2; 0 turns a pod's sampler off)."""
STALL_FLOOR_S = "GPUJOBS_STALL_FLOOR_S"
"""Seconds of silence before ranks are flagged as stalled, at least (default 60; 0: off)."""
STALL_SM_PCT = "GPUJOBS_STALL_SM_PCT"
"""A GPU with a kernel resident the whole sampling round but under this percentage of its SMs
busy (NVML GPM) only waits, and its rank counts as quiet (default 50; 0: off)."""
STARTUP_NOTE_S = "GPUJOBS_STARTUP_NOTE_S"
"""Seconds after a local gang's launch before its status names the ranks that have not reached
the job's function yet (default 20; 0 turns it off)."""
STALL_FACTOR = "GPUJOBS_STALL_FACTOR"
"""A stall is also this many usual report intervals of silence (default 5)."""
HOST = "GPUJOBS_HOST"
"""The host name metrics samples carry (default: the machine's)."""

# ------------------------------------------------------------ client and agent settings
HOME = "GPUJOBS_HOME"
"""The local state folder (default ``~/.gpujobs``)."""
CONFIG = "GPUJOBS_CONFIG"
"""The configuration file (default ``$GPUJOBS_HOME/config.toml``)."""
BACKEND = "GPUJOBS_BACKEND"
"""The default backend (local or kubernetes)."""
LOCAL_GPUS = "GPUJOBS_LOCAL_GPUS"
"""How many GPU slots the local agent hands out (default: the GPUs NVML finds)."""
LOCAL_CPUS = "GPUJOBS_LOCAL_CPUS"
"""The local CPU quota for ranks that ask for no GPU."""
AGENT_IDLE_S = "GPUJOBS_AGENT_IDLE_S"
"""Seconds the local agent stays up with nothing to do."""
DISPLAY = "GPUJOBS_DISPLAY"
"""``html`` or ``text``: how views display, whatever the front end seems to be."""
LAB_REFRESH_S = "GPUJOBS_LAB_REFRESH_S"
"""Seconds between the JupyterLab panel's job listings (one backend request each; default 2)."""
DEBUG = "GPUJOBS_DEBUG"
"""Set (not 0): the CLI shows tracebacks, and notebooks show gpujobs' own frames in them."""

ENV_PREFIX = "GPUJOBS_"
"""Every gpujobs variable starts so (a simulated pod starts without the host's)."""
KEY_PREFIX = "GPUJOBS_KEY"
"""Variables starting so (the key and its file) never travel in a recorded environment."""
DEFAULT_CHECKPOINT_DIR = "/tmp/gpujobs-ckpt"
"""A rank's checkpoint folder when the launcher names none."""


@dataclass(frozen=True)
class RankEnv:
    """What a launcher tells one rank; ``None`` fields are not written (the reader's default).

    ``to_env()`` writes it, ``from_env()`` reads it back (``from_env(e.to_env()) == e`` for the
    fields written)."""
    job_id: str | None = None
    framework: str | None = None
    payload: str | None = None
    key_file: str | None = None
    key_context: str | None = None
    result_sink: str | None = None
    return_all: bool | None = None
    checkpoint_dir: str | None = None
    restarts: int | None = None
    command: tuple[str, ...] | None = None
    device: str | None = None
    termination_log: str | None = None
    stack_request: str | None = None
    rendezvous_file: str | None = None
    launch_file: str | None = None
    launch: str | None = None
    grace_s: float | None = None

    def to_env(self) -> dict[str, str]:
        """The environment variables of the fields that are set, in field order."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, bool):
                text = "1" if value else "0"
            elif f.name == "command":
                text = json.dumps(list(value))
            else:
                text = str(value)
            out[_FIELD_ENV[f.name]] = text
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "RankEnv":
        """Read a rank's contract back (``os.environ`` by default); unset or empty: None."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(_FIELD_ENV[f.name])
            if raw is None or raw == "":
                continue
            if f.name == "return_all":
                values[f.name] = raw == "1"
            elif f.name == "restarts":
                values[f.name] = int(raw)
            elif f.name == "grace_s":
                values[f.name] = float(raw)
            elif f.name == "command":
                values[f.name] = tuple(json.loads(raw))
            else:
                values[f.name] = raw
        return cls(**values)  # type: ignore[arg-type]

    def setdefault_into(self, env: dict[str, str]) -> dict[str, str]:
        """Add the set fields that ``env`` does not have yet (a pod's own env wins); ``env``."""
        for name, value in self.to_env().items():
            env.setdefault(name, value)
        return env


_FIELD_ENV = {"job_id": JOB_ID, "framework": FRAMEWORK, "payload": PAYLOAD, "key_file": KEY_FILE,
              "key_context": KEY_CONTEXT, "result_sink": RESULT_SINK, "return_all": RETURN_ALL,
              "checkpoint_dir": CHECKPOINT_DIR, "restarts": RESTARTS, "command": COMMAND,
              "device": DEVICE, "termination_log": TERMINATION_LOG,
              "stack_request": STACK_REQUEST, "rendezvous_file": RENDEZVOUS_FILE,
              "launch_file": LAUNCH_FILE, "launch": LAUNCH, "grace_s": GRACE_S}


def result_sink_dir(sink: str | None) -> Path | None:
    """The folder of a ``dir:PATH`` result sink; None for the ``log`` sink (or none)."""
    return Path(sink[4:]) if sink and sink.startswith("dir:") else None


def dir_sink(path: Path | str) -> str:
    """The ``dir:PATH`` result sink value for ``path``."""
    return f"dir:{path}"


# ------------------------------------------------------------------ a local job's folder
@dataclass(frozen=True)
class RankFile:
    """A per-rank file name, ``<prefix><rank><suffix>``."""
    prefix: str
    suffix: str

    def name(self, rank: int) -> str:
        """The file name of ``rank``."""
        return f"{self.prefix}{rank}{self.suffix}"

    @property
    def glob(self) -> str:
        """The glob pattern matching every rank's file."""
        return f"{self.prefix}*{self.suffix}"

    @property
    def any_glob(self) -> str:
        """The glob pattern matching every rank's file and its temporary copies."""
        return f"{self.prefix}*"

    def rank_of(self, name: str) -> int | None:
        """The rank a file name of this kind is for, None when it is not one."""
        m = re.fullmatch(re.escape(self.prefix) + r"(\d+)" + re.escape(self.suffix), name)
        return int(m.group(1)) if m else None


OUTCOME = RankFile("outcome-", ".bin")
"""results/: a rank's sealed outcome (value or exception)."""
EXIT = RankFile("exit-", "")
"""results/: a zygote-forked rank's exit code (its parent is the zygote, not the agent)."""
FAILURE = RankFile("failure-", ".json")
"""results/: plain JSON beside a failed outcome: exception type and whether it is collateral."""
STARTED = RankFile("started-", "")
"""results/: a rank reached the job's function (or command): written just before calling it."""
STACKS = RankFile("stacks-", ".txt")
"""results/: where SIGUSR2 makes a rank dump its threads' stacks."""
STACKPID = RankFile("stackpid-", ".json")
"""results/: which pid (and start time) to send SIGUSR2 for a rank's stacks."""
PROGRESS = RankFile("progress-", ".log")
"""results/: a rank's progress reports, one JSON line each."""
RANK_LOG = RankFile("rank-", ".log")
"""logs/: a rank's stdout and stderr."""
RENDEZVOUS = RankFile("rendezvous-", "")
"""The FileStore of one run of a torch gang, by restart number (not by rank)."""
PROCESS = RankFile("pid-", ".json")
"""pids/: one per local rank process, named by its pid: pid, start time, rank, launch token."""

SPEC_FILE = "spec.json"
"""The job's JobSpec.to_dict()."""
PAYLOAD_FILE = "payload.bin"
"""The sealed call (empty for a command job)."""
KEY_FILE_NAME = "key"
"""The job's HMAC key in hex (0600)."""
SUBMITTER_ENV_FILE = "env.json"
"""The submitting process's environment (0600): the ranks start from it."""
PHASE_FILE_NAME = "phase"
"""What the driver is doing before the function runs (see :data:`PHASE_FILE`)."""
METRICS_LOG = "metrics.log"
"""The agent's bounded metrics history of the job."""
RESULTS_DIR = "results"
"""Outcomes, exit codes, failure markers, stacks and progress (:class:`RankFile` s)."""
LOGS_DIR = "logs"
"""One log per rank (and ``mpirun.txt``)."""
CHECKPOINT_DIR_NAME = "checkpoint"
"""The job's checkpoint folder (:data:`CHECKPOINT_DIR`)."""
KEPT_OUTCOME = "gpujobs-returned-in-grace-{rank}.bin"
"""checkpoint folder (Kubernetes): a rank's sealed outcome when its function returned after the
stop was announced (its grace period), so the requeued run replays it instead of running again
(``{rank}``: the rank; rank 0's file marks the job finished)."""
STOPPED_EXIT = 143
"""A rank's exit code (Kubernetes) when its function ended without a result after the stop was
announced (SIGTERM: preemption, a suspend, a deadline): 128 + SIGTERM, as a process SIGTERM
killed. A BatchJob's podFailurePolicy ignores it, because the Job controller judges every pod of
the Job by that policy, those it deleted on a suspend too, until the kubelet removes them:
exiting 1 there failed a preempted Job (kubernetes@v1.37.2 pkg/controller/job/job_controller.go
getFailJobMessage; seen on the real control plane, tests/realcp/test_node_real.py)."""
STOP_MARGIN_S = 5.0
"""At most this long before its SIGKILL a stopped rank (or pod) exits :data:`STOPPED_EXIT`."""


def stop_exit_after(grace_s: float) -> float:
    """Seconds after its SIGTERM a rank whose function still runs exits :data:`STOPPED_EXIT`
    (and a pod's bootstrap kills its ranks and exits so): a third of the grace period, at most
    :data:`STOP_MARGIN_S`, before the SIGKILL. The margin covers a SIGTERM noticed late by a
    busy process (2.4 s seen with four ranks importing torch per core). A BatchJob's
    podFailurePolicy fails the Job on 137, the SIGKILL's code, even for a pod deleted on a
    suspend (see :data:`STOPPED_EXIT`)."""
    return max(0.0, grace_s - min(STOP_MARGIN_S, grace_s / 3))


MPIRUN_LOG = "mpirun.txt"
"""logs/: mpirun's own messages (local MPI gangs)."""
RAY_DIR = "ray"
"""The private Ray instance's temp folder, or a link to it."""
LAUNCH_FILE_NAME = "launch"
"""The start gate of the job's ranks: ``<token>`` (wait), ``<token> go`` (run), else fenced."""
PIDS_DIR = "pids"
"""Every rank process of the job's latest launch (:data:`PROCESS` files): a new agent finds them."""


def launch_line(token: str, go: bool) -> str:
    """What the launch file says: ranks of launch ``token`` wait for it, or run (``go``)."""
    return f"{token} go\n" if go else f"{token}\n"


def launch_state(text: str, token: str) -> str:
    """``"go"``, ``"wait"`` or ``"fenced"`` (another launch, or a new agent stopped this one)
    for a rank of launch ``token`` reading the launch file's ``text``."""
    words = text.split()
    if not words:
        return "wait"  # being written
    if words[0] != token:
        return "fenced"
    return "go" if words[1:] == ["go"] else "wait"


POD_CONFIG = "bootstrap.json"
"""A pod's job files: the bootstrap's settings (the job-files volume)."""
POD_INLINE_PAYLOAD = "payload.b64"
"""A pod's job files: the sealed call in base64, when it travels inline (a pod annotation)."""
POD_PAYLOAD = PAYLOAD_FILE
"""A pod's job files: the sealed call, when it travels in the job's Secret."""


class JobFolder:
    """The paths of one local job's folder (``$GPUJOBS_HOME/jobs/<id>/``)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    @property
    def key_file(self) -> Path:
        return self.root / KEY_FILE_NAME

    @property
    def payload_file(self) -> Path:
        return self.root / PAYLOAD_FILE

    @property
    def spec_file(self) -> Path:
        return self.root / SPEC_FILE

    @property
    def submitter_env_file(self) -> Path:
        return self.root / SUBMITTER_ENV_FILE

    @property
    def phase_file(self) -> Path:
        return self.root / PHASE_FILE_NAME

    @property
    def metrics_log(self) -> Path:
        return self.root / METRICS_LOG

    @property
    def result_dir(self) -> Path:
        return self.root / RESULTS_DIR

    @property
    def log_dir(self) -> Path:
        return self.root / LOGS_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / CHECKPOINT_DIR_NAME

    @property
    def ray_dir(self) -> Path:
        return self.root / RAY_DIR

    @property
    def launch_file(self) -> Path:
        return self.root / LAUNCH_FILE_NAME

    @property
    def pid_dir(self) -> Path:
        return self.root / PIDS_DIR

    def rank_log(self, rank: int) -> Path:
        return self.log_dir / RANK_LOG.name(rank)

    def result(self, kind: RankFile, rank: int) -> Path:
        """``results/<kind's name for rank>``."""
        return self.result_dir / kind.name(rank)
