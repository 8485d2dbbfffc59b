"""Configuration: environment first, then a TOML file.

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

import os
import tomllib
from pathlib import Path
from typing import Any

from . import quantity
from .errors import SpecError
from .rank import contract


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


def default_backend_name() -> str:
    """``GPUJOBS_BACKEND``, then the config file's ``backend``, else ``local``."""
    return os.environ.get(contract.BACKEND) or load_config().get("backend") or "local"


def load_config() -> dict[str, Any]:
    """The parsed config file, or {} when there is none. A broken file is a SpecError."""
    path = config_path()
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


def idle_timeout_s(cfg: dict[str, Any] | None = None) -> float:
    """Seconds the local agent stays up with nothing to do (``GPUJOBS_AGENT_IDLE_S``)."""
    env = os.environ.get(contract.AGENT_IDLE_S)
    if env:
        return float(env)
    cfg = load_config() if cfg is None else cfg
    return float(cfg.get("local", {}).get("idle_timeout_s", 300))


_QUEUE_FIELDS = {"name", "gpus", "cpus", "memory", "cohort", "borrowing_limit", "strategy",
                 "preemption", "reclaim", "local_queues"}
_QUEUE_CHOICES = {
    "strategy": ("BestEffortFIFO", "StrictFIFO"),
    "preemption": ("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
    "reclaim": ("Never", "LowerPriority", "Any"),
}


def local_queue_names(cfg: dict[str, Any] | None = None) -> list[str]:
    """The queue names a local submit may use: each [[local.queues]] name and its local_queues."""
    cfg = load_config() if cfg is None else cfg
    queues = (cfg.get("local") or {}).get("queues") or [{"name": "default"}]
    names = {str(q["name"]) for q in queues if isinstance(q, dict) and "name" in q}
    for q in queues:
        if isinstance(q, dict):
            names.update(str(n) for n in q.get("local_queues") or ())
    return sorted(names)


def local_admission_config(slots: int, cfg: dict[str, Any] | None = None,
                           cpus: float | None = None) -> dict[str, Any]:
    """Queues, cohorts and priority classes for the local agent's admission engine.

    Returns ``{"queues": [ClusterQueue], "cohorts": [Cohort], "priorities": {name: value},
    "default_priority": name-or-int, "kueue_version": version row}`` (``[local] kueue_version``,
    default the newest supported: :mod:`gpujobs.admission.gates`). Without ``[[local.queues]]``: one queue "default"
    with all ``slots`` GPU slots and ``cpus`` CPUs (default :func:`gpujobs.devices.local_cpus`):
    ranks asking for 0 GPUs are charged CPUs, the others GPU slots. A queue without ``cpus``
    may use every CPU. GPU quotas (or explicit ``cpus``) adding up to more than the machine
    has are a SpecError.
    """
    from .admission import DEFAULT_PRIORITIES, ClusterQueue, Cohort

    cfg = load_config() if cfg is None else cfg
    if cpus is None:
        from .devices import local_cpus
        cpus = local_cpus(cfg)
    local = cfg.get("local", {})
    prios = cfg.get("priorities") or dict(DEFAULT_PRIORITIES)
    for k, v in prios.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"[priorities] {k}", f"must be an integer, got {v!r}", f"e.g. {k} = 500")
    default = local.get("default_priority")
    if default is not None and default not in prios:
        raise SpecError("[local] default_priority", f"unknown class {default!r}",
                        f"use one of {', '.join(prios)}")
    queues: list[ClusterQueue] = []
    quotas: list[dict[str, float]] = []  # queues[i]'s quota
    for i, q in enumerate(local.get("queues") or [{"name": "default", "gpus": slots}]):
        where = f"[[local.queues]] #{i + 1}"
        if "name" not in q:
            raise SpecError(where, "has no name", 'add name = "team-a"')
        unknown = sorted(set(q) - _QUEUE_FIELDS)
        if unknown:
            raise SpecError(f"{where} {unknown[0]}", f"is not a queue setting in queue {q['name']!r}",
                            f"use one of {', '.join(sorted(_QUEUE_FIELDS))}")
        for key, allowed in _QUEUE_CHOICES.items():
            if key in q and q[key] not in allowed:
                raise SpecError(f"{where} {key}", f"{q[key]!r} is not a valid {key}",
                                f"use one of {', '.join(allowed)}")
        quota: dict[str, float] = {"gpu": parse_quantity(q.get("gpus", slots), f"{where} gpus"),
                                   "cpu": parse_quantity(q["cpus"], f"{where} cpus") if "cpus" in q else cpus}
        if "memory" in q:
            quota["memory"] = parse_quantity(q["memory"], f"{where} memory")
        blim = q.get("borrowing_limit")
        quotas.append(quota)
        queues.append(ClusterQueue(
            name=q["name"], quota=quota, cohort=q.get("cohort"),
            borrowing_limit={"gpu": parse_quantity(blim, f"{where} borrowing_limit")}
            if blim is not None else None,
            strategy=q.get("strategy", "BestEffortFIFO"),
            within_queue=q.get("preemption", "LowerPriority"),
            reclaim_within_cohort=q.get("reclaim", "Never"),
            local_queues=tuple(q.get("local_queues", ()))))
    total = sum(qt["gpu"] for qt in quotas)
    if total > slots:
        raise SpecError("[[local.queues]] gpus",
                        f"the queues' GPU quotas add up to {total:g} but this machine has {slots} slots",
                        f"lower the quotas in {config_path()} (use a cohort to share idle slots), "
                        "or raise gpus = N under [local] there")
    explicit = sum(qt["cpu"] for qt, raw in zip(quotas, local.get("queues") or []) if "cpus" in raw)
    if explicit > cpus:
        raise SpecError("[[local.queues]] cpus",
                        f"the queues' CPU quotas add up to {explicit:g} but this machine has {cpus:g} CPUs",
                        f"lower the quotas in {config_path()}, or raise cpus = N under [local] there "
                        "(or export GPUJOBS_LOCAL_CPUS=N)")
    cohorts = [Cohort(name) for name in sorted({q.cohort for q in queues if q.cohort})]
    return {"queues": queues, "cohorts": cohorts, "priorities": dict(prios),
            "default_priority": default, "kueue_version": kueue_version_of(local, "[local] kueue_version")}


def kueue_version_of(section: dict[str, Any], where: str) -> str:
    """The supported Kueue version row a config section's ``kueue_version`` names (the newest
    when it names none); SpecError naming ``where`` for one that is not supported."""
    from .admission import gates
    try:
        return gates.kueue_version(section.get("kueue_version"))
    except SpecError as exc:
        raise SpecError(where, f"Kueue {section.get('kueue_version')!r} is not supported",
                        f'set kueue_version = "{gates.NEWEST}" (or one of {", ".join(gates.VERSIONS)}) '
                        f"in {config_path()}") from exc
