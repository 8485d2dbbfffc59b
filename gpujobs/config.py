"""Configuration: environment first, then a TOML file, read once into a typed :class:`Settings`.

:func:`settings` returns it, cached per (file, its mtime and size, the ``GPUJOBS_*`` variables
below); :func:`reload` forgets it (tests). Every key is checked when the file is read: a wrong
one is a SpecError naming the key and the file. Variables win over the file:
``GPUJOBS_BACKEND`` over ``backend``, ``GPUJOBS_LOCAL_GPUS`` over ``[local] gpus``,
``GPUJOBS_LOCAL_CPUS`` over ``[local] cpus``, ``GPUJOBS_AGENT_IDLE_S`` over
``[local] idle_timeout_s``. The local agent's queues are built from ``settings().local`` by
:mod:`gpujobs.backends.local.queue_config`.

File: ``$GPUJOBS_CONFIG``, else ``$GPUJOBS_HOME/config.toml``, else
``~/.config/gpujobs/config.toml``. Example::

    backend = "local"              # or "kubernetes"

    [local]
    gpus = 4                       # GPU slots (default: what NVML finds)
    cpus = 8                       # CPU quota for ranks asking 0 GPUs (default: CPU count, at least 4;
                                   # env GPUJOBS_LOCAL_CPUS)
    idle_timeout_s = 600           # the agent exits after this long with nothing to do
    default_priority = "normal"
    kueue_version = "v0.20"        # whose scheduler the agent's admission follows: v0.17.0,
                                   # v0.19.2 or v0.20 (default: the newest; docs/admission.md)

    [[local.queues]]               # default: one queue "default" holding every slot
    name = "team-a"
    gpus = 2                       # nominal quota (GPU slots); cpus = 8, memory = "32Gi" optional
                                   # (cpus: what its 0-GPU ranks may use; default [local] cpus)
    cohort = "lab"                 # queues of one cohort lend each other idle quota
    borrowing_limit = 2            # at most this many slots above nominal (default: unlimited)
    strategy = "BestEffortFIFO"    # or "StrictFIFO"
    preemption = "LowerPriority"   # within the queue: Never | LowerPriority | LowerOrNewerEqualPriority
    reclaim = "Any"                # from borrowers of the cohort: Never | LowerPriority | Any
    local_queues = ["alice"]       # more names that submit into this queue

    [priorities]                   # default: low = 100, normal = 500 (default), high = 1000
    low = 100
    high = 1000

    [kubernetes]
    namespace = "team-a"
    queue = "team-a"
    kubeconfig = "~/.kube/config"  # also: context; else $KUBECONFIG, ~/.kube/config, in-cluster
    kueue_version = "v0.19.2"      # the cluster's Kueue, for plans (default: the newest supported)
    trainjob_runtime = "gpujobs-torch"              # the ClusterTrainingRuntime DDP/FSDP TrainJobs use
    trainjob_volcano_runtime = "gpujobs-torch-volcano"       # the one for volcano="gang"
    volcano_queue = "default"      # the Volcano Queue of jobs that name none
    checkpoint_volume = "ckpt"     # CLAIM[:PATH]: a PVC mounted into jobs that name no volume,
                                   # so ctx.checkpoint_dir survives preemption (docs/configuration.md)
    checkpoint_storage_class = "nfs"  # else a checkpointing job gets a claim of the default class
"""
from __future__ import annotations

import difflib
import os
import threading
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from . import contract, quantity
from .errors import SpecError


def gpujobs_home() -> Path:
    """State directory (``GPUJOBS_HOME``, default ``~/.gpujobs``)."""
    return Path(os.environ.get(contract.HOME) or Path.home() / ".gpujobs").expanduser()


def config_path() -> Path:
    if os.environ.get(contract.CONFIG):
        return Path(os.environ[contract.CONFIG]).expanduser()
    home_cfg = gpujobs_home() / "config.toml"
    if home_cfg.exists():
        return home_cfg
    return Path.home() / ".config" / "gpujobs" / "config.toml"


def read_file(path: Path) -> dict[str, Any]:
    """The parsed TOML file at ``path``, or {} when there is none. A broken file is a SpecError."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:  # a folder, no permission, binary junk
        raise SpecError(f"config file {path}", f"cannot be read: {exc}",
                        "point GPUJOBS_CONFIG at a readable TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"config file {path}", f"is not valid TOML: {exc}",
                        "fix the line named above, or point GPUJOBS_CONFIG elsewhere") from None


def parse_quantity(value: Any, what: str) -> float:
    """'32Gi' -> bytes; plain numbers pass through (:mod:`gpujobs.quantity` grammar, as a float)."""
    if isinstance(value, str):
        value = value.strip()  # our own config file: forgive spaces around a value
    return float(quantity.parse_quantity(value, what, example="32Gi or 512Mi"))


# ------------------------------------------------------------------------------ the settings
QUEUE_CHOICES = {
    "strategy": ("BestEffortFIFO", "StrictFIFO"),
    "preemption": ("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
    "reclaim": ("Never", "LowerPriority", "Any"),
}


@dataclass(frozen=True)
class QueueSettings:
    """One ``[[local.queues]]`` table (quantities already parsed; None: unset)."""
    name: str
    gpus: float | None = None
    cpus: float | None = None
    memory: float | None = None
    cohort: str | None = None
    borrowing_limit: float | None = None
    strategy: str = "BestEffortFIFO"
    preemption: str = "LowerPriority"
    reclaim: str = "Never"
    local_queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class LocalSettings:
    """``[local]``, with the variables that win over it. ``gpus``/``cpus`` None: what the machine
    has (:mod:`gpujobs.devices`); ``*_from``: where a value came from, for errors and notices."""
    gpus: int | None = None
    gpus_from: str = ""
    cpus: float | None = None
    cpus_from: str = ""
    idle_timeout_s: float = 300.0
    default_priority: str | None = None
    kueue_version: str | None = None
    queues: tuple[QueueSettings, ...] = ()

    def queue_names(self) -> list[str]:
        """The queue names a local submit may use: each queue's name and its local_queues."""
        queues = self.queues or (QueueSettings("default"),)
        return sorted({q.name for q in queues} | {n for q in queues for n in q.local_queues})


@dataclass(frozen=True)
class KubernetesSettings:
    """``[kubernetes]``: the kubernetes backend's defaults (its arguments win)."""
    namespace: str | None = None
    queue: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    kueue_version: str | None = None  # checked where used (a detected version may replace it)
    trainjob_runtime: str | None = None
    trainjob_volcano_runtime: str | None = None
    volcano_queue: str | None = None
    checkpoint_volume: str | None = None
    checkpoint_storage_class: str | None = None
    checkpoint_size: str | None = None


@dataclass(frozen=True)
class Settings:
    """Everything gpujobs reads from the environment and the config file, checked once."""
    path: Path
    backend: str = "local"
    local: LocalSettings = LocalSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    priorities: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """``[priorities]``; empty: the admission engine's defaults."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: Path | None = None,
                  env: Mapping[str, str] | None = None) -> "Settings":
        """Settings from a parsed file ``data`` and the variables ``env`` (default: none).
        A wrong key or value is a SpecError naming it and ``path``."""
        return _Reader(Path(path) if path else config_path(), env or {}).settings(data)


DEFAULT_PRIORITY_NAMES = ("low", "normal", "high")
"""The priority classes when ``[priorities]`` names none (values: the admission engine's)."""
_TOP = ("backend", "local", "kubernetes", "priorities")
_LOCAL = ("gpus", "cpus", "idle_timeout_s", "default_priority", "kueue_version", "queues")
QUEUE_FIELDS = tuple(f.name for f in fields(QueueSettings))
KUBERNETES_FIELDS = tuple(f.name for f in fields(KubernetesSettings))
ENV = (contract.BACKEND, contract.LOCAL_GPUS, contract.LOCAL_CPUS, contract.AGENT_IDLE_S)
"""The variables :class:`Settings` holds (besides ``GPUJOBS_HOME``/``GPUJOBS_CONFIG``, which find
the file)."""


def _as_number(value: Any) -> float | None:
    """``value`` as a float (4, 4.0 and "4" alike), None when it is not a number (or a bool)."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class _Reader:
    """Checks one parsed file and the variables into a :class:`Settings`."""

    def __init__(self, path: Path, env: Mapping[str, str]):
        self.path = path
        self.env = env

    def fail(self, key: str, problem: str, fix: str) -> SpecError:
        return SpecError(key, problem, fix)

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a table, got {value!r}",
                            f"write it as a {where} section in {self.path}")
        return value

    def known(self, section: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in section:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                raise self.fail(f"{where}{key}".strip(), f"is not a setting{' of ' + where if where else ''}"
                                + (f" (did you mean {close[0]!r}?)" if close else ""),
                                f"use one of {', '.join(sorted(allowed))}, or remove it from {self.path}")

    def text(self, value: Any, key: str, example: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}", f'e.g. {key.split()[-1]} = "{example}"')
        return value

    def settings(self, data: Mapping[str, Any]) -> Settings:
        self.known(data, _TOP, "")
        backend = self.env.get(contract.BACKEND) or data.get("backend") or "local"
        if not isinstance(backend, str):
            raise self.fail("backend", f"{backend!r} is not a backend name (config file {self.path})",
                            'set backend = "local" there (one of kubernetes, local)')
        prios = self.table(data.get("priorities") or {}, "[priorities]")
        for k, v in prios.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.fail(f"[priorities] {k}", f"must be an integer, got {v!r}", f"e.g. {k} = 500")
        local = self.local(self.table(data.get("local") or {}, "[local]"), prios)
        k8s = self.table(data.get("kubernetes") or {}, "[kubernetes]")
        self.known(k8s, KUBERNETES_FIELDS, "[kubernetes] ")
        kubernetes = KubernetesSettings(**{k: self.text(v, f"[kubernetes] {k}", "NAME")
                                           for k, v in k8s.items()})
        return Settings(path=self.path, backend=backend, local=local, kubernetes=kubernetes,
                        priorities=MappingProxyType(dict(prios)))

    def local(self, local: dict[str, Any], prios: Mapping[str, int]) -> LocalSettings:
        self.known(local, _LOCAL, "[local] ")
        gpus, gpus_from = self.env.get(contract.LOCAL_GPUS), contract.LOCAL_GPUS
        if gpus:
            slots: int | None = self.slot_count(gpus, gpus_from, "e.g. GPUJOBS_LOCAL_GPUS=4, or unset it")
        elif local.get("gpus") is not None:
            gpus_from = "[local] gpus"
            slots = self.slot_count(local["gpus"], gpus_from,
                                    "e.g. gpus = 4, or remove it to use what NVML finds")
        else:
            slots, gpus_from = None, ""
        cpus, cpus_from = self.env.get(contract.LOCAL_CPUS), contract.LOCAL_CPUS
        if cpus:
            ncpus: float | None = self.cpu_count(cpus, cpus_from, "e.g. GPUJOBS_LOCAL_CPUS=8, or unset it")
        elif local.get("cpus") is not None:
            cpus_from = "[local] cpus"
            ncpus = self.cpu_count(local["cpus"], cpus_from, "e.g. cpus = 8, or remove it to use every CPU")
        else:
            ncpus, cpus_from = None, ""
        idle = self.env.get(contract.AGENT_IDLE_S)
        idle_from = contract.AGENT_IDLE_S if idle else "[local] idle_timeout_s"
        idle_s = _as_number(idle if idle else local.get("idle_timeout_s", 300))
        if idle_s is None or idle_s != idle_s:
            raise self.fail(idle_from, f"must be a number of seconds, got {idle or local.get('idle_timeout_s')!r}",
                            "e.g. GPUJOBS_AGENT_IDLE_S=600" if idle else "e.g. idle_timeout_s = 600")
        default = local.get("default_priority")
        names = prios or DEFAULT_PRIORITY_NAMES
        if default is not None and default not in names:
            raise self.fail("[local] default_priority", f"unknown class {default!r}",
                            f"use one of {', '.join(names)}")
        version = self.text(local.get("kueue_version"), "[local] kueue_version", "v0.20")
        queues = local.get("queues") or []
        if not isinstance(queues, list):
            raise self.fail("[[local.queues]]", f"must be an array of tables, got {queues!r}",
                            f'write each queue as a [[local.queues]] table with name = "team-a" in {self.path}')
        return LocalSettings(gpus=slots, gpus_from=gpus_from, cpus=ncpus, cpus_from=cpus_from,
                             idle_timeout_s=idle_s, default_priority=default, kueue_version=version,
                             queues=tuple(self.queue(q, i) for i, q in enumerate(queues)))

    def queue(self, q: Any, i: int) -> QueueSettings:
        where = f"[[local.queues]] #{i + 1}"
        q = self.table(q, where)
        if "name" not in q:
            raise self.fail(where, "has no name", 'add name = "team-a"')
        unknown = sorted(set(q) - set(QUEUE_FIELDS))
        if unknown:
            raise self.fail(f"{where} {unknown[0]}", f"is not a queue setting in queue {q['name']!r}",
                            f"use one of {', '.join(sorted(QUEUE_FIELDS))}")
        for key, allowed in QUEUE_CHOICES.items():
            if key in q and q[key] not in allowed:
                raise self.fail(f"{where} {key}", f"{q[key]!r} is not a valid {key}",
                                f"use one of {', '.join(allowed)}")
        def amount(key: str) -> float | None:
            return None if q.get(key) is None else parse_quantity(q[key], f"{where} {key}")

        return QueueSettings(
            name=str(q["name"]), gpus=amount("gpus"), cpus=amount("cpus"), memory=amount("memory"),
            cohort=q.get("cohort"), borrowing_limit=amount("borrowing_limit"),
            strategy=q.get("strategy", "BestEffortFIFO"), preemption=q.get("preemption", "LowerPriority"),
            reclaim=q.get("reclaim", "Never"), local_queues=tuple(str(n) for n in q.get("local_queues") or ()))

    def slot_count(self, value: Any, field: str, fix: str) -> int:
        """A positive whole number of GPU slots (4, 4.0 and "4" alike)."""
        number = _as_number(value)
        if number is None or number != int(number) or number < 1:
            raise self.fail(field, f"must be a positive whole number of GPU slots, got {value!r}", fix)
        return int(number)

    def cpu_count(self, value: Any, field: str, fix: str) -> float:
        number = _as_number(value)
        if number is None or not number > 0 or number != number or number == float("inf"):
            raise self.fail(field, f"must be a positive number of CPUs, got {value!r}", fix)
        return number


_cache_lock = threading.Lock()
_cache: tuple[Any, Settings] | None = None


def settings() -> Settings:
    """This process's :class:`Settings`: read again only when the file (its path, mtime or size)
    or one of the variables it holds has changed since the last call."""
    global _cache
    path = config_path()
    try:
        st = path.stat()
        stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    env = {name: os.environ[name] for name in ENV if os.environ.get(name)}
    key = (path, stamp, tuple(sorted(env.items())))
    with _cache_lock:
        if _cache is not None and _cache[0] == key:
            return _cache[1]
    loaded = Settings.from_dict(read_file(path), path, env)
    with _cache_lock:
        _cache = (key, loaded)
    return loaded


def reload() -> Settings:
    """Forget the cached settings and read them again (tests; a long-lived process)."""
    global _cache
    with _cache_lock:
        _cache = None
    return settings()


def kueue_version_of(version: str | None, where: str) -> str:
    """The supported Kueue version row ``version`` names (the newest when None); SpecError naming
    ``where`` for one that is not supported."""
    from .admission import gates
    try:
        return gates.kueue_version(version)
    except SpecError as exc:
        raise SpecError(where, f"Kueue {version!r} is not supported",
                        f'set kueue_version = "{gates.NEWEST}" (or one of {", ".join(gates.VERSIONS)}) '
                        f"in {config_path()}") from exc
