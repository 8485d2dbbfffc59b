"""Cost of the local backend's privacy checks (issue 21), per call, in microseconds.

    .venv/bin/python benchmarks/local_checks.py [--n 2000]

What a client pays on each connection to the agent (state folders and socket checked, then
the listener's uid via SO_PEERCRED) and what the agent pays per submit (the job folder
derived from the id and checked). local_launch.py measures the whole launch; these numbers
say how much of it the checks can be, independent of the machine's load.
"""
from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpujobs.backends.local import private, protocol  # noqa: E402


def per_call_us(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    n = ap.parse_args().n
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        private.make_home(home)
        path = protocol.socket_path(home)
        with socket.socket(socket.AF_UNIX) as srv, socket.socket(socket.AF_UNIX) as cli:
            srv.bind(str(path))
            srv.listen(1)
            cli.connect(str(path))
            folder = home / "jobs" / "bench-000001"
            folder.mkdir(mode=0o700)
            rows = [
                ("client, per connection: state folders + socket and its folder",
                 per_call_us(lambda: (private.check_home(home),
                                      private.check_socket_file(protocol.socket_path(home))), n)),
                ("client, per connection: SO_PEERCRED of the listener",
                 per_call_us(lambda: private.peer_uid(cli), n)),
                ("agent, per submit: job folder from the id, checked",
                 per_call_us(lambda: private.job_folder(home, "bench-000001", str(folder)), n)),
            ]
    for what, us in rows:
        print(f"{what:<66} {us:7.1f} us")


if __name__ == "__main__":
    main()
