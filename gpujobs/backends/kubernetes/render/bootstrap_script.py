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
``mpi-launcher``    checks mpirun/ssh, writes a hostfile of the workers and execs ``mpirun
                    --hostfile`` of ``mpi-rank`` with gpujobs' ssh options (see MPI_SSH_PORT).
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
CONFIG = "bootstrap.json"
"""gpujobs.rank.contract.POD_CONFIG: read before gpujobs (lib.zip) can be imported (a test checks
that the two agree); everything after check_environment() takes gpujobs' names from
gpujobs.rank.contract."""
MPI_DNS_WAIT = "GPUJOBS_MPI_DNS_WAIT_S"
"""gpujobs.rank.contract.MPI_DNS_WAIT_S, read by the MPI launcher role, which runs without lib.zip
(a test checks that the two agree)."""


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
    with open(os.path.join(JOB, CONFIG)) as fh:
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
    """The ranks' environment: the pod's, plus the rank contract (gpujobs.rank.contract.RankEnv)
    from bootstrap.json where the pod's env does not say (MPI ranks over ssh lack the pod env)."""
    from gpujobs.rank.contract import POD_INLINE_PAYLOAD, POD_PAYLOAD, RankEnv
    env = dict(os.environ)
    lib = os.path.join(HERE, "lib.zip")
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    payload = next((os.path.join(JOB, name) for name in (POD_INLINE_PAYLOAD, POD_PAYLOAD)
                    if os.path.exists(os.path.join(JOB, name))), None)
    RankEnv(job_id=cfg["job_id"], framework=cfg["framework"], payload=payload,
            key_file=cfg["key_file"], key_context=cfg["job_id"], result_sink="log",
            checkpoint_dir=cfg["checkpoint_dir"], grace_s=cfg.get("grace_s"),
            stack_request=os.path.join(CONTROL, "stack-request") if os.path.isdir(CONTROL) else None,
            ).setdefault_into(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(RankEnv(return_all=True if cfg.get("return_all") else None,
                       command=tuple(cfg["command"]) if cfg.get("command") else None).to_env())
    return env


def rank_argv(cfg):
    # Command jobs run through the runner too (RankEnv.command): same exit codes, same result line.
    return [sys.executable, "-m", "gpujobs.rank.runner"]


def note(msg):
    sys.stderr.write("gpujobs bootstrap: " + msg + "\n")
    sys.stderr.flush()


def metrics_interval():
    from gpujobs.rank.contract import METRICS_INTERVAL
    raw = os.environ.get(METRICS_INTERVAL, "").strip()
    if not raw:
        return 2.0
    try:
        return float(raw)
    except ValueError:
        note("%s=%r is not a number of seconds; using 2" % (METRICS_INTERVAL, raw))
        return 2.0


def make_sampler(lock):
    """The pod's Sampler (not started, no ranks yet), or None with one log line saying why."""
    interval = metrics_interval()
    if interval <= 0:
        from gpujobs.rank.contract import METRICS_INTERVAL
        note("metrics off (%s=%s)" % (METRICS_INTERVAL, os.environ[METRICS_INTERVAL]))
        return None, []
    try:
        from gpujobs.rank.podlaunch import visible_gpus
        from gpujobs.rank.sampler import Sampler, log_sink
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
    the pod log (and ``gpujobs logs``) says which rank wrote it even when a pod runs several.
    The newline the runner writes before a marker line (to end an unterminated line of the
    user's) is dropped when the user's line had ended already: no empty ``[rank R] `` line."""
    from gpujobs.rank.wire import MARKER_PREFIX
    prefix = MARKER_PREFIX.encode()
    out = getattr(sys.stdout, "buffer", sys.stdout)
    tag = ("[rank %d] " % rank).encode() if rank is not None else b""
    held = False  # an empty line, shown unless a marker line follows it
    for line in iter(pipe.readline, b""):
        marker = line.lstrip().startswith(prefix)
        if line == b"\n" and not held:
            held = True
            continue
        with lock:
            if held and not marker:
                out.write(tag + b"\n")
            held = line == b"\n"
            if not held:
                out.write(line if not tag or marker else tag + line)
            out.flush()
    if held:
        with lock:
            out.write(tag + b"\n")
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
    from gpujobs.rank.contract import GRACE_S
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
    stopped = []  # when the pod's SIGTERM came (monotonic s): the ranks are being stopped

    def on_signal(sig, _frame):
        if sig == signal.SIGTERM and not stopped:
            stopped.append(time.monotonic())
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    if sampler is not None:
        sampler.update(ranks)
        sampler.start()
    try:
        return supervise(procs, stopped, env.get(GRACE_S))
    finally:
        for t in pumps:
            t.join(10)
        if sampler is not None:
            sampler.stop()


def supervise(procs, stopped=(), grace_s=None):
    """Wait for every rank; the first failure stops the others; return the pod's exit code.
    Once the pod is being stopped (``stopped`` holds when its SIGTERM came), any failure is
    gpujobs.rank.contract.STOPPED_EXIT (143), and ranks still running shortly before the end of
    the grace period (``grace_s``; stop_exit_after) are killed and the pod exits 143 then: this
    process's exit code is the container's, and the kubelet's SIGKILL would make it 137, which a
    batch/v1 Job's podFailurePolicy fails the Job on."""
    from gpujobs.rank.contract import STOPPED_EXIT, stop_exit_after
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
        if procs and stopped and grace_s is not None \
                and time.monotonic() >= stopped[0] + stop_exit_after(float(grace_s)):
            note("%d rank(s) still running near the end of the %s s grace period: killed; the pod "
                 "exits %d (stopped)" % (len(procs), grace_s, STOPPED_EXIT))
            for p in procs:
                p.kill()
                p.wait()
            return STOPPED_EXIT
        time.sleep(0.2)
    return STOPPED_EXIT if stopped and code else code


# MPI over ssh (MPIJob, Volcano's mpi plugin). The workers run sshd on MPI_SSH_PORT, the port
# mpi-operator's own images configure (mpi-operator@v0.8.0 build/base/Dockerfile, ARG port=2222,
# in sshd_config and ssh_config): unprivileged, so a root sshd needs no NET_BIND_SERVICE, and the
# same for stock images (the worker command passes -p). The ssh options go to mpirun through its
# MCA parameters, under both names: Open MPI 4's plm_rsh_* and Open MPI 5's PRRTE plm_ssh_* (PRRTE
# renamed the rsh launcher; the ORTE-era names are ignored by 5, kubeflow/mpi-operator#842); they
# are set in mpirun's environment, where they override the MPI Operator's
# OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10" (mpi_job_controller.go ompiEnvVars). Host keys
# are not checked and known_hosts goes to /dev/null: the ssh directory is the operator's read-only
# Secret mount, and the workers are new hosts every run. No tree spawn: only the launcher ssh's out.
MPI_SSH_PORT = 2222
SSH_OPTIONS = ("-p %d -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
               "-o ConnectionAttempts=10 -o LogLevel=ERROR" % MPI_SSH_PORT)
MPI_IMAGE_HINT = ("MPI jobs need an image with sshd (openssh-server), an ssh client, Open MPI's mpirun "
                  "(4 or 5), mpi4py and the submitter's Python (docs/kubernetes-kinds.md, MPIJob; "
                  "`gpujobs admin mpi-image | docker build -t gpujobs-mpi:pyXY --build-arg PYTHON=X.Y -` "
                  "builds one), named with .image(...)")


def mpi_env(env):
    """mpirun's environment: gpujobs' ssh options for Open MPI 4 and 5 (see above)."""
    env = dict(env)
    env.update(OMPI_MCA_plm_rsh_args=SSH_OPTIONS, PRTE_MCA_plm_ssh_args=SSH_OPTIONS,
               OMPI_MCA_plm_rsh_no_tree_spawn="1", PRTE_MCA_plm_ssh_no_tree_spawn="1",
               OMPI_MCA_orte_keep_fqdn_hostnames="1", PRTE_MCA_prte_keep_fqdn_hostnames="1")
    return env


def mpi_hosts(cfg):
    """[(host, slots)] from Volcano's MPI_HOST or the MPI Operator's hostfile (one worker a line)."""
    slots = int(cfg["nproc_per_node"])
    if os.environ.get("MPI_HOST"):
        return [(h, slots) for h in os.environ["MPI_HOST"].split(",") if h]
    path = os.environ.get("OMPI_MCA_orte_default_hostfile") or "/etc/mpi/hostfile"
    hosts = []
    if os.path.exists(path):
        for line in open(path):
            if line.strip() and not line.lstrip().startswith("#"):
                hosts.append((line.split()[0].split(":")[0], slots))
    return hosts


def write_hostfile(hosts):
    """The hostfile gpujobs passes with --hostfile: ``host slots=N`` per worker. Passed
    explicitly because Open MPI 5 ignores OMPI_MCA_orte_default_hostfile (ranks would all run on
    the launcher, and succeed); --hostfile means the same in Open MPI 4 and 5."""
    import tempfile
    fd, path = tempfile.mkstemp(prefix="gpujobs-hostfile-")
    with os.fdopen(fd, "w") as fh:
        for host, slots in hosts:
            fh.write("%s slots=%d\n" % (host, slots))
    return path


def openmpi_version(mpirun):
    """'5.0.7' from ``mpirun --version`` ('' when it cannot tell); exits when it names another MPI
    (MPICH's and Intel MPI's Hydra)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        out = subprocess.run([mpirun, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=env, timeout=30).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return ""
    if "Open MPI" not in out and any(w in out for w in ("HYDRA", "MPICH", "Intel(R) MPI")):
        fail("this image's mpirun is not Open MPI (%s); gpujobs runs MPIJobs with mpiImplementation "
             "OpenMPI. %s" % ((out.strip().splitlines() or ["no output"])[0], MPI_IMAGE_HINT))
    for word in out.replace(")", " ").split():
        if word[:1].isdigit() and "." in word:
            return word
    return ""


def wait_for_names(hosts, timeout):
    """Wait until every worker's DNS name resolves (a headless Service's records follow the pods'
    readiness by a few seconds; ssh gives up at once on an unknown name); never fatal."""
    deadline = time.time() + timeout
    for host, _ in hosts:
        while True:
            try:
                socket.getaddrinfo(host, MPI_SSH_PORT)
                break
            except OSError:
                if time.time() > deadline:
                    note("worker %s does not resolve after %d s; starting mpirun anyway" % (host, timeout))
                    return
                time.sleep(1)


def wait_for_ssh(hosts, timeout):
    deadline = time.time() + timeout
    for host, _ in hosts:
        while True:
            try:
                socket.create_connection((host, MPI_SSH_PORT), timeout=3).close()
                break
            except OSError:
                if time.time() > deadline:
                    fail("worker %s did not accept ssh on port %d within %d s: its sshd did not start "
                         "(see that pod's log). %s" % (host, MPI_SSH_PORT, timeout, MPI_IMAGE_HINT))
                time.sleep(1)


def mpirun_argv(cfg, mpirun, hostfile):
    """mpirun's argv: every rank placed by the hostfile's slots (workers only)."""
    argv = [mpirun, "-np", str(int(cfg["nnodes"]) * int(cfg["nproc_per_node"])), "--hostfile", hostfile]
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
    return argv


def run_mpi_launcher(cfg):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        fail("this image has no mpirun. " + MPI_IMAGE_HINT)
    if not shutil.which("ssh"):
        fail("this image has no ssh client (openssh-client), which mpirun needs to start the ranks "
             "on the workers. " + MPI_IMAGE_HINT)
    hosts = mpi_hosts(cfg)
    if len(hosts) != int(cfg["nnodes"]):
        fail("expected %d MPI workers but %s lists %d (MPI_HOST or the MPI Operator's hostfile "
             "/etc/mpi/hostfile); is this pod run by the operator gpujobs rendered it for?"
             % (int(cfg["nnodes"]), "MPI_HOST" if os.environ.get("MPI_HOST") else "the hostfile", len(hosts)))
    if os.environ.get("MPI_HOST"):  # Volcano starts master and workers together: wait for sshd
        wait_for_ssh(hosts, int(cfg.get("ssh_wait_s", 300)))
    else:  # the MPI Operator created this launcher once every worker's sshd was ready
        wait_for_names(hosts, float(os.environ.get(MPI_DNS_WAIT, "60")))
    version = openmpi_version(mpirun)
    argv = mpirun_argv(cfg, mpirun, write_hostfile(hosts))
    note("Open MPI %s: %s ranks on %d workers (%s)" % (version or "(version unknown)", argv[2], len(hosts),
                                                       ", ".join(h for h, _ in hosts)))
    sys.stdout.flush()
    os.execve(mpirun, argv, mpi_env(os.environ))


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
            from gpujobs.rank.contract import RAY_ADDRESS
            env.setdefault(RAY_ADDRESS, "auto")
        rank = mpi_world_rank() if role == "mpi-rank" else None
        if rank is not None:  # the launcher's log holds every rank's output: say whose it is
            return run_prefixed(rank_argv(cfg), env, rank)
        os.execvpe(rank_argv(cfg)[0], rank_argv(cfg), env)
    return run_torch(cfg)


if __name__ == "__main__":
    sys.exit(main())
