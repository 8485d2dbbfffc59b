"""The local backend: a one-machine batch scheduler that runs real rank processes."""
from .backend import LocalBackend

__all__ = ["LocalBackend"]
