"""The sbatch translator: sbatch scripts into gpujobs jobs (it runs nothing of Slurm).

>>> b = gpujobs.slurm.from_sbatch("train.sbatch", mapping="site.yaml")
>>> b.spec().total_gpus, b.submit()

Modules: ``source`` (a path or the text itself), ``directives`` (a script's ``#SBATCH`` and
body lines), ``options`` (the directives in force, line-numbered messages), ``body`` (the launch line, export, cd), ``launch`` (what the
launcher starts), ``geometry`` (nodes, ranks per node, GPUs per rank), ``translate`` (the other
fields, arrays: from_sbatch, from_sbatch_array), ``site_mapping`` (the site mapping file),
``policy`` (directives warned about or refused), ``units`` (Slurm value syntax).
"""
from .site_mapping import GpuPlacement, SiteMapping, load_mapping
from .options import SbatchWarning
from .translate import from_sbatch, from_sbatch_array

__all__ = ["from_sbatch", "from_sbatch_array", "load_mapping", "SiteMapping", "GpuPlacement",
           "SbatchWarning"]
