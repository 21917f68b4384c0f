"""CUDA kernel sources (``*.cu``, ``*.cuh``) and their one loader (``gpumine.kernels``).

The sources are shipped as package data next to this file. The loader
``get_kernel(source, name, *template_args, defines=...)`` and the kernels land
with the GPU k-means issue; until then gpumine runs its NumPy reference path.
"""

from pathlib import Path

__all__ = ["KERNEL_DIR", "kernel_sources"]

#: Folder that holds the ``.cu``/``.cuh`` files, installed or editable.
KERNEL_DIR = Path(__file__).resolve().parent


def kernel_sources() -> list[Path]:
    """All CUDA sources shipped with gpumine, sorted by name."""
    return sorted(p for p in KERNEL_DIR.iterdir() if p.suffix in (".cu", ".cuh"))
