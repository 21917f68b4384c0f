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
import itertools
import os
import weakref
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
    "HostBuffer",
    "cupy_module",
    "get_backend",
    "gpu_available",
    "gpu_unavailable_reason",
    "host_pool",
    "host_pool_threads",
    "set_column_major",
    "upload",
]

DEVICES = ("auto", "cpu", "gpu")
ENV_VAR = "GPUMINE_DEVICE"
#: The device's transpose of a row-major X into its column buffer
#: (:meth:`Backend.to_device_columns`), registered by the layer that holds the kernels
#: (:func:`gpumine.adapters.column_stats.column_major`, on import); None: CuPy's copy.
_column_major = None


def set_column_major(transpose) -> None:
    """Register ``transpose(X) -> X``'s column-major copy on the device, used by
    :meth:`Backend.to_device_columns` (this module sits below the kernels' layer, as the
    strategy registry sits below the strategies)."""
    global _column_major
    _column_major = transpose

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
        if _column_major is not None:  # by tiles in shared memory (adapters/column_stats)
            return _column_major(X_device)
        columns = cp.ascontiguousarray(X_device.T)
        del X_device
        return columns.T

    def to_host(self, array, out: HostBuffer | None = None):
        """Return ``array`` as a NumPy array (copied from the device if needed).

        Device arrays of ``STAGING_MIN_BYTES`` or more, or with ``out``, come back
        through pinned staging buffers (see :func:`_staged_copy_to_host`).

        Parameters
        ----------
        array : array
        out : HostBuffer, optional
            Where a device array goes (its shape, and its dtype or a wider one of the
            same kind: a narrow integer array is widened by the host threads as it lands,
            so that fewer bytes cross the bus): a buffer from :meth:`host_buffer`, whose
            pages were written while the device worked.
        """
        if self.is_gpu and is_device_array(array):
            if out is not None:
                host = out.result()
                if host.shape != array.shape or not (
                        host.dtype == array.dtype
                        or (host.dtype.kind == array.dtype.kind
                            and np.can_cast(array.dtype, host.dtype, "safe"))):
                    raise InvalidParameterError(
                        f"out is {host.shape} {host.dtype}, the array {array.shape} "
                        f"{array.dtype}")
                return _staged_copy_to_host(self._cupy, array, host)
            if array.nbytes >= STAGING_MIN_BYTES:
                return _staged_copy_to_host(self._cupy, array)
            return self._cupy.asnumpy(array)
        return np.asarray(array)

    @staticmethod
    def host_buffer(shape, dtype) -> HostBuffer:
        """An empty NumPy array whose pages host threads write now, in the background.

        The first write to each page of fresh host memory costs the kernel a page
        fault and a zeroing (about 20 ms for 134 MB on one thread, measured on the H100
        machine); ask for the buffer of a result before the device work that makes it,
        and the faults overlap that work. :meth:`to_host` ``(array, out=buffer)`` fills it.
        """
        return HostBuffer(shape, dtype)

    def pinned_array(self, shape, dtype) -> np.ndarray:
        """A NumPy array in page-locked host memory of its own (GPU backend only).

        Its pages are written by the host threads first (:class:`HostBuffer`), then
        page-locked in place (``cudaHostRegister``), and unlocked when the array and every
        view of it are gone. Not from CuPy's pinned pool, which would keep the memory
        locked for the process; and not by ``cudaHostAlloc``: with its buffers, keeping a
        10M x 32 float32 stream's batches (:class:`gpumine.adapters.chunks.PinnedCache`)
        cost a 2-iteration fit 0.5 s (0.95 s against 0.45 uncached, stream-timing record
        at a48d87a), this way 0.1 s (0.56 s, record at 3d8c3a2).
        """
        array = HostBuffer(shape, dtype).result()
        if array.nbytes == 0:
            return array
        runtime = self.xp.cuda.runtime
        runtime.hostRegister(array.ctypes.data, array.nbytes, 0)
        weakref.finalize(array, runtime.hostUnregister, array.ctypes.data)
        return array

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
#: Slices of a staged copy's chunk (one host thread each). Measured on the H100 machine (16
#: cores), 268 MB in: 13.7 ms with 4, 11.3 with 8, 11.9 with 12; 134 MB out: 12.8 ms with 4,
#: 10.6 with 8.
_STAGING_THREADS = 8
#: Threads of the host pool: up to 8. Measured on the H100 machine (16 cores): a table staged
#: to the device (as_columns) 1M x 32 float32 6.2-6.3 ms on 8 threads, 6.3 on 12, 7.7 on 16;
#: 16.7M x 2 float64 11.4-11.9, 10.1, 10.3 (threads-ab-2026-11-24 record); but WaveCluster's
#: fit of those points from the host 27.4-30.6 ms on 8, 31.3-32.5 on 12 (pool-ab record).
_POOL_THREADS = max(1, min(8, os.cpu_count() or 1))


def _host_pool():
    """The host threads of staged copies, :class:`HostBuffer` and WaveCluster's coarser
    levels on the CPU (made once per process)."""
    return _pool_of(os.getpid())


@functools.lru_cache(maxsize=1)
def _pool_of(pid: int):
    """The pool of process ``pid``: a process forked from one whose pool had threads gets its
    own (the parent's threads do not exist in the child, and an executor that believes it
    has idle ones never starts another: a task submitted there would wait forever)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="gpumine-host")


def host_pool():
    """The host threads that fill and drain pinned staging buffers (one pool per process;
    NumPy's copies release the GIL, so they run at once)."""
    return _host_pool()


def host_pool_threads() -> int:
    """Threads of :func:`host_pool`."""
    return _POOL_THREADS


def _slices(size: int):
    """``_STAGING_THREADS`` consecutive (start, stop) slices of ``range(size)``."""
    edges = [size * t // _STAGING_THREADS for t in range(_STAGING_THREADS + 1)]
    return list(itertools.pairwise(edges))


def _threaded_copy(pool, target, source) -> None:
    """``target[...] = source`` (1-d, same size) in ``_STAGING_THREADS`` slices on ``pool``.

    NumPy's copy releases the GIL, so the slices run at once: one thread alone does not
    reach the memory bandwidth that the pinned transfers need.
    """
    list(pool.map(lambda edge: np.copyto(target[edge[0]:edge[1]], source[edge[0]:edge[1]]),
                  _slices(source.size)))


class HostBuffer:
    """A NumPy array being written (zeroed) by the host threads; see :meth:`Backend.host_buffer`.

    Parameters
    ----------
    shape : tuple of int
    dtype : dtype
    """

    def __init__(self, shape, dtype):
        self.array = np.empty(shape, dtype=dtype)
        flat = self.array.reshape(-1)
        self._pending = [_host_pool().submit(np.copyto, flat[start:stop], 0)
                         for start, stop in _slices(flat.size)]

    def result(self) -> np.ndarray:
        """The array, once every page has been written."""
        for future in self._pending:
            future.result()
        return self.array


def _staged_copy(cupy, X):
    """Copy a large host array to the device through two pinned buffers.

    A pageable copy makes the driver stage through its own small pinned buffer, one
    piece at a time. Here chunks of ``_STAGING_CHUNK_BYTES`` are copied into one of two
    pinned buffers by the host threads (NumPy's copy releases the GIL) while the
    other buffer's chunk travels on a side stream; the host waits for the last chunk
    (the buffers return to CuPy's pinned pool).

    Page-locking the array itself instead (``cudaHostRegister``, in 8-64 MB chunks, copies
    overlapping the registrations, unregistration in the background) measured slower on
    the H100 machine: 12.7-21 ms for 268 MB against 11.0 staged, the registration alone
    taking 10 ms and the unregistration 5-7 (session-scratch-2026-11-24 record).
    """
    import cupyx

    X = np.ascontiguousarray(X)
    out = cupy.empty(X.shape, dtype=X.dtype)
    flat_in, flat_out = X.reshape(-1), out.reshape(-1)
    step = max(1, _STAGING_CHUNK_BYTES // X.itemsize)
    buffers = [cupyx.empty_pinned(step, dtype=X.dtype) for _ in range(2)]
    done = [None, None]
    stream = cupy.cuda.Stream(non_blocking=True)
    # ``out`` comes from CuPy's pool on the current stream: memory freed there may still be
    # read by work queued on it (a previous copy's transpose), which a non-blocking side
    # stream would not wait for -- it overwrote a partition being transposed when
    # gpumine.dask staged several partitions in turn (record dask-two-gpus-*-32ec66b)
    stream.wait_event(cupy.cuda.get_current_stream().record())
    pool = _host_pool()
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


def _staged_copy_to_host(cupy, array, out=None):
    """Copy a large device array to the host through two pinned buffers.

    The reverse of :func:`_staged_copy`: while one pinned buffer's chunk is copied
    into the NumPy result (``out`` when given, of ``array``'s shape and dtype) by the
    host threads, the next chunk comes down into the other on a side stream (which
    first waits for the work queued on the current stream, so the array is complete).
    """
    import cupyx

    array = cupy.ascontiguousarray(array)
    if out is None:
        out = np.empty(array.shape, dtype=array.dtype)
    flat_in, flat_out = array.reshape(-1), out.reshape(-1)
    step = max(1, _STAGING_CHUNK_BYTES // array.itemsize)
    buffers = [cupyx.empty_pinned(min(step, flat_in.size), dtype=array.dtype)
               for _ in range(2)]
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.wait_event(cupy.cuda.get_current_stream().record())
    starts = list(range(0, flat_in.size, step))
    done = [None, None]
    pool = _host_pool()

    def drain(number):
        start = starts[number]
        size = min(step, flat_in.size - start)
        done[number % 2].synchronize()
        _threaded_copy(pool, flat_out[start:start + size], buffers[number % 2][:size])

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


def upload(values, xp, dtype=None):
    """A small host array (a table, a few numbers) as an array of ``xp``.

    On CuPy's default stream: one copy from the array's own pages on the legacy default
    stream, which the driver stages and returns from without waiting for the device, the
    stream ordering it after the work queued before; where ``cupy.asarray`` stages it
    through CuPy's pinned pool (on the H100 machine, the device idle, 15 us a call against
    27; with a kernel running both vary from run to run, this one never the slower;
    WaveCluster's ``"auto"`` fits 2-10 % faster: record
    ``wavecluster-auto-uploads-h100-2026-11-27-989e2b5.json``). On another stream, or for
    NumPy or an array already on the device: ``xp.asarray`` (a copy ordered in that stream:
    the legacy stream's would not be, in a non-blocking one). For large arrays use
    :meth:`Backend.to_device`.

    Examples
    --------
    >>> upload([3, 1, 2], np, dtype=np.int64)
    array([3, 1, 2])
    """
    if xp is np or is_device_array(values) or xp.cuda.get_current_stream().ptr != 0:
        return xp.asarray(values, dtype=dtype)
    host = np.ascontiguousarray(values, dtype=dtype)
    out = xp.empty(host.shape, dtype=host.dtype)
    if host.size:
        out.set(host)  # sync: none -- staged by the driver, ordered by the default stream
    return out


def cupy_module() -> ModuleType:
    """The CuPy module, for GPU code (kernel loader, GPU strategies).

    Raises
    ------
    BackendUnavailable
        No CuPy or no GPU; the message says what to install.
    """
    return get_backend("gpu").xp


def nccl_module() -> ModuleType:
    """CuPy's NCCL bindings (``cupy.cuda.nccl``), for the several-GPU loop.

    Raises
    ------
    BackendUnavailable
        No CuPy or no GPU, or a CuPy built without NCCL.
    """
    cupy_module()
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise BackendUnavailable(f"several GPUs need CuPy's NCCL bindings: {exc}") from exc
    if not getattr(nccl, "available", True):
        raise BackendUnavailable("several GPUs need NCCL: this CuPy has no NCCL library "
                                 "(pip install nvidia-nccl-cu12 or -cu13)")
    return nccl


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
