"""``gpumine.dask.WaveCluster``: WaveCluster over the partitions of a Dask collection.

The streamed fit's passes (:func:`gpumine.wavecluster.pipeline.fit_wavecluster_chunked`),
each one Dask computation over the persisted partitions, which stay on their workers:

1. each partition's bounds (its rows' minimum and maximum per feature; a NaN or infinity
   fails here, naming the partition and the row), combined on the driver;
2. each partition's fine grid (the quantize + histogram step on the worker's ``device``),
   added pairwise on the workers, so the driver receives one grid;
3. on the driver, on ``device``: the low-pass, the threshold and the labelling of the
   coarse grid -- the single-GPU steps of the in-memory fit;
4. each partition's points weighed per component (k + 1 numbers back), which gives the
   cluster ids and the noise;
5. ``labels_``: a lazy ``dask.array``, each partition's lookup into the labelled grid.

Unweighted, the grid's counts are exact, so the result equals the in-memory fit's on the
same data: labels, ``grid_labels_``, ``threshold_`` (tested on a two-worker
``LocalCluster``). ``sample_weight`` travels as a second persisted array in X's partitions:
the bounds are those of the points of positive weight, the grid and the components' sizes
are weighed, as in memory (tested equal too, and integer weights equal repeated rows).
Each partition's grid is as large as the fine grid (float64): the
tree keeps one per worker in flight, not one per partition.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from gpumine.dask.blocks import (
    block_weights,
    check_finite_block,
    check_weight_block,
    dask_modules,
    partition_offsets,
    persisted_blocks,
    persisted_weights,
    tree_sum,
    weight_blocks,
)
from gpumine.exceptions import InvalidInputError

__all__ = ["WaveCluster"]


# -- what runs on the workers (pure functions of a block) ------------------------------------
def _stages(device):
    from gpumine.backend import get_backend
    from gpumine.wavecluster import pipeline

    backend = get_backend(device)
    return backend, pipeline.stages_for(backend, device_labels=False)


def _block_bounds(block, wblock, index, offset):
    """A partition's (rows, lowest, highest, weight): the bounds of its rows of positive
    weight (all rows unweighted); a NaN or infinity, or a bad weight, raises."""
    X = check_finite_block(block, index, offset)
    total = check_weight_block(wblock, index, offset) if wblock is not None else X.shape[0]
    if wblock is not None:
        X = X[np.asarray(wblock) > 0]  # host NumPy (sync: none)
    if not X.shape[0]:
        return 0, None, None, total
    return X.shape[0], X.min(axis=0), X.max(axis=0), total


def _on_backend(backend, block):
    """A partition on the worker's backend, column-major on the GPU. Not checked again:
    the bounds pass rejected NaN and infinity (and the blocks are persisted)."""
    return backend.to_device_columns(np.asarray(block, dtype=np.float64))


def _weights_on(backend, wblock):
    """A partition's weights on the worker's backend (float64), or None (unweighted)."""
    return None if wblock is None else backend.to_device(block_weights(wblock, 0))


def _block_grid(block, wblock, bounds, grid_shape, device):
    """A partition's fine grid (float64 weights), on the host."""
    backend, stages = _stages(device)
    if not block.shape[0]:
        return np.zeros(grid_shape)  # sync: none -- host NumPy, an empty partition's grid
    _, grid, _ = stages.histogram(_on_backend(backend, block), _weights_on(backend, wblock),
                               bounds, grid_shape)
    return stages.to_host(grid)  # sync: the grid, once a partition (the reduction's input)


def _block_ids(block, bounds, grid_shape, components, wavelet, levels, device):
    """A partition's points' components (0: background) on the worker's backend."""
    from gpumine.wavecluster.pipeline import chunk_components

    backend, stages = _stages(device)
    ids = chunk_components(stages, _on_backend(backend, block), bounds, grid_shape,
                           backend.to_device(components), wavelet, levels)
    return backend, stages, ids


def _block_sizes(block, wblock, bounds, grid_shape, components, wavelet, levels, size,
                 device):
    """A partition's weight per component (``size`` numbers), on the host."""
    if not block.shape[0]:
        return np.zeros(size)  # sync: none -- host NumPy, an empty partition's counts
    backend, stages, ids = _block_ids(block, bounds, grid_shape, components, wavelet, levels,
                                      device)
    sizes = stages.weigh(ids, _weights_on(backend, wblock), size)
    return stages.to_host(sizes)  # sync: size numbers


def _block_labels(block, bounds, grid_shape, components, remap, wavelet, levels, device):
    """A partition's labels (int32, -1 noise), on the host."""
    if not block.shape[0]:
        return np.empty(0, dtype=np.int32)
    backend, _, ids = _block_ids(block, bounds, grid_shape, components, wavelet, levels,
                                 device)
    return backend.to_host(backend.to_device(remap)[ids])  # sync: the partition's labels


def _block_lookup(block, grid_labels, bounds, grid_shape, wavelet, levels):
    from gpumine.wavecluster import engine

    return engine.lookup(np.asarray(block, dtype=np.float64), grid_labels, bounds, grid_shape,
                         wavelet, levels)


# -- the estimator --------------------------------------------------------------------------
class WaveCluster(ClusterMixin, BaseEstimator):
    """WaveCluster on a ``dask.array`` or ``dask.dataframe`` (``pip install "gpumine[dask]"``).

    The parameters and fitted attributes of :class:`gpumine.WaveCluster` (see there), with
    ``labels_`` lazy. ``device`` is where each partition's steps run on its worker and where
    the driver labels the grid.

    Parameters
    ----------
    grid_size, levels, wavelet, threshold, connectivity, min_cluster_size, bounds, label :
        As for :class:`gpumine.WaveCluster`.
    device : {"cpu", "gpu", "auto"}, default="cpu"

    Attributes
    ----------
    labels_ : dask.array.Array of shape (n_samples,), int32
        Lazy: each partition's points looked up in the labelled grid, -1 for noise.
    n_clusters_ : int
    grid_labels_ : ndarray, int32
        Labels of the coarse grid's cells (NumPy).
    grid_shape_ : tuple of int
    bounds_ : ndarray of shape (2, n_features)
    threshold_ : float
    levels_ : int
    n_features_in_ : int
    device_ : str
    strategies_ : dict

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from gpumine.dask import WaveCluster
    >>> rng = np.random.RandomState(0)
    >>> X = np.vstack([rng.normal(0, 0.3, (300, 2)), rng.normal(5, 0.3, (300, 2))])
    >>> wc = WaveCluster().fit(da.from_array(X, chunks=(250, 2)))
    >>> wc.n_clusters_
    2
    >>> import gpumine
    >>> same = gpumine.WaveCluster(device="cpu").fit(X)
    >>> bool((wc.labels_.compute() == same.labels_).all())  # sync: none, host NumPy
    True
    """

    def __init__(self, grid_size="auto", *, levels="auto", wavelet="haar", threshold="auto",
                 connectivity=None, min_cluster_size="auto", bounds=None, device="cpu",
                 label="auto"):
        self.grid_size = grid_size
        self.levels = levels
        self.wavelet = wavelet
        self.threshold = threshold
        self.connectivity = connectivity
        self.min_cluster_size = min_cluster_size
        self.bounds = bounds
        self.device = device
        self.label = label

    def __sklearn_is_fitted__(self):
        return hasattr(self, "grid_labels_")

    def _in_memory(self):
        """The in-memory estimator with the same parameters: its rules resolve them."""
        from gpumine.wavecluster import WaveCluster as InMemory

        return InMemory(**self.get_params())

    def fit(self, X, y=None, sample_weight=None):
        """Fit on a ``dask.array`` (n_samples, n_features) or a numeric ``dask.dataframe``.

        Parameters
        ----------
        X : dask.array.Array or dask.dataframe.DataFrame
        y : Ignored
        sample_weight : None, array-like, dask array or dask Series of shape (n_samples,)
            As in :meth:`gpumine.WaveCluster.fit`; a NaN, infinite or negative weight fails
            naming its partition and row.

        Returns
        -------
        self
        """
        from gpumine.backend import get_backend
        from gpumine.wavecluster import engine, pipeline

        dask, _ = dask_modules()
        X = persisted_blocks(X, dtype=np.float64)
        W = persisted_weights(sample_weight, X)
        blocks = X.to_delayed().ravel().tolist()
        wblocks = weight_blocks(W, len(blocks))
        sizes = [int(rows) for rows in X.chunks[0]]  # sync: none, Dask's chunk sizes
        offsets = partition_offsets(X)
        n_samples, n_features = int(sum(sizes)), int(X.shape[1])  # sync: none, host ints
        inner = self._in_memory()
        backend = get_backend(self.device)
        inner._plan(n_samples, n_features, None, backend)  # parameters checked before a pass
        parts = dask.compute(*[dask.delayed(_block_bounds)(b, wb, i, offset)
                               for i, (b, wb, offset) in enumerate(zip(blocks, wblocks, offsets,
                                                                       strict=True))])
        total = float(sum(part[3] for part in parts))  # sync: none, host floats
        if not total > 0:
            raise InvalidInputError("sample_weight sums to 0: no point has weight")
        plan = inner._plan(n_samples, n_features, None, backend, total_weight=total)
        if self.bounds is not None:
            bounds = inner._bounds(SimpleNamespace(shape=(n_samples, n_features)), None, backend)
        else:
            lows = [lo for rows, lo, _, _ in parts if rows]
            highs = [hi for rows, _, hi, _ in parts if rows]
            bounds = inner._check_bounds(np.stack([np.min(lows, axis=0),
                                                   np.max(highs, axis=0)]))
        grid_shape, levels = plan["grid_shape"], inner._levels()
        fine = tree_sum(dask, [dask.delayed(_block_grid)(b, wb, bounds, grid_shape, self.device)
                               for b, wb in zip(blocks, wblocks, strict=True)]).compute()
        stages = pipeline.stages_for(backend, device_labels=False)
        threshold, components, n_components = pipeline.grid_components(
            stages, [backend.to_device(fine)], wavelet=plan["wavelet"], levels=levels,
            threshold=self.threshold, connectivity=plan["connectivity"],
            min_cluster_size=plan["min_cluster_size"], label=plan["label"].load(),
            coarser_levels=inner._consults_coarser())
        components = backend.to_host(components)  # sync: the coarse grid, once, to ship
        shared = dask.delayed(components)  # one key, not a copy per task
        counts = dask.compute(*[
            dask.delayed(_block_sizes)(b, wb, bounds, grid_shape, shared, plan["wavelet"],
                                       levels, n_components + 1, self.device)
            for b, wb in zip(blocks, wblocks, strict=True)])
        remap = engine.cluster_ids(np.sum(counts, axis=0), plan["min_cluster_size"])
        self.grid_labels_ = remap[components]
        self.n_clusters_ = int((remap >= 0).sum())  # sync: none, host NumPy
        self.grid_shape_ = tuple(grid_shape)
        self.bounds_ = np.asarray(bounds, dtype=np.float64)
        self.threshold_ = float(threshold)  # sync: none, a host number
        self.levels_ = levels
        self.n_features_in_ = n_features
        self.device_ = backend.name
        self.strategies_ = {"wavelet": self.wavelet, "label": plan["label"].name}
        self._wavelet = plan["wavelet"]
        self.labels_ = _lazy(X, _block_labels, self.bounds_, self.grid_shape_, shared, remap,
                             self._wavelet, levels, self.device)
        return self

    def predict(self, X):
        """Lazy labels of a dask array or dataframe through the fitted grid (-1: noise or
        outside the bounds): a ``dask.array`` of int32, as :meth:`gpumine.WaveCluster.predict`
        computes them for host data."""
        check_is_fitted(self)
        X = persisted_blocks(X, dtype=np.float64)
        if X.shape[1] != self.n_features_in_:
            raise InvalidInputError(f"X has {X.shape[1]} features, the fit saw "
                                    f"{self.n_features_in_}")
        dask, _ = dask_modules()
        return _lazy(X, _block_lookup, dask.delayed(self.grid_labels_), self.bounds_,
                     self.grid_shape_, self._wavelet, self.levels_)


def _lazy(X, function, *args):
    """``function(block, *args)`` of every row block of X as one lazy int32 dask array (a
    delayed argument is one key that every task shares, not a copy in each; X's persisted
    blocks stay alive with the result)."""
    return X.map_blocks(function, *args, dtype=np.int32, drop_axis=1)
