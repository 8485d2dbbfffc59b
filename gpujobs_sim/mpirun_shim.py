"""The simulated cluster's ``mpirun`` (run in an MPIJob launcher pod in place of the image's).

It decides what Open MPI's mpirun would do on the cluster, from Open MPI's documentation,
then starts the ranks with this machine's real mpirun (all locally):

- which hosts the job runs on (docs.open-mpi.org v5.0.x "Launching with SSH" / "Scheduling
  processes across hosts"; orte_hosts(7) for 4.x): ``--hostfile``/``--machinefile`` (lines
  ``name slots=N``; N defaults to the host's cores), else ``--host h[:n],...`` (n defaults to 1);
  Open MPI 4 also reads a default hostfile from the MCA parameter ``orte_default_hostfile``
  (``OMPI_MCA_orte_default_hostfile``, which the MPI Operator sets); Open MPI 5 replaced ORTE by
  PRRTE, which before v3.0.3 ignores every ``orte_*`` parameter (kubeflow/mpi-operator#842,
  kubeflow/trainer#4028; from v3.0.3 its schizo translates them, openpmix/prrte
  src/mca/schizo/ompi/schizo_ompi.c check_prte_overlap: this shim models the older PRRTE):
  its default hostfile is ``prte_default_hostfile`` (``PRTE_MCA_prte_default_hostfile``,
  ``--default-hostfile``). With none, the job runs only on the mpirun host (the launcher pod),
  with as many slots as it has cores, and still "succeeds";
- ranks are placed by slot, filling each host in turn (the default mapping);
- too few slots without ``--oversubscribe``: "There are not enough slots available";
- reaching a remote host over ssh: the ssh options are the MCA parameter ``plm_rsh_args``
  (Open MPI 4, ``OMPI_MCA_plm_rsh_args``) or ``plm_ssh_args`` (Open MPI 5's PRRTE renamed its
  rsh launcher to ssh: ``PRTE_MCA_plm_ssh_args``, ``--prtemca plm_ssh_args``); the port is their
  ``-p N``, else the image's ssh_config port; the host must run sshd on that port (the
  worker pods' sshd, ``GPUJOBS_SIM_SSHD``); without ``StrictHostKeyChecking=no`` (in the options
  or the image's ssh_config) a batch ssh to an unknown host fails "Host key verification failed.".

The host each rank was placed on is passed to the ranks as ``GPUJOBS_SIM_RANK_HOSTS`` (comma list,
by rank), so a test can tell ranks that ran on the workers from ranks that ran on the launcher.
Inputs from the simulated kubelet: GPUJOBS_SIM_OPENMPI (major version), GPUJOBS_SIM_LAUNCHER_HOST,
GPUJOBS_SIM_CORES, GPUJOBS_SIM_SSH_PORT, GPUJOBS_SIM_NO_HOST_KEY_CHECK, GPUJOBS_SIM_SSHD (JSON
host -> port), GPUJOBS_SIM_REAL_MPIRUN.
"""
from __future__ import annotations

import json
import os
import shlex
import sys

_WITH_VALUE = {"-np", "-n", "--np", "-c", "--map-by", "-map-by", "--bind-to", "-bind-to", "--rank-by",
               "--output", "--display", "--wdir", "--prefix", "-wdir", "--runtime-options"}
_FLAGS = {"--oversubscribe", "-oversubscribe", "--allow-run-as-root", "--tag-output", "-tag-output",
          "--report-bindings", "-q", "--quiet", "-v", "--verbose", "--timestamp-output"}


def parse(argv: list[str]) -> dict:
    out: dict = {"np": None, "hostfile": None, "host": None, "mca": {}, "prtemca": {}, "x": [],
                 "oversubscribe": False, "root": False, "default_hostfile": None, "program": []}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-np", "-n", "--np", "-c"):
            out["np"] = int(argv[i + 1])
            i += 2
        elif a in ("--hostfile", "-hostfile", "--machinefile", "-machinefile"):
            out["hostfile"] = argv[i + 1]
            i += 2
        elif a in ("--default-hostfile", "-default-hostfile"):
            out["default_hostfile"] = argv[i + 1]
            i += 2
        elif a in ("--host", "-host", "-H"):
            out["host"] = argv[i + 1]
            i += 2
        elif a in ("--mca", "-mca", "--gmca", "-gmca"):
            out["mca"][argv[i + 1]] = argv[i + 2]
            i += 3
        elif a in ("--prtemca", "-prtemca"):
            out["prtemca"][argv[i + 1]] = argv[i + 2]
            i += 3
        elif a == "-x":
            out["x"].append(argv[i + 1])
            i += 2
        elif a in ("--oversubscribe", "-oversubscribe"):
            out["oversubscribe"] = True
            i += 1
        elif a == "--allow-run-as-root":
            out["root"] = True
            i += 1
        elif a in _WITH_VALUE:
            i += 2
        elif a in _FLAGS:
            i += 1
        else:
            out["program"] = argv[i:]
            break
    return out


def read_hostfile(path: str, cores: int) -> list[tuple[str, int]]:
    hosts = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        slots = cores
        for p in parts[1:]:
            if p.startswith(("slots=", "slots:")):
                slots = int(p[6:])
        hosts.append((parts[0], slots))
    return hosts


def hosts_of(opts: dict, env: dict, version: int, launcher: str, cores: int) -> list[tuple[str, int]]:
    if opts["hostfile"]:
        return read_hostfile(opts["hostfile"], cores)
    if opts["host"]:
        out = []
        for h in opts["host"].split(","):
            name, _, n = h.partition(":")
            out.append((name, int(n) if n else 1))
        return out
    if version >= 5:
        default = opts["default_hostfile"] or opts["prtemca"].get("prte_default_hostfile") or \
            env.get("PRTE_MCA_prte_default_hostfile")
    else:
        default = opts["mca"].get("orte_default_hostfile") or env.get("OMPI_MCA_orte_default_hostfile")
    if default and os.path.exists(default):
        return read_hostfile(default, cores)
    return [(launcher, cores)]


def ssh_args(opts: dict, env: dict, version: int) -> str:
    if version >= 5:
        return opts["prtemca"].get("plm_ssh_args") or opts["mca"].get("plm_ssh_args") or \
            env.get("PRTE_MCA_plm_ssh_args", "")
    return opts["mca"].get("plm_rsh_args") or env.get("OMPI_MCA_plm_rsh_args", "")


def fail(msg: str) -> None:
    sys.stderr.write(msg.rstrip("\n") + "\n")
    sys.stderr.flush()
    sys.exit(1)


def main(argv: list[str]) -> None:
    env = dict(os.environ)
    version = int(env.get("GPUJOBS_SIM_OPENMPI", "5"))
    if argv[:1] in (["--version"], ["-V"]):
        print(f"mpirun (Open MPI) {version}.0.7 (simulated)")
        return
    opts = parse(argv)
    launcher = env.get("GPUJOBS_SIM_LAUNCHER_HOST", "launcher")
    cores = int(env.get("GPUJOBS_SIM_CORES", "8"))
    hosts = hosts_of(opts, env, version, launcher, cores)
    np_ = opts["np"] if opts["np"] is not None else sum(s for _, s in hosts)
    if np_ > sum(s for _, s in hosts) and not opts["oversubscribe"] and \
            env.get("OMPI_MCA_rmaps_base_oversubscribe") not in ("1", "true"):
        fail(f"There are not enough slots available in the system to satisfy the {np_}\n"
             f"slots that were requested by the application:\n\n  {' '.join(opts['program'][:1])}")
    placed: list[str] = []
    for name, slots in hosts:
        placed += [name] * slots
    while len(placed) < np_:  # oversubscribed: round again
        placed += [h for h, _ in hosts]
    placed = placed[:np_]
    args = shlex.split(ssh_args(opts, env, version))
    port = int(env.get("GPUJOBS_SIM_SSH_PORT", "22"))
    if "-p" in args:
        port = int(args[args.index("-p") + 1])
    opt_values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-o"] + \
        [a[2:] for a in args if a.startswith("-o") and len(a) > 2]
    no_check = env.get("GPUJOBS_SIM_NO_HOST_KEY_CHECK") == "1" or \
        any(v.replace(" ", "").lower() == "stricthostkeychecking=no" for v in opt_values)
    sshd = json.loads(env.get("GPUJOBS_SIM_SSHD", "{}"))
    for host in dict.fromkeys(h for h in placed if h != launcher):
        if host not in sshd:
            fail(f"ssh: connect to host {host} port {port}: Connection refused\n"
                 "PRTE has lost communication with a remote daemon.")
        if int(sshd[host]) != port:
            fail(f"ssh: connect to host {host} port {port}: Connection refused (its sshd listens on "
                 f"{sshd[host]})\nPRTE has lost communication with a remote daemon.")
        if not no_check:
            fail("Host key verification failed.\nPRTE has lost communication with a remote daemon.")
    real = env.get("GPUJOBS_SIM_REAL_MPIRUN", "mpirun")
    run_env = {k: v for k, v in env.items() if not k.startswith(("OMPI_MCA_", "PRTE_MCA_", "GPUJOBS_SIM_"))}
    run_env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    run_env["GPUJOBS_SIM_RANK_HOSTS"] = ",".join(placed)
    cmd = [real, "-np", str(np_), "--oversubscribe"]
    if opts["root"]:
        cmd.append("--allow-run-as-root")
    for name in [*opts["x"], "GPUJOBS_SIM_RANK_HOSTS"]:
        cmd += ["-x", name]
    cmd += opts["program"]
    sys.stdout.flush()
    os.execve(real, cmd, run_env)


if __name__ == "__main__":
    main(sys.argv[1:])
