"""The one exception hierarchy of gpumine.

Every error gpumine raises on purpose derives from :class:`GpumineError`, so
``except GpumineError`` catches them all. Where scikit-learn users expect a
built-in type, the class also derives from it: bad parameters and bad data are
``ValueError`` (sklearn's common checks rely on that), missing hardware or a
failed compile is ``RuntimeError``.

Files that cannot be read or written are ``OSError`` (:class:`DataIOError`), memory that is
not there ``MemoryError`` (:class:`InsufficientMemoryError`). What other libraries raise
while gpumine reads, writes or allocates for a job (an ``OSError`` of the file system,
pyarrow's errors, NumPy's ``MemoryError``) becomes one of these at the job's boundary
(:func:`translated`), so the command line and the Airflow operator catch ``GpumineError``
alone.

Examples
--------
>>> from gpumine.exceptions import GpumineError, UnknownStrategy
>>> issubclass(UnknownStrategy, ValueError) and issubclass(UnknownStrategy, GpumineError)
True
>>> with translated():
...     open("/no/such/gpumine/file")
Traceback (most recent call last):
...
gpumine.exceptions.DataNotFoundError: [Errno 2] No such file or directory: '/no/such/gpumine/file'
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

__all__ = [
    "BackendUnavailable",
    "DataFormatError",
    "DataIOError",
    "DataNotFoundError",
    "GpumineError",
    "IncompatibleStrategy",
    "InsufficientMemoryError",
    "InvalidInputError",
    "InvalidParameterError",
    "KernelCompileError",
    "MissingDependency",
    "StrategyLoadError",
    "UnknownStrategy",
    "translated",
    "translating",
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


class MissingDependency(GpumineError, ImportError):
    """An optional package that this feature needs is not installed (or lacks what is
    needed); the message names the extra that brings it (``pip install "gpumine[bench]"``)."""


class DataIOError(GpumineError, OSError):
    """A data file or folder that cannot be read or written (permissions, a full disk, a
    failed download). Retrying may help: the Airflow operator retries it."""


class DataNotFoundError(DataIOError, FileNotFoundError):
    """A data file, folder or glob that names nothing."""


class InsufficientMemoryError(GpumineError, MemoryError):
    """The work needs more host or device memory than there is (the message says how much,
    where it can)."""


def _is_arrow_error(exc: BaseException) -> bool:
    return any(cls.__module__.startswith("pyarrow") and cls.__name__ == "ArrowException"
               for cls in type(exc).__mro__)


@contextmanager
def translated():
    """Raise what other libraries raise inside as gpumine's own errors, chained to the cause.

    ``FileNotFoundError`` becomes :class:`DataNotFoundError`, any other ``OSError``
    :class:`DataIOError`, ``MemoryError`` :class:`InsufficientMemoryError`, and
    pyarrow's errors about a file's content (``ArrowInvalid``, ``ArrowTypeError``, ...)
    :class:`DataFormatError` (its I/O errors are ``OSError``). :class:`GpumineError`
    passes unchanged, and so does everything else: a ``ValueError`` or ``TypeError`` from
    elsewhere is a bug to see with its traceback, not a message to print.
    """
    try:
        yield
    except GpumineError:
        raise
    except OSError as exc:
        kind = DataNotFoundError if isinstance(exc, FileNotFoundError) else DataIOError
        if exc.errno is not None:  # keep errno, message and file name as the cause had them
            raise kind(exc.errno, exc.strerror, exc.filename) from exc
        raise kind(str(exc) or type(exc).__name__) from exc
    except MemoryError as exc:
        raise InsufficientMemoryError(str(exc) or "out of memory") from exc
    except Exception as exc:
        if _is_arrow_error(exc):
            raise DataFormatError(str(exc)) from exc
        raise


def translating(func):
    """Decorate a job function so that it raises through :func:`translated`."""

    @functools.wraps(func)
    def job(*args, **kwargs):
        with translated():
            return func(*args, **kwargs)

    return job
