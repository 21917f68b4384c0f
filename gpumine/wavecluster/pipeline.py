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

from gpumine.wavecluster import cpu_fast
from gpumine.wavecluster.engine import (
    WaveClusterResult,
    cluster_ids,
    quantize,
    resolve_threshold,
)
from gpumine.wavecluster.wavelet import coarse_cells, coarse_shape, get_wavelet, lowpass

__all__ = ["Stages", "chunk_components", "fit_wavecluster", "fit_wavecluster_chunked",
           "grid_components", "stages_for"]


@dataclass(frozen=True)
class Stages:
    """One backend's implementation of each step of :func:`fit_wavecluster`.

    Attributes
    ----------
    xp : module
        ``numpy`` or ``cupy``: where the grids live.
    histogram : callable
        ``histogram(X, weight, bounds, grid_shape) -> (point_cells, grid, total)``: each
        point's fine cell, in a form only ``point_components`` reads, the weighted fine grid
        (float64) and its sum as a 0-d array of ``xp`` where the binning gives it for free
        (the GPU's), else None; ``weight`` None weighs every point 1; points outside the
        bounds add nothing.
    lowpass : callable
        ``lowpass(grid, wavelet, levels) -> coarse`` (the GPU's one launch a level for haar;
        the CPU's compiled axes, :func:`gpumine.wavecluster.cpu_fast.lowpass`, with Numba).
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
    to_host : callable, optional
        An array of ``xp`` as a NumPy array (the component sizes; the chunked fit's
        labels, chunk by chunk).
    spread : callable, optional
        ``spread(labels, region, steps) -> labels``: the breadth-first growth of
        :func:`~gpumine.wavecluster.hierarchy.grow_labels` on a padded, flattened box of
        ``xp`` arrays (the GPU's one launch; the CPU's compiled loop,
        :func:`gpumine.wavecluster.cpu_fast.spread`, with Numba); None: NumPy's steps, on a
        host copy of the box.
    nearest : callable, optional
        The ``"auto"`` rule's border and specks in one pass
        (:func:`~gpumine.wavecluster.engine.add_border_cells`; the GPU's kernel, the CPU's
        compiled :func:`gpumine.wavecluster.cpu_fast.nearest` with Numba); None: minima over
        shifted views on ``xp`` (on the host, the specks' neighbourhoods alone).
    joint : callable, optional
        The coarser levels' table of each cluster's mass under each next-level piece in one
        pass (:func:`~gpumine.wavecluster.levels.split_by_coarser_level`; the GPU's kernel,
        the CPU's compiled :func:`gpumine.wavecluster.cpu_fast.joint` with Numba); None:
        gathers and ``weigh``.
    summaries : callable, optional
        ``summaries(grids, weight) -> host array``: ``weight`` and each grid's mass and axes'
        profiles in one transfer (the ``"auto"`` rule's first look; the layout of
        :func:`~gpumine.wavecluster.engine._summaries`); None: reductions on ``xp``.
    tree : callable, optional
        ``tree(labels, n, weights, transfer=True) -> host array``: a stack's planes' largest
        numbers, and its components' masses and parents, in one transfer (the layout of
        :func:`~gpumine.wavecluster.hierarchy._read`; the CPU's one compiled pass,
        :func:`gpumine.wavecluster.cpu_fast.stack_tree`, with Numba); with
        ``transfer=False`` the same array on the backend (a large tree, whose significant
        components alone come back); None: a bincount, a scatter and a reduction on ``xp``.
    plane : callable, optional
        ``plane(plane, shape, box, start) -> labels``: one level of a stack as a labelling
        of the grid (:meth:`~gpumine.wavecluster.hierarchy._LevelStack.labelling`); None:
        slicing on ``xp``.
    paint : callable, optional
        ``paint(planes, table, shape, box) -> labels``: a stack's levels painted onto the
        grid through a table of their numbers, in one pass
        (:func:`~gpumine.wavecluster.hierarchy.resolve_stacked`'s clusters); None: a level at
        a time on ``xp``.
    planes : callable, optional
        ``planes(grids, boxes, counts, thresholds, common) -> (weights, mask)``: several
        grids' levels as the planes of one stack, in one pass
        (:meth:`~gpumine.wavecluster.hierarchy._LevelStack.shared`); None: a copy a grid
        and a comparison on ``xp``.
    levels_tree : callable, optional
        ``levels_tree(grid, thresholds, connectivity) -> LevelsTree``: the components of
        every level of a grid in one pass, a component tree (the CPU's compiled union-find,
        :func:`gpumine.wavecluster.cpu_fast.levels_tree`, with Numba): the ``"auto"`` rule's
        levels come from it in place of stacks of labelled levels; None: stacks.
    """

    xp: ModuleType
    histogram: Callable
    lowpass: Callable
    point_components: Callable
    weigh: Callable
    results: Callable
    prepare: Callable | None = None
    to_host: Callable = np.asarray
    spread: Callable | None = None
    nearest: Callable | None = None
    joint: Callable | None = None
    summaries: Callable | None = None
    tree: Callable | None = None
    plane: Callable | None = None
    paint: Callable | None = None
    planes: Callable | None = None
    levels_tree: Callable | None = None


def _cpu_histogram(X, weight, bounds, grid_shape):
    cells, inside = quantize(X, bounds, grid_shape)
    flat = np.ravel_multi_index(tuple(cells[inside].T), grid_shape)
    grid = np.bincount(flat, weights=None if weight is None else weight[inside],
                       minlength=math.prod(grid_shape)).astype(np.float64, copy=False)
    return (cells, inside), grid.reshape(grid_shape), None  # the sum: grid.sum() if asked


def _cpu_point_components(point_cells, components, wavelet, levels, grid_shape):
    cells, inside = point_cells
    coarse = coarse_cells(cells, wavelet, levels, grid_shape)
    return np.where(inside, components[tuple(coarse.T)], 0)


def _cpu_weigh(values, weight, bins):
    return np.bincount(values, weights=weight, minlength=bins)


def _cpu_results(remap, point_component, components, n_clusters, prepared):
    return remap[point_component], remap[components]


_FAST = cpu_fast.available()  # the compiled steps with Numba, else NumPy's
_CPU = Stages(xp=np, histogram=cpu_fast.histogram if _FAST else _cpu_histogram,
              lowpass=cpu_fast.lowpass if _FAST else lowpass,
              point_components=_cpu_point_components, weigh=_cpu_weigh, results=_cpu_results,
              spread=cpu_fast.spread if _FAST else None,
              nearest=cpu_fast.nearest if _FAST else None,
              joint=cpu_fast.joint if _FAST else None,
              tree=cpu_fast.stack_tree if _FAST else None,
              levels_tree=cpu_fast.levels_tree if _FAST else None)


def stages_for(backend, *, device_labels: bool = True) -> Stages:
    """The steps on ``backend`` (a :class:`gpumine.backend.Backend`).

    ``device_labels`` (GPU): the labels stay on the device (CuPy input); False brings
    them to the host once, at the end (see :func:`gpumine.wavecluster.gpu.stages`).
    """
    if not backend.is_gpu:
        return _CPU
    from gpumine.wavecluster import gpu

    return gpu.stages(device_labels=device_labels)


def grid_components(stages, fine, *, wavelet, levels, threshold, connectivity,
                    min_cluster_size, label, coarser_levels=False):
    """Low-pass the fine grid, resolve the threshold and label the coarse foreground:
    ``(threshold, components, n_components)``. ``fine`` is a list holding the fine grid and,
    optionally, its sum (``Stages.histogram``'s ``total``; None or absent: summed here when
    needed); it is emptied, so the grid is freed before the labelling. ``coarser_levels``:
    ``threshold="auto"`` consults the wavelet's coarser levels (``levels="auto"``)."""
    grid, total = fine.pop(0), fine.pop() if fine else None
    coarse = stages.lowpass(grid, wavelet, levels)
    # the grid's weight, that "auto" counts points in: on the GPU a device number (the
    # histogram's), read back with the coarse grids' masses (engine.resolve_threshold)
    grid_weight = ((total if total is not None else grid.sum()) if threshold == "auto"
                   else 0.0)
    del grid, total
    threshold, (components, n_components) = resolve_threshold(
        threshold, coarse, grid_weight=grid_weight, min_cluster_size=min_cluster_size,
        label=label, connectivity=connectivity, xp=stages.xp, weigh=stages.weigh,
        to_host=stages.to_host, spread=stages.spread, nearest=stages.nearest,
        joint=stages.joint, summaries=stages.summaries, tree=stages.tree, plane=stages.plane,
        paint=stages.paint, planes=stages.planes, levels_tree=stages.levels_tree,
        coarser=(_next_level(stages, wavelet) if threshold == "auto" and coarser_levels
                 else None))
    return threshold, components, n_components


def _next_level(stages, wavelet):
    """``coarser`` of :func:`~gpumine.wavecluster.engine.resolve_threshold`: haar's next level
    of a coarse grid (None for another wavelet, whose cells do not nest, and for a grid with
    an axis of fewer than 4 cells: its next level would have fewer than 2)."""
    if get_wavelet(wavelet).name != "haar":
        return None

    def coarser(coarse):
        return stages.lowpass(coarse, wavelet, 1) if min(coarse.shape) >= 4 else None

    return coarser


def fit_wavecluster(X, sample_weight, *, stages: Stages, bounds, grid_shape, levels, wavelet,
                    threshold, connectivity, min_cluster_size, label,
                    coarser_levels: bool = False) -> WaveClusterResult:
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
    coarser_levels : bool, default=False
        ``threshold="auto"`` consults the coarser levels (the estimator's ``levels="auto"``;
        :func:`grid_components`).

    Returns
    -------
    WaveClusterResult
        What comes back to the host on the GPU: the threshold (with ``"auto"``: the grid's
        mass and one count per level tried) and the component sizes (8 bytes per
        component), besides the labels as ``stages.results`` places them.
    """
    point_cells, *fine = stages.histogram(X, sample_weight, bounds, grid_shape)
    prepared = (stages.prepare(X.shape[0], coarse_shape(grid_shape, wavelet, levels))
                if stages.prepare is not None else None)
    threshold, components, n_components = grid_components(
        stages, fine, wavelet=wavelet, levels=levels, threshold=threshold,
        connectivity=connectivity, min_cluster_size=min_cluster_size, label=label,
        coarser_levels=coarser_levels)
    point_component = stages.point_components(point_cells, components, wavelet, levels,
                                              grid_shape)
    del point_cells
    sizes = stages.weigh(point_component, sample_weight, n_components + 1)
    # the component sizes: 8 bytes per component (the coarse grid's, not the points')
    remap = cluster_ids(stages.to_host(sizes), min_cluster_size)  # sync: the sizes
    n_clusters = int((remap >= 0).sum())  # sync: none, remap is on the host
    labels, grid_labels = stages.results(remap, point_component, components, n_clusters,
                                         prepared)
    return WaveClusterResult(
        labels=labels, grid_labels=grid_labels, grid_shape=tuple(grid_shape),
        bounds=np.asarray(bounds, dtype=np.float64),
        threshold=float(threshold),  # sync: none, a host number
        n_clusters=n_clusters)


def chunk_components(stages, X, bounds, grid_shape, components, wavelet, levels):
    """Each point's component (``stages.point_components``' ids: 0 for background) in the
    labelled coarse grid ``components``; what the chunked and distributed fits' later passes
    compute per chunk."""
    point_cells, _, _ = stages.histogram(X, None, bounds, grid_shape)
    return stages.point_components(point_cells, components, wavelet, levels, grid_shape)


def fit_wavecluster_chunked(chunks, *, stages: Stages, bounds, grid_shape, levels, wavelet,
                            threshold, connectivity, min_cluster_size, label,
                            labels_to_host: bool = True,
                            coarser_levels: bool = False) -> WaveClusterResult:
    """:func:`fit_wavecluster` over a chunk source (:mod:`gpumine.kmeans.chunked` says what
    one is), on either backend: three passes, none holding more than a chunk, the grids
    and the labels.

    The fine grid is the sum of the chunks' grids; the wavelet, threshold and labelling are
    then :func:`fit_wavecluster`'s, on the same grid; a second pass weighs the components
    by their points and a third labels the points. With unweighted points the counts are
    exact, so the result equals the in-memory fit's. ``labels_to_host``: each chunk's
    labels go to the host as they are made (``stages.to_host``); else they stay on the
    backend and are joined there.
    """
    xp = stages.xp
    fine = [xp.zeros(grid_shape, dtype=xp.float64)]
    for X, w in chunks():
        fine[0] += stages.histogram(X, w, bounds, grid_shape)[1]
    threshold, components, n_components = grid_components(
        stages, fine, wavelet=wavelet, levels=levels, threshold=threshold,
        connectivity=connectivity, min_cluster_size=min_cluster_size, label=label,
        coarser_levels=coarser_levels)

    def point_component(X):
        return chunk_components(stages, X, bounds, grid_shape, components, wavelet, levels)

    sizes = xp.zeros(n_components + 1, dtype=xp.float64)
    for X, w in chunks():
        sizes += stages.weigh(point_component(X), w, n_components + 1)
    remap = cluster_ids(stages.to_host(sizes), min_cluster_size)  # sync: 8 bytes a component
    on_backend = xp.asarray(remap)
    move = stages.to_host if labels_to_host else (lambda labels: labels)
    # sync on the GPU with labels_to_host: each chunk's labels, once, as they are made
    labels = [move(on_backend[point_component(X)]) for X, _ in chunks()]
    join = np if labels_to_host else xp
    return WaveClusterResult(
        labels=join.concatenate(labels) if labels else join.empty(0, dtype=np.int32),
        grid_labels=move(on_backend[components]), grid_shape=tuple(grid_shape),
        bounds=np.asarray(bounds, dtype=np.float64),
        threshold=float(threshold),  # sync: none, a host number
        n_clusters=int((remap >= 0).sum()))  # sync: none, remap is on the host
