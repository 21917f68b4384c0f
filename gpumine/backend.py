"""Compute backends: NumPy on the host, CuPy on a CUDA GPU.

This is the only module of gpumine that imports CuPy. Everything else asks
:func:`get_backend` for a :class:`Backend` and uses its ``xp`` namespace, so
the same engine code runs on both.

The device is chosen by the ``device`` argument of an estimator:

* ``"cpu"`` -- NumPy, always available; the exact reference path.
* ``"gpu"`` -- CuPy on the current CUDA device. Without CuPy, or with CuPy but
  no device that answers, :class:`~gpumine.exceptions.BackendUnavailable` is
  raised and its message says what to install.
* ``"auto"`` -- the GPU when CuPy imports and a device answers, else the CPU.

The environment variable ``GPUMINE_DEVICE`` (``cpu``, ``gpu`` or ``auto``)
overrides ``"auto"`` only: an explicit ``device="cpu"`` or ``device="gpu"`` in
code is never second-guessed. ``GPUMINE_DEVICE=cpu`` therefore forces every
estimator left at its default onto the CPU, e.g. in a test job.

Examples
--------
>>> from gpumine.backend import get_backend
>>> backend = get_backend("cpu")
>>> backend.name, backend.is_gpu
('cpu', False)
>>> backend.to_host(backend.xp.arange(3)).tolist()
[0, 1, 2]
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from gpumine.exceptions import BackendUnavailable, InvalidParameterError
from gpumine.validation import is_device_array

__all__ = [
    "DEVICES",
    "ENV_VAR",
    "STAGING_MIN_BYTES",
    "Backend",
    "cupy_module",
    "get_backend",
    "gpu_available",
    "gpu_unavailable_reason",
]

DEVICES = ("auto", "cpu", "gpu")
ENV_VAR = "GPUMINE_DEVICE"

_INSTALL_HINT = (
    'install CuPy for your CUDA version: pip install "gpumine[cuda12]" (CUDA 12) '
    'or pip install "gpumine[cuda13]" (CUDA 13)'
)


@dataclass(frozen=True)
class Backend:
    """A compute backend: an array namespace plus host/device transfers.

    Attributes
    ----------
    name : {"cpu", "gpu"}
    xp : module
        ``numpy`` or ``cupy``.
    device_name : str
        ``"cpu"`` or the CUDA device's name.
    """

    name: str
    xp: ModuleType
    device_name: str = "cpu"
    _cupy: Any = field(default=None, repr=False, compare=False)

    @property
    def is_gpu(self) -> bool:
        """True for the CuPy backend."""
        return self.name == "gpu"

    def to_device(self, array, dtype=None):
        """Return ``array`` as an array of this backend (a copy only if needed)."""
        if self.is_gpu:
            return self._cupy.asarray(array, dtype=dtype)
        if is_device_array(array):
            array = array.get()
        return np.asarray(array, dtype=dtype)

    def to_device_columns(self, X):
        """X (n_samples, n_features) on this backend, stored column-major on the GPU.

        On the GPU: one host-to-device copy of X as given, then a transpose on the
        device into a (n_features, n_samples) C-contiguous buffer, returned as its
        (n_samples, n_features) view -- the layout the seed papers' kernels read,
        where a warp loads consecutive points of one feature. On the CPU, X is
        returned as it is (row-major, as scikit-learn's reference keeps it).
        """
        if not self.is_gpu:
            return self.to_device(X)
        cp = self._cupy
        if isinstance(X, np.ndarray) and X.nbytes >= STAGING_MIN_BYTES:
            X_device = _staged_copy(cp, X)
        else:
            X_device = cp.asarray(X)
        if X_device.T.flags.c_contiguous:
            return X_device
        columns = cp.ascontiguousarray(X_device.T)
        del X_device
        return columns.T

    def to_host(self, array):
        """Return ``array`` as a NumPy array (copied from the device if needed).

        Device arrays of ``STAGING_MIN_BYTES`` or more come back through pinned
        staging buffers (see :func:`_staged_copy_to_host`).
        """
        if self.is_gpu and isinstance(array, self._cupy.ndarray):
            if array.nbytes >= STAGING_MIN_BYTES:
                return _staged_copy_to_host(self._cupy, array)
            return self._cupy.asnumpy(array)
        return np.asarray(array)

    def synchronize(self) -> None:
        """Wait for all queued device work (a no-op on the CPU)."""
        if self.is_gpu:
            self._cupy.cuda.get_current_stream().synchronize()

    def release_memory(self) -> None:
        """Hand the memory CuPy's pools keep for reuse back to the driver (a no-op on the CPU).

        Arrays still referenced stay; what the pools hold in reserve, device and
        pinned host memory, is freed, so another process (the next task on the
        worker) can use it.
        """
        if self.is_gpu:
            self.synchronize()
            self._cupy.get_default_memory_pool().free_all_blocks()
            self._cupy.get_default_pinned_memory_pool().free_all_blocks()


_CPU = Backend(name="cpu", xp=np, device_name="cpu")

#: Host arrays at least this large go to the GPU through pinned staging buffers.
STAGING_MIN_BYTES = 64 << 20
_STAGING_CHUNK_BYTES = 32 << 20
_STAGING_THREADS = 4


def _threaded_copy(pool, target, source) -> None:
    """``target[...] = source`` (1-d, same size) in ``_STAGING_THREADS`` slices on ``pool``.

    NumPy's copy releases the GIL, so the slices run at once: one thread alone does not
    reach the memory bandwidth that the pinned transfers need.
    """
    edges = [source.size * t // _STAGING_THREADS for t in range(_STAGING_THREADS + 1)]
    list(pool.map(lambda t: np.copyto(target[edges[t]:edges[t + 1]],
                                      source[edges[t]:edges[t + 1]]),
                  range(_STAGING_THREADS)))


def _staged_copy(cupy, X):
    """Copy a large host array to the device through two pinned buffers.

    A pageable copy makes the driver stage through its own small pinned buffer, one
    piece at a time. Here chunks of ``_STAGING_CHUNK_BYTES`` are copied into one of two
    pinned buffers by a few host threads (NumPy's copy releases the GIL) while the
    other buffer's chunk travels on a side stream; the host waits for the last chunk
    (the buffers return to CuPy's pinned pool).
    """
    from concurrent.futures import ThreadPoolExecutor

    import cupyx

    X = np.ascontiguousarray(X)
    out = cupy.empty(X.shape, dtype=X.dtype)
    flat_in, flat_out = X.reshape(-1), out.reshape(-1)
    step = max(1, _STAGING_CHUNK_BYTES // X.itemsize)
    buffers = [cupyx.empty_pinned(step, dtype=X.dtype) for _ in range(2)]
    done = [None, None]
    stream = cupy.cuda.Stream(non_blocking=True)

    with ThreadPoolExecutor(_STAGING_THREADS) as pool:
        for number, start in enumerate(range(0, flat_in.size, step)):
            chunk = flat_in[start:start + step]
            slot = number % 2
            if done[slot] is not None:
                done[slot].synchronize()  # the buffer's previous chunk has left
            _threaded_copy(pool, buffers[slot][:chunk.size], chunk)
            flat_out[start:start + chunk.size].set(buffers[slot][:chunk.size], stream=stream)
            done[slot] = stream.record()
    # The pinned buffers go back to CuPy's pool on return: wait for their last chunks.
    stream.synchronize()
    return out


def _staged_copy_to_host(cupy, array):
    """Copy a large device array to the host through two pinned buffers.

    The reverse of :func:`_staged_copy`: while one pinned buffer's chunk is copied
    into the NumPy result by a few host threads, the next chunk comes down into the
    other on a side stream (which first waits for the work queued on the current
    stream, so the array is complete).
    """
    from concurrent.futures import ThreadPoolExecutor

    import cupyx

    array = cupy.ascontiguousarray(array)
    out = np.empty(array.shape, dtype=array.dtype)
    flat_in, flat_out = array.reshape(-1), out.reshape(-1)
    step = max(1, _STAGING_CHUNK_BYTES // array.itemsize)
    buffers = [cupyx.empty_pinned(step, dtype=array.dtype) for _ in range(2)]
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.wait_event(cupy.cuda.get_current_stream().record())
    starts = list(range(0, flat_in.size, step))
    done = [None, None]

    def drain(number):
        start = starts[number]
        size = min(step, flat_in.size - start)
        done[number % 2].synchronize()
        _threaded_copy(pool, flat_out[start:start + size], buffers[number % 2][:size])

    with ThreadPoolExecutor(_STAGING_THREADS) as pool:
        for number, start in enumerate(starts):
            slot = number % 2
            if number >= 2:
                drain(number - 2)  # the slot's previous chunk leaves before it is reused
            size = min(step, flat_in.size - start)
            flat_in[start:start + size].get(stream=stream, out=buffers[slot][:size],
                                            blocking=False)
            done[slot] = stream.record()
        for number in range(max(0, len(starts) - 2), len(starts)):
            drain(number)
    return out


@functools.lru_cache(maxsize=1)
def _probe_gpu() -> tuple[Backend | None, str]:
    """Import CuPy and ask for a device once per process.

    Returns the GPU backend, or ``None`` and the reason it is unavailable.
    """
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        return None, f"CuPy is not installed ({exc}); {_INSTALL_HINT}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver errors come in several types
        return None, f"CuPy is installed but no CUDA device answered ({exc})"
    if count < 1:
        return None, "CuPy is installed but no CUDA device is visible"
    try:
        device_id = cupy.cuda.Device().id
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception as exc:
        return None, f"the CUDA device did not answer ({exc})"
    return Backend(name="gpu", xp=cupy, device_name=name, _cupy=cupy), ""


def cupy_module() -> ModuleType:
    """The CuPy module, for GPU code (kernel loader, GPU strategies).

    Raises
    ------
    BackendUnavailable
        No CuPy or no GPU; the message says what to install.
    """
    return get_backend("gpu").xp


def gpu_available() -> bool:
    """True when CuPy imports and a CUDA device answers."""
    return _probe_gpu()[0] is not None


def gpu_unavailable_reason() -> str:
    """Why the GPU backend cannot run here ("" when it can), with what to install."""
    return _probe_gpu()[1]


def _requested_device(device: str) -> str:
    if not isinstance(device, str) or device not in DEVICES:
        raise InvalidParameterError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "auto":
        override = os.environ.get(ENV_VAR, "").strip().lower()
        if override:
            if override not in DEVICES:
                raise InvalidParameterError(
                    f"environment variable {ENV_VAR}={override!r} must be one of {DEVICES}"
                )
            device = override
    return device


def get_backend(device: str = "auto") -> Backend:
    """Return the backend for ``device``.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}, default="auto"
        See the module docstring; ``GPUMINE_DEVICE`` overrides ``"auto"``.

    Returns
    -------
    Backend

    Raises
    ------
    BackendUnavailable
        ``device="gpu"`` (or ``GPUMINE_DEVICE=gpu``) without CuPy or a GPU.
    ValueError
        An unknown device name.
    """
    device = _requested_device(device)
    if device == "cpu":
        return _CPU
    gpu, reason = _probe_gpu()
    if gpu is not None:
        return gpu
    if device == "gpu":
        raise BackendUnavailable(f'device="gpu" is not available: {reason}')
    return _CPU
