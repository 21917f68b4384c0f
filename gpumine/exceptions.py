"""The one exception hierarchy of gpumine.

Every error gpumine raises on purpose derives from :class:`GpumineError`, so
``except GpumineError`` catches them all. Where scikit-learn users expect a
built-in type, the class also derives from it: bad parameters and bad data are
``ValueError`` (sklearn's common checks rely on that), missing hardware or a
failed compile is ``RuntimeError``.

Examples
--------
>>> from gpumine.exceptions import GpumineError, UnknownStrategy
>>> issubclass(UnknownStrategy, ValueError) and issubclass(UnknownStrategy, GpumineError)
True
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "DataFormatError",
    "GpumineError",
    "IncompatibleStrategy",
    "InvalidInputError",
    "InvalidParameterError",
    "KernelCompileError",
    "StrategyLoadError",
    "UnknownStrategy",
]


class GpumineError(Exception):
    """Base class of every error gpumine raises on purpose."""


class BackendUnavailable(GpumineError, RuntimeError):
    """The requested compute backend cannot be used here.

    The message names what is missing and how to install it, e.g.
    ``pip install "gpumine[cuda12]"``.
    """


class UnknownStrategy(GpumineError, ValueError):
    """A strategy name that the registry does not know; the message lists the known ones."""


class StrategyLoadError(GpumineError, RuntimeError):
    """A registered strategy (usually a third-party plugin) failed to import or load.

    The message names the plugin's distribution and entry point.
    """


class KernelCompileError(GpumineError, RuntimeError):
    """NVRTC rejected a CUDA source; the message carries the compiler log."""


class InvalidParameterError(GpumineError, ValueError):
    """An estimator or function parameter out of its domain (the message names it)."""


class InvalidInputError(GpumineError, ValueError):
    """Input data that gpumine cannot use (wrong shape, dtype, NaN, ...)."""


class DataFormatError(GpumineError, ValueError):
    """A data file that is truncated, corrupted or not in the expected format."""


class IncompatibleStrategy(GpumineError, ValueError):
    """A strategy that exists but cannot run on the chosen backend (a GPU kernel on the CPU)."""
