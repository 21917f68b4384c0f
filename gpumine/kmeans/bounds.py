"""``assign="hamerly"``: exact labels that skip the points whose centre cannot have changed.

Hamerly's algorithm (G. Hamerly, "Making k-means even faster", SDM 2010) keeps, per
point, an upper bound ``u`` on the distance to its centre and a lower bound ``l`` on the
distance to every other centre. When the centres move by ``delta_j``, ``u`` grows by its
centre's move and ``l`` shrinks by the largest move of another centre (the triangle
inequality); a point whose ``u`` is still below ``l`` keeps its label without a single
distance computed, and one whose ``u``, tightened to the distance to its own centre (d
terms), is then below ``l`` keeps it after one. Late in a fit most points are skipped, so
an iteration costs little more than reading and writing the bounds (8 bytes a point).

Exactness: the labels must equal ``assign="tiled"``'s bit for bit, and tiled compares
direct distances ``D_hat`` rounded in the data's precision, ``|D_hat - D| <= kappa D + eta``
(``kappa`` is :func:`gpumine.kmeans.tensor_cores.error_bound`'s ``kappa_d``, ``eta`` a floor
for underflow). A point is skipped only when ``(1 + kappa) u^2 + eta < (1 - kappa) l^2 - eta``:
then tiled's ``D_hat`` of its centre is strictly below every other, and tiled picks it. The
other points are scanned against all centres with tiled's register loop (the same values,
the same label, ties to the lowest index), and their new bounds come from the best and
second-best ``D_hat`` widened by the same error terms; a tightened ``u`` is the same:
``D_hat`` of its own centre, computed as tiled computes it, widened to ``(D_hat + eta) /
(1 - kappa)``. Bounds are kept in float32 rounded outward; the derivation is in
``kernels/kmeans_bounds.cu``.

Where d * k is large, or past 32 features (up to 128), the queued points are scanned by
``tc-exact``'s kernels on the tensor cores instead (:class:`BoundAssign`, :func:`tensor_scan`).

The strategy binds to a fit (``bind(X)``, as the engine binds update strategies): the bounds
belong to one run. Called unbound -- ``predict``, a streamed chunk -- it is ``tiled``. A
relocation of empty clusters moves labels outside the assignment; the engine then calls
``reset()`` and the next call scans every point.

Examples
--------
>>> from gpumine import GPUKMeans
>>> GPUKMeans(200, assign="hamerly", device="gpu")      # doctest: +SKIP
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpumine import registry
from gpumine.backend import cupy_module
from gpumine.exceptions import IncompatibleStrategy
from gpumine.kernels import BLOCK, declares, get_kernel, launch, stride_grid
from gpumine.kmeans.gpu import (
    ASSIGN_DIMS,
    ASSIGN_SHAPES,
    TILE_SIZES,
    assign_tiled,
    column_buffer,
    kernel_pointer,
    points_per_thread,
    tiled_shape,
)
from gpumine.kmeans.tensor_cores import (
    LISTED_DIMS,
    SCREEN_SHARE,
    _padded_width,
    _Scratch,
    assign_listed,
    error_bound,
    has_mma,
)

__all__ = ["MAX_FEATURES", "REGISTER_FEATURES", "TC_SCAN_SAMPLE", "TC_SCAN_SCREEN",
           "BoundAssign", "Moves", "hamerly", "tensor_scan"]

_SOURCE = "kmeans_bounds.cu"
_TYPES = ("float", "double")
#: Features the bounds' register loop holds in registers, at most.
REGISTER_FEATURES = ASSIGN_DIMS[-1]
#: Features the strategy takes: past REGISTER_FEATURES its queue is scanned on the tensor
#: cores (compute capability 8.0), up to the fused kernels' widest.
MAX_FEATURES = LISTED_DIMS[-1]
#: The tensor-core scan puts tc-exact's screen (one product) before the split kernel while
#: the screen leaves few enough of the queued points (its own plan over them: the
#: ``plan`` of :func:`~gpumine.kmeans.tensor_cores.assign_listed`); False: the split kernel
#: alone.
TC_SCAN_SCREEN = True
#: ... and a run's first call, a full scan, takes that plan from a sample of the rows
#: (:func:`~gpumine.kmeans.tensor_cores.assign_listed`'s ``sample``) where it has rows
#: enough; False: the split kernel alone over every row, counting for the next call's plan.
TC_SCAN_SAMPLE = True


class Moves(NamedTuple):
    """Where :meth:`BoundAssign.track_moves` lists the rows each call relabels (device)."""

    count: object     # uint32 (1,): rows moved in the last call, listed or not
    capacity: int     # rows the list holds
    rows: object      # int64 (capacity,): the moved rows
    previous: object  # int32 (capacity,): their labels before the call

    @classmethod
    def empty(cls, count, capacity: int) -> Moves:
        """A list of ``capacity`` rows counted in ``count`` (a uint32 (1,) device array)."""
        cp = cupy_module()
        return cls(count, capacity, cp.empty(capacity, dtype=cp.int64),
                   cp.empty(capacity, dtype=cp.int32))


def _bound(d: int, dtype) -> np.ndarray:
    """``[kappa, eta]``: the direct distance's relative error and an absolute floor."""
    tiny = np.finfo(np.dtype(dtype)).tiny  # the smallest normal number
    return np.array([error_bound(d, dtype)[1], 4.0 * (d + 1) * float(tiny)], dtype=np.float64)


class _Hamerly:
    """The strategy object: unbound, ``assign_tiled``; :meth:`bind` gives a fit's state."""

    counts_changes = True
    graph_safe = True

    def __call__(self, X, centers, labels, changed=None):
        assign_tiled(X, centers, labels, changed)

    def bind(self, X):
        """A :class:`BoundAssign` holding this run's bounds for X."""
        return BoundAssign(X)


hamerly = _Hamerly()


def tensor_scan(n: int, d: int, k: int) -> bool:
    """Whether a bounds run over n x d points with k centres scans its queued points on the
    tensor cores (tc-exact's kernels over the filter's list,
    :func:`~gpumine.kmeans.tensor_cores.assign_listed`), else by the register loop
    (``bounds_scan``): always past :data:`REGISTER_FEATURES` (up to :data:`MAX_FEATURES`),
    else where :func:`gpumine.registry.hamerly_tensor_scan` says so (its thresholds,
    ``registry.TC_SCAN_MIN_WORK`` and ``TC_SCAN_MIN_ROWS``); the device's compute capability
    is the caller's to check."""
    if d > REGISTER_FEATURES:
        return d <= MAX_FEATURES
    return registry.hamerly_tensor_scan(n, d, k)


@declares(_SOURCE, "bounds_moved", _TYPES, (BLOCK,))
@declares(_SOURCE, "bounds_shifts", (BLOCK,))
@declares(_SOURCE, "bounds_filter", _TYPES, (BLOCK,))
@declares(_SOURCE, "bounds_scan", _TYPES, TILE_SIZES, ASSIGN_SHAPES)
@declares(_SOURCE, "bounds_moves")
class BoundAssign:
    """Hamerly's assignment bound to one run over X (module docstring).

    Each call is three steps and no host sync: the centres' moves (a warp a centre, then
    one block for the largest two), the bounds test of every point (skipped points get
    moved bounds, the others a queue), and the scan of the queued points (a fixed grid
    reading the queue's length on the device).
    Buffers are allocated on the first call, never during a captured one.

    Where :func:`tensor_scan` says so (many centres: 10M x 32, k = 1024, for one), the scan
    is tc-exact's split kernel over the queue instead (at 17 to 32 features the screen
    first, while it leaves few of the queued points: :data:`TC_SCAN_SCREEN`; on the first
    call, which queues every point, as a sample of them says: :data:`TC_SCAN_SAMPLE`), and
    its re-check of the rows the kernels' margins leave
    (:func:`~gpumine.kmeans.tensor_cores.assign_listed`): the same labels. The kernels
    write new bounds for the rows they decide; the filter has written, for every queued
    point, bounds that hold whatever label the exact assignment gives it (``bounds_filter``'s
    comment), which the re-checked rows keep, and its label, from which ``bounds_moves``
    lists the moves.

    Parameters
    ----------
    X : cupy.ndarray (n_samples, n_features), a view of a (d, n) column-major buffer
    """

    counts_changes = True
    graph_safe = True

    def __init__(self, X):
        n, d = X.shape
        cp = cupy_module()
        if d > MAX_FEATURES or (d > REGISTER_FEATURES and not has_mma(cp)):
            raise IncompatibleStrategy(
                f"assign='hamerly' takes at most {MAX_FEATURES} features (past "
                f"{REGISTER_FEATURES} it scans on tensor cores: compute capability 8.0), got "
                f"{d}; use 'tiled' or 'tc-exact'")
        self.X = X
        self._XT = column_buffer(X)
        self.upper = cp.empty(n, dtype=cp.float32)
        self.lower = cp.empty(n, dtype=cp.float32)
        self._queue = cp.empty(n, dtype=cp.int64)
        # [request, force, queue size, moves]: a fresh run requests a full scan
        self._flags = cp.asarray(np.array([1, 0, 0, 0], dtype=np.int32))
        self._bound = cp.asarray(_bound(d, X.dtype))
        self._k = None
        self._moves = None
        self._tensor = False  # the queue scanned on the tensor cores (_allocate decides)
        self._queue_labels = None
        self._scratch = _Scratch(keep=True)
        self._screen_plan = None  # ... and the screen's plan over the queue (assign_listed)
        self._sample = TC_SCAN_SAMPLE  # the first call (a full scan): its plan from a sample

    def _allocate(self, k: int, d: int) -> None:
        cp = cupy_module()
        self._previous = cp.zeros((k, d), dtype=self.X.dtype)
        self._shift = cp.empty(k, dtype=cp.float64)
        self._stats = cp.empty(3, dtype=cp.float64)
        self._k = k
        n = self.X.shape[0]
        self._tensor = tensor_scan(n, d, k) and has_mma(cp)
        if self._tensor and self._queue_labels is None:
            self._queue_labels = cp.empty(n, dtype=cp.int32)
            # 2: the split kernel alone, counting what the screen would leave, until the
            # first call's sample (TC_SCAN_SAMPLE) or its full pass sets it
            self._screen_plan = (cp.full(1, 2, dtype=cp.int32)
                                 if TC_SCAN_SCREEN and _padded_width(d) in SCREEN_SHARE
                                 else None)
        self.reset()

    def reset(self) -> None:
        """Scan every point in the next call (labels were moved outside the assignment)."""
        self._flags[:1].fill(1)

    def seeded(self, centers) -> tuple:
        """The bounds for a caller to fill: ``(upper, lower)``, float32 device arrays of n.

        The caller assigns the labels for ``centers`` and writes, for the rows it can, an
        upper bound on its true distance to its label's centre and a lower bound on its
        distance to every other centre (rounded outward; the others keep +inf and 0, filled
        here, which say nothing), before the next call, which then moves them by the
        centres' moves from these (no full scan):
        :meth:`ScreenedRun.seed <gpumine.kmeans.tensor_cores.ScreenedRun.seed>`.
        """
        cp = cupy_module()
        k, d = centers.shape
        if k != self._k:
            self._allocate(k, d)
        self._previous[...] = cp.asarray(centers, dtype=self.X.dtype)
        self._flags[:1].fill(0)  # no full scan requested: the caller's bounds stand
        self._sample = False  # ... so the next call lists some rows, not a sample's
        self.upper.fill(np.inf)  # what a row the caller does not write says: nothing
        self.lower.fill(0.0)
        return self.upper, self.lower

    def track_moves(self, capacity: int) -> Moves:
        """List, from the next call on, the rows whose label each call changes.

        Parameters
        ----------
        capacity : int
            Rows the list holds; a call that moves more only counts them (``count`` then
            exceeds ``capacity``: the reader must not trust the list).

        Returns
        -------
        Moves
            Device buffers the calls overwrite: ``count`` (uint32, zeroed by each call),
            ``rows`` (int64) and ``previous`` (int32, the label before; -1 on a fresh
            run's first call).
        """
        cp = cupy_module()
        capacity = max(1, min(int(capacity), self.X.shape[0]))
        self._moves = Moves.empty(self._flags[3:4].view(cp.uint32), capacity)
        return self._moves

    def __call__(self, X, centers, labels, changed=None):
        if X is not self.X:  # another array than the run's: no bounds for it
            assign_tiled(X, centers, labels, changed)
            return
        for launch_step in self.launches(centers, labels, changed):
            launch_step()

    def launches(self, centers, labels, changed=None) -> tuple:
        """The call's three steps as callables, in order (shifts, filter, scan).

        Separate so that benchmarks (``benchmarks/hamerly_calls.py``) can time each; a
        call is ``for step in launches(...): step()``.
        """
        cp = cupy_module()
        X = self.X
        n, d = X.shape
        k = centers.shape[0]
        if k != self._k:
            self._allocate(k, d)
        centers = cp.ascontiguousarray(centers, dtype=X.dtype)
        request, force, queue_size = (self._flags[0:1], self._flags[1:2],
                                      self._flags[2:3].view(cp.uint32))
        moves = self._moves

        def shifts():
            launch(get_kernel(_SOURCE, "bounds_moved", X.dtype, BLOCK),
                   -(-k * 32 // BLOCK), BLOCK,  # a warp a centre
                   (centers, self._previous, np.int32(k), np.int32(d), request, self._shift))
            launch(get_kernel(_SOURCE, "bounds_shifts", BLOCK), 1, BLOCK,
                   (self._shift, np.int32(k), self._stats, request, force))
            self._flags[2:4].data.memset_async(0, 8)  # the queue's and the moves' counts

        def filter_points():
            kernel = get_kernel(_SOURCE, "bounds_filter", X.dtype, BLOCK)
            launch(kernel, stride_grid(kernel, BLOCK, n), BLOCK,
                   (self._XT, centers, np.int32(d), labels, self._shift, self._stats, force,
                    self._bound, np.int64(n), self.upper,
                    self.lower, queue_size, self._queue,
                    kernel_pointer(self._queue_labels if self._tensor else None)))

        def scan():
            if self._tensor:
                tensor_scan_queue()
                return
            tile, _ = tiled_shape(k, d, X.dtype.itemsize)
            dmax = next(m for m in ASSIGN_DIMS if m >= d)
            ppt = points_per_thread(dmax, n)
            kernel = get_kernel(_SOURCE, "bounds_scan", X.dtype, tile, dmax, ppt)
            shared = tile * dmax * X.dtype.itemsize
            launch(kernel, stride_grid(kernel, BLOCK, n, shared), BLOCK,
                   (self._XT, centers, self._bound, np.int64(n), np.int32(d), np.int32(k),
                    queue_size, self._queue, labels, self.upper, self.lower,
                    kernel_pointer(changed),
                    *((kernel_pointer(None), np.uint32(0), kernel_pointer(None),
                       kernel_pointer(None)) if moves is None else
                      (moves.count, np.uint32(moves.capacity), moves.rows, moves.previous))),
                   shared_mem=shared)

        def tensor_scan_queue():
            # the run's first call lists every row (sync: none, a host flag)
            sample, self._sample = self._sample, False
            assign_listed(X, centers, labels, changed, self._queue, queue_size,
                          (self.upper, self.lower), self._scratch, plan=self._screen_plan,
                          sample=sample)
            if moves is not None:
                kernel = get_kernel(_SOURCE, "bounds_moves")
                launch(kernel, stride_grid(kernel, BLOCK, n), BLOCK,
                       (queue_size, self._queue, self._queue_labels, labels, moves.count,
                        np.uint32(moves.capacity), moves.rows, moves.previous))

        return shifts, filter_points, scan

    def scanned(self) -> int:
        """Points the last call scanned (a diagnostic: a host sync, for tests and benchmarks)."""
        return int(self._flags[2:3].get()[0])  # sync: the diagnostic's one readback
