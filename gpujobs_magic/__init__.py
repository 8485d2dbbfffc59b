"""IPython extension: ``%load_ext gpujobs_magic`` then ``%%gpujob --gpus 4``."""


def load_ipython_extension(ipython):  # pragma: no cover - replaced by the notebook issue
    from .magics import GpuJobMagics
    ipython.register_magics(GpuJobMagics)
