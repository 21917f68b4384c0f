"""MineBench "raw binary" point files: the format lives in :mod:`gpumine.adapters.minebench`
(a file format, read and written like the others); the datasets re-export its reader and
writer, which the Corel loader uses."""

from gpumine.adapters.minebench import read_minebench_bin, write_minebench_bin

__all__ = ["read_minebench_bin", "write_minebench_bin"]
