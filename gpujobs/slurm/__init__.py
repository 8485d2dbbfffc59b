"""Slurm bridge: translate sbatch scripts into gpujobs jobs.

>>> b = gpujobs.slurm.from_sbatch("train.sbatch", mapping="site.yaml")
>>> b.spec().total_gpus, b.submit()
"""
from .site_mapping import GpuPlacement, SiteMapping, load_mapping
from .options import SbatchWarning
from .translate import from_sbatch, from_sbatch_array

__all__ = ["from_sbatch", "from_sbatch_array", "load_mapping", "SiteMapping", "GpuPlacement",
           "SbatchWarning"]
