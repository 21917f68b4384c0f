"""``GPUKMeans``: a scikit-learn ``KMeans`` whose steps are registry strategies.

The estimator validates parameters and data, resolves ``"auto"`` choices and
hands over to the engine (:mod:`gpumine.kmeans.lloyd`); it holds no array math.
"""

from __future__ import annotations

import numbers
import warnings
from types import SimpleNamespace

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from gpumine import registry
from gpumine.adapters.chunks import DEFAULT_BATCH_ROWS, array_chunks, dataset_chunks, is_dataset
from gpumine.adapters.columns import Columns
from gpumine.adapters.estimator import GpumineEstimator
from gpumine.backend import DEVICES, cupy_module, get_backend
from gpumine.devices import is_several_gpus, resolve_gpu_ids
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.kmeans import chunked, lloyd
from gpumine.kmeans.measured import MeasuredAssign, race_candidates
from gpumine.validation import check_init_array, check_sample_weight, is_device_array

__all__ = ["GPUKMeans"]


def _tensor_cores(backend) -> bool:
    """Whether the fit's device has the tensor cores ``hamerly`` past 32 features scans on
    (compute capability 8.0; :func:`gpumine.kmeans.tensor_cores.has_mma`)."""
    if not backend.is_gpu:
        return False
    from gpumine.kmeans.tensor_cores import has_mma  # CuPy's side, imported with the GPU

    return has_mma(backend.xp)


class GPUKMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, GpumineEstimator):
    """K-means clustering (Lloyd) on the GPU or the CPU, scikit-learn compatible.

    Drop-in for ``sklearn.cluster.KMeans(algorithm="lloyd")``: same parameters,
    attributes and numerics (tolerance scaled by the mean feature variance,
    strict convergence on unchanged labels, a final E-step otherwise, empty
    clusters relocated to the farthest points, best of ``n_init`` by inertia).
    The assignment, update and initialisation steps are strategies from the
    registry (``gpumine strategies`` lists them).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    init : {"k-means++", "k-means||", "random"}, str, callable or array-like of shape \
            (n_clusters, n_features), default="k-means++"
        A ``kmeans.init`` strategy name (built-in: greedy ``"k-means++"``, Bahmani et
        al.'s ``"k-means||"`` and ``"random"``, all weighted by ``sample_weight``), a
        callable
        ``init(X, n_clusters, random_state)`` returning centres, or the centres.
    n_init : "auto" or int, default="auto"
        Number of runs from different inits; the lowest inertia is kept.
        ``"auto"``: 10 for ``"random"`` or a callable, 1 otherwise.
    max_iter : int, default=300
        Maximum Lloyd iterations per run.
    tol : float, default=1e-4
        Convergence threshold on the total squared centre shift, relative to
        the mean feature variance of X.
    verbose : int, default=0
        Print the inertia of each iteration.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation.
    copy_x : bool, default=True
        If False, X is centred in place during the fit and restored afterwards
        (it may differ from the original by rounding).
    device : {"auto", "cpu", "gpu", "gpu:all"} or list of int, default="auto"
        Where to run. ``"auto"`` takes the GPU when CuPy and a CUDA device are
        present, else the CPU; the environment variable ``GPUMINE_DEVICE``
        overrides ``"auto"``. On the GPU, X is copied once to the device and
        transposed there to column-major; X, labels and centres stay on the
        device for the whole fit. ``"gpu:all"`` (every visible GPU) or a list of
        GPU ids fits on several GPUs of this process: X on the first, the init
        there, then each Lloyd iteration split over the GPUs, their partial sums
        added by NCCL (:mod:`gpumine.kmeans.multi_gpu`); the same labels as one GPU
        from the same init. ``predict`` and ``transform`` run on the current GPU.
    assign : str, default="auto"
        ``kmeans.assign`` strategy. ``"auto"``: on the CPU ``"numba"`` where Numba is
        installed, else ``"numpy"``; on the GPU the exact assignment the device's measured
        table (or the fixed rule) gives for the problem's shape, and on a large fit (n d k
        from :data:`gpumine.kmeans.measured.RACE_MIN_WORK`, ``max_iter`` >= 10) the exact
        candidates race on the data in the first iterations, the fastest assigning the
        rest (:mod:`gpumine.kmeans.measured`; the same labels whichever wins). From
        524,288 rows, where ``"hamerly"`` scans the points its bounds leave on the tensor
        cores (d <= 32 with d * k >= 8192; or 33 to 128 features with k >= 1024 where the
        shape picks ``"tc-exact"``, on compute capability 8.0 or newer), a fit runs it
        without a race (``gpumine.registry._tensor_bounds``); ``predict`` keeps the
        stateless pick. ``strategies_`` and ``strategy_reasons_`` say what ran and why.
    update : str, default="auto"
        ``kmeans.update`` strategy. ``"auto"``: on the CPU ``"numba"`` where Numba is
        installed, else ``"numpy"``; on the GPU the update the device's measured table
        gives for the problem's shape, else ``"atomic"`` (the fixed rule).
    batch_rows : int or None, default=None
        Stream X in chunks of this many rows (:mod:`gpumine.kmeans.chunked`): every
        pass reads the chunks again, so only two chunks (and the labels) need be in
        memory. A ``pyarrow.dataset.Dataset`` (Parquet data larger than the host's
        or the GPU's memory) always streams, in chunks of 2**20 rows when this is
        None, the next chunk read while the current one is computed; on the GPU, data
        that fits in half the free host memory is kept page-locked after the second
        pass (:class:`gpumine.adapters.chunks.PinnedCache`). Other input streams only
        when this is set. From the same initial
        centres a streamed fit gives the in-memory fit's labels, ``n_iter_`` and
        centres up to float64 rounding; a string or callable ``init`` runs on a
        uniform sample of 100,000 rows drawn in one pass.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Centres, in the dtype of the training data (float32 or float64). A CuPy
        array on the fit's device when X was a CuPy array (the output mirrors the
        input's namespace, as scikit-learn's array API and cuML do), else NumPy.
    labels_ : ndarray of shape (n_samples,), int32
        Cluster of each training point; CuPy for CuPy input, like ``cluster_centers_``.
    inertia_ : float
        Sum of weighted squared distances of the points to their centre.
    n_iter_ : int
        Lloyd iterations of the kept run.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when X had string column names.
    device_ : str
        ``"cpu"`` or ``"gpu"``: where the fit ran.
    device_ids_ : list of int
        The GPUs of a several-GPU fit (``device="gpu:all"`` or a list), first the one
        holding X; absent otherwise.
    iteration_seconds_ : ndarray of shape (n_iter_,)
        A several-GPU fit's wall time of each Lloyd iteration of the kept run (the GPUs'
        work, the exchange and the readback); absent otherwise.
    strategies_ : dict
        The resolved ``init``, ``assign`` and ``update`` strategy names.
    strategy_reasons_ : dict
        Why ``assign`` and ``update`` are what they are: ``"given"``, the table measured
        on this device (``gpumine bench calibrate``; the cell and the number of pairs
        compared), or the fixed rule where no table applies.

    See Also
    --------
    sklearn.cluster.KMeans : the CPU estimator this one reproduces.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine import GPUKMeans
    >>> X = np.array([[1, 2], [1, 4], [1, 0], [10, 2], [10, 4], [10, 0]], dtype=np.float64)
    >>> km = GPUKMeans(n_clusters=2, random_state=0, device="cpu").fit(X)
    >>> sorted(km.cluster_centers_.tolist())
    [[1.0, 2.0], [10.0, 2.0]]
    >>> km.predict(np.array([[0.0, 0.0], [12.0, 3.0]])).tolist() == [
    ...     km.labels_[0], km.labels_[3]]
    True
    """

    _input_dtype = (np.float64, np.float32)  # float32 stays float32
    _fitted_attribute = "cluster_centers_"

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300, tol=1e-4,
                 verbose=0, random_state=None, copy_x=True, device="auto", assign="auto",
                 update="auto", batch_rows=None):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.copy_x = copy_x
        self.device = device
        self.assign = assign
        self.update = update
        self.batch_rows = batch_rows

    # -- validation --------------------------------------------------------
    def _check_params(self):
        def positive_int(name):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")

        positive_int("n_clusters")
        positive_int("max_iter")
        if not (self.n_init == "auto" or (isinstance(self.n_init, numbers.Integral)
                                          and not isinstance(self.n_init, bool)
                                          and self.n_init >= 1)):
            raise InvalidParameterError(
                f"n_init must be 'auto' or an integer >= 1, got {self.n_init!r}")
        if (not isinstance(self.tol, numbers.Real) or isinstance(self.tol, bool)
                or not np.isfinite(self.tol) or self.tol < 0):
            raise InvalidParameterError(f"tol must be a finite number >= 0, got {self.tol!r}")
        self._check_device()
        if self.batch_rows is not None:
            positive_int("batch_rows")
        for name in ("assign", "update"):
            if not isinstance(getattr(self, name), str):
                raise InvalidParameterError(
                    f"{name} must be a strategy name, got {getattr(self, name)!r}")
        if not (isinstance(self.init, str) or callable(self.init) or hasattr(self.init, "__len__")):
            raise InvalidParameterError(
                "init must be a strategy name, a callable or an array of centres, "
                f"got {self.init!r}")

    def _resolve_init(self, X, backend_name):
        """Return (init for the engine, init name, default n_init)."""
        init = self.init
        if isinstance(init, str):
            strategy = registry.resolve_strategy("kmeans.init", init, backend_name)
            return strategy.load(), init, 10 if init == "random" else 1
        if callable(init):
            def user_init(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp):
                centers = check_init_array(init(X, n_clusters, random_state=random_state), X.dtype)
                self._check_center_shape(X, centers)
                return xp.asarray(centers)
            return user_init, "callable", 10
        centers = check_init_array(init, X.dtype)
        self._check_center_shape(X, centers)
        return centers, "array", 1

    def _check_center_shape(self, X, centers):
        if centers.shape[0] != self.n_clusters:
            raise InvalidInputError(f"The shape of the initial centers {centers.shape} does not "
                                    f"match the number of clusters {self.n_clusters}.")
        if centers.shape[1] != X.shape[1]:
            raise InvalidInputError(f"The shape of the initial centers {centers.shape} does not "
                                    f"match the number of features of the data {X.shape[1]}.")

    # -- fitting -----------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None):
        """Compute k-means clustering.

        Parameters
        ----------
        X : array-like, pandas DataFrame, pyarrow Table or CuPy array of shape \
                (n_samples, n_features)
            Training data; float32 stays float32, anything else becomes float64.
            Columnar data is validated column by column (the message names a bad
            column) and copied once into a column-major buffer on the device
            (see :mod:`gpumine.adapters`).
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each point (used by the init strategies too,
            not by an explicit or callable init).

        Returns
        -------
        self : GPUKMeans

        Raises
        ------
        ValueError
            Bad parameters or data; the estimator is left as it was before the call.
        """
        return self._checked_fit(X, sample_weight)

    def _check_device(self):
        if not is_several_gpus(self.device) and self.device not in DEVICES:
            raise InvalidParameterError(f"device must be one of {DEVICES}, 'gpu:all' or a list "
                                        f"of GPU ids, got {self.device!r}")

    def _backend(self):
        if is_several_gpus(self.device):
            return get_backend("gpu")
        return super()._backend()

    def _fit(self, X, sample_weight):
        self._check_params()
        if is_several_gpus(self.device):
            if self.batch_rows is not None or is_dataset(X):
                raise InvalidParameterError(
                    f"device={self.device!r} fits in memory: several GPUs do not take "
                    "batch_rows or a pyarrow dataset (stream on one GPU instead)")
            get_backend("gpu")  # raises BackendUnavailable, naming what is missing
            ids = resolve_gpu_ids(self.device)
            with cupy_module().cuda.Device(ids[0]):
                return self._fit_in_memory(X, sample_weight, ids)
        if self.batch_rows is not None or is_dataset(X):
            return self._fit_streamed(X, sample_weight)
        return self._fit_in_memory(X, sample_weight, None)

    def _fit_in_memory(self, X, sample_weight, ids):
        backend = self._backend()
        device_input = is_device_array(X)
        # copy_x gives the fit a copy of its own, except of already validated Columns (a
        # caller's buffer, e.g. the command line's): only a caller's X is shifted back
        owned = self.copy_x and not isinstance(X, Columns)
        columns = self._validate(X, reset=True, backend=backend, copy=self.copy_x)
        X = columns.X
        n_samples, n_features = X.shape
        if n_samples < self.n_clusters:
            raise InvalidInputError(
                f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}.")
        xp = backend.xp
        sample_weight = check_sample_weight(sample_weight, n_samples, X.dtype, xp)
        assign, update, reasons = registry.resolve_kmeans_pair(
            self.assign, self.update, backend.name, n_samples=n_samples, n_features=n_features,
            n_clusters=self.n_clusters, dtype=X.dtype.name, device_name=backend.device_name,
            tensor_cores=_tensor_cores(backend))
        _check_features(update, n_features)
        assign_fn, race = assign.load(), None
        if self.assign == "auto" and backend.is_gpu and ids is None:
            names = race_candidates(assign.name, n_samples=n_samples, n_features=n_features,
                                    n_clusters=self.n_clusters, max_iter=self.max_iter)
            if names:  # a large fit: the exact assignments race on its data (measured.py)
                assign_fn = race = MeasuredAssign(names)
        init, init_name, default_n_init = self._resolve_init(X, backend.name)
        n_init = self._n_init(init_name, default_n_init)
        single = None
        if ids is not None:
            from gpumine.kmeans.multi_gpu import MultiGPULloyd

            single = MultiGPULloyd(ids, update.load())
        result = lloyd.fit_lloyd(
            X, sample_weight, n_clusters=self.n_clusters,
            init=init if callable(init) else backend.to_device(init), n_init=n_init,
            assign=assign_fn, update=update.load(), max_iter=self.max_iter, tol=self.tol,
            random_state=check_random_state(self.random_state), verbose=self.verbose, xp=xp,
            mean=columns.means, restore_x=not owned, single=single)
        self._set_fitted(result, backend, device_input, init_name, assign, update)
        if race is not None:
            self.strategies_["assign"] = race.used or assign.name
            reasons = {**reasons, "assign": race.reason(reasons["assign"])}
        self.strategy_reasons_ = reasons
        for name in ("device_ids_", "iteration_seconds_"):  # a previous several-GPU fit's
            self.__dict__.pop(name, None)
        if single is not None:
            self.device_ids_ = list(ids)
            self.iteration_seconds_ = np.asarray(result.iteration_seconds)  # the kept run's
        return self

    def _n_init(self, init_name, default_n_init):
        n_init = default_n_init if self.n_init == "auto" else self.n_init
        if init_name == "array" and n_init != 1:
            warnings.warn("Explicit initial center position passed: performing only one init "
                          f"in {type(self).__name__} instead of n_init={n_init}.",
                          RuntimeWarning, stacklevel=3)
            n_init = 1
        return n_init

    def _fit_streamed(self, X, sample_weight):
        """The fit over chunks (``batch_rows``, or a pyarrow dataset)."""
        backend = self._backend()
        rows = self.batch_rows or DEFAULT_BATCH_ROWS
        if is_dataset(X):
            if sample_weight is not None:
                raise InvalidParameterError("sample_weight is not taken with a pyarrow dataset "
                                            "(stream a weight column separately is not "
                                            "supported); pass None")
            stream = dataset_chunks(X, backend=backend, batch_rows=rows)
            self.n_features_in_ = stream.n_features
            self.feature_names_in_ = np.asarray(stream.feature_names, dtype=object)
            chunks, dtype, n_features, device_input = (stream.chunks, stream.dtype,
                                                       stream.n_features, False)
        else:
            device_input = is_device_array(X)
            X = self._validate_X(X, reset=True, backend=backend)  # chunks are centred copies
            weight = (None if sample_weight is None else
                      check_sample_weight(sample_weight, X.shape[0], X.dtype, backend.xp))
            chunks, dtype, n_features = array_chunks(X, weight, rows), X.dtype, X.shape[1]
        assign = registry.resolve_strategy("kmeans.assign", self.assign, backend.name)
        update = registry.resolve_strategy("kmeans.update", self.update, backend.name)
        _check_features(update, n_features)
        reasons = {key: "given" if name != "auto" else "the fixed rule for streamed fits"
                        for key, name in (("assign", self.assign), ("update", self.update))}
        shape_of_X = SimpleNamespace(dtype=np.dtype(dtype), shape=(0, n_features))
        init, init_name, default_n_init = self._resolve_init(shape_of_X, backend.name)
        result = chunked.fit_lloyd_chunked(
            chunks, n_clusters=self.n_clusters,
            init=init if callable(init) else backend.to_device(init),
            n_init=self._n_init(init_name, default_n_init), assign=assign.load(),
            update=update.load(), max_iter=self.max_iter, tol=self.tol,
            random_state=check_random_state(self.random_state), verbose=self.verbose,
            xp=backend.xp)
        self._set_fitted(result, backend, device_input, init_name, assign, update)
        self.strategy_reasons_ = reasons
        return self

    def _set_fitted(self, result, backend, device_input, init_name, assign, update):
        xp = backend.xp
        n_distinct = result.n_distinct
        if n_distinct is None:  # distinct labels from the cluster sizes, on the backend
            # sync: one integer, once per fit
            n_distinct = int(xp.count_nonzero(xp.bincount(result.labels,
                                                          minlength=self.n_clusters)))
        if n_distinct < self.n_clusters:
            warnings.warn(f"Number of distinct clusters ({n_distinct}) found smaller than "
                          f"n_clusters ({self.n_clusters}). Possibly due to duplicate points "
                          "in X.", ConvergenceWarning, stacklevel=2)
        self.cluster_centers_ = self._output(result.centers, device_input)
        self.labels_ = self._output(result.labels, device_input)
        self.inertia_ = float(result.inertia)
        self.n_iter_ = int(result.n_iter)
        self._n_features_out = self.n_clusters
        self.device_ = backend.name
        self.strategies_ = {"init": init_name, "assign": assign.name, "update": update.name}
        return self

    # -- using a fitted model ----------------------------------------------
    def _assign(self, X, backend):
        assign = registry.resolve_strategy(
            "kmeans.assign", self.assign, backend.name, n_samples=X.shape[0],
            n_features=X.shape[1], n_clusters=self.n_clusters)
        return assign.load()

    def _centers_on(self, backend, dtype):
        return backend.to_device(self.cluster_centers_).astype(dtype, copy=False)

    def predict(self, X):
        """Index of the closest centre for each row of X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,), int32
            CuPy for CuPy input (on its device), NumPy otherwise.
        """
        check_is_fitted(self)
        backend = self._backend()
        if is_dataset(X):
            return self._predict_streamed(X, backend)
        device_input = is_device_array(X)
        X = self._validate_X(X, reset=False, backend=backend)
        labels = lloyd.assign_labels(X, self._centers_on(backend, X.dtype),
                                     assign=self._assign(X, backend), xp=backend.xp)
        return self._output(labels, device_input)

    def _predict_streamed(self, dataset, backend):
        """``predict`` of a pyarrow dataset, batch by batch; NumPy labels."""
        stream = dataset_chunks(dataset, backend=backend,  # one pass: nothing to cache
                                batch_rows=self.batch_rows or DEFAULT_BATCH_ROWS, cache_bytes=0)
        names = getattr(self, "feature_names_in_", None)
        if stream.n_features != self.n_features_in_ or (
                names is not None and list(names) != stream.feature_names):
            raise InvalidInputError(
                f"the dataset's columns {stream.feature_names} are not the "
                f"{self.n_features_in_} features seen in fit"
                + (f" ({list(names)})" if names is not None else ""))
        centers = self._centers_on(backend, stream.dtype)
        parts = []
        for X, _ in stream.chunks():
            labels = lloyd.assign_labels(X, centers, assign=self._assign(X, backend),
                                         xp=backend.xp)
            parts.append(self._output(labels, False))  # sync: each batch's labels, once
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)

    def transform(self, X):
        """Euclidean distance of each row of X to every centre.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
            CuPy for CuPy input (on its device), NumPy otherwise.
        """
        check_is_fitted(self)
        backend = self._backend()
        device_input = is_device_array(X)
        X = self._validate_X(X, reset=False, backend=backend)
        distances = lloyd.euclidean_distances(X, backend.to_device(self.cluster_centers_),
                                              xp=backend.xp)
        return self._output(distances, device_input)

    def fit_transform(self, X, y=None, sample_weight=None):
        """Fit, then return the distances of the training points to the centres."""
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the k-means objective (the weighted inertia) of X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        backend = self._backend()
        X = self._validate_X(X, reset=False, backend=backend)
        xp = backend.xp
        sample_weight = check_sample_weight(sample_weight, X.shape[0], X.dtype, xp)
        centers = self._centers_on(backend, X.dtype)
        labels = lloyd.assign_labels(X, centers, assign=self._assign(X, backend), xp=xp)
        return -lloyd.inertia(X, sample_weight, centers, labels, xp)


def _check_features(strategy, n_features: int) -> None:
    """A strategy with a ``max_dims`` refuses wider data before the fit starts."""
    if strategy.max_dims is not None and n_features > strategy.max_dims:
        raise InvalidParameterError(
            f"{strategy.kind.split('.')[-1]}={strategy.name!r} takes at most "
            f"{strategy.max_dims} features, got {n_features}; use 'auto'")
