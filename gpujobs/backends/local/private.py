"""The local backend's state kept private to its user, whatever the umask (SECURITY.md).

The agent runs whatever a job folder holds with its user's rights, and a client unpickles
what comes back from it, so nothing that steers either may be in another user's reach:

- state folders (``$GPUJOBS_HOME``, ``jobs/``, each job folder and its sub-folders) are made
  0700 and files (database, logs, key, payload, pid/lock/error files) 0600, with the mode
  set explicitly (a umask of 002 or 000 changes nothing); a state folder that another user
  can write, or that another user owns, is refused with the command that fixes it;
- the agent's socket lives in a folder only its user can enter (:func:`socket_path`);
  both ends check the other's uid (SO_PEERCRED): the agent before it reads an op, the
  client before it sends one;
- the agent takes a submit's job folder only as ``jobs/<id>`` under its own home, a real
  folder of its user's, 0700 (:func:`job_folder`).
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import socket
import stat
import struct
import tempfile
from pathlib import Path

from ...errors import SpecError, StateError
from ...rank.filemodes import DIR_MODE, FILE_MODE, open_private, private_file, write_private

__all__ = ["DIR_MODE", "FILE_MODE", "open_private", "private_file", "write_private"]  # re-exported
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
OTHERS_ANY = 0o077
_SUN_PATH_MAX = 100  # AF_UNIX paths are at most 107 bytes on Linux; keep a margin
_JOB_ID_RE = re.compile(r"\w[\w.-]*")  # what display_name-<hex> ids look like; no '/', no leading '.'
_JOB_ID_MAX = 200


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def _owner_problem(path: Path, st: os.stat_result) -> str | None:
    uid = os.geteuid()
    if st.st_uid != uid:
        return (f"the gpujobs state folder {path} belongs to uid {st.st_uid}, not to you "
                f"(uid {uid}); another user could change what your agent runs. Point "
                f"GPUJOBS_HOME at a folder of your own (e.g. unset GPUJOBS_HOME for ~/.gpujobs)")
    return None


def check_dir(path: Path, *, follow: bool = True) -> os.stat_result:
    """StateError unless ``path`` is a folder of this user's that no other user can write.

    ``follow=False`` also refuses a symlink (folders gpujobs itself makes are never links).
    FileNotFoundError passes through (callers create or report it)."""
    path = Path(path)
    st = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a folder"
        raise StateError(f"the gpujobs state folder {path} is {what}; gpujobs makes it as a "
                         f"private folder. Move it aside (mv {_q(path)} {_q(str(path) + '.bad')}) "
                         f"and retry")
    problem = _owner_problem(path, st)
    if problem:
        raise StateError(problem)
    if st.st_mode & OTHERS_WRITE:
        raise StateError(f"the gpujobs state folder {path} can be written by other users "
                         f"(mode {stat.S_IMODE(st.st_mode):04o}), who could then run code as you "
                         f"through your agent; make it private: chmod 700 {_q(path)}")
    return st


def make_dir(path: Path, *, follow: bool = True) -> Path:
    """``path`` made 0700 (mode set explicitly, not via the umask) if missing, then checked."""
    path = Path(path)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    else:
        os.chmod(path, DIR_MODE)  # a umask cannot widen it, a setgid parent cannot either
    check_dir(path, follow=follow)
    return path


def make_home(home: Path) -> None:
    """``$GPUJOBS_HOME`` (its missing parents too, 0700) and ``jobs/``: made private, checked."""
    home = Path(home)
    missing = []
    p = home
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        make_dir(d)
    check_dir(home)
    make_dir(home / "jobs")


def check_home(home: Path) -> None:
    """The state folders that exist are the user's and not writable by others (client use)."""
    for path in (Path(home), Path(home) / "jobs"):
        try:
            check_dir(path)
        except FileNotFoundError:
            return


def make_private_db(path: Path) -> None:
    """The SQLite file (and a WAL/SHM left over) 0600 before SQLite opens it: SQLite makes
    new files 0644 minus the umask, and its -wal / -shm files take the database's mode."""
    os.close(private_file(Path(path), os.O_WRONLY))
    for extra in ("-wal", "-shm"):
        try:
            os.chmod(f"{path}{extra}", FILE_MODE)
        except OSError:
            pass


# ------------------------------------------------------------------------------ the socket
def _private_enough(path: Path) -> bool:
    """A folder of ours nobody else may enter (a missing one will be made so)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    return st.st_uid == os.geteuid() and not st.st_mode & OTHERS_ANY


def runtime_dir() -> Path:
    """Where sockets go when the home will not do: ``$XDG_RUNTIME_DIR/gpujobs`` when that is
    a private folder of this user's (systemd makes it 0700, per login), else
    ``<tempdir>/gpujobs-<uid>``. The latter name is predictable, so it is checked (ours,
    0700, not a link) before anything is put in or taken from it: another user who makes
    it first gets a refusal (:func:`check_socket_dir`), never our traffic."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and len(xdg) < 60:
        try:
            st = os.stat(xdg)
            if st.st_uid == os.geteuid() and not st.st_mode & OTHERS_ANY and stat.S_ISDIR(st.st_mode):
                return Path(xdg) / "gpujobs"
        except OSError:
            pass
    return Path(tempfile.gettempdir()) / f"gpujobs-{os.geteuid()}"


def socket_path(home: Path) -> Path:
    """``$GPUJOBS_HOME/agent.sock`` when the home is private (0700, ours) and short enough
    for AF_UNIX; else ``<runtime_dir()>/<hash of the home>.sock``."""
    home = Path(home)
    p = home / "agent.sock"
    if len(str(p).encode()) < _SUN_PATH_MAX and _private_enough(home):
        return p
    digest = hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:16]
    return runtime_dir() / f"{digest}.sock"


def check_socket_dir(folder: Path) -> None:
    """StateError unless the socket's folder is ours and nobody else may enter it."""
    st = os.stat(folder)  # through a link (a home reached so): its target is what counts
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & OTHERS_ANY:
        owner = f"belongs to uid {st.st_uid}" if st.st_uid != os.geteuid() else \
            f"has mode {stat.S_IMODE(st.st_mode):04o}"
        fix = (f"chmod 700 {_q(folder)}" if st.st_uid == os.geteuid() else
               "it was not made by you: report it to the machine's admins, and meanwhile set "
               "XDG_RUNTIME_DIR to a private folder of yours or use a shorter GPUJOBS_HOME")
        raise StateError(f"the gpujobs agent's socket folder {folder} {owner}; only you may "
                         f"be able to enter it (another user could pose as your agent or reach "
                         f"it). Fix: {fix}")


def make_socket_dir(folder: Path) -> None:
    """The socket's folder made 0700 if missing (the runtime folder), then checked."""
    try:
        os.mkdir(folder, DIR_MODE)
    except FileExistsError:
        pass
    else:
        os.chmod(folder, DIR_MODE)
    check_socket_dir(folder)


def check_socket_file(path: Path) -> None:
    """Before a client connects: the socket is a socket of ours in a private folder.
    FileNotFoundError when there is none (no agent runs)."""
    check_socket_dir(path.parent)
    st = os.lstat(path)
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        what = "is not a socket" if not stat.S_ISSOCK(st.st_mode) else f"belongs to uid {st.st_uid}"
        raise StateError(f"the gpujobs agent socket {path} {what}, not to you (uid "
                         f"{os.geteuid()}); nothing was sent to it. If no agent of yours runs, "
                         f"remove it (rm {_q(path)}) and retry; if you did not make it, tell the "
                         f"machine's admins")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected AF_UNIX socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


# ------------------------------------------------------------------------------ job folders
def job_folder(home: Path, job_id: object, claimed: object = None) -> Path:
    """``home/jobs/<job_id>``, the only folder the agent runs a job from.

    SpecError when the id could name anything else (``/``, ``..``, a leading ``.``), when the
    client's ``job_dir`` is not that folder, or when the folder is not a real 0700 folder of
    this user's under ``jobs/`` (a symlink out, another user's)."""
    if not isinstance(job_id, str) or len(job_id) > _JOB_ID_MAX or not _JOB_ID_RE.fullmatch(job_id):
        raise SpecError("id", f"{job_id!r} is not a gpujobs job id (letters, digits, '.', '-', "
                              f"'_'; no '/', no leading '.', at most {_JOB_ID_MAX} characters)",
                        "submit through gpujobs; it makes the id")
    jobs = Path(home) / "jobs"
    folder = jobs / job_id
    if claimed is not None and (not isinstance(claimed, str) or
                                os.path.realpath(claimed) != os.path.realpath(folder)):
        raise SpecError("job_dir", f"{claimed!r} is not this agent's folder for job {job_id} "
                                   f"({folder}); the agent runs jobs only from its own jobs/ folder",
                        "submit through gpujobs, which writes the job under $GPUJOBS_HOME/jobs/<id>")
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        raise SpecError("job_dir", f"the job folder {folder} does not exist",
                        "submit through gpujobs, which writes it first") from None
    real_jobs = os.path.realpath(jobs)
    if (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
            or st.st_mode & OTHERS_ANY
            or os.path.dirname(os.path.realpath(folder)) != real_jobs):
        raise SpecError("job_dir", f"{folder} is not a private (0700) folder of uid "
                                   f"{os.geteuid()} inside {real_jobs}; refused",
                        "submit through gpujobs, which makes the job folder")
    return folder
