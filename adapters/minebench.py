"""MineBench "raw binary" point files: ``int32 n, int32 d``, then ``n*d`` float32, row-major.

This is the format of the Corel feature files of MineBench and STAMP (seed
paper 004 §6). All values are little-endian.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpumine.adapters.sinks import atomic_output
from gpumine.exceptions import DataFormatError, InvalidParameterError

__all__ = ["read_minebench_bin", "write_minebench_bin"]

_HEADER = np.dtype("<i4")
_VALUE = np.dtype("<f4")


def read_minebench_bin(path) -> np.ndarray:
    """Read a MineBench raw binary file.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    X : ndarray of shape (n, d), float32

    Raises
    ------
    DataFormatError
        The file is shorter than its header, the header is negative or zero in
        d, or the size disagrees with ``8 + 4*n*d`` bytes.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from gpumine.adapters.minebench import read_minebench_bin, write_minebench_bin
    >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> write_minebench_bin(path, np.eye(2, dtype=np.float32))
    >>> read_minebench_bin(path).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.read(2 * _HEADER.itemsize)
        if len(header) < 2 * _HEADER.itemsize:
            raise DataFormatError(f"{path}: {size} bytes is too short for the 8-byte MineBench "
                                  "header (int32 n, int32 d)")
        n, d = (int(v) for v in np.frombuffer(header, dtype=_HEADER))
        if n < 0 or d < 1:
            raise DataFormatError(f"{path}: header says n={n}, d={d}; expected n >= 0, d >= 1")
        expected = 2 * _HEADER.itemsize + n * d * _VALUE.itemsize
        if size != expected:
            raise DataFormatError(
                f"{path}: header says {n} x {d} float32 values ({expected} bytes in all) but "
                f"the file has {size} bytes; it is truncated or not a MineBench .bin file")
        values = np.fromfile(handle, dtype=_VALUE, count=n * d)
    return values.astype(np.float32, copy=False).reshape(n, d)


def write_minebench_bin(path, X) -> None:
    """Write X as a MineBench raw binary file (atomically: a temporary file, then a rename).

    Parameters
    ----------
    path : str or path-like
    X : array-like of shape (n, d)
        Cast to float32.
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] < 1:
        raise InvalidParameterError(f"X must be 2-D with at least one column, got shape {X.shape}")
    if X.shape[0] > np.iinfo(np.int32).max or X.shape[1] > np.iinfo(np.int32).max:
        raise InvalidParameterError(f"shape {X.shape} does not fit the format's int32 header")
    with atomic_output(path) as tmp, open(tmp, "wb") as handle:
        np.asarray(X.shape, dtype=_HEADER).tofile(handle)
        np.ascontiguousarray(X, dtype=_VALUE).tofile(handle)
