"""``gpumine.dask.GPUKMeans``: Lloyd's algorithm over the partitions of a Dask collection.

With ``engine="collective"`` (a ``distributed.Client``) one long-lived task
per worker runs the whole loop on the partitions that worker holds and the workers exchange
their k x (d + 1) partial sums each iteration through a Dask actor
(:mod:`gpumine.dask.collective`), as cuML's multi-node k-means does: no graph and no
scheduler round trip per iteration. With ``engine="graph"`` (any Dask scheduler) every
iteration is one Dask computation: each partition (a block of rows, persisted on its
worker) is assigned against the centres by the fit's ``assign`` strategy and returns its
weighted sums and weights (float64) and a fingerprint of its labels; the driver adds the
partials in partition order. Either way the in-memory loop's relocation, averaging and
stopping rule (:mod:`gpumine.kmeans.lloyd`) decide, and from the same initial centres the
fit gives the in-memory estimator's labels, ``n_iter_`` and centres up to float64 rounding
of the summation order (tested with a two-worker ``LocalCluster``). A lost worker: the
graph engine's tasks are pure functions of persisted blocks, recomputed by Dask; the
collective loop is started again from the same centres (after the exchange's bounded wait
when the lost worker held its actor).

``iteration_overhead_`` records the measured share of each iteration spent outside the
busiest worker's own work (benchmarks/dask_overhead.py compares the engines).

Init: ``"k-means||"`` (default, Bahmani et al. 2012, as dask-ml and cuML): each round
is one computation over the partitions, each drawing its points with a generator
seeded from ``random_state``, the round and the partition index, so a seed gives the
same centres on any cluster. An explicit array of centres is taken as is.
"""

from __future__ import annotations

import hashlib
import numbers
import time

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from gpumine import registry
from gpumine.dask.blocks import (
    block_weights,
    check_finite_block,
    check_weight_block,
    dask_modules,
    partition_offsets,
    persisted_blocks,
    persisted_weights,
    weight_blocks,
)
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.kmeans.chunked import merge_moments, relocate_found
from gpumine.kmeans.lloyd import average_centers, shift_rows, stopping_rule

__all__ = ["GPUKMeans", "ResidentPartition"]


def _dask():
    return dask_modules()


def _backend(device):
    from gpumine.backend import get_backend

    return get_backend(device)


def _resolve_pair(assign, update, backend, rows, n_features, n_clusters, dtype):
    """``(assign, update, reasons)`` names the partitions run: on a GPU, ``"auto"`` from the
    device's measured table at the largest partition's shape (what one GPU assigns), as
    :func:`gpumine.registry.resolve_kmeans_pair` does for an in-memory fit; on the CPU the
    fixed rule (the in-memory CPU fit's own choice, so their results stay comparable)."""
    if backend.is_gpu:
        a, u, reasons = registry.resolve_kmeans_pair(
            assign, update, backend.name, n_samples=rows, n_features=n_features,
            n_clusters=n_clusters, dtype=np.dtype(dtype).name, device_name=backend.device_name,
            binds=False)  # a partition's strategies are called unbound
        return a.name, u.name, reasons
    names = {"assign": assign, "update": update}
    picked = {key: registry.resolve_strategy(f"kmeans.{key}", name, backend.name).name
              for key, name in names.items()}
    reasons = {key: "given" if name != "auto" else f"the fixed rule for {backend.name}"
               for key, name in names.items()}
    return picked["assign"], picked["update"], reasons


# -- what runs on the workers (pure functions of a block) ------------------------------------
def _stats(block, wblock, index, offset):
    """A partition's rows, mean and squared deviations (unweighted, as the in-memory fit's
    centring and tolerance) and its weights' sum; a NaN names its partition and row."""
    block = check_finite_block(block, index, offset)
    weight = check_weight_block(wblock, index, offset)
    mean = block.mean(axis=0)
    return block.shape[0], mean, ((block - mean) ** 2).sum(axis=0), weight


def _partial(block, wblock, centers, x_mean, device, assign_name, update_name):
    """A partition's assignment against ``centers`` (the graph engine's stateless task): sums,
    weights, labels' fingerprint and the task's own seconds."""
    start = time.perf_counter()
    part = ResidentPartition(block, wblock, x_mean, device, assign_name, update_name)
    sums, weights, _ = part.step(centers)
    # on a GPU worker the partition's labels (4 bytes a row) come to the worker's host each
    # iteration for the fingerprint (the collective engine keeps them and counts instead)
    host_labels = part.backend.to_host(part.labels)  # sync: n int32, once an iteration
    return (sums, weights, hashlib.blake2b(host_labels.tobytes(), digest_size=16).digest(),
            time.perf_counter() - start, _where())


class ResidentPartition:
    """A partition held by the collective loop's task for the whole loop.

    Moved to the worker's backend and centred once, its weights and labels kept there: an
    iteration (:meth:`step`) moves only the k x (d + 1) sums and one count off the device.
    The graph engine's stateless tasks (:func:`_partial`, :func:`_farthest`) make one per
    call instead.
    """

    def __init__(self, block, wblock, x_mean, device, assign_name, update_name):
        self.backend = backend = _backend(device)
        xp = backend.xp
        # the block minus the mean in the block's dtype, as the in-memory fit centres X (a
        # float64 mean made a float32 block float64: twice the bytes and a float64
        # assignment), stored column-major on the GPU, the layout the kernels read (a
        # row-major block was transposed by every launch)
        self.X = _centred_columns(backend, block, x_mean)
        n = self.X.shape[0]
        self.weight = block_weights(wblock, n, xp, self.X.dtype)
        self.labels = xp.full(n, -1, dtype=xp.int32)
        self.labels_old = xp.empty_like(self.labels)
        self.assign = registry.resolve_strategy("kmeans.assign", assign_name,
                                                backend.name).load()
        self.update = registry.resolve_strategy("kmeans.update", update_name,
                                                backend.name).load()

    def assign_to(self, centers) -> None:
        """The labels of ``centers`` (host, centred), kept on the backend."""
        self.assign(self.X, self.backend.to_device(centers), self.labels)

    def step(self, centers):
        """Assign against ``centers`` (host, centred): host sums and weights, and how many
        labels changed since the previous step (all of them at the first)."""
        xp = self.backend.xp
        k = centers.shape[0]
        self.labels_old[...] = self.labels
        self.assign_to(centers)
        sums, weights = xp.zeros((k, self.X.shape[1])), xp.zeros(k)
        changed = self.update(self.X, self.labels, self.weight, sums, weights,
                              labels_old=self.labels_old)
        if changed is None:  # an update that does not count: compare on the backend
            changed = (self.labels != self.labels_old).sum()
        sums, weights = self.backend.to_host(sums), self.backend.to_host(weights)  # sync: k (d+1)
        return sums, weights, int(changed)  # sync: one count, once an iteration

    def step_into(self, centers, row) -> None:
        """:meth:`step` kept on the device (the NCCL exchange): assign against ``centers``
        (device, centred) and write the sums, weights and changed count into ``row`` (device
        float64, k (d + 1) + 1 values), queued on the current stream, nothing read back."""
        xp = self.backend.xp
        k, d = centers.shape
        self.labels_old[...] = self.labels
        self.assign(self.X, centers, self.labels)
        row.fill(0)
        # no labels_old: an update that counts would read its count back
        self.update(self.X, self.labels, self.weight, row[:k * d].reshape(k, d),
                    row[k * d:k * d + k])
        row[k * d + k] = xp.count_nonzero(self.labels != self.labels_old)

    def farthest(self, centers, count):
        """The ``count`` rows farthest from their centre under the labels of ``centers`` (the
        last :meth:`step` or :meth:`assign_to`): (distance, row, point, weight, label) each,
        for relocation."""
        xp = self.backend.xp
        c = self.backend.to_device(centers)
        distances = ((self.X - c[self.labels]) ** 2).sum(axis=1)
        take = min(count, distances.shape[0])
        if take == 0:
            return []
        top = xp.argpartition(distances, -take)[-take:]
        # the reads below: `take` values each, only in an iteration with an empty cluster
        host = self.backend.to_host  # sync: none here (a function)
        rows = host(top)  # sync: `take` ints
        distance = host(distances[top])  # sync: `take` floats
        points = host(self.X[top])  # sync: `take` rows
        weight = host(self.weight[top])  # sync: `take` floats
        labels = host(self.labels[top])  # sync: `take` ints
        found = zip(rows, distance, points, weight, labels, strict=True)
        return [(float(d), int(i), np.asarray(p, np.float64), float(w), int(lab))  # sync: none
                for i, d, p, w, lab in found]


def _where() -> str:
    """The worker running this task (its address), or the thread, without a cluster."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        import threading

        return f"thread-{threading.get_ident()}"


def _farthest(block, wblock, centers, x_mean, device, assign_name, count):
    """The ``count`` points of a partition farthest from their centre: (distance, row,
    point, weight, label) each, for empty-cluster relocation (the graph engine's task)."""
    part = ResidentPartition(block, wblock, x_mean, device, assign_name, "auto")
    part.assign_to(centers)
    return part.farthest(centers, count)


def _centred_columns(backend, block, x_mean):
    """A partition on ``backend``, column-major on the GPU, minus ``x_mean`` in its own dtype;
    a copy of its own (the persisted partition is never written)."""
    block = np.asarray(block)
    X = backend.to_device_columns(block.copy() if not backend.is_gpu else block)
    shift_rows(X, backend.to_device(x_mean.astype(block.dtype)), -1)
    return X


def _labels(block, centers, x_mean, device, assign_name):
    backend = _backend(device)
    X = _centred_columns(backend, block, x_mean)
    labels = backend.xp.empty(X.shape[0], dtype=backend.xp.int32)
    registry.resolve_strategy("kmeans.assign", assign_name, backend.name).load()(
        X, backend.to_device(centers), labels)
    # sync: the partition's labels to the host (n-sized), only for relocation, inertia and
    # predict, never in the Lloyd iteration's step
    return backend.to_host(labels)


def _inertia(block, wblock, centers, x_mean, device, assign_name):
    labels = _labels(block, centers, x_mean, device, assign_name)  # host labels
    diff = np.asarray(block, dtype=np.float64) - x_mean - centers[labels]  # host: no sync
    w = block_weights(wblock, labels.shape[0])  # host NumPy (sync: none)
    return float(np.einsum("ij,ij,i->", diff, diff, w))  # sync: none -- host NumPy, a float


def _nearest_squared(block, candidates, x_mean):
    X = np.asarray(block, dtype=np.float64) - x_mean
    C = np.asarray(candidates, dtype=np.float64)
    products = X @ C.T * -2.0 + (C ** 2).sum(axis=1)[None, :]
    nearest = products.argmin(axis=1)
    return np.maximum(products.min(axis=1) + (X ** 2).sum(axis=1), 0.0), nearest


def _potential(block, wblock, candidates, x_mean):
    """A partition's share of the k-means|| potential, ``sum w D^2``."""
    distances, _ = _nearest_squared(block, candidates, x_mean)
    if wblock is None:
        return float(distances.sum())  # sync: none -- host NumPy
    return float(distances @ block_weights(wblock, distances.shape[0]))  # sync: none, host


def _round_draw(block, wblock, candidates, x_mean, factor, seed):
    """k-means|| on one partition: the rows kept with probability min(1, factor w D^2)."""
    distances, _ = _nearest_squared(block, candidates, x_mean)
    if wblock is not None:
        distances *= block_weights(wblock, distances.shape[0])  # host NumPy (sync: none)
    rng = np.random.RandomState(seed)
    kept = rng.random_sample(distances.shape[0]) < factor * distances  # host (NumPy) work
    # sync: none -- host NumPy: the kept rows and one float
    return np.asarray(block, dtype=np.float64)[kept] - x_mean, float(distances.sum())


def _candidate_weights(block, wblock, candidates, x_mean):
    _, nearest = _nearest_squared(block, candidates, x_mean)
    return np.bincount(nearest, weights=block_weights(wblock, nearest.shape[0]),
                       minlength=len(candidates))


# -- the estimator --------------------------------------------------------------------------
class GPUKMeans(ClusterMixin, BaseEstimator):
    """k-means on a ``dask.array`` or ``dask.dataframe`` (``pip install "gpumine[dask]"``).

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means||"} or array-like of shape (n_clusters, n_features), default="k-means||"
    max_iter : int, default=300
    tol : float, default=1e-4
        Relative to the mean feature variance, as in scikit-learn.
    random_state : int, RandomState instance or None, default=None
    oversampling : float, default=2.0
        k-means||: candidates drawn per round, in multiples of ``n_clusters``.
    init_rounds : int, default=5
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where each partition's assignment runs, on its worker.
    assign, update : str, default="auto"
        The strategies each partition runs (``gpumine strategies``). On GPU workers
        ``"auto"`` takes the pair the device's measured table gives the largest partition
        (``tc-exact`` on wide data, as the in-memory fit's table does); on the CPU the
        fixed rule.
    engine : {"graph", "collective", "auto"}, default="graph"
        ``"graph"``: one Dask computation per iteration, the driver adding the partitions'
        sums (any Dask scheduler; a lost worker's tasks are recomputed). ``"collective"``:
        one long-lived task per worker runs the whole loop on its partitions, the workers
        exchanging their sums each iteration through a Dask actor
        (:mod:`gpumine.dask.collective`; needs a ``distributed.Client``): less overhead per
        iteration; a lost worker restarts the loop from the same centres (the worker holding
        the actor: once the exchange's wait, a minute or more, runs out).
        ``"auto"``: collective with a client, else graph.
    exchange : {"auto", "nccl", "actor"}, default="auto"
        How the collective engine's workers exchange their sums: ``"nccl"``, GPU to GPU
        (the sums stay on the GPUs; one worker a GPU, CuPy's NCCL on each), ``"actor"``,
        through the Dask actor and the workers' hosts; ``"auto"``: NCCL where every
        worker has a GPU of its own (``device`` on a GPU), else the actor. The same sums
        either way (:mod:`gpumine.dask.collective`).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : dask.array.Array of shape (n_samples,), int32
        Lazy: the assignment to ``cluster_centers_`` (what the in-memory fit's labels are).
    inertia_ : float
    n_iter_ : int
    n_features_in_ : int
    iteration_overhead_ : float
        Median share of an iteration's wall time not spent in the busiest worker's
        tasks (scheduling, transfers, the driver's work).
    exchange_ : {"nccl", "actor", "driver"}
        How the sums were exchanged ("driver": the graph engine's driver added them).
    strategies_ : dict
        The ``"assign"`` and ``"update"`` strategies the partitions ran.
    strategy_reasons_ : dict
        Why each is what it is (``"given"``, the measured table's cell, the fixed rule).
    iteration_seconds_ : ndarray of shape (n_iter_,)
        Each Lloyd iteration's wall time: on the first worker's task with
        ``engine="collective"`` (its partitions' step, the exchange, the new centres), on
        the driver with ``"graph"`` (the computation and the driver's work). The init,
        persisting the data and the inertia pass are outside.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from gpumine.dask import GPUKMeans
    >>> X = da.from_array(np.vstack([np.zeros((50, 2)), np.ones((50, 2)) * 10]), chunks=30)
    >>> km = GPUKMeans(2, random_state=0).fit(X)   # the default scheduler, or a Client's
    >>> sorted(km.cluster_centers_[:, 0].tolist())
    [0.0, 10.0]
    >>> km.predict(X).compute()[[0, -1]].tolist() == km.labels_.compute()[[0, -1]].tolist()
    True
    """

    def __init__(self, n_clusters=8, *, init="k-means||", max_iter=300, tol=1e-4,
                 random_state=None, oversampling=2.0, init_rounds=5, device="cpu",
                 assign="auto", update="auto", engine="graph", exchange="auto"):
        self.n_clusters = n_clusters
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.oversampling = oversampling
        self.init_rounds = init_rounds
        self.device = device
        self.assign = assign
        self.update = update
        self.engine = engine
        self.exchange = exchange

    def __sklearn_is_fitted__(self):
        return hasattr(self, "cluster_centers_")

    def _check_params(self):
        for name in ("n_clusters", "max_iter", "init_rounds"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.tol, numbers.Real) or self.tol < 0:
            raise InvalidParameterError(f"tol must be a number >= 0, got {self.tol!r}")
        if self.engine not in ("auto", "graph", "collective"):
            raise InvalidParameterError(
                f"engine must be 'auto', 'graph' or 'collective', got {self.engine!r}")
        from gpumine.dask.collective import EXCHANGES

        if self.exchange not in EXCHANGES:
            raise InvalidParameterError(
                f"exchange must be one of {EXCHANGES}, got {self.exchange!r}")
        if self.exchange == "nccl" and self.engine == "graph":
            raise InvalidParameterError("exchange='nccl' is the collective engine's: "
                                        "engine='collective' or 'auto'")
        if isinstance(self.init, str) and self.init != "k-means||":
            raise InvalidParameterError(
                f"init must be 'k-means||' or an array of centres, got {self.init!r}")

    def _blocks(self, X):
        """The collection as a persisted dask array of row blocks (one block across columns)."""
        return persisted_blocks(X)

    def fit(self, X, y=None, sample_weight=None):
        """Fit on a ``dask.array`` (n_samples, n_features) or a numeric ``dask.dataframe``.

        Parameters
        ----------
        X : dask.array.Array or dask.dataframe.DataFrame
        y : Ignored
        sample_weight : None, array-like, dask array or dask Series of shape (n_samples,)
            As in :meth:`gpumine.GPUKMeans.fit` (cast to X's dtype; the centring and
            ``tol``'s variance stay unweighted, as there); a NaN, infinite or negative
            weight fails naming its partition and row.

        Returns
        -------
        self
        """
        self._check_params()
        dask, _ = _dask()
        X = self._blocks(X)
        W = persisted_weights(sample_weight, X)
        blocks = X.to_delayed().ravel().tolist()
        wblocks = weight_blocks(W, len(blocks))
        sizes = [int(rows) for rows in X.chunks[0]]
        n_features = X.shape[1]
        backend = _backend(self.device)
        assign, update, reasons = _resolve_pair(self.assign, self.update, backend, max(sizes),
                                                n_features, self.n_clusters, X.dtype)
        stats = dask.compute(*[dask.delayed(_stats)(b, wb, i, offset) for i, (b, wb, offset)
                               in enumerate(zip(blocks, wblocks, partition_offsets(X),
                                                strict=True))])
        count, mean, m2 = _merge_stats([part[:3] for part in stats])
        if count < self.n_clusters:
            raise InvalidInputError(f"n_samples={count} should be >= n_clusters={self.n_clusters}.")
        block_sums = [part[3] for part in stats]
        if W is not None and not sum(block_sums) > 0:
            raise InvalidInputError("sample_weight sums to 0: no point has weight")
        x_mean = mean.astype(X.dtype).astype(np.float64)
        tol = float((m2 / count).mean()) * self.tol
        random_state = check_random_state(self.random_state)
        if isinstance(self.init, str):
            centers = self._kmeans_parallel(dask, blocks, wblocks, sizes,
                                            None if W is None else block_sums, x_mean,
                                            random_state)
        else:
            centers = np.asarray(self.init, dtype=np.float64)
            if centers.shape != (self.n_clusters, n_features):
                raise InvalidInputError(f"The shape of the initial centers {centers.shape} does "
                                        f"not match ({self.n_clusters}, {n_features}).")
            centers = centers - x_mean
        centers = centers.astype(np.float64)
        client = _client() if self.engine != "graph" else None
        if self.engine == "collective" and client is None:
            raise InvalidParameterError("engine='collective' needs a distributed.Client "
                                        "(its workers run the loop)")
        if client is not None:
            from gpumine.dask import collective

            centers, n_iter, overheads, seconds, exchange = collective.run(
                client, X, W, centers, x_mean, device=self.device, assign=assign,
                update=update, max_iter=self.max_iter, tol=tol, resident=ResidentPartition,
                exchange=self.exchange)
        else:
            if self.exchange == "nccl":
                raise InvalidParameterError("exchange='nccl' needs a distributed.Client "
                                            "(its workers run the loop)")
            centers, n_iter, overheads, seconds = self._graph_loop(
                dask, blocks, wblocks, sizes, centers, x_mean, assign, update, tol, n_features)
            exchange = "driver"
        self.exchange_ = exchange
        self.strategies_ = {"assign": assign, "update": update}
        self.strategy_reasons_ = reasons
        self.iteration_overhead_ = float(np.median(overheads))  # sync: none -- host floats
        self.iteration_seconds_ = np.asarray(seconds, dtype=np.float64)
        self.cluster_centers_ = (centers + x_mean).astype(X.dtype)
        self.n_iter_ = n_iter
        self.n_features_in_ = n_features
        self.inertia_ = float(sum(dask.compute(*[
            dask.delayed(_inertia)(b, wb, centers, x_mean, self.device, assign)
            for b, wb in zip(blocks, wblocks, strict=True)])))
        self._x_mean, self._centred, self._assign_name = x_mean, centers, assign
        self.labels_ = self._lazy_labels(X)
        return self

    def _graph_loop(self, dask, blocks, wblocks, sizes, centers, x_mean, assign, update, tol,
                    n_features):
        """Lloyd's loop as one Dask computation per iteration (``engine="graph"``)."""
        fingerprints, overheads, seconds = None, [], []
        for iteration in range(self.max_iter):
            start = time.perf_counter()
            parts = dask.compute(*[dask.delayed(_partial)(b, wb, centers, x_mean, self.device,
                                                          assign, update)
                                   for b, wb in zip(blocks, wblocks, strict=True)])
            wall = time.perf_counter() - start
            # what the busiest worker's own work (its partitions' tasks) leaves of the wall time
            busy = {}
            for part in parts:
                busy[part[4]] = busy.get(part[4], 0.0) + part[3]
            overheads.append(max(0.0, 1.0 - max(busy.values()) / wall))
            # the driver's host accumulators, k (d + 1) values
            sums = np.zeros((self.n_clusters, n_features))  # sync: none, host NumPy
            weights = np.zeros(self.n_clusters)
            for part_sums, part_weights, *_ in parts:  # partition order: a fixed sum order
                sums += part_sums
                weights += part_weights
            self._relocate(dask, blocks, wblocks, sizes, centers, x_mean, assign, sums,
                           weights)
            new = average_centers(sums, weights, np.float64)
            shift = float(((new - centers) ** 2).sum())
            centers = new
            now = [part[2] for part in parts]
            unchanged = now == fingerprints
            fingerprints = now
            stop, _ = stopping_rule(iteration, unchanged, shift, tol, 0)
            seconds.append(time.perf_counter() - start)  # the whole iteration, the driver's
            if stop:
                break
        return centers, iteration + 1, overheads, seconds

    def _kmeans_parallel(self, dask, blocks, wblocks, sizes, block_sums, x_mean,
                         random_state):
        """k-means|| over the partitions (module docstring), then k-means++ on the candidates.

        ``block_sums``: each partition's weight (None: unweighted). Weighted, the first
        candidate is drawn with probability proportional to its weight and each round keeps
        a row with probability ``min(1, factor w D^2)``, as weighted k-means++ would.
        """
        from gpumine.kmeans.init import kmeans_plusplus

        seed = int(random_state.randint(2**31 - 1))
        if block_sums is None:
            row = int(random_state.randint(sum(sizes)))  # sync: none -- first candidate: any row
            part = int(np.searchsorted(np.cumsum(sizes), row, side="right"))  # sync: none
            row -= sum(sizes[:part])
        else:  # a partition by its weight, then a row of it by weight
            shares = np.asarray(block_sums) / sum(block_sums)  # host NumPy (sync: none)
            part = int(random_state.choice(len(blocks), p=shares))  # sync: none, host
            w = np.asarray(wblocks[part].compute(), dtype=np.float64)
            row = int(random_state.choice(w.shape[0], p=w / w.sum()))  # sync: none, host
        block = np.asarray(blocks[part].compute(), dtype=np.float64)
        candidates = block[row][None, :] - x_mean
        pairs = list(zip(blocks, wblocks, strict=True))
        potential = None
        for round_ in range(self.init_rounds):
            if potential is None:
                potential = float(sum(dask.compute(*[  # sync: none -- host floats
                    dask.delayed(_potential)(b, wb, candidates, x_mean) for b, wb in pairs])))
            if potential <= 0:
                break
            factor = self.oversampling * self.n_clusters / potential
            drawn = dask.compute(*[
                dask.delayed(_round_draw)(b, wb, candidates, x_mean, factor,
                                          (seed + 7919 * round_ + 104729 * i) % (2**31 - 1))
                for i, (b, wb) in enumerate(pairs)])
            new = [rows for rows, _ in drawn if len(rows)]
            if new:
                candidates = np.vstack([candidates, *new])
            potential = float(sum(dask.compute(*[  # sync: none -- host floats
                dask.delayed(_potential)(b, wb, candidates, x_mean) for b, wb in pairs])))
        weights = sum(dask.compute(*[dask.delayed(_candidate_weights)(b, wb, candidates, x_mean)
                                     for b, wb in pairs]))
        if candidates.shape[0] < self.n_clusters:
            raise InvalidInputError(f"k-means|| found {candidates.shape[0]} distinct candidates "
                                    f"for {self.n_clusters} clusters; the data has fewer "
                                    "distinct points than clusters")
        norms = (candidates ** 2).sum(axis=1)
        return kmeans_plusplus(candidates, self.n_clusters, sample_weight=weights,
                               x_squared_norms=norms, random_state=random_state)

    def _relocate(self, dask, blocks, wblocks, sizes, centers, x_mean, assign, sums, weights):
        """Empty clusters take the farthest points (the in-memory rule), found per partition;
        ties go to the lowest row."""
        empty = np.flatnonzero(weights == 0)
        if not empty.size:
            return
        found = []
        parts = dask.compute(*[dask.delayed(_farthest)(b, wb, centers, x_mean, self.device,
                                                       assign, empty.size)
                               for b, wb in zip(blocks, wblocks, strict=True)])
        for part, offset in zip(parts, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True):
            found += [(d, offset + row, *rest) for d, row, *rest in part]
        relocate_found(empty, found, sums, weights)

    def _lazy_labels(self, X):
        _, da = _dask()
        X = self._blocks(X) if not isinstance(X, da.Array) else X.rechunk({1: -1})
        return X.map_blocks(_labels, self._centred, self._x_mean, self.device,
                            self._assign_name, dtype=np.int32, drop_axis=1)

    def predict(self, X):
        """Lazy labels of a dask array or dataframe: a ``dask.array`` of int32."""
        check_is_fitted(self)
        _dask()
        if hasattr(X, "to_dask_array"):
            X = X.to_dask_array(lengths=True)
        if X.shape[1] != self.n_features_in_:
            raise InvalidInputError(f"X has {X.shape[1]} features, the fit saw "
                                    f"{self.n_features_in_}")
        return self._lazy_labels(X.astype(self.cluster_centers_.dtype))


def _client():
    """The current ``distributed.Client``, or None (no distributed, or no client)."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _merge_stats(stats):
    """Chan et al.'s update over the partitions' (count, mean, M2), in partition order."""
    count, mean, m2 = 0, None, None
    for rows, part_mean, part_m2 in stats:
        if rows:
            count, mean, m2 = merge_moments(count, mean, m2, rows, part_mean, part_m2)
    if not count:
        raise InvalidInputError("no rows to cluster")
    return count, mean, m2
