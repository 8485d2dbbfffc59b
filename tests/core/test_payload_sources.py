"""The call carries the source lines of the user's functions it reaches (not whole files), and
the file names cloudpickle drops, so a rank's traceback names the file and shows the line."""
from __future__ import annotations

import importlib
import linecache
import sys
import traceback

import cloudpickle

from gpujobs.payload import pack_call, unpack_call

MODULE = '''\
FILLER = """
{filler}
"""


def helper(i):
    if i == 2:
        raise ValueError("bad " + str(i))
    return i


def fit(n):
    for i in range(n):
        helper(i)
'''


def load(tmp_path, monkeypatch, name):
    src = tmp_path / f"{name}.py"
    src.write_text(MODULE.format(filler="x" * 200_000))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return src, importlib.import_module(name)


def test_only_the_reached_functions_lines_travel(tmp_path, monkeypatch):
    """Regression: shipping whole files made a call from a big test module spill out of the
    pod annotations into a Secret (tests/k8s_render/test_bootstrap.py caught it)."""
    src, mod = load(tmp_path, monkeypatch, "bigmod_a")
    data = pack_call(mod.fit, (4,), {}, limit=10 << 20)
    cloudpickle.register_pickle_by_value(mod)
    try:
        bare = cloudpickle.dumps((mod.fit, (4,), {}))
    finally:
        cloudpickle.unregister_pickle_by_value(mod)
    assert len(data) - len(bare) < 2_000, (len(data), len(bare))  # not the 200 kB of FILLER
    sys.modules.pop("bigmod_a", None)


def test_unpacked_function_names_its_file_and_shows_the_line(tmp_path, monkeypatch):
    src, mod = load(tmp_path, monkeypatch, "bigmod_b")
    data = pack_call(mod.fit, (4,), {}, limit=10 << 20)
    src.unlink()
    linecache.clearcache()
    sys.modules.pop("bigmod_b", None)
    fn, args, kwargs = unpack_call(data)
    try:
        fn(*args)
    except ValueError as exc:
        tb = "".join(traceback.format_exception(exc))
    assert f'File "{src}", line 8, in helper' in tb, tb
    assert 'raise ValueError("bad " + str(i))' in tb and "helper(i)" in tb
    assert "<dynamic-code>" not in tb


def test_a_gpujob_cell_traceback_shows_the_cells_lines():
    """#31: a %%gpujob cell's remote traceback read `File "<dynamic-code>", line 5, in cell_14`
    with no source line. The cell's lines travel with the call and are shown."""
    from gpujobs_magic.cell import compile_cell
    cell = "x = 1\ny = {}\nz = x + 1\nprint(y['missing_key'])\n"
    fn = compile_cell(cell, {}, name="cell_14").fn
    data = pack_call(fn, (), {}, limit=10 << 20)
    linecache.cache.pop("<cell_14>", None)  # the rank's process never compiled the cell
    fn, args, kwargs = unpack_call(data)
    try:
        fn(*args)
    except KeyError as exc:
        tb = "".join(traceback.format_exception(exc))
    assert 'File "<cell_14>", line 4, in cell_14' in tb, tb
    assert "print(y['missing_key'])" in tb, tb
    assert "<dynamic-code>" not in tb
