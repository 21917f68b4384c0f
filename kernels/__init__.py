"""CUDA kernel sources (``*.cu``, ``*.cuh``) and their one loader (``gpumine.kernels``).

:func:`get_kernel` is the only place in gpumine that builds CUDA modules. It reads
a source next to this file, compiles it with NVRTC through ``cupy.RawModule``
with ``name_expressions`` for the template instantiation asked for (dtype,
compile-time tile sizes: seed 000's runtime specialization), and memoizes the
module per device, source, instantiation and defines. NVRTC errors become
:class:`~gpumine.exceptions.KernelCompileError` carrying the compiler log.

Every instantiation a strategy uses is declared with :func:`instantiation` so
that the CI test can compile all of them with ``nvcc -arch=sm_90`` without a GPU.

Examples
--------
>>> from gpumine.kernels import kernel_sources
>>> [p.name for p in kernel_sources()][:1]
['common.cuh']
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from gpumine.backend import cupy_module
from gpumine.exceptions import InvalidInputError, KernelCompileError

__all__ = [
    "BLOCK",
    "KERNEL_DIR",
    "Instantiation",
    "declared_instantiations",
    "declares",
    "device_attribute",
    "get_kernel",
    "instantiation",
    "kernel_sources",
    "launch",
    "resident_blocks",
    "stride_grid",
]

#: Folder that holds the ``.cu``/``.cuh`` files, installed or editable.
KERNEL_DIR = Path(__file__).resolve().parent

#: NVRTC options shared by every module: C++17, headers from this folder. No
#: ``-use_fast_math``: the kernels are compared with FP64 references. CuPy itself appends
#: ``-ftz=true`` (cupy/cupy#9576), so float arithmetic flushes subnormals to zero (double
#: arithmetic does not); the tensor-core bounds carry underflow terms for it (``a`` and the
#: keys' ``2^-126``, gpumine/kmeans/tensor_cores.py).
_OPTIONS = ("-std=c++17", f"-I{KERNEL_DIR}")



def header_define(name: str) -> int:
    """An integer ``#define`` of common.cuh: one definition for CUDA and for Python."""
    text = (KERNEL_DIR / "common.cuh").read_text(encoding="utf-8")
    return int(re.search(rf"^#define {name} (\d+)\s*$", text, re.MULTILINE).group(1))


#: Threads per block of every launch that does not choose its own (``GPUMINE_BLOCK`` in
#: common.cuh, which the kernels' shared reduction scratch is sized by).
BLOCK = header_define("GPUMINE_BLOCK")

_CACHE: dict = {}
_LOCK = threading.Lock()
# Ordered set of declared instantiations (a dict: membership is a hash, not a scan).
_DECLARED: dict[Instantiation, None] = {}
# (device, source, name, template args, defines, cooperative) -> kernel: the launch path's
# lookup, without building an Instantiation per call.
_FAST: dict = {}


def kernel_sources() -> list[Path]:
    """All CUDA sources shipped with gpumine, sorted by name."""
    return sorted(p for p in KERNEL_DIR.iterdir() if p.suffix in (".cu", ".cuh"))


@dataclass(frozen=True)
class Instantiation:
    """One kernel instantiation: ``name<template_args...>`` from ``source``."""

    source: str
    name: str
    template_args: tuple = ()
    defines: tuple = ()

    @property
    def expression(self) -> str:
        """The C++ name expression, e.g. ``assign_tiled<float, 32>``."""
        if not self.template_args:
            return self.name
        return f"{self.name}<{', '.join(str(a) for a in self.template_args)}>"


def instantiation(source: str, name: str, *template_args, defines=None) -> Instantiation:
    """Declare (and return) an instantiation a strategy launches, for the nvcc CI test."""
    item = Instantiation(source, name, tuple(template_args),
                         tuple(sorted((defines or {}).items())))
    _DECLARED.setdefault(item, None)
    return item


def declares(source: str, name: str, *axes, defines=None):
    """Decorator for a launcher: declare kernel ``name``'s instantiations where it is launched.

    Declares ``name<args...>`` of ``source`` for every combination of ``axes`` (each a
    sequence of template arguments; a tuple in an axis stands for several consecutive
    arguments), and returns the launcher unchanged. The CI compile test builds every
    declared instantiation with nvcc, so a launcher and what it launches stay together.

    Examples
    --------
    >>> from gpumine.kernels import declared_instantiations, declares
    >>> @declares("kmeans_update.cu", "update_gm_cl", ("float", "double"))
    ... def update_gm_cl(X, labels, sample_weight, sums, weights, labels_old=None): ...
    >>> [i.expression for i in declared_instantiations() if i.name == "update_gm_cl"]
    ['update_gm_cl<float>', 'update_gm_cl<double>']
    """
    for combination in itertools.product(*axes):
        args = [a for arg in combination for a in (arg if isinstance(arg, tuple) else (arg,))]
        instantiation(source, name, *args, defines=defines)
    return lambda launcher: launcher


def declared_instantiations() -> list[Instantiation]:
    """Every instantiation declared so far (import the strategy modules first)."""
    return list(_DECLARED)


def _ctype(arg) -> str:
    """Template argument text: NumPy dtypes become C types."""
    import numpy as np

    if isinstance(arg, (type, np.dtype)):
        dtype = np.dtype(arg)
        names = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
        if dtype.name not in names:
            raise InvalidInputError(f"no C type for dtype {dtype}: the kernels take float32, "
                                    "float64, int32 and int64")
        return names[dtype.name]
    return str(arg)


def get_kernel(source: str, name: str, *template_args, defines=None, cooperative=False):
    """Return the compiled kernel ``name<template_args...>`` of ``kernels/source``.

    Parameters
    ----------
    source : str
        File name in this folder, e.g. ``"kmeans_assign.cu"``.
    name : str
        Kernel (function template) name.
    *template_args
        Template arguments: NumPy dtypes (``numpy.float32`` -> ``float``) or values.
    defines : dict, optional
        Preprocessor macros, passed as ``-Dkey=value``.
    cooperative : bool, default=False
        Build with cooperative groups and launch with ``cuLaunchCooperativeKernel``
        (kernels that call ``grid.sync()``; the grid must fit the device at once, see
        :func:`resident_blocks`).

    Returns
    -------
    cupy.RawKernel

    Raises
    ------
    KernelCompileError
        NVRTC rejected the source; the message holds its log.
    """
    cupy = cupy_module()
    device = cupy.cuda.runtime.getDevice()
    fast_key = (device, source, name, template_args,
                tuple(sorted(defines.items())) if defines else (), cooperative)
    kernel = _FAST.get(fast_key)
    if kernel is not None:
        return kernel
    item = instantiation(source, name, *(_ctype(a) for a in template_args), defines=defines)
    key = (device, item, cooperative)
    kernel = _CACHE.get(key)
    if kernel is not None:
        return kernel
    with _LOCK:
        kernel = _CACHE.get(key)
        if kernel is None:
            path = KERNEL_DIR / source
            code = path.read_text()
            options = _OPTIONS + tuple(f"-D{k}={v}" for k, v in item.defines)
            try:
                module = cupy.RawModule(code=code, options=options,
                                        name_expressions=[item.expression],
                                        enable_cooperative_groups=cooperative)
                kernel = module.get_function(item.expression)
            except cupy.cuda.compiler.CompileException as exc:
                raise KernelCompileError(
                    f"NVRTC failed on {source} ({item.expression}):\n{exc.get_message()}"
                ) from exc
            _CACHE[key] = kernel
    _FAST[fast_key] = kernel
    return kernel


def device_attribute(name: str) -> int:
    """An attribute of the current CUDA device (``cupy.cuda.Device().attributes`` key), cached.

    ``Device().attributes`` queries every attribute on each call (tens of microseconds);
    the launchers ask on every launch, so the values are read once per device.
    """
    cupy = cupy_module()
    device = cupy.cuda.runtime.getDevice()
    attributes = _ATTRIBUTES.get(device)
    if attributes is None:
        attributes = _ATTRIBUTES[device] = dict(cupy.cuda.Device(device).attributes)
    return int(attributes[name])


_ATTRIBUTES: dict = {}


def resident_blocks(kernel, block: int, shared_mem: int = 0) -> int:
    """Blocks of ``kernel`` that fit on the current device at once (a cooperative grid's limit).

    The driver's occupancy calculator times the multiprocessor count, asked once per
    kernel, block and shared memory size (a small fit asks every time it starts).
    """
    return _resident_blocks(kernel.kernel.ptr, block, shared_mem)


@functools.lru_cache(maxsize=256)
def _resident_blocks(function_pointer: int, block: int, shared_mem: int) -> int:
    cupy = cupy_module()
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        function_pointer, block, shared_mem)
    return max(1, int(per_sm)) * device_attribute("MultiProcessorCount")


def stride_grid(kernel, block: int, count: int, shared_mem: int = 0) -> int:
    """The grid of a kernel whose blocks stride over ``count`` items: the blocks needed for
    them, at most one wave of resident blocks (:func:`resident_blocks`).

    A fixed count per multiprocessor above what fits leaves a partial wave: eight blocks
    of 256 threads where six fit (40 registers a thread) made ``bounds_filter``'s grid 1.33
    waves, each block striding over the same number of points, so the last third of the
    blocks ran alone (ncu on the H200: 55 % achieved occupancy, "partial wave of 264 thread
    blocks", ``ncu-listed-hamerly-10000000x32x1024-h200-82645d5.txt.gz``).
    """
    return max(1, min(-(-int(count) // block), resident_blocks(kernel, block, shared_mem)))


def launch(kernel, grid, block, args, shared_mem: int = 0) -> None:
    """Launch ``kernel``; with ``GPUMINE_DEBUG=1`` synchronize and surface errors at once."""
    kernel(grid if isinstance(grid, tuple) else (grid,),
           block if isinstance(block, tuple) else (block,), args, shared_mem=shared_mem)
    if os.environ.get("GPUMINE_DEBUG"):
        cupy_module().cuda.get_current_stream().synchronize()
