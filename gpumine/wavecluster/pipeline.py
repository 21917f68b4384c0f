"""WaveCluster's pipeline, written once: quantize -> wavelet -> threshold -> label -> drop
small -> lookup, with each backend's implementation of the steps in a :class:`Stages`.

The estimator, the benchmarks and the GPU records all run these steps; a backend (NumPy,
CuPy) only supplies how each one is computed. What the steps compute is the CPU reference
(:mod:`gpumine.wavecluster.engine` holds the rules: the automatic threshold, the cluster
ids); the GPU's kernels (:mod:`gpumine.wavecluster.gpu`) do the same arithmetic, so both
backends give the same labels.

Examples
--------
>>> import numpy as np
>>> from gpumine.backend import get_backend
>>> from gpumine.wavecluster import pipeline
>>> from gpumine.wavecluster.labeling import label_union_find
>>> X = np.concatenate([np.random.RandomState(0).normal(0, 0.1, (300, 2)),
...                     np.random.RandomState(1).normal(3, 0.1, (300, 2))])
>>> result = pipeline.fit_wavecluster(
...     X, None, stages=pipeline.stages_for(get_backend("cpu")),
...     bounds=np.stack([X.min(0), X.max(0)]), grid_shape=(32, 32), levels=1,
...     wavelet="haar", threshold="auto", connectivity=2, min_cluster_size=6.0,
...     label=label_union_find)
>>> result.n_clusters
2
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from gpumine.wavecluster.engine import (
    WaveClusterResult,
    cluster_ids,
    quantize,
    resolve_threshold,
)
from gpumine.wavecluster.wavelet import coarse_cells, coarse_shape, lowpass

__all__ = ["Stages", "fit_wavecluster", "stages_for"]


@dataclass(frozen=True)
class Stages:
    """One backend's implementation of each step of :func:`fit_wavecluster`.

    Attributes
    ----------
    xp : module
        ``numpy`` or ``cupy``: where the grids live.
    histogram : callable
        ``histogram(X, weight, bounds, grid_shape) -> (point_cells, grid)``: each point's
        fine cell, in a form only ``point_components`` reads, and the weighted fine grid
        (float64); ``weight`` None weighs every point 1; points outside the bounds add
        nothing.
    lowpass : callable
        ``lowpass(grid, wavelet, levels) -> coarse``.
    point_components : callable
        ``point_components(point_cells, components, wavelet, levels, grid_shape)``: the
        coarse grid's component at every point's coarse cell, 0 outside the bounds.
    weigh : callable
        ``weigh(values, weight, bins)``: ``bincount(values, weights=weight,
        minlength=bins)``, except that bin 0 (the background) need not be counted.
    results : callable
        ``results(remap, point_component, components, n_clusters, prepared) -> (labels,
        grid_labels)``: the cluster id of every point and coarse cell (``remap`` is the
        host array of :func:`~gpumine.wavecluster.engine.cluster_ids`, ``prepared`` what
        ``prepare`` returned, or None).
    prepare : callable, optional
        ``prepare(n_samples, coarse_shape)``, called once the histogram is queued: what
        ``results`` will need (the GPU's host buffers for host input, written while the
        device works).
    """

    xp: ModuleType
    histogram: Callable
    lowpass: Callable
    point_components: Callable
    weigh: Callable
    results: Callable
    prepare: Callable | None = None


def _cpu_histogram(X, weight, bounds, grid_shape):
    cells, inside = quantize(X, bounds, grid_shape)
    flat = np.ravel_multi_index(tuple(cells[inside].T), grid_shape)
    grid = np.bincount(flat, weights=None if weight is None else weight[inside],
                       minlength=math.prod(grid_shape)).astype(np.float64, copy=False)
    return (cells, inside), grid.reshape(grid_shape)


def _cpu_point_components(point_cells, components, wavelet, levels, grid_shape):
    cells, inside = point_cells
    coarse = coarse_cells(cells, wavelet, levels, grid_shape)
    return np.where(inside, components[tuple(coarse.T)], 0)


def _cpu_weigh(values, weight, bins):
    return np.bincount(values, weights=weight, minlength=bins)


def _cpu_results(remap, point_component, components, n_clusters, prepared):
    return remap[point_component], remap[components]


_CPU = Stages(xp=np, histogram=_cpu_histogram, lowpass=lowpass,
              point_components=_cpu_point_components, weigh=_cpu_weigh, results=_cpu_results)


def stages_for(backend, *, device_labels: bool = True) -> Stages:
    """The steps on ``backend`` (a :class:`gpumine.backend.Backend`).

    ``device_labels`` (GPU): the labels stay on the device (CuPy input); False brings
    them to the host once, at the end (see :func:`gpumine.wavecluster.gpu.stages`).
    """
    if not backend.is_gpu:
        return _CPU
    from gpumine.wavecluster import gpu

    return gpu.stages(device_labels=device_labels)


def fit_wavecluster(X, sample_weight, *, stages: Stages, bounds, grid_shape, levels, wavelet,
                    threshold, connectivity, min_cluster_size, label) -> WaveClusterResult:
    """Run the pipeline on validated X.

    Parameters
    ----------
    X : array (n, d), float64, on the backend of ``stages``   -- IN
        On the GPU, a view of a column-major buffer.
    sample_weight : array (n,), float64, non-negative, or None   -- IN
        None: every point weighs 1 (no array of ones on either side).
    stages : Stages
        From :func:`stages_for`.
    bounds : ndarray (2, d)
        Lower and upper bound per feature (upper > lower), on the host.
    grid_shape : tuple of int
    levels : int
    wavelet : str
    threshold : float or "auto"
    connectivity : int
    min_cluster_size : float
        In units of sample weight (points when unweighted).
    label : callable
        A ``wavecluster.label`` strategy of the same backend.

    Returns
    -------
    WaveClusterResult
        What comes back to the host on the GPU: the threshold (with ``"auto"``: the grid's
        mass and one count per level tried) and the component sizes (8 bytes per
        component), besides the labels as ``stages.results`` places them.
    """
    xp = stages.xp
    point_cells, grid = stages.histogram(X, sample_weight, bounds, grid_shape)
    prepared = (stages.prepare(X.shape[0], coarse_shape(grid_shape, wavelet, levels))
                if stages.prepare is not None else None)
    coarse = stages.lowpass(grid, wavelet, levels)
    # sync: 8 bytes on the GPU, the grid's weight that "auto" counts points in
    grid_weight = float(grid.sum()) if threshold == "auto" else 0.0
    del grid
    threshold, (components, n_components) = resolve_threshold(
        threshold, coarse, grid_weight=grid_weight, min_cluster_size=min_cluster_size,
        label=label, connectivity=connectivity, xp=xp, weigh=stages.weigh)
    point_component = stages.point_components(point_cells, components, wavelet, levels,
                                              grid_shape)
    del point_cells
    sizes = stages.weigh(point_component, sample_weight, n_components + 1)
    # sync: the component sizes, 8 bytes per component (the coarse grid's, not the points')
    remap = cluster_ids(sizes.get() if xp is not np else sizes, min_cluster_size)
    n_clusters = int((remap >= 0).sum())
    labels, grid_labels = stages.results(remap, point_component, components, n_clusters,
                                         prepared)
    return WaveClusterResult(
        labels=labels, grid_labels=grid_labels, grid_shape=tuple(grid_shape),
        bounds=np.asarray(bounds, dtype=np.float64), threshold=float(threshold),
        n_clusters=n_clusters)
