"""Labelled point sets in ARFF (the clustering-benchmark shapes: cluto-t4-8k, jain, ...)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.io import arff

from gpumine.exceptions import DataFormatError

__all__ = ["NOISE_LABEL", "read_arff_points"]

#: Label given to points whose class is ``noise``.
NOISE_LABEL = -1


def read_arff_points(path):
    """Read the numeric attributes and the class of an ARFF file.

    The numeric attributes become the points; the nominal attribute (``class``
    or ``CLASS``) becomes integer labels: class values that are integers keep
    their value, other values are numbered 0, 1, ... in the order the header
    declares them, and ``noise`` becomes :data:`NOISE_LABEL` (-1).

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    X : ndarray of shape (n_samples, n_numeric_attributes), float64
    y : ndarray of shape (n_samples,), int64, or None if the file has no nominal attribute
    feature_names : list of str

    Examples
    --------
    >>> import os, tempfile
    >>> from gpumine.datasets import read_arff_points
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.arff")
    >>> with open(path, "w") as f:
    ...     _ = f.write("@relation tiny\\n@attribute x numeric\\n@attribute y numeric\\n"
    ...                 "@attribute class {1,2,noise}\\n@data\\n0,0,1\\n5,5,2\\n9,0,noise\\n")
    >>> X, y, names = read_arff_points(path)
    >>> X.shape, y.tolist(), names
    ((3, 2), [1, 2, -1], ['x', 'y'])
    """
    path = Path(path)
    try:
        data, meta = arff.loadarff(path)
    except (ValueError, arff.ArffError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{path}: not a readable ARFF file: {exc}") from exc
    numeric = [name for name in meta.names() if meta[name][0] == "numeric"]
    nominal = [name for name in meta.names() if meta[name][0] == "nominal"]
    if not numeric:
        raise DataFormatError(f"{path}: no numeric attributes")
    if len(nominal) > 1:
        raise DataFormatError(f"{path}: more than one nominal attribute ({nominal}); "
                              "expected one class attribute")
    X = np.column_stack([np.asarray(data[name], dtype=np.float64) for name in numeric])
    if np.isnan(X).any():
        raise DataFormatError(f"{path}: missing values ('?') in the numeric attributes")
    if not nominal:
        return X, None, numeric
    values = [v.decode() if isinstance(v, bytes) else str(v) for v in data[nominal[0]]]
    declared = list(meta[nominal[0]][1])
    if "?" in values:
        raise DataFormatError(f"{path}: missing class values ('?')")
    clusters = [v for v in declared if v.lower() != "noise"]
    as_ints = all(v.lstrip("-").isdigit() for v in clusters)
    codes = {v: (int(v) if as_ints else i) for i, v in enumerate(clusters)}
    codes.update({v: NOISE_LABEL for v in declared if v.lower() == "noise"})
    return X, np.array([codes[v] for v in values], dtype=np.int64), numeric
