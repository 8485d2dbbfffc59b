"""Queue quotas in the config file: Kubernetes quantities, never negative or infinite."""
from __future__ import annotations

import pytest

from gpujobs.config import parse_quantity
from gpujobs.errors import SpecError


def test_units():
    assert parse_quantity("32Gi", "memory") == 32 * 2**30
    assert parse_quantity("1.5k", "memory") == 1500.0
    assert parse_quantity(8, "cpus") == 8.0


@pytest.mark.parametrize("bad", ["-1Gi", "inf", "nan", "lots", "Gi", -3])
def test_bad_quantities_are_refused(bad):
    """Regression: "-1Gi" and "inf" became a negative / infinite queue quota."""
    with pytest.raises(SpecError) as err:
        parse_quantity(bad, "[[local.queues]] #1 memory")
    assert err.value.field == "[[local.queues]] #1 memory" and "32Gi" in err.value.fix
