"""Compiled CPU steps of WaveCluster (Numba): the histogram, the growth of split pieces, a
stack's tree.

The ``"auto"`` rule grows the pieces of a split component back over it, breadth first
(:func:`gpumine.wavecluster.hierarchy.grow_labels`). In NumPy every step costs about a
dozen calls on the cells just reached, and a spiral arm takes a hundred steps or more:
most of a CPU fit of the spirals. :func:`spread` runs the same steps as one compiled loop
(the CPU's ``Stages.spread``; the GPU has its own, one cooperative launch).
:func:`stack_tree` reads a stack of labelled levels -- each plane's largest number, each
component's mass and parent -- in one pass where NumPy takes a bincount, a scatter, a
maximum and their copies (the CPU's ``Stages.tree``). :func:`histogram` quantizes the points
and counts them into the fine grid in one pass where NumPy makes a dozen arrays of n rows
(the CPU's ``Stages.histogram``); :func:`bounds` finds every feature's range in one pass (NumPy's
``min(axis=0)`` over rows of two features takes a hundred times longer than over columns).

Numba is optional (``pip install gpumine[fast]``, part of ``dev``); without it the NumPy
steps run. The first call compiles (about a second), cached on disk afterwards.

Examples
--------
>>> import numpy as np
>>> from gpumine.wavecluster.cpu_fast import spread
>>> grown = np.array([0, 1, 0, 0, 0, 2, 0], dtype=np.int64)  # a padded 1-d box of 5 cells
>>> inside = np.array([False, True, True, True, True, True, False])
>>> spread(grown, inside, np.array([1, -1])).tolist()
[0, 1, 1, 1, 2, 2, 0]
"""

from __future__ import annotations

import importlib.util

import numpy as np

__all__ = ["available", "bounds", "histogram", "spread", "stack_tree"]

_KERNELS: dict = {}


def available() -> bool:
    """Whether Numba can be imported (:func:`spread` needs it)."""
    return importlib.util.find_spec("numba") is not None


def _kernels() -> dict:
    """Compile-on-first-use: importing this module never imports Numba."""
    if _KERNELS:
        return _KERNELS
    import numba

    @numba.njit(cache=True, nogil=True)
    def grow(grown, inside, steps):
        # INOUT grown (cells) int64: positive labels, 0 unlabelled; IN inside (cells) bool;
        # IN steps (s) int64: the neighbours' flat offsets, both signs (a padded box: every
        # labelled cell's neighbours lie inside the array)
        cells = grown.size
        front = np.empty(cells, dtype=np.int64)
        reached = np.empty(cells, dtype=np.int64)
        # a reached cell's lowest label, this step (sync: none, CPU memory in a Numba loop)
        lowest = np.zeros(cells, dtype=np.int64)  # sync: none, host scratch
        count = 0
        for c in range(cells):
            if grown[c] != 0:
                front[count] = c
                count += 1
        while count:
            new = 0
            for a in range(count):
                cell = front[a]
                label = grown[cell]
                for step in steps:
                    other = cell + step
                    if inside[other] and grown[other] == 0:
                        if lowest[other] == 0:
                            reached[new] = other
                            new += 1
                            lowest[other] = label
                        elif label < lowest[other]:
                            lowest[other] = label
            for a in range(new):  # labelled after the step: grown is this step's start
                cell = reached[a]
                grown[cell] = lowest[cell]
                lowest[cell] = 0
            front, reached = reached, front
            count = new
        return grown

    @numba.njit(cache=True, nogil=True)
    def tree(labels, weights, n, packed):
        # IN labels (m, cells) int64: numbers 1..n, 0 background; IN weights (m, cells) f8
        # (any strides: a broadcast plane too); IN n; OUT packed (m + 2 (n + 1)) f8, zeroed:
        # each plane's largest number, each number's mass, its parent in the plane below
        m, cells = labels.shape
        for p in range(m):
            top = 0
            for c in range(cells):
                v = labels[p, c]
                if v != 0:
                    packed[m + v] += weights[p, c]  # flat order, as bincount adds
                    if p > 0:
                        packed[m + n + 1 + v] = labels[p - 1, c]
                    if v > top:
                        top = v
            packed[p] = top
        return packed

    @numba.njit(cache=True, nogil=True)
    def quantize_histogram(X, weight, weighted, lo, hi, shape, cells, inside, grid):
        # IN X (n, d) float32/64; IN weight (n) float32/64, read when weighted; IN lo, hi (d)
        # float64; IN shape (d) int64; OUT cells (n, d) int64; OUT inside (n) bool;
        # INOUT grid (prod(shape)) float64, zeros in
        n, d = X.shape
        for i in range(n):
            ok = True
            flat = 0
            for j in range(d):
                x = np.float64(X[i, j])
                ok = ok and x >= lo[j] and x <= hi[j]
                v = np.floor((x - lo[j]) / (hi[j] - lo[j]) * np.float64(shape[j]))
                top = np.float64(shape[j] - 1)
                v = 0.0 if v < 0.0 else (top if v > top else v)
                cells[i, j] = np.int64(v)
                flat = flat * shape[j] + cells[i, j]
            inside[i] = ok
            if ok:
                grid[flat] += np.float64(weight[i]) if weighted else 1.0
        return grid

    @numba.njit(cache=True, nogil=True)
    def minmax(X, out):
        # IN X (n, d), n >= 1, any layout; OUT out (2, d), X's dtype: per-feature min, max
        n, d = X.shape
        for j in range(d):
            out[0, j] = X[0, j]
            out[1, j] = X[0, j]
        for i in range(1, n):
            for j in range(d):
                x = X[i, j]
                if x < out[0, j]:
                    out[0, j] = x
                if x > out[1, j]:
                    out[1, j] = x
        return out

    _KERNELS["grow"] = grow
    _KERNELS["tree"] = tree
    _KERNELS["histogram"] = quantize_histogram
    _KERNELS["minmax"] = minmax
    return _KERNELS


def spread(labels, region, steps):
    """:func:`~gpumine.wavecluster.hierarchy.grow_labels`'s steps, compiled: each step every
    unlabelled cell of ``region`` next to a cell labelled the step before takes the lowest
    label among those neighbours (``Stages.spread``'s contract).

    Parameters
    ----------
    labels : numpy.ndarray of int64, flat   -- IN/OUT
        The padded box's labels, 0 unlabelled (one empty cell all round); grown in place.
    region : numpy.ndarray of bool, flat   -- IN
        Where labels may grow (False on the padding).
    steps : numpy.ndarray of int64
        The neighbours' flat offsets, both signs.

    Returns
    -------
    numpy.ndarray of int64
        ``labels``, grown.
    """
    grown = np.ascontiguousarray(labels, dtype=np.int64)
    return _kernels()["grow"](grown, np.ascontiguousarray(region, dtype=np.bool_),
                              np.ascontiguousarray(steps, dtype=np.int64))


def stack_tree(labels, n, weights):
    """:func:`~gpumine.wavecluster.hierarchy._read`'s small tree in one compiled pass
    (``Stages.tree``'s contract, the GPU's :func:`gpumine.wavecluster.gpu.stack_tree`): ``[each
    plane's largest number (m), each component's mass (n + 1), each one's parent in the
    plane below (n + 1)]`` as one array of doubles (bin 0 and the first plane's parents are
    not meaningful). The masses add the cells in flat order, as NumPy's ``bincount`` does,
    so they are the same numbers.

    Parameters
    ----------
    labels : numpy.ndarray of int64, (m, ...)   -- IN
        A stack's labelling, numbers 1..n.
    n : int
    weights : numpy.ndarray of float64   -- IN
        The densities, the shape of ``labels`` (a broadcast view of one plane is not copied).

    Returns
    -------
    numpy.ndarray of float64

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import stack_tree
    >>> labels = np.array([[1, 1, 0, 2], [0, 3, 0, 0]])  # two planes of four cells
    >>> weights = np.broadcast_to(np.array([1.0, 2.0, 5.0, 4.0]), labels.shape)
    >>> stack_tree(labels, 3, weights).tolist()  # tops, masses 0..3, parents 0..3
    [2.0, 3.0, 0.0, 3.0, 4.0, 2.0, 0.0, 0.0, 0.0, 1.0]
    """
    m = labels.shape[0]
    flat = np.ascontiguousarray(labels, dtype=np.int64).reshape(m, -1)
    packed = np.zeros(m + 2 * (int(n) + 1))  # sync: none, host arrays
    return _kernels()["tree"](flat, np.asarray(weights, dtype=np.float64).reshape(m, -1),
                              int(n), packed)  # sync: none, host arrays


def histogram(X, weight, bounds, grid_shape):
    """``Stages.histogram`` on the CPU in one compiled pass: the cells and inside mask of
    :func:`~gpumine.wavecluster.engine.quantize`, and the fine grid those points count into
    (their weights, when given, added in row order as NumPy's ``bincount`` adds them: the
    same numbers as the NumPy steps, ``pipeline._cpu_histogram``).

    Parameters
    ----------
    X : numpy.ndarray (n, d), float32 or float64   -- IN
    weight : numpy.ndarray (n,) or None   -- IN
    bounds : numpy.ndarray (2, d), float64
        The grid's lower and upper bounds per feature.
    grid_shape : tuple of int

    Returns
    -------
    ((cells, inside), grid, None)
        ``cells`` (n, d) int64 and ``inside`` (n,) bool of every point, the grid (float64,
        ``grid_shape``); no sum (the contract's third item).

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import histogram
    >>> X = np.array([[0.0, 0.0], [1.0, 1.0], [0.4, 0.9], [2.0, 0.5]])
    >>> (cells, inside), grid, _ = histogram(X, None, np.array([[0.0, 0.0], [1.0, 1.0]]), (2, 2))
    >>> inside.tolist(), grid.tolist()
    ([True, True, True, False], [[1.0, 1.0], [0.0, 1.0]])
    """
    X = np.asarray(X)  # any layout: a fit's columns are column-major (compiled for each)
    n, d = X.shape
    lo = np.ascontiguousarray(bounds[0], dtype=np.float64)
    hi = np.ascontiguousarray(bounds[1], dtype=np.float64)
    shape = np.asarray(grid_shape, dtype=np.int64)
    cells = np.empty((n, d), dtype=np.int64)
    inside = np.empty(n, dtype=np.bool_)
    grid = np.zeros(int(np.prod(shape)))  # sync: none, host arrays
    weighted = weight is not None
    weights = np.ascontiguousarray(weight) if weighted else np.empty(0, dtype=X.dtype)
    _kernels()["histogram"](X, weights, weighted, lo, hi, shape, cells, inside, grid)
    shape_out = tuple(int(s) for s in grid_shape)  # sync: none, host numbers
    return (cells, inside), grid.reshape(shape_out), None


def bounds(X):
    """Every feature's minimum and maximum, ``np.stack([X.min(0), X.max(0)])`` in one compiled
    pass over X in any memory layout (the same values: finite data, exact comparisons).

    Parameters
    ----------
    X : numpy.ndarray (n, d), n >= 1   -- IN

    Returns
    -------
    numpy.ndarray (2, d), X's dtype

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import bounds
    >>> bounds(np.array([[0.5, 3.0], [-1.0, 4.0], [2.0, 3.5]])).tolist()
    [[-1.0, 3.0], [2.0, 4.0]]
    """
    X = np.asarray(X)
    out = np.empty((2, X.shape[1]), dtype=X.dtype)
    return _kernels()["minmax"](X, out)
