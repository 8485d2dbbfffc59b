"""#31: a gpujobs error in a notebook shows the caller's line and the message, not 30-45
frames of builder, backend, client and protocol; every frame stays one switch away."""
from __future__ import annotations

from IPython.utils.capture import capture_output

CELL = "import gpujobs\ndef f():\n    pass\njob = gpujobs.submit(f, gpu=2)  # the typo\n"


def shown(shell, cell):
    with capture_output() as cap:
        res = shell.run_cell(cell)
    return res, cap.stdout + cap.stderr


def test_spec_error_shows_the_callers_line_not_gpujobs_frames(shell):
    res, out = shown(shell, CELL)
    from gpujobs.errors import SpecError
    assert isinstance(res.error_in_exec, SpecError), res.error_in_exec
    assert "gpujobs.submit(f, gpu=2)" in out and "SpecError" in out, out
    assert "gpujobs/builder.py" not in out and "gpujobs/api.py" not in out, out
    assert "%tb verbose" in out
    assert len(out.strip().splitlines()) <= 12, out


def test_tb_verbose_and_debug_show_every_frame(shell, monkeypatch):
    shown(shell, CELL)
    with capture_output() as cap:
        shell.run_line_magic("tb", "verbose")
    assert "gpujobs" + "/" in cap.stdout and "gpujobs.submit(f, gpu=2)" in cap.stdout, cap.stdout
    monkeypatch.setenv("GPUJOBS_DEBUG", "1")
    _, out = shown(shell, CELL)
    assert "%tb verbose" not in out and len(out.strip().splitlines()) > 12, out


def test_other_errors_keep_ipythons_traceback(shell):
    _, out = shown(shell, "def g():\n    return 1 / 0\ng()\n")
    assert "ZeroDivisionError" in out and "return 1 / 0" in out and "%tb verbose" not in out
