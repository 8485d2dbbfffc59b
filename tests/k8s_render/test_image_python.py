"""The image's Python must be the submitter's major.minor; where the tag says it (rayproject/ray's
``-pyXY``), a mismatch is refused before anything is created."""
import sys

import pytest

import gpujobs
from gpujobs.backends.kubernetes.render.job import render_job
from gpujobs.errors import SpecError


def _other_py() -> str:
    return "py310" if sys.version_info[:2] != (3, 10) else "py311"


def test_ray_image_with_another_python_is_refused_naming_the_image():
    spec = gpujobs.job(print).ray(workers=1).image(f"rayproject/ray:2.52.0-{_other_py()}-gpu").spec()
    with pytest.raises(SpecError) as ei:
        render_job(spec)
    here = "py%d%d" % sys.version_info[:2]
    assert ei.value.field == "image" and f"rayproject/ray:2.52.0-{here}-gpu" in ei.value.fix


def test_ray_image_with_this_python_renders():
    here = "py%d%d" % sys.version_info[:2]
    assert render_job(gpujobs.job(print).ray(workers=1).image(f"rayproject/ray:2.52.0-{here}").spec()).kind == "RayJob"
