"""Compiled CPU steps of WaveCluster (Numba): the breadth-first growth of split pieces.

The ``"auto"`` rule grows the pieces of a split component back over it, breadth first
(:func:`gpumine.wavecluster.hierarchy.grow_labels`). In NumPy every step costs about a
dozen calls on the cells just reached, and a spiral arm takes a hundred steps or more:
most of a CPU fit of the spirals. :func:`spread` runs the same steps as one compiled loop
(the CPU's ``Stages.spread``; the GPU has its own, one cooperative launch).

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

__all__ = ["available", "spread"]

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
        lowest = np.zeros(cells, dtype=np.int64)  # a reached cell's lowest label, this step
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

    _KERNELS["grow"] = grow
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
