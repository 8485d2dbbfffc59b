"""What gpujobs knows about container images without pulling them: a small table of known
images (their upstream Dockerfiles, source beside each entry) and the tag conventions that
name a Python version (``rayproject/ray:<ray>-py<XY>[-gpu]``, gpujobs' own ``gpujobs-mpi:py<XY>``).

Reading an image's real labels or files needs registry access (the manifest and config blob,
``GET /v2/<name>/manifests/<tag>``, with the cluster's pull credentials), which gpujobs does not
do. Where neither the table nor the tag tells, the pod bootstrap checks at run time and fails
with words (exit 3): the Python version (bootstrap_script.check_environment), mpirun and ssh (the
MPI launcher), sshd (the MPI worker command).

Used before submit: the Python check of every kind (render.job._check) and the MPI image check
(:func:`mpi_missing`).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from fnmatch import fnmatch

from ....errors import Fix

MPI_IMAGE_NAME = "gpujobs-mpi"
"""The image docker/mpi/Dockerfile builds; tagged ``py<XY>`` for the Python it holds."""
MPI_DOCKERFILE = """\
ARG PYTHON=3.11
FROM python:${PYTHON}-slim-bookworm
ARG PYTHON
RUN apt-get update \\
    && apt-get install -y --no-install-recommends openssh-server openssh-client openmpi-bin libopenmpi-dev gcc \\
    && rm -rf /var/lib/apt/lists/* \\
    && mkdir -p /run/sshd
RUN pip install --no-cache-dir mpi4py cloudpickle
LABEL dev.gpujobs.python="${PYTHON}" dev.gpujobs.mpi="openmpi-4" dev.gpujobs.sshd="openssh"
"""
"""docker/mpi/Dockerfile's instructions (a test keeps them equal), for ``gpujobs admin mpi-image``:
a pip install has no docker/ folder, and the image needs no build context."""


@dataclass(frozen=True)
class ImageFacts:
    """What is in an image (None: not known)."""
    pattern: str
    source: str
    python: str | None = None  # "3.11"
    sshd: bool | None = None  # openssh-server
    ssh: bool | None = None  # openssh-client
    mpirun: str | None = None  # "openmpi-5", "" = none
    mpi4py: bool | None = None
    labels: tuple[tuple[str, str], ...] = ()  # the image's own LABELs, from its Dockerfile


KNOWN: tuple[ImageFacts, ...] = (
    # pytorch/pytorch Dockerfile, stage "official": ubuntu + ca-certificates, libjpeg-dev,
    # libpng-dev and the conda env (Python = the release's PYTHON_VERSION build arg); no ssh,
    # no sshd, no MPI
    ImageFacts("pytorch/pytorch*", "pytorch/pytorch Dockerfile (official stage)", sshd=False, ssh=False,
               mpirun="", mpi4py=False, labels=(("com.nvidia.volumes.needed", "nvidia_driver"),)),
    ImageFacts("docker.io/pytorch/pytorch*", "pytorch/pytorch Dockerfile (official stage)", sshd=False,
               ssh=False, mpirun="", mpi4py=False),
    # mpi-operator@v0.8.0 build/base/Dockerfile: debian:trixie + openssh-server/-client, sshd and
    # ssh on port 2222, StrictHostKeyChecking no, StrictModes no; openmpi.Dockerfile adds
    # openmpi-bin (Debian trixie: Open MPI 5.0); no python3, no mpi4py
    ImageFacts("mpioperator/base*", "mpi-operator@v0.8.0 build/base/Dockerfile", python="", sshd=True,
               ssh=True, mpirun="", mpi4py=False),
    ImageFacts("mpioperator/openmpi*", "mpi-operator@v0.8.0 build/base/openmpi.Dockerfile", python="",
               sshd=True, ssh=True, mpirun="openmpi-5", mpi4py=False),
    ImageFacts("mpioperator/mpi-pi:openmpi*", "mpi-operator@v0.8.0 examples/v2beta1/pi/Dockerfile", python="",
               sshd=True, ssh=True, mpirun="openmpi-5", mpi4py=False),
    ImageFacts("mpioperator/intel*", "mpi-operator@v0.8.0 build/base/intel.Dockerfile", python="", sshd=True,
               ssh=True, mpirun="intel", mpi4py=False),
    ImageFacts("mpioperator/mpich*", "mpi-operator@v0.8.0 build/base/mpich.Dockerfile", python="", sshd=True,
               ssh=True, mpirun="mpich", mpi4py=False),
    # gpujobs' own (docker/mpi/Dockerfile): python:<X.Y>-slim-bookworm + openssh-server/-client,
    # openmpi-bin (Debian bookworm: Open MPI 4.1), mpi4py, cloudpickle; LABEL dev.gpujobs.python
    ImageFacts(f"*{MPI_IMAGE_NAME}:py*", "docker/mpi/Dockerfile", sshd=True, ssh=True, mpirun="openmpi-4",
               mpi4py=True),
)

_PY_TAG = re.compile(r":(?:[^/]*-)?py(\d)(\d+)(?:-|$)")
"""``rayproject/ray:2.52.0-py311-gpu``, ``gpujobs-mpi:py311``: the Python the tag names."""


def facts(image: str | None) -> ImageFacts | None:
    for f in KNOWN:
        if image and fnmatch(image, f.pattern):
            return f
    return None


def python_of(image: str | None) -> tuple[str, str] | None:
    """(major.minor, how it is known) of the image's Python, or None when it cannot be known here."""
    if not image:
        return None
    m = _PY_TAG.search(image)
    if m:
        return f"{m.group(1)}.{m.group(2)}", "its tag"
    f = facts(image)
    if f and f.python:
        return f.python, f.source
    return None


def python_fix(image: str, want: str, text: str = "{}") -> Fix:
    """Set the same image for Python ``want`` (a -pyXY tag swapped), else an image with it."""
    m = _PY_TAG.search(image)
    if m:
        return Fix.set("image", f"{image[:m.start(1) - 2]}py{want.replace('.', '')}{image[m.end(2):]}", text)
    return Fix.set("image", "IMAGE", text.replace("{}", f"an image with Python {want} ({{}})"))


def mpi_missing(image: str) -> tuple[list[str], str] | None:
    """(what the MPI path needs that ``image`` lacks, source) for a known image; None when
    unknown (the launcher and workers check at run time)."""
    f = facts(image)
    if f is None:
        return None
    missing = []
    if f.sshd is False:
        missing.append("sshd (openssh-server)")
    if f.ssh is False:
        missing.append("an ssh client")
    if f.mpirun is not None and not f.mpirun.startswith("openmpi"):
        missing.append("Open MPI's mpirun" + (f" (it has {f.mpirun})" if f.mpirun else ""))
    if f.mpi4py is False:
        missing.append("mpi4py")
    if f.python == "":
        missing.append("python3")
    return missing, f.source


def mpi_image_fix() -> Fix:
    """A fix naming gpujobs' MPI image for this Python, runnable as written (no checkout needed:
    the Dockerfile comes from ``gpujobs admin mpi-image``)."""
    here = "%d.%d" % sys.version_info[:2]
    tag = f"{MPI_IMAGE_NAME}:py{here.replace('.', '')}"
    return Fix.set("image", tag, f"build gpujobs' MPI image: gpujobs admin mpi-image | docker build -t {tag} "
                   f"--build-arg PYTHON={here} - (then push it to your registry, or `kind load docker-image "
                   f"{tag}`), and pass {{}}")
