"""``WaveCluster``: grid- and wavelet-based clustering with noise, scikit-learn compatible."""

from __future__ import annotations

import math
import numbers
import os
from types import SimpleNamespace

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpumine import registry
from gpumine.adapters.chunks import DEFAULT_BATCH_ROWS, array_chunks, dataset_chunks, is_dataset
from gpumine.adapters.estimator import GpumineEstimator
from gpumine.backend import get_backend
from gpumine.exceptions import InsufficientMemoryError, InvalidInputError, InvalidParameterError
from gpumine.validation import check_sample_weight, is_device_array
from gpumine.wavecluster import cpu_fast, engine, pipeline
from gpumine.wavecluster.wavelet import coarse_shape

__all__ = ["WaveCluster"]


def _available_memory() -> int:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 34


class WaveCluster(GpumineEstimator):
    """WaveCluster: quantize into a grid, wavelet low-pass, threshold, connected components.

    Points are binned into a grid; ``levels`` levels of the wavelet's low-pass
    filter smooth the density and shrink the grid; cells at or above
    ``threshold`` are foreground and their connected components are the
    clusters; each point takes its cell's cluster, or -1 (noise) when the cell
    is background or its cluster is smaller than ``min_cluster_size``. Works for
    any d whose grid fits in memory (d = 1..4 typically).

    Parameters
    ----------
    grid_size : "auto", int or tuple of int, default="auto"
        Fine-grid cells per feature. ``"auto"``: about two coarse cells per point;
        with one feature, ``sqrt(2 N)`` coarse cells (see
        :func:`gpumine.wavecluster.engine.auto_grid_shape`).
    levels : "auto" or int, default="auto"
        Wavelet levels of the transform; each halves the grid (``haar``). ``"auto"``:
        one level, and with ``threshold="auto"`` and ``haar`` the coarser levels the
        transform produces next (up to three, each 2^d times the points per cell) are
        consulted: a cluster that holds two or more clusters of a coarser level is split
        between them (:mod:`gpumine.wavecluster.levels`, the threshold's docstring below).
        An integer: that many levels, and the clusters of that level alone.
    wavelet : {"haar", "bior2.2"}, default="haar"
        ``haar``: seed 003's 2^d-block low-pass; ``bior2.2``: the CDF(2,2)
        low-pass of the original WaveCluster paper. Both equal PyWavelets'
        ``dwtn`` approximation (mode ``"zero"``).
    threshold : "auto" or float, default="auto"
        Minimum transformed density of a foreground cell. ``"auto"``: every
        occupied coarse cell, unless they join into one significant component (a
        background of noise that percolates); then the lowest of 2, 3, 4, 6, 8, ...
        points per cell at which two or more clusters appear and persist one level
        more (reasoning in :mod:`gpumine.wavecluster.engine`). Then each component
        of that level splits where it holds clusters that separate only at a higher
        density and persist far above it (spiral arms meeting at the centre, blobs
        whose tails overlap): the pieces are grown back over the component, so no
        point changes between cluster and noise
        (:mod:`gpumine.wavecluster.hierarchy`); with ``haar``, a cluster that holds two
        or more clusters of the wavelet's next level (2^d times the points per cell, its
        own clusters split the same way by up to two levels above) is split between them
        (:mod:`gpumine.wavecluster.levels`; with ``levels="auto"``). Last, where the base
        level is above one point per cell, each occupied cell sharing a face with a
        cluster's cell joins it; at one point per cell, each occupied cell outside the
        clusters within two steps of ``connectivity`` joins the nearest (the border:
        :func:`gpumine.wavecluster.engine.add_border_cells`). Tuned
        for ``haar``: with ``bior2.2`` an isolated point gives its coarse cell 0.25 to
        2.25 points' worth in 2-d (0.5 to 1.5 per axis, by its position in the cell),
        so the rule's counts in points do not hold (mean adjusted Rand index 0.69 on
        the quality benchmark's sets, against 0.92 with ``haar``). A number:
        the classic WaveCluster, one threshold, no split, no border.
    connectivity : int or None, default=None
        1..d as in scikit-image (1: cells sharing a face, d: all 3^d - 1
        neighbours). None: d up to 3 features (8 neighbours in 2-d, 26 in 3-d), 2
        from 4 on (cells that differ in at most two coordinates; see
        :func:`gpumine.wavecluster.engine.auto_connectivity`).
    min_cluster_size : "auto" or float, default="auto"
        Components with less weight (points, when unweighted) become noise.
        ``"auto"``: 1 % of the total weight.
    bounds : None or array-like of shape (2, n_features), default=None
        Grid bounds; None takes the data's min and max.
    device : {"auto", "cpu", "gpu"}, default="auto"
        On the GPU every stage is a kernel (quantize + histogram, low-pass,
        threshold, labelling, lookup) with the CPU path's arithmetic.
    label : str, default="auto"
        ``wavecluster.label`` strategy: ``scipy`` or ``union-find`` on the CPU
        (``"auto"``: ``scipy``), ``union-find-gpu`` or ``sliding-window`` on the
        GPU (``"auto"``: ``union-find-gpu``). With ``threshold="auto"`` the GPU labels
        every level it considers in one call of this strategy
        (:func:`gpumine.wavecluster.hierarchy.resolve_stacked`).
    batch_rows : int or None, default=None
        Stream X in chunks of this many rows: a pass for the bounds, one for the
        grid's histogram, one to weigh the components and one to label the points,
        none holding more than two chunks and the labels. A ``pyarrow.dataset.Dataset``
        always streams (chunks of 2**20 rows when this is None; the next chunk read
        while the current one is used, and on the GPU the chunks kept page-locked after
        the second pass when they fit in half the free host memory). Unweighted, the
        result equals the in-memory fit's, on the CPU and on the GPU (whose device then
        holds two chunks and the grids, not X).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,), int32
        Cluster of each training point, -1 for noise; ids 0..n_clusters_-1 by decreasing size.
        int32, as :class:`GPUKMeans`'s and scikit-learn's ``KMeans``'s: half the bytes of
        int64 to write on the host (16.7M labels into a fresh buffer: 3.2 against 11.2 ms, record
        ``session-scratch-2026-11-24-a1ef4bd.json``).
        A CuPy array on the fit's device when X was one (``predict`` likewise), else NumPy.
    n_clusters_ : int
    grid_labels_ : ndarray, int32
        Labels of the coarse grid's cells (-1: background or dropped). On the device,
        like ``labels_``, when X was a CuPy array.
    grid_shape_ : tuple of int
        Fine-grid shape.
    bounds_ : ndarray of shape (2, n_features)
    threshold_ : float
        The threshold applied (resolved when ``"auto"``: the base level's; clusters
        split from one of its components separated at higher densities).
    levels_ : int
        The wavelet levels of the transform (1 for ``levels="auto"``).
    n_features_in_ : int
    feature_names_in_ : ndarray
    device_ : str
        ``"cpu"`` or ``"gpu"``: where the fit ran.
    strategies_ : dict
        The ``wavelet`` and resolved ``label`` strategy names.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine import WaveCluster
    >>> rng = np.random.RandomState(0)
    >>> X = np.vstack([rng.normal(0, 0.3, (300, 2)), rng.normal(5, 0.3, (300, 2))])
    >>> wc = WaveCluster(device="cpu").fit(X)
    >>> wc.n_clusters_
    2
    >>> bool((wc.labels_[:300] == wc.labels_[0]).mean() > 0.9)
    True
    """

    _input_dtype = np.float64
    _fitted_attribute = "grid_labels_"

    def __init__(self, grid_size="auto", *, levels="auto", wavelet="haar", threshold="auto",
                 connectivity=None, min_cluster_size="auto", bounds=None, device="auto",
                 label="auto", batch_rows=None):
        self.grid_size = grid_size
        self.levels = levels
        self.wavelet = wavelet
        self.threshold = threshold
        self.connectivity = connectivity
        self.min_cluster_size = min_cluster_size
        self.bounds = bounds
        self.device = device
        self.label = label
        self.batch_rows = batch_rows

    def _check_params(self, n_features):
        if self.levels != "auto" and (not isinstance(self.levels, numbers.Integral)
                                      or isinstance(self.levels, bool) or self.levels < 1):
            raise InvalidParameterError(
                f"levels must be 'auto' or an integer >= 1, got {self.levels!r}")
        if not isinstance(self.wavelet, str):
            raise InvalidParameterError(f"wavelet must be a strategy name, got {self.wavelet!r}")
        self._check_device()
        if self.batch_rows is not None and (not isinstance(self.batch_rows, numbers.Integral)
                                            or isinstance(self.batch_rows, bool)
                                            or self.batch_rows < 1):
            raise InvalidParameterError(
                f"batch_rows must be an integer >= 1 or None, got {self.batch_rows!r}")
        connectivity = (engine.auto_connectivity(n_features) if self.connectivity is None
                        else self.connectivity)
        if (not isinstance(connectivity, numbers.Integral)
                or not 1 <= connectivity <= n_features):
            raise InvalidParameterError(
                f"connectivity must be an integer in 1..{n_features} (the number "
                f"of features), got {self.connectivity!r}")
        if not (self.threshold == "auto" or (
                isinstance(self.threshold, numbers.Real) and not isinstance(self.threshold, bool)
                and np.isfinite(self.threshold) and self.threshold >= 0)):
            raise InvalidParameterError(f"threshold must be 'auto' or a finite number >= 0 (a "
                                        f"density), got {self.threshold!r}")
        if not (self.min_cluster_size == "auto" or (
                isinstance(self.min_cluster_size, numbers.Real) and self.min_cluster_size >= 0)):
            raise InvalidParameterError("min_cluster_size must be 'auto' or a number >= 0, got "
                             f"{self.min_cluster_size!r}")
        return int(connectivity)

    def _levels(self) -> int:
        """The transform's wavelet levels: ``levels``, or 1 for ``"auto"``."""
        return 1 if self.levels == "auto" else int(self.levels)  # sync: none, a parameter

    def _consults_coarser(self) -> bool:
        """Whether ``threshold="auto"`` consults the coarser levels: ``levels="auto"``."""
        return self.levels == "auto"

    def _grid_shape(self, total_weight, n_features, wavelet):
        if isinstance(self.grid_size, str):
            if self.grid_size != "auto":
                raise InvalidParameterError(
                    f"grid_size must be 'auto', an int or one int per feature, "
                    f"got {self.grid_size!r}")
            shape = engine.auto_grid_shape(total_weight, n_features, self._levels())
        elif isinstance(self.grid_size, numbers.Integral) and not isinstance(self.grid_size,
                                                                            bool):
            shape = (int(self.grid_size),) * n_features
        else:
            sizes = (list(self.grid_size) if isinstance(self.grid_size, (list, tuple, np.ndarray))
                     else None)
            if sizes is None or not all(isinstance(v, numbers.Integral)
                                        and not isinstance(v, bool) for v in sizes):
                raise InvalidParameterError(
                    f"grid_size must be 'auto', an integer >= 2 or one integer per feature, "
                    f"got {self.grid_size!r}")
            shape = tuple(int(v) for v in sizes)
            if len(shape) != n_features:
                raise InvalidParameterError(f"grid_size has {len(shape)} entries for {n_features} "
                                 "features")
        if min(shape) < 2:
            raise InvalidParameterError(f"grid_size must be >= 2 per feature, got {shape}")
        levels = self._levels()
        coarse = coarse_shape(shape, wavelet, levels)
        if any(2 * 2 ** levels > s for s in shape):
            raise InvalidParameterError(
                f"levels={self.levels} shrinks the grid {shape} to {coarse}: the "
                f"grid vanishes; use fewer levels or a finer grid_size")
        needed = engine.required_bytes(shape)
        available = _available_memory()
        if needed > available and self.grid_size == "auto" and levels > 1:
            raise InsufficientMemoryError(
                f"levels={self.levels} with grid_size='auto' asks for a "
                f"{'x'.join(map(str, shape))} fine grid ({2 ** levels} fine cells per coarse "
                f"cell and axis), about {needed / 2**30:.1f} GiB, more than the "
                f"{available / 2**30:.1f} GiB available; use fewer levels")
        if needed > available:
            raise InsufficientMemoryError(
                f"a {'x'.join(map(str, shape))} grid ({math.prod(shape):,} cells for "
                f"{n_features} features) needs about {needed / 2**30:.1f} GiB, more than the "
                f"{available / 2**30:.1f} GiB available; lower grid_size or the number of "
                "features")
        return shape

    def fit(self, X, y=None, sample_weight=None):
        """Cluster X.

        Parameters
        ----------
        X : array-like, pandas DataFrame, pyarrow Table or CuPy array of shape \
                (n_samples, n_features)
            Validated and copied once, column-major, to the device (see
            :mod:`gpumine.adapters`).
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each point in the density grid.

        Returns
        -------
        self : WaveCluster
        """
        return self._checked_fit(X, sample_weight)

    def _plan(self, n_samples, n_features, sample_weight, backend, *,
              total_weight=None) -> dict:
        """Every parameter resolved and checked, from the shape alone (before any transfer).

        ``total_weight``: the weights' sum when the caller has it and passes no
        ``sample_weight`` (the Dask fit's first pass); the number of samples otherwise.
        """
        if n_samples < 2:
            raise InvalidInputError(f"WaveCluster needs at least 2 samples, got {n_samples} "
                                    "sample")
        connectivity = self._check_params(n_features)
        wavelet = registry.get_strategy("wavecluster.wavelet", self.wavelet).load()
        if sample_weight is None:  # every point weighs 1: no array of ones on either side
            weight = None
            total = float(n_samples if total_weight is None else total_weight)  # sync: none
        else:
            weight = check_sample_weight(sample_weight, n_samples, np.float64, backend.xp)
            total = float(weight.sum())  # sync: one number, once per fit
        label = registry.resolve_strategy("wavecluster.label", self.label, backend.name)
        if label.max_dims is not None and n_features > label.max_dims:
            raise InvalidParameterError(
                f"label={label.name!r} labels grids of up to {label.max_dims} dimensions, "
                f"the data has {n_features} features; choose another label strategy "
                f"(gpumine strategies) or device='cpu'")
        return dict(
            weight=weight, connectivity=connectivity, wavelet=wavelet,
            grid_shape=self._grid_shape(total, n_features, wavelet),
            min_cluster_size=(engine.AUTO_MIN_CLUSTER_FRACTION * total
                              if self.min_cluster_size == "auto"
                              else float(self.min_cluster_size)),
            label=label)

    def _fit(self, X, sample_weight):
        if self.batch_rows is not None or is_dataset(X):
            return self._fit_streamed(X, sample_weight)
        backend = self._backend()
        device_input = is_device_array(X)
        plans = []
        X = self._validate_X(X, reset=True, backend=backend, before_copy=lambda n, d: plans.append(
            self._plan(n, d, sample_weight, backend)))
        plan = plans[0]
        weight = plan["weight"]
        bounds = self._bounds(X, weight, backend)
        params = dict(bounds=bounds, grid_shape=plan["grid_shape"], levels=self._levels(),
                      coarser_levels=self._consults_coarser(),
                      wavelet=plan["wavelet"], threshold=self.threshold,
                      connectivity=plan["connectivity"],
                      min_cluster_size=plan["min_cluster_size"], label=plan["label"].load())
        result = pipeline.fit_wavecluster(
            X, weight, stages=pipeline.stages_for(backend, device_labels=device_input), **params)
        return self._set_fitted(result, backend, plan)

    def _fit_streamed(self, X, sample_weight):
        """The fit over chunks (``batch_rows``, or a pyarrow dataset), on either backend."""
        backend = self._backend()
        device_input = is_device_array(X)
        rows = self.batch_rows or DEFAULT_BATCH_ROWS
        if is_dataset(X):
            if sample_weight is not None:
                raise InvalidParameterError("sample_weight is not taken with a pyarrow "
                                            "dataset; pass None")
            stream = dataset_chunks(X, backend=backend, batch_rows=rows, dtype=np.float64)
            self.n_features_in_ = stream.n_features
            self.feature_names_in_ = np.asarray(stream.feature_names, dtype=object)
            chunks, n_features, weight = stream.chunks, stream.n_features, None
        else:
            X = self._validate_X(X, reset=True, backend=backend)
            weight = (None if sample_weight is None
                      else check_sample_weight(sample_weight, X.shape[0], np.float64,
                                               backend.xp))
            chunks, n_features = array_chunks(X, weight, rows), X.shape[1]
        n_samples, data_bounds = engine.chunk_bounds(chunks)  # the first pass
        plan = self._plan(n_samples, n_features, weight, backend)
        if self.bounds is not None:
            bounds = self._bounds(SimpleNamespace(shape=(n_samples, n_features)), None, backend)
        elif data_bounds is None:
            raise InvalidInputError("every point has zero weight")
        else:
            bounds = self._check_bounds(data_bounds)
        result = pipeline.fit_wavecluster_chunked(
            chunks, stages=pipeline.stages_for(backend), bounds=bounds,
            grid_shape=plan["grid_shape"], levels=self._levels(),
            coarser_levels=self._consults_coarser(), wavelet=plan["wavelet"],
            threshold=self.threshold, connectivity=plan["connectivity"],
            min_cluster_size=plan["min_cluster_size"], label=plan["label"].load(),
            labels_to_host=not device_input)
        return self._set_fitted(result, backend, plan)

    def _set_fitted(self, result, backend, plan):
        self.labels_ = result.labels
        self.n_clusters_ = result.n_clusters
        self.grid_labels_ = result.grid_labels
        self.grid_shape_ = result.grid_shape
        self.bounds_ = result.bounds
        self.threshold_ = result.threshold
        self.levels_ = self._levels()
        self.device_ = backend.name
        self.strategies_ = {"wavelet": self.wavelet, "label": plan["label"].name}
        return self

    def _bounds(self, X, weight, backend):
        if self.bounds is not None:
            bounds = np.asarray(self.bounds, dtype=np.float64)
            if bounds.shape != (2, X.shape[1]):
                raise InvalidParameterError(
                    f"bounds must have shape (2, {X.shape[1]}) (lower and upper per feature), "
                    f"got {bounds.shape}")
            if not np.all(np.isfinite(bounds)):
                raise InvalidParameterError("bounds must be finite; they hold NaN or infinity")
        # sync: one flag where weights are given (are they all positive), once per fit
        elif backend.is_gpu and (weight is None or bool((weight > 0).all())):
            from gpumine.wavecluster import gpu

            bounds = gpu.bounds(X.T)  # one fused pass over the column buffer
        else:
            weighted = X if weight is None else X[backend.to_device(weight > 0)]
            if not backend.is_gpu and cpu_fast.available() and len(weighted):
                bounds = cpu_fast.bounds(weighted)  # one pass, any layout (no rows: NumPy's error)
            else:
                bounds = backend.to_host(backend.xp.stack([weighted.min(axis=0),
                                                           weighted.max(axis=0)]))
        return self._check_bounds(bounds)

    def _check_bounds(self, bounds):
        constant = np.flatnonzero(bounds[1] <= bounds[0])
        if constant.size:
            names = getattr(self, "feature_names_in_", None)
            which = ", ".join(str(names[j]) if names is not None else f"#{j}" for j in constant)
            raise InvalidInputError(f"feature {which} has no spread (constant, or bounds with "
                                    "upper <= lower): WaveCluster cannot grid it; drop it")
        return bounds

    def predict(self, X):
        """Cluster of each point of X through the fitted grid; -1 for noise or outside bounds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,), int32
        """
        check_is_fitted(self)
        wavelet = registry.get_strategy("wavecluster.wavelet", self.wavelet).load()
        if is_device_array(X):  # CuPy in, CuPy out: the lookup runs where the data is
            backend = get_backend("gpu")
            X = self._validate_X(X, reset=False, backend=backend)
            from gpumine.wavecluster import gpu

            return gpu.lookup(X, self.grid_labels_, self.bounds_, self.grid_shape_, wavelet,
                              self.levels_)
        X = self._validate_X(X, reset=False, backend=get_backend("cpu"))  # a lookup: host work
        grid_labels = self.grid_labels_
        if is_device_array(grid_labels):  # fitted from CuPy input: the coarse grid comes over
            grid_labels = get_backend("gpu").to_host(grid_labels)
        return engine.lookup(X, grid_labels, self.bounds_, self.grid_shape_, wavelet,
                             self.levels_)
