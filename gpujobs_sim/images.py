"""What the simulated cluster knows about container images: what is installed in them.

The simulator runs every process on this machine, so an image's contents only matter where a
real cluster would behave differently: an MPI worker's ``sshd`` that never starts, an ``ssh``
client whose image configuration already disables host-key checking, the port sshd listens on.
Facts come from the images' upstream Dockerfiles (source beside each entry); an image not named
here is assumed to have everything (tests use made-up image names), and
``SimCluster(images={name: {...}})`` adds or overrides entries.

Fields: ``sshd`` (openssh-server installed), ``ssh`` (the client), ``ssh_port`` (the port both
the image's sshd_config and ssh_config name; 22 when they keep the default),
``no_host_key_check`` (the image's /etc/ssh/ssh_config sets ``StrictHostKeyChecking no`` and
``UserKnownHostsFile /dev/null``), ``openmpi`` (major version of its ``mpirun``, 0 = none),
``python3`` (an interpreter on PATH), ``privsep_dir`` (the image has sshd's privilege-separation
directory /run/sshd: Debian's openssh-server makes it only when its service starts, so a stock
image has none and sshd exits "Missing privilege separation directory"; mpi-operator's Dockerfile
and gpujobs' docker/mpi create it).
"""
from __future__ import annotations

from fnmatch import fnmatch
from typing import Any

EVERYTHING: dict[str, Any] = {"sshd": True, "ssh": True, "ssh_port": 22, "no_host_key_check": False,
                              "openmpi": 4, "python3": True, "privsep_dir": False}

# (image pattern, facts, source)
KNOWN: list[tuple[str, dict[str, Any], str]] = [
    # pytorch/pytorch: Dockerfile in pytorch/pytorch (the runtime stage copies a conda env onto
    # ubuntu and installs only ca-certificates/libjpeg/libpng): no ssh, no sshd, no MPI
    ("pytorch/pytorch*", {"sshd": False, "ssh": False, "openmpi": 0}, "pytorch/pytorch Dockerfile"),
    ("docker.io/pytorch/pytorch*", {"sshd": False, "ssh": False, "openmpi": 0}, "pytorch/pytorch Dockerfile"),
    # mpi-operator's base image: debian:trixie + openssh-server/-client; sed sets Port 2222 in
    # sshd_config and ssh_config, StrictHostKeyChecking no, UserKnownHostsFile /dev/null, StrictModes
    # no (mpi-operator@v0.8.0 build/base/Dockerfile, ARG port=2222); openmpi.Dockerfile adds
    # openmpi-bin (Debian trixie: Open MPI 5.0.x); no python3
    ("mpioperator/base*", {"sshd": True, "ssh": True, "ssh_port": 2222, "no_host_key_check": True,
                           "openmpi": 0, "python3": False, "privsep_dir": True}, "mpi-operator@v0.8.0 build/base/Dockerfile"),
    ("mpioperator/openmpi*", {"sshd": True, "ssh": True, "ssh_port": 2222, "no_host_key_check": True,
                              "openmpi": 5, "python3": False, "privsep_dir": True},
     "mpi-operator@v0.8.0 build/base/Dockerfile, openmpi.Dockerfile"),
    ("mpioperator/mpi-pi:openmpi*", {"sshd": True, "ssh": True, "ssh_port": 2222, "no_host_key_check": True,
                                     "openmpi": 5, "python3": False, "privsep_dir": True},
     "mpi-operator@v0.8.0 examples/v2beta1/pi/Dockerfile (FROM mpioperator/openmpi)"),
]


def facts(image: str, extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """What ``image`` contains (see the module doc)."""
    out = dict(EVERYTHING)
    for pattern, f, _src in KNOWN:
        if fnmatch(image or "", pattern):
            out.update(f)
            break
    for pattern, f in (extra or {}).items():
        if fnmatch(image or "", pattern):
            out.update(f)
    return out
