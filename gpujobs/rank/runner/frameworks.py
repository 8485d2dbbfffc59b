"""Per-framework set-up and teardown inside a rank (torch.distributed, MPI, Ray)."""
from __future__ import annotations

import math
import os
import signal
import sys
from typing import Any, Mapping

from ..context import JobContext
from .. import contract
from ..filemodes import replace_private
from ..wire import PHASE_MARKER


def setup(framework: str, ctx: JobContext) -> Any:
    if framework in ("ddp", "fsdp"):
        if _can_defer_torch(ctx):
            return _defer_torch(ctx)
        return _setup_torch(ctx)
    if framework == "mpi":
        return _setup_mpi(ctx)
    if framework == "ray":
        return _setup_ray(ctx)
    raise ValueError(f"unknown framework {framework!r}")


def teardown(framework: str, state: Any) -> None:
    if framework in ("ddp", "fsdp") and state is not None:
        if "torch" not in sys.modules:
            return  # a deferred set-up the job never reached (it never imported torch)
        import torch.distributed as dist
        # A gang of one has no peer to wait for or to leave cleanly: the rank exits
        # (os._exit) with nothing to tear down (a barrier + destroy cost ~20% of a tiny rank).
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()  # barrier first: destroy alone aborts ~25% of runs with gloo
            dist.destroy_process_group()
    elif framework == "mpi" and state is not None:
        if not state.Is_finalized():
            state.Finalize()  # Open MPI reports a rank that exits without it as failed
    elif framework == "ray" and state is not None:
        # A local instance whose launcher kills it by process group and job id needs no
        # ray.shutdown() (~1.2 s); elsewhere shutdown stops a local instance or leaves a cluster.
        if state.is_initialized() and os.environ.get(contract.RAY_LAUNCHER_CLEANS) != "1":
            state.shutdown()


def _setup_torch(ctx: JobContext) -> Any:
    import torch
    import torch.distributed as dist

    if os.environ.get(contract.DEVICE, "auto") != "cpu" and torch.cuda.is_available():
        index = ctx.local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        ctx.device = f"cuda:{index}"
        backend = "nccl"
    else:
        ctx.device = "cpu"
        backend = "gloo"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": torch.device(ctx.device)} if backend == "nccl" else {}
        rdzv = os.environ.get(contract.RENDEZVOUS_FILE)  # local gangs: FileStore, no port
        init = f"file://{rdzv}" if rdzv else "env://"
        dist.init_process_group(backend=backend, init_method=init, rank=ctx.rank,
                                world_size=ctx.world_size, **kwargs)
    return True


def _can_defer_torch(ctx: JobContext) -> bool:
    """A local gang of one CPU rank (FileStore rendezvous, :data:`~gpujobs.contract.DEVICE`
    ``cpu``) in a process without torch (forked from the lean zygote): no peer to meet and no
    device to pick, so the process group can wait until the job imports torch."""
    return ("torch" not in sys.modules and ctx.world_size == 1
            and os.environ.get(contract.DEVICE) == "cpu"
            and bool(os.environ.get(contract.RENDEZVOUS_FILE)))


class _AfterImport:
    """A meta-path finder that runs ``then()`` once module ``name`` has been executed (found
    by the other finders; its loader is theirs), then leaves ``sys.meta_path``."""

    def __init__(self, name: str, then: Any):
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader, then = spec.loader, self.then
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: Any) -> None:
            run(module)
            then()
        loader.exec_module = exec_module  # this module's loader instance only
        return spec


def _defer_torch(ctx: JobContext) -> Any:
    """torch.distributed is set up (gloo, the gang's FileStore) right after the job's first
    ``import torch`` (or of any torch module) completes, before the import returns: code
    that imports torch finds the process group initialised; a job that never imports it
    pays nothing for torch."""
    ctx.device = "cpu"
    sys.meta_path.insert(0, _AfterImport("torch", lambda: _setup_torch(ctx)))
    return True


RAY_INSTALL_HINT = "pip install 'gpujobs[ray]' (ray[default])"
MPI_INSTALL_HINT = ("apt-get install openmpi-bin libopenmpi-dev, then pip install mpi4py "
                    "(or pip install 'gpujobs[mpi]')")


def _setup_mpi(ctx: JobContext) -> Any:
    """mpi4py with COMM_WORLD ready; rank/world from MPI; GPUs from GPUJOBS_MPI_DEVICES.

    GPUJOBS_MPI_DEVICES (local launcher) is ``"0,1;2,3"``: rank r sees the r-th group.
    It is applied before MPI_Init so CUDA-aware MPI sees the right devices.
    """
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", ctx.local_rank))
    groups = os.environ.get(contract.MPI_DEVICES)
    if groups:
        os.environ["CUDA_VISIBLE_DEVICES"] = groups.split(";")[ctx.rank % len(groups.split(";"))]
    try:
        from mpi4py import MPI  # initialises MPI; COMM_WORLD is ready for fn
    except ImportError as exc:
        from ...errors import SpecError
        raise SpecError("framework", f"mpi4py cannot be imported in this rank ({exc})",
                        MPI_INSTALL_HINT) from None
    ctx.rank = MPI.COMM_WORLD.Get_rank()
    ctx.world_size = MPI.COMM_WORLD.Get_size()
    ctx.local_rank = local
    if os.environ.get(contract.DEVICE) == "cpu":
        ctx.device = "cpu"
    elif groups:
        ctx.device = "cuda:0"
    elif os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("NVIDIA_VISIBLE_DEVICES", "") not in (
            "", "void", "none", "all"):  # "all" is a CUDA image's default, not an allocation
        ctx.device = f"cuda:{local}"  # a pod's GPUs, one per rank on the node
    return MPI


def check_ray_version(installed: str, wanted: str | None) -> None:
    """Raise SpecError when the rank's Ray differs from the submitter's (GPUJOBS_RAY_VERSION)."""
    if wanted and wanted != installed:
        from ...errors import SpecError
        raise SpecError("image", f"the job runs Ray {installed} but it was submitted with Ray "
                        f"{wanted}; a Ray driver and cluster of different versions cannot talk",
                        f"use an image with ray=={wanted} (e.g. rayproject/ray:{wanted}) or "
                        f"install ray=={installed} where you submit")


def ray_init_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """ray.init arguments: connect to GPUJOBS_RAY_ADDRESS, else start a private local instance."""
    address = env.get(contract.RAY_ADDRESS)
    if address:
        return {"address": address, "log_to_driver": True}
    kwargs: dict[str, Any] = {
        "address": "local", "include_dashboard": False, "log_to_driver": True,
        "num_cpus": int(math.ceil(float(env.get(contract.RAY_NUM_CPUS, "1")))),
        "num_gpus": int(env.get(contract.RAY_NUM_GPUS, "0")),
    }
    if env.get(contract.RAY_TEMP_DIR):
        kwargs["_temp_dir"] = env[contract.RAY_TEMP_DIR]
    if env.get(contract.RAY_OBJECT_STORE_BYTES):
        kwargs["object_store_memory"] = int(env[contract.RAY_OBJECT_STORE_BYTES])
    return kwargs


def _setup_ray(ctx: JobContext) -> Any:
    """Make this rank the Ray driver: ``ray.init`` on a cluster (Kubernetes) or a private local one.

    Locally the Ray processes are children of this driver and stop with ``ray.shutdown()``
    (or, if the driver dies, are swept by the launcher by pid and job id).
    """
    phase = _phase_writer(os.environ.get(contract.PHASE_FILE))
    kw = ray_init_kwargs(os.environ)
    phase(f"connecting to Ray at {kw['address']}" if kw["address"] != "local" else
          f"starting Ray head ({kw['num_cpus']} CPUs, {kw['num_gpus']} GPUs)")
    try:
        import ray
    except ImportError as exc:
        from ...errors import SpecError
        raise SpecError("framework", f"ray cannot be imported in this rank ({exc})",
                        RAY_INSTALL_HINT) from None
    check_ray_version(ray.__version__, os.environ.get(contract.RAY_VERSION))
    if not os.environ.get(contract.RAY_ADDRESS):
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not ray.is_initialized():
        announce = signal.getsignal(signal.SIGTERM)
        ray.init(**kw)
        if announce is not None:  # ray.init makes SIGTERM exit the driver; keep the grace period
            signal.signal(signal.SIGTERM, announce)
        _tolerate_reinit(ray)
    phase(None)  # Ray is up: the function runs
    ctx.device = "cpu"  # the driver owns no GPU; tasks and actors ask Ray for theirs
    return ray


def _phase_writer(path: str | None):
    """``phase(text)``: what the rank is doing before the function runs, in the file the local
    agent shows as the job's status message (``GPUJOBS_PHASE_FILE``), else (a pod) as a
    ``GPUJOBS-PHASE`` line of its log, read by the Kubernetes status; ``phase(None)``: done."""
    def phase(text: str | None) -> None:
        if not path:
            if contract.result_sink_dir(contract.RankEnv.from_env().result_sink) is None:
                sys.stdout.write(f"{PHASE_MARKER} {text or '-'}\n")
                sys.stdout.flush()
            return
        try:
            if text is None:
                os.unlink(path)
            else:
                replace_private(path, text)
        except OSError:
            pass  # a phase is a courtesy: it never stops the job
    return phase


def _tolerate_reinit(ray: Any) -> None:
    """Let ``fn`` keep its own ``ray.init()`` (as RayJob entrypoints do): it joins this cluster."""
    init = ray.init
    if getattr(init, "_gpujobs", False):
        return

    def init_once(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("ignore_reinit_error", True)
        return init(*args, **kwargs)
    init_once._gpujobs = True  # type: ignore[attr-defined]
    ray.init = init_once
