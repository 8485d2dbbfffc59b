"""Administrator tools: Kueue queues from a teams-and-quotas table or from slurm.conf.

>>> objs = gpujobs.admin.render_queues("teams.yaml")           # list of dicts
>>> print(gpujobs.admin.queues_yaml(slurm_conf="slurm.conf"))   # for kubectl apply -f -

Modules: ``teams`` (the teams-and-quotas table), ``slurm_conf`` (that table from slurm.conf),
``kueue`` (the table -> Kueue queue objects).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from ..errors import SpecError
from .kueue import render_table
from .slurm_conf import SlurmConfWarning, expand_hostlist, table_from_slurm_conf
from .teams import QueueTable, load_table, parse_table

__all__ = ["render_queues", "queues_yaml", "load_table", "parse_table", "table_from_slurm_conf",
           "render_table", "QueueTable", "SlurmConfWarning", "expand_hostlist"]


def render_queues(table: str | Path | Mapping[str, Any] | None = None, *,
                  slurm_conf: str | Path | None = None, namespace: str = "default",
                  cohort: str = "slurm") -> list[dict[str, Any]]:
    """Kueue objects for a table (path, YAML text or dict) or for a slurm.conf."""
    if (table is None) == (slurm_conf is None):
        raise SpecError("admin queues", "give a table or a slurm.conf, not both or neither",
                        "gpujobs admin queues TABLE.yaml  |  gpujobs admin queues --slurm-conf slurm.conf")
    if table is not None:
        model = load_table(table)
    else:
        assert slurm_conf is not None  # exactly one of the two, checked above
        model = parse_table(table_from_slurm_conf(slurm_conf, namespace, cohort), str(slurm_conf))
    return render_table(model)


def queues_yaml(table: Any = None, **kwargs: Any) -> str:
    return yaml.safe_dump_all(render_queues(table, **kwargs), sort_keys=False)
