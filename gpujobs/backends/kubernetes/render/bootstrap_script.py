#!/usr/bin/env python3
"""gpujobs pod bootstrap (``/opt/gpujobs/runtime/bootstrap.py``, from the shared runtime ConfigMap).

Runs in a stock image (e.g. pytorch/pytorch) with nothing but the standard
library. It checks that this Python's major.minor equals the submitter's (a
cloudpickled function only loads in the same version) and that cloudpickle
imports, else prints a clear message and exits 3. It then runs the gpujobs
runner shipped next to it (``/opt/gpujobs/runtime/lib.zip``: gpujobs' runner, payload and
context modules plus the submitter's cloudpickle, first on ``sys.path``).

Roles (argv[1]):

``rank`` (default)  torch/ray pod: one rank per process. The operators give each
                    *pod* a node rank (PyTorchJob/TrainJob ``PET_NODE_RANK``, Volcano's
                    pytorch plugin ``RANK`` whose ``WORLD_SIZE`` counts pods), so with
                    N processes per pod this script starts them itself with
                    RANK = node_rank * N + local_rank and WORLD_SIZE = nodes * N.
``mpi-launcher``    waits for the workers' sshd, then execs ``mpirun`` of ``mpi-rank``.
``mpi-rank``        one MPI rank (rank/size come from MPI itself).

Settings come from the job's ``bootstrap.json`` (``../job/`` beside this file's folder: the
job-files volume), not the environment, because MPI ranks started over ssh do not inherit
the pod's environment; the sealed call is ``../job/payload.b64`` (inline) or ``payload.bin``.

Metrics (``rank`` role of torch pods): this process, not the training processes, runs one
``gpujobs.metrics`` Sampler for the pod's ranks and writes a ``GPUJOBS-METRICS {json}``
line to the pod log every ``$GPUJOBS_METRICS_INTERVAL`` seconds (default 2; 0 turns it
off): NVML for the GPUs the container sees, else the ranks' CPU/RSS via psutil
(``source="psutil"``). The ranks' stdout is forwarded line by line through this process so
a metrics line never splits a rank's line (a ``GPUJOBS-RESULT`` line is longer than one
atomic pipe write). Forwarded lines (several ranks in a pod, or an MPI rank, whose output all
lands in the launcher's log) carry ``[rank R] `` with the global rank; gpujobs' marker lines do not. Without pynvml and psutil in the image it logs one line and runs the
job without metrics. Ray drivers and MPI ranks are exec'd as before (no sampler).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(os.path.dirname(HERE), "job")
CONTROL = os.path.join(os.path.dirname(HERE), "control")  # downwardAPI: requests (job.stacks())
EXIT_SETUP = 3


_VERIFY = (
    "import hashlib,runpy,sys;d=%r;h=hashlib.sha256();"
    "[h.update(hashlib.sha256(open(d+n,'rb').read()).digest()) for n in ('bootstrap.py','lib.zip')];"
    "h.hexdigest()==%r or sys.exit('gpujobs: the runtime ConfigMap %s does not hold the gpujobs "
    "runtime this job was submitted with (it was changed or replaced); delete it and submit "
    "again');sys.argv=[d+'bootstrap.py']+sys.argv[1:];"
    "runpy.run_path(d+'bootstrap.py',run_name='__main__')")


def verify_script(runtime_dir, digest, configmap):
    """``python -c`` text that checks the runtime files in ``runtime_dir`` against ``digest``
    (carried by the job object), then runs bootstrap.py from there with the same arguments."""
    return _VERIFY % (runtime_dir, digest, configmap)


def fail(msg):
    sys.stderr.write("gpujobs bootstrap: " + msg + "\n")
    sys.stderr.flush()
    sys.exit(EXIT_SETUP)


def load_config():
    with open(os.path.join(JOB, "bootstrap.json")) as fh:
        return json.load(fh)


def check_environment(cfg):
    want = cfg["python"]
    have = "%d.%d" % sys.version_info[:2]
    if have != want:
        fail("this image runs Python %s but the function was pickled by Python %s; cloudpickled "
             "code only loads in the same major.minor version. Fix: use an image with Python %s "
             "(builder .image(...)), or submit from a Python %s kernel." % (have, want, want, have))
    lib = os.path.join(HERE, "lib.zip")
    if lib not in sys.path:
        sys.path.insert(0, lib)
    try:
        import cloudpickle  # noqa: F401
    except Exception as exc:  # pragma: no cover - only when the shipped copy is missing
        fail("cannot import cloudpickle (%s); install it in the image (pip install cloudpickle)"
             % exc)


def base_env(cfg):
    env = dict(os.environ)
    lib = os.path.join(HERE, "lib.zip")
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for name in ("payload.b64", "payload.bin"):
        if os.path.exists(os.path.join(JOB, name)):
            env.setdefault("GPUJOBS_PAYLOAD", os.path.join(JOB, name))
    env.setdefault("GPUJOBS_KEY_FILE", cfg["key_file"])
    env.setdefault("GPUJOBS_KEY_CONTEXT", cfg["job_id"])  # MPI ranks over ssh lack the pod env
    env.setdefault("GPUJOBS_RESULT_SINK", "log")
    env.setdefault("GPUJOBS_JOB_ID", cfg["job_id"])
    env.setdefault("GPUJOBS_FRAMEWORK", cfg["framework"])
    env.setdefault("GPUJOBS_CHECKPOINT_DIR", cfg["checkpoint_dir"])
    env.setdefault("PYTHONUNBUFFERED", "1")
    if os.path.isdir(CONTROL):
        env.setdefault("GPUJOBS_STACK_REQUEST", os.path.join(CONTROL, "stack-request"))
    if cfg.get("return_all"):
        env["GPUJOBS_RETURN_ALL"] = "1"
    if cfg.get("command"):
        env["GPUJOBS_COMMAND"] = json.dumps(list(cfg["command"]))
    return env


def rank_argv(cfg):
    # Command jobs run through the runner too (GPUJOBS_COMMAND): same exit codes, same result line.
    return [sys.executable, "-m", "gpujobs.runner"]


def note(msg):
    sys.stderr.write("gpujobs bootstrap: " + msg + "\n")
    sys.stderr.flush()


def metrics_interval():
    raw = os.environ.get("GPUJOBS_METRICS_INTERVAL", "").strip()
    if not raw:
        return 2.0
    try:
        return float(raw)
    except ValueError:
        note("GPUJOBS_METRICS_INTERVAL=%r is not a number of seconds; using 2" % raw)
        return 2.0


def make_sampler(lock):
    """The pod's Sampler (not started, no ranks yet), or None with one log line saying why."""
    interval = metrics_interval()
    if interval <= 0:
        note("metrics off (GPUJOBS_METRICS_INTERVAL=%s)" % os.environ["GPUJOBS_METRICS_INTERVAL"])
        return None, []
    try:
        from gpujobs.metrics.podlaunch import visible_gpus
        from gpujobs.metrics.sampler import Sampler, log_sink
        gpus = visible_gpus()
        holder = []
        sampler = Sampler({}, interval=interval, sink=log_sink(
            sys.stdout, lock, reason=lambda: holder[0].reason))
        holder.append(sampler)
    except Exception as exc:  # metrics never stop a job
        note("no metrics: the sampler could not start (%s: %s)" % (type(exc).__name__, exc))
        return None, []
    if not (sampler.nvml_available and gpus) and not sampler.cpu_available:
        sampler.stop()
        note("no metrics: %s in this image; pip install nvidia-ml-py (GPU) or psutil (CPU) "
             "to get GPUJOBS-METRICS lines" % ("NVML sees no GPU and psutil is not installed"
                                              if sampler.nvml_available else
                                              "neither pynvml (NVML) nor psutil is installed"))
        return None, []
    return sampler, gpus


def forward(pipe, lock, rank=None):
    """Copy a rank's stdout to ours a whole line at a time (metrics lines go between lines),
    each line but gpujobs' marker lines prefixed ``[rank R] `` with the rank's global rank, so
    the pod log (and ``gpujobs logs``) says which rank wrote it even when a pod runs several."""
    out = getattr(sys.stdout, "buffer", sys.stdout)
    tag = ("[rank %d] " % rank).encode() if rank is not None else b""
    for line in iter(pipe.readline, b""):
        with lock:
            out.write(line if not tag or line.lstrip().startswith(b"GPUJOBS-") else tag + line)
            out.flush()
    pipe.close()


def mpi_world_rank():
    """This MPI rank's number from the launcher's environment (Open MPI, PMIx, MPICH/Hydra), or None."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return None


def run_prefixed(argv, env, rank):
    """Run one rank as a child whose output is forwarded with its ``[rank R]`` prefix; signals
    are passed on; returns its exit code."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: p.poll() is None and p.send_signal(s))
    forward(p.stdout, threading.Lock(), rank)
    rc = p.wait()
    return rc if rc >= 0 else 128 - rc


def env_int(names, default=None):
    for name in names:
        if os.environ.get(name, "") != "":
            return int(os.environ[name])
    if default is None:
        fail("none of %s is set; is this pod run by the operator gpujobs rendered it for?"
             % ", ".join(names))
    return default


def run_torch(cfg):
    nnodes, nproc = int(cfg["nnodes"]), int(cfg["nproc_per_node"])
    node_rank = env_int(cfg["node_rank_env"], 0 if nnodes == 1 else None)
    env = base_env(cfg)
    addr = next((os.environ[n] for n in cfg["master_addr_env"] if os.environ.get(n)), "127.0.0.1")
    port = next((os.environ[n] for n in cfg["master_port_env"] if os.environ.get(n)), "29500")
    env.update(MASTER_ADDR=addr, MASTER_PORT=str(port), WORLD_SIZE=str(nnodes * nproc),
               GROUP_RANK=str(node_rank), NODE_RANK=str(node_rank),
               LOCAL_WORLD_SIZE=str(nproc))
    lock = threading.Lock()
    sampler, gpus = make_sampler(lock)
    if nproc == 1 and sampler is None:  # one rank: the pod's log is that rank's (node rank = rank)
        env.update(RANK=str(node_rank), LOCAL_RANK="0")
        os.execvpe(rank_argv(cfg)[0], rank_argv(cfg), env)
    procs, ranks, pumps = [], {}, []
    per = len(gpus) // nproc
    for local in range(nproc):
        rank = node_rank * nproc + local
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(local))
        p = subprocess.Popen(rank_argv(cfg), env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(p)
        ranks[rank] = (p.pid, gpus[local * per:(local + 1) * per] if per else [])
        t = threading.Thread(target=forward, args=(p.stdout, lock, rank), daemon=True)
        t.start()
        pumps.append(t)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: [p.send_signal(s) for p in procs if p.poll() is None])
    if sampler is not None:
        sampler.update(ranks)
        sampler.start()
    try:
        return supervise(procs)
    finally:
        for t in pumps:
            t.join(10)
        if sampler is not None:
            sampler.stop()


def supervise(procs):
    """Wait for every rank; the first failure stops the others; return the pod's exit code."""
    procs = list(procs)
    code = 0
    while procs:
        for p in list(procs):
            rc = p.poll()
            if rc is None:
                continue
            procs.remove(p)
            if rc != 0 and code == 0:
                code = rc if rc > 0 else 128 - rc
                for other in procs:  # one rank failed: the gang cannot finish
                    other.terminate()
        time.sleep(0.2)
    return code


def mpi_hosts(cfg):
    """[(host, slots)] from Volcano's MPI_HOST or the MPI Operator hostfile."""
    slots = int(cfg["nproc_per_node"])
    if os.environ.get("MPI_HOST"):
        return [(h, slots) for h in os.environ["MPI_HOST"].split(",") if h]
    path = os.environ.get("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile")
    hosts = []
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                hosts.append((line.split()[0], slots))
    return hosts


def wait_for_ssh(hosts, timeout):
    deadline = time.time() + timeout
    for host, _ in hosts:
        while True:
            try:
                socket.create_connection((host, 22), timeout=3).close()
                break
            except OSError:
                if time.time() > deadline:
                    fail("worker %s did not accept ssh on port 22 within %d s; the image must "
                         "run sshd (openssh-server) in the worker pods" % (host, timeout))
                time.sleep(1)


def run_mpi_launcher(cfg):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        fail("this image has no mpirun; MPI jobs need an image with Open MPI, openssh-server "
             "and mpi4py (builder .image(...))")
    hosts = mpi_hosts(cfg)
    wait_for_ssh(hosts, int(cfg.get("ssh_wait_s", 300)))
    argv = [mpirun, "-np", str(int(cfg["nnodes"]) * int(cfg["nproc_per_node"]))]
    if os.environ.get("MPI_HOST"):
        argv += ["--host", ",".join("%s:%d" % h for h in hosts)]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    for name in cfg.get("forward_env", []):
        if name in os.environ:
            argv += ["-x", name]
    if cfg.get("runtime_digest"):  # each rank checks the runtime files of its own pod
        argv += [sys.executable, "-c", verify_script(HERE + os.sep, cfg["runtime_digest"],
                                                      cfg.get("runtime_configmap", "")), "mpi-rank"]
    else:
        argv += [sys.executable, os.path.join(HERE, "bootstrap.py"), "mpi-rank"]
    sys.stdout.flush()
    os.execv(mpirun, argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    role = argv[0] if argv else "rank"
    cfg = load_config()
    if role == "mpi-launcher":
        return run_mpi_launcher(cfg)
    check_environment(cfg)
    if role == "mpi-rank" or cfg["framework"] == "ray":
        env = base_env(cfg)
        if cfg["framework"] == "ray":
            env.setdefault("GPUJOBS_RAY_ADDRESS", "auto")
        rank = mpi_world_rank() if role == "mpi-rank" else None
        if rank is not None:  # the launcher's log holds every rank's output: say whose it is
            return run_prefixed(rank_argv(cfg), env, rank)
        os.execvpe(rank_argv(cfg)[0], rank_argv(cfg), env)
    return run_torch(cfg)


if __name__ == "__main__":
    sys.exit(main())
