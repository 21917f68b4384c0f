"""GPU k-means strategies: thin launchers of the CUDA kernels in ``kernels/``.

Every function follows the contracts of :mod:`gpumine.kmeans.lloyd`. ``X`` is a
(n_samples, n_features) CuPy view of a column-major (n_features, n_samples)
buffer -- ``X.T`` is C-contiguous -- as the seed papers store it; ``labels`` is
int32; ``sums``/``weights`` are float64 buffers (the kernels accumulate in
double whatever X's dtype). Update strategies accept ``labels_old`` and return
``None``, or, when they count it as seed 000's kernels do, the number of points
whose label changed.
"""

from __future__ import annotations

import os
import threading
from typing import NamedTuple

import numpy as np

from gpumine.adapters.column_stats import column_major, divided_row_sums
from gpumine.backend import cupy_module
from gpumine.exceptions import InvalidParameterError
from gpumine.kernels import (
    BLOCK,
    declares,
    device_attribute,
    get_kernel,
    launch,
    resident_blocks,
)

__all__ = [
    "ASSIGN_DIMS",
    "ASSIGN_SHAPES",
    "TILE_SIZES",
    "FusedLoop",
    "LoopBuffers",
    "assign_gemm",
    "assign_tiled",
    "column_buffer",
    "feature_variance",
    "finish_centers",
    "fixed_scales",
    "graphs_enabled",
    "hybrid",
    "inertia",
    "kernel_pointer",
    "kmeans_plusplus",
    "points_per_thread",
    "relocate_empty_clusters",
    "tiled_floor_seconds",
    "tiled_shape",
    "update_atomic",
    "update_atomic_f64",
    "update_atomic_fixed",
    "update_gather",
    "update_gm_cl",
    "update_gm_ct",
    "update_gm_dl",
    "update_gm_dt",
    "update_irregular_reduction",
    "update_masked_tree",
    "update_sm_cl",
    "update_sm_ct",
    "update_sm_dl",
    "update_sm_dt",
    "update_sort",
]

_BLOCK = BLOCK
#: :func:`finish_centers`' blocks, at most (a block per _BLOCK centre values below that).
_FINISH_BLOCKS = 256
_DEFAULT_SHARED = 48 * 1024
_MAX_GRID_Y = 65535
TILE_SIZES = _TILE_SIZES = (1, 2, 4, 8, 16, 32)
_IRREGULAR_GROUP = 256  # seed 000's work-group size, a parameter of its kernel
_PARTIAL_BUDGET = 1 << 30  # bytes of per-group partial sums held at once
#: Points per cluster a block of the privatized atomic update is given, at least.
ATOMIC_POINTS_PER_CLUSTER = 1
#: update="atomic" keeps block partials in opted-in shared memory up to this many bytes
#: (the device's own limit caps it), and launches such blocks with this many threads.
ATOMIC_SHARED_LIMIT = 1 << 30
ATOMIC_WIDE_BLOCK = 1024
#: At most this many feature slices (each reads the labels once more); past it, global atomics.
ATOMIC_MAX_SLICES = 16

_ASSIGN = "kmeans_assign.cu"
_UPDATE = "kmeans_update.cu"
_STEP = "kmeans_step.cu"
_LOOP = "kmeans_loop.cu"
#: The fused loop (:class:`FusedLoop`) runs fits of at most this many rows. Measured on the
#: H100 (benchmarks/results/fused-loop-2026-11-23-d03077d.json), per Lloyd iteration
#: against the graph loop: 23 us against 56 at 17,695 x 18, k = 128, and 18 against 29 at
#: 17,695 x 4, k = 16, but 57 against 31 at 32,768 x 8, k = 100, and ever slower past it
#: (one block's share of the points and its atomic flush grow with n).
FUSED_MAX_SAMPLES = 24_576
#: Empty clusters the fused loop relocates on the device in one iteration
#: (``kMaxRelocations`` in kernels/kmeans_loop.cu); more stop it for the host's relocation.
FUSED_MAX_RELOCATIONS = 32
#: The fused loop's status record (doubles) and static shared memory (an upper bound, bytes).
_FUSED_STATUS = 7
_LOOP_STATIC_SHARED = 1024
_INIT = "kmeans_init.cu"
_GATHER_BLOCK = 512  # update_gather's own choice: a block per cluster
_KPP_TRIALS = (8, 16, 32)  # compile-time bounds on the candidates per k-means++ centre
_KPP_SHARED = 40 * 1024    # candidate coordinates kept in shared memory up to this size

# Template arguments of the declared instantiations (@declares on each launcher; the nvcc
# compile test in CI builds them, no GPU needed).
_REGISTER_DIMS = (4, 8, 16, 32)
#: The register-held assignments' specializations (``assign_registers``, Hamerly's scan):
#: finer, since their work is k x DMAX per point (d = 18 runs as 20 features instead of 32).
ASSIGN_DIMS = (4, 8, 12, 16, 20, 24, 32)
_TYPES = ("float", "double")


#: Rows from which ``assign_registers`` takes two points per thread (d >= 8).
_PAIRED_MIN_ROWS = 1 << 19


def points_per_thread(dmax: int, n: int) -> int:
    """Points per thread of ``assign_registers`` (its PPT): a centre read from shared memory
    into registers serves that many distances. Measured on the H100 (record
    ``assign-ppt-2026-11-24-434712c.json``, per call, one against two points per thread):
    1M x 16, k = 100: 231 -> 160 us; 1M x 32, k = 64: 264 -> 238; 4M x 8, k = 200: 696 ->
    644; at d = 2 and 4 no gain; at 50k and 17,695 rows slower (434 -> 482 us, 13.6 -> 25.2:
    half the blocks leave SMs idle)."""
    return 2 if dmax >= 8 and n >= _PAIRED_MIN_ROWS else 1


#: (DMAX, points per thread) of the register-held assignment kernels.
ASSIGN_SHAPES = tuple((dmax, ppt) for dmax in ASSIGN_DIMS
                       for ppt in ((1, 2) if dmax >= 8 else (1,)))
#: (candidates, DMAX) of the k-means++ kernel: register-held points up to 16 candidates.
_KPP_SHAPES = tuple((mt, dmax) for mt in _KPP_TRIALS
                    for dmax in ((*_REGISTER_DIMS, 0) if mt < _KPP_TRIALS[-1] else (0,)))


def _odd_stride(d: int) -> int:
    """``odd_stride`` of kernels/common.cuh: the row stride of a block's shared (k, d)
    partial sums, d rounded up to odd so that a warp's atomics spread over the banks."""
    return d | 1


def _blocks(count: int, block: int = _BLOCK) -> int:
    return max(1, -(-int(count) // block))


def column_buffer(X):
    """The (d, n) C-contiguous buffer behind X (a copy only if X is not a view of one)."""
    return column_major(X).T


def _shared_budget() -> int:
    """Dynamic shared memory a block may opt into on this device."""
    return device_attribute("MaxSharedMemoryPerBlockOptin")


def _launch_shared(kernel, grid, block, args, shared_mem):
    if shared_mem > _DEFAULT_SHARED:
        kernel.max_dynamic_shared_size_bytes = shared_mem
    launch(kernel, grid, block, args, shared_mem=shared_mem)


def _null():
    return np.uint64(0)


def kernel_pointer(array):
    """A device array as a kernel argument, or the null pointer for None."""
    return _null() if array is None else array


# -- assignment --------------------------------------------------------------------------
def tiled_shape(k: int, d: int, itemsize: int) -> tuple[int, int]:
    """``(KT, dt)`` of the tiled assignment: centroids per portion (a compile-time tile
    size) and features per portion, so KT x dt elements fit the default shared memory."""
    tile = next(t for t in _TILE_SIZES if t >= min(k, _TILE_SIZES[-1]))
    return tile, max(1, min(d, _DEFAULT_SHARED // (tile * itemsize)))


@declares(_ASSIGN, "assign_tiled", _TYPES, _TILE_SIZES)
@declares(_ASSIGN, "assign_registers", _TYPES, _TILE_SIZES, ASSIGN_SHAPES)
def assign_tiled(X, centers, labels, changed=None):
    """Seed 002 §5.5: one thread per point, centroids through shared memory in portions.

    For d <= 32 the kernel is specialized on d (seed 000 §7's runtime specialization): the
    point stays in registers and the loops unroll. ``labels`` holds the previous labels on
    entry; when ``changed`` (a device uint64 array of one element) is given, the number of
    labels that changed is added to it (no copy of the previous labels needed).
    """
    cp = cupy_module()
    XT = column_buffer(X)
    n, d = X.shape
    k = centers.shape[0]
    tile, dt = tiled_shape(k, d, X.dtype.itemsize)
    itemsize = X.dtype.itemsize
    centers = cp.ascontiguousarray(centers, dtype=X.dtype)
    if d <= ASSIGN_DIMS[-1]:
        dmax = next(m for m in ASSIGN_DIMS if m >= d)
        ppt = points_per_thread(dmax, n)
        kernel = get_kernel(_ASSIGN, "assign_registers", X.dtype, tile, dmax, ppt)
        launch(kernel, _blocks(n, _BLOCK * ppt), _BLOCK,
               (XT, centers, np.int64(n), np.int32(d), np.int32(k), labels,
                kernel_pointer(changed)), shared_mem=tile * dmax * itemsize)
        return
    kernel = get_kernel(_ASSIGN, "assign_tiled", X.dtype, tile)
    launch(kernel, _blocks(n), _BLOCK,
           (XT, centers, np.int64(n), np.int32(d), np.int32(k), np.int32(dt), labels,
            kernel_pointer(changed)), shared_mem=tile * dt * itemsize)


assign_tiled.counts_changes = True  # the engine's loop then keeps no copy of the labels
assign_tiled.graph_safe = True  # launches only: capturable into a CUDA graph

#: FP32 lanes a multiprocessor, at most, on every NVIDIA GPU to date (64 on sm_70 and
#: sm_80, 128 from sm_86): the floor below takes the most, so it never overstates.
_FP32_LANES_PER_SM = 128


def tiled_floor_seconds(n: int, d: int, k: int) -> float:
    """The fewest seconds a call of :func:`assign_tiled` can take on the current device.

    Its direct distances cost two instructions per row, centre and feature (a
    subtraction and a fused multiply-add) on the SIMT lanes, with no pruning: the count
    does not depend on the data. No call can issue ``2 n d k`` of them faster than
    multiprocessors x 128 lanes x the boost clock (every lane issuing every cycle; float64
    is slower still). A lower bound, for :mod:`gpumine.kmeans.measured` to skip racing
    ``tiled`` where another candidate already measured faster than it.

    Examples
    --------
    >>> from gpumine.kmeans.gpu import tiled_floor_seconds
    >>> tiled_floor_seconds(1_000_000, 128, 1024)   # H200: 132 SMs at 1.98 GHz  # doctest: +SKIP
    0.00783...
    """
    lanes = device_attribute("MultiProcessorCount") * _FP32_LANES_PER_SM
    rate = lanes * device_attribute("ClockRate") * 1e3  # ClockRate in kHz: instructions a second
    return 2.0 * n * d * k / rate


assign_tiled.floor_seconds = tiled_floor_seconds


@declares(_ASSIGN, "argmin_epilogue", _TYPES)
def assign_gemm(X, centers, labels):
    """cuBLAS x.c over row tiles, then ||c||^2 - 2 x.c and the argmin in one epilogue kernel.

    At most ``2**24`` elements of the n x k product exist at a time.
    """
    cp = cupy_module()
    n = X.shape[0]
    k = centers.shape[0]
    centers = cp.ascontiguousarray(centers, dtype=X.dtype)
    center_norms = (centers * centers).sum(axis=1)
    centers_t = cp.ascontiguousarray(centers.T)
    rows = max(1, min(n, (1 << 24) // k))
    kernel = get_kernel(_ASSIGN, "argmin_epilogue", X.dtype)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        products = X[start:stop] @ centers_t
        launch(kernel, _blocks((stop - start) * 32), _BLOCK,
               (products, center_norms, np.int64(stop - start), np.int32(k),
                labels[start:stop]))


# -- update --------------------------------------------------------------------------------
def _prepare(X, sums, weights):
    sums.fill(0)
    weights.fill(0)
    n, d = X.shape
    return column_buffer(X), n, d, sums.shape[0]


def _privatized_grid(kernel, n: int, d: int, k: int, itemsize: int):
    """``(grid, block, slice_width, shared)`` of a privatized update whose block holds
    ``k (slice + 1)`` partials of ``itemsize`` bytes, or None where no slicing fits."""
    shared = k * (_odd_stride(d) + 1) * itemsize
    if shared <= _DEFAULT_SHARED:
        # At most one block per ATOMIC_POINTS_PER_CLUSTER * k points. Measured on the H100
        # (benchmarks/results/atomic-blocks-2026-11-23-5da09e7.json): more blocks win on
        # small problems (17,695 x 18, k = 128: 21 us at 1 against 32 us at 4 and 83 us
        # at 16), where a block's own points, not the flush of its k (d + 1) sums, cost.
        blocks = min(_blocks(n), device_attribute("MultiProcessorCount") * 8,
                     max(1, n // (ATOMIC_POINTS_PER_CLUSTER * k)))
        return (blocks, 1), _BLOCK, d, shared
    slices = _feature_slices(k, d, itemsize)
    if slices is None:
        return None
    # Partials past the default 48 KB (10M x 32, k = 1024: 135 KB of float): opt into the
    # device's shared memory, in slices of features when k (d + 1) do not fit at once; one
    # wave of ATOMIC_WIDE_BLOCK-thread blocks shared among the slices, so each block
    # flushes k (slice + 1) partials once and the points' atomics stay on chip.
    slice_width = -(-d // slices)
    slices = -(-d // slice_width)  # no empty last slice (d = 5 in 4 slices is 3 of 2)
    shared = k * (_odd_stride(slice_width) + 1) * itemsize
    kernel.max_dynamic_shared_size_bytes = shared
    blocks = max(1, min(-(-n // ATOMIC_WIDE_BLOCK),
                        resident_blocks(kernel, ATOMIC_WIDE_BLOCK, shared) // slices))
    return (blocks, slices), ATOMIC_WIDE_BLOCK, slice_width, shared


@declares(_UPDATE, "update_atomic_shared",
          (("float", "float"), ("double", "double"), ("float", "double")))
@declares(_UPDATE, "update_atomic_global", _TYPES)
def update_atomic(X, labels, sample_weight, sums, weights, labels_old=None, *,
                  partials=None):
    """Shared-memory privatized atomicAdd when k*(d+1) values fit a block, else global.

    Shared partial sums are in ``partials`` (default: the data's precision, a block's
    share of the points), the global sums in double. Float32 partials added in whatever
    order the atomics land make a float32 fit differ run to run in the last bits, which
    near-ties amplify (10M x 32, k = 64: 872-2430 of the labels after 10 iterations);
    float64 partials (:func:`update_atomic_f64`) do not (record
    ``update-partials-2026-11-24-b2fa0dc.json``).
    """
    XT, n, d, k = _prepare(X, sums, weights)
    partials = X.dtype if partials is None else np.dtype(partials)
    kernel = get_kernel(_UPDATE, "update_atomic_shared", X.dtype, partials)
    geometry = _privatized_grid(kernel, n, d, k, partials.itemsize)
    if geometry is None:
        launch(get_kernel(_UPDATE, "update_atomic_global", X.dtype), min(_blocks(n), 1 << 20),
               _BLOCK, (XT, labels, sample_weight, np.int64(n), np.int32(d), sums, weights))
        return
    grid, block, slice_width, shared = geometry
    launch(kernel, grid, block, (XT, labels, sample_weight, np.int64(n), np.int32(d),
                                 np.int32(k), np.int32(slice_width), sums, weights),
           shared_mem=shared)


def _feature_slices(k: int, d: int, itemsize: int) -> int | None:
    """Fewest feature slices whose ``k (slice + 1)`` partials fit a block's opted-in shared
    memory (and ATOMIC_SHARED_LIMIT), at most ATOMIC_MAX_SLICES; None when none do."""
    budget = min(_shared_budget(), ATOMIC_SHARED_LIMIT)
    for slices in range(1, min(d, ATOMIC_MAX_SLICES) + 1):
        width = -(-d // slices)
        if k * (_odd_stride(width) + 1) * itemsize <= budget:
            return slices
    return None


update_atomic.graph_safe = True


def update_atomic_f64(X, labels, sample_weight, sums, weights, labels_old=None):
    """:func:`update_atomic` with float64 block partial sums, whatever X's dtype.

    A float32 fit is then the same run to run and streamed or not: measured on the H100
    at 10M x 32, k = 64, 10 iterations, 0 labels differ and the centres are bit-equal
    (872 labels with float32 partials); the update step costs up to 2x (4M x 8, k = 200:
    115 -> 218 us), the whole fit of that data 1 % (record
    ``update-partials-2026-11-24-b2fa0dc.json``). The global flush still adds doubles in
    any order, so equality is in practice, not by construction.
    """
    return update_atomic(X, labels, sample_weight, sums, weights, labels_old,
                         partials=np.float64)


update_atomic_f64.graph_safe = True


def fixed_scales(XT, sample_weight, xp=np):
    """The quanta of ``update="atomic-fixed"``: ``(scales, unscales)``, float64 arrays of
    ``d + 1`` powers of two ``2^s_j`` and ``2^-s_j`` (the features', then the weights').

    ``s_j`` is the largest integer with ``n * max|x_j| * max|w| * 2^s_j <= 2^62``, so the
    rounded products ``round(x_ij w_i 2^s_j)`` of all n rows add up to less than ``2^63``
    in any order and grouping: the integer sums never overflow. Reductions on ``xp``, no
    host read.

    Examples
    --------
    >>> import numpy as np
    >>> scales, unscales = fixed_scales(np.array([[1.0, -3.0]]), np.ones(2))  # sync: NumPy
    >>> [int(v).bit_length() - 1 for v in scales]  # 2 * 3 < 2^3, 2 * 1 < 2^2
    [59, 60]
    >>> bool((scales * unscales == 1).all())
    True
    """
    n = XT.shape[1]
    if n == 0:
        ones = xp.ones(XT.shape[0] + 1, dtype=xp.float64)
        return ones, ones.copy()
    largest = xp.maximum(XT.max(axis=1), -XT.min(axis=1)).astype(xp.float64)
    weight = xp.maximum(sample_weight.max(), -sample_weight.min()).astype(xp.float64)
    bounds = xp.concatenate([largest * weight, weight.reshape(1)]) * n
    _, exponent = xp.frexp(bounds)  # bounds < 2^exponent (0 for a zero bound)
    return xp.ldexp(1.0, 62 - exponent), xp.ldexp(1.0, exponent - 62)


class _AtomicFixed:
    """``update="atomic-fixed"``: :func:`update_atomic`'s privatized sums in 64-bit fixed
    point, for float32 data; the same sums run to run, by construction.

    Each product ``x_ij w_i`` (exact in float64) is rounded to a multiple of the
    feature's quantum ``2^-s_j`` (:func:`fixed_scales`), and the integers are added in
    shared memory (two native 32-bit atomics each, where sm_90's float atomics are
    compare-and-swap loops), then into global 64-bit integers, then scaled back to
    float64 once (``fixed_to_double``). Integer addition is exact, so the order the
    atomics land in changes nothing: a float32 fit is the same run to run, as with
    ``atomic-f64``, and on the H100 the update is faster than ``atomic``'s float32
    partials (record ``fixed-update-ab-h100-2026-11-28-*``).

    The rounding moves each sum by at most half a quantum a row, so a centre coordinate
    is within ``2^-(s_j + 1) <= n max|x_j| max|w| 2^-62`` of the exact weighted mean of its
    rows (float64 sums of float32 partials move by about ``2^-24`` of the partial sums
    instead): at a million rows, ``2^-42`` of the feature's largest magnitude. Only a
    feature whose clusters sit more than about ``2^18`` times closer to zero than its
    largest value, and are that narrow, is summed less precisely than by float32 partials;
    ``update="atomic-f64"`` keeps float64 partials there.

    The scales are computed once per fit (:meth:`bind`, one pass over X); a call
    without ``bind`` computes them itself. Float64 data takes :func:`update_atomic` (its
    float64 partials resolve more than a quantum), and so does a k too large for a
    block's shared memory (global float64 atomics).

    Examples
    --------
    >>> from gpumine import registry
    >>> registry.get_strategy("kmeans.update", "atomic-fixed").name
    'atomic-fixed'
    """

    graph_safe = False  # unbound, a call allocates and computes the quanta; bound, it is

    def bind(self, X, sample_weight):
        if X.dtype != np.float32:
            return update_atomic
        return _BoundFixed(column_buffer(X), sample_weight)

    def __call__(self, X, labels, sample_weight, sums, weights, labels_old=None):
        return self.bind(X, sample_weight)(X, labels, sample_weight, sums, weights)


class _BoundFixed:
    """:class:`_AtomicFixed` bound to a fit's (d, n) data and weights: the scales made."""

    graph_safe = True  # launches only (sums.fill is a memset kernel)

    @declares(_UPDATE, "fixed_maxima")
    @declares(_UPDATE, "fixed_quanta")
    def __init__(self, XT, sample_weight):
        # fixed_scales' arithmetic in two kernels: one pass over X (CuPy's reductions along
        # the rows of a (d, n) buffer took a block a feature, slower than a fit's update)
        cp = cupy_module()
        d, n = XT.shape
        maxima = cp.zeros(d + 1, dtype=cp.uint32)
        self.scales = cp.empty(d + 1, dtype=cp.float64)
        self.unscales = cp.empty(d + 1, dtype=cp.float64)
        sms = device_attribute("MultiProcessorCount")
        rows = min(d + 1, _MAX_GRID_Y)
        launch(get_kernel(_UPDATE, "fixed_maxima"),
               (max(1, min(_blocks(n), -(-sms * 8 // rows))), rows), _BLOCK,
               (XT, cp.ascontiguousarray(sample_weight, dtype=cp.float32), np.int64(n),
                np.int32(d), maxima))
        launch(get_kernel(_UPDATE, "fixed_quanta"), _blocks(d + 1), _BLOCK,
               (maxima, np.int64(n), np.int32(d), self.scales, self.unscales))

    @declares(_UPDATE, "update_fixed_shared", ("float",))
    @declares(_UPDATE, "fixed_to_double")
    def __call__(self, X, labels, sample_weight, sums, weights, labels_old=None):
        XT, n, d, k = _prepare(X, sums, weights)
        kernel = get_kernel(_UPDATE, "update_fixed_shared", X.dtype)
        geometry = _privatized_grid(kernel, n, d, k, 8)
        if geometry is None:
            return update_atomic(X, labels, sample_weight, sums, weights)
        grid, block, slice_width, shared = geometry
        null = _null()
        launch(kernel, grid, block, (XT, labels, sample_weight, np.int64(n), np.int32(d),
                                     np.int32(k), np.int32(slice_width), self.scales, sums,
                                     weights, null, null, np.uint32(0)), shared_mem=shared)
        launch(get_kernel(_UPDATE, "fixed_to_double"), min(_blocks(k * (d + 1)), _FINISH_BLOCKS),
               _BLOCK, (sums, weights, sums, weights, self.unscales, np.int32(k), np.int32(d),
                        null))
        return None

    def follow(self, assign):
        """This update for one run, following ``assign``'s moves (:class:`_TrackedFixed`).

        The sums are kept from call to call and only the rows whose label moved are taken
        out of one cluster and put into another: from the list a bounds assignment writes
        as it scans (``assign="hamerly"`` bound to the run: it has ``track_moves``), or
        from comparing the labels with the last call's (any other assignment).
        """
        return _TrackedFixed(self, assign if hasattr(assign, "track_moves") else None)


#: A run's fixed-point sums follow at most ``n / TRACKED_MOVES_SHARE`` moved rows a call;
#: a call that moves more recomputes them (fixed_moves' note in kernels/kmeans_update.cu).
#: 4 to 64 measured within 7 % of each other in steady iterations on the H200 (hamerly at
#: 1M x 4, k = 400; tc-exact at 1M x 128 and 10M x 32, k = 1024; benchmarks/results/
#: tracked-fixed-ab-h200-82f5eb5.json, tracked-share-ab-h200-d407283.json).
TRACKED_MOVES_SHARE = 8


class _TrackedFixed:
    """``update="atomic-fixed"`` kept from call to call within one run, from the moved rows.

    Each call takes the rows the assignment moved out of their old cluster's integer sums
    and into their new one's: the same integers :class:`_BoundFixed` adds, so the sums, and
    the fit, are those of a recomputation bit for bit (integer addition is exact in any
    order). The moved rows come from ``assign`` where it lists them as it scans
    (:meth:`BoundAssign.track_moves <gpumine.kmeans.bounds.BoundAssign.track_moves>`), else
    from comparing the labels with those the sums were made from (``label_moves``: 12 bytes
    a row, where a recomputation reads the row's features). A call recomputes instead on a
    run's first call, after :meth:`reset` (labels relocated outside the assignment) or when
    more than ``n / TRACKED_MOVES_SHARE`` rows moved; the choice is made on the device (no
    host sync): each launch does nothing where the other path runs.

    Parameters
    ----------
    bound : _BoundFixed
        The fit's quanta.
    assign : BoundAssign or None
        The run's bounds assignment, or None: the labels are compared.
    """

    graph_safe = True  # launches only

    def __init__(self, bound: _BoundFixed, assign):
        self._bound = bound
        self._assign = assign
        self._state = None  # (X, k, d): what the buffers were made for (X by identity)
        self.moves = None

    def reset(self) -> None:
        """Recompute the sums in the next call (labels moved outside the assignment)."""
        if self._state is not None:
            self._reset.fill(1)

    def _allocate(self, X, k: int, d: int) -> None:
        # in the run's first call, which is never captured into a graph
        from gpumine.kmeans.bounds import Moves

        cp = cupy_module()
        n = X.shape[0]
        capacity = max(1, n // TRACKED_MOVES_SHARE)
        if self._assign is not None:
            self.moves = self._assign.track_moves(capacity)
            self._previous = None
        else:
            self.moves = Moves.empty(cp.zeros(1, dtype=cp.uint32), capacity)
            self._previous = cp.full(n, -1, dtype=cp.int32)
        self._fixed = cp.zeros(k * (d + 1), dtype=cp.uint64)
        self._reset = cp.ones(1, dtype=cp.int32)  # the first call recomputes
        self._state = (X, k, d)

    @declares(_UPDATE, "fixed_moves", ("float",))
    @declares(_UPDATE, "label_moves")
    def __call__(self, X, labels, sample_weight, sums, weights, labels_old=None):
        n, d = X.shape
        k = sums.shape[0]
        kernel = get_kernel(_UPDATE, "update_fixed_shared", X.dtype)
        geometry = _privatized_grid(kernel, n, d, k, 8) if X.dtype == np.float32 else None
        if self._state is None and geometry is not None and n >= 2 and (
                self._assign is None or X is self._assign.X):  # the assignment's rows
            self._allocate(X, k, d)
        if geometry is None or self._state is None or self._state[0] is not X or (
                self._state[1:] != (k, d)):
            # not the run's rows, or k too large for shared partials: no moves followed
            return self._bound(X, labels, sample_weight, sums, weights)
        fixed_sums, fixed_weights = self._fixed[:k * d], self._fixed[k * d:]
        moves = self.moves
        XT = column_buffer(X)
        if self._previous is not None:  # the moves by comparing labels
            moves.count.data.memset_async(0, 4)
            launch(get_kernel(_UPDATE, "label_moves"), min(_blocks(n), _FINISH_BLOCKS * 4),
                   _BLOCK, (labels, self._previous, np.int64(n), moves.count,
                            np.uint32(moves.capacity), moves.rows, moves.previous))
        grid, block, slice_width, shared = geometry
        launch(get_kernel(_UPDATE, "fixed_moves", X.dtype), _FINISH_BLOCKS, _BLOCK,
               (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k),
                self._bound.scales, self._reset, moves.count, np.uint32(moves.capacity),
                moves.rows, moves.previous, fixed_sums, fixed_weights,
                np.int32(min(32, 1 << d.bit_length()))))  # lanes a move: >= d + 1, <= 32
        launch(kernel, grid, block, (XT, labels, sample_weight, np.int64(n), np.int32(d),
                                     np.int32(k), np.int32(slice_width), self._bound.scales,
                                     fixed_sums, fixed_weights, self._reset, moves.count,
                                     np.uint32(moves.capacity)), shared_mem=shared)
        launch(get_kernel(_UPDATE, "fixed_to_double"), min(_blocks(k * (d + 1)), _FINISH_BLOCKS),
               _BLOCK, (fixed_sums, fixed_weights, sums, weights, self._bound.unscales,
                        np.int32(k), np.int32(d), self._reset))
        return None


update_atomic_fixed = _AtomicFixed()


#: ``update="gather"`` takes up to this many features (the catalogue's ``max_dims``).
GATHER_MAX_FEATURES = _REGISTER_DIMS[-1]


@declares(_UPDATE, "update_gather", _TYPES, (_GATHER_BLOCK,), _REGISTER_DIMS)
def update_gather(X, labels, sample_weight, sums, weights, labels_old=None):
    """One block per cluster gathers its points by scanning the labels: no atomics, no
    zeroing, the same sums run to run; d <= 32, and small n x k (the labels are read once
    per cluster). Opt-in: on the H100 it beat ``atomic`` only with many small clusters
    (17,695 x 8, k = 1024), benchmarks/results/update-small-2026-11-23-f94c03d.json."""
    XT = column_buffer(X)
    n, d = X.shape
    k = sums.shape[0]
    if d > GATHER_MAX_FEATURES:
        raise InvalidParameterError(
            f"update='gather' keeps a cluster's sums in registers: at most "
            f"{GATHER_MAX_FEATURES} features, got {d}; use update='atomic'")
    dmax = next(m for m in _REGISTER_DIMS if m >= d)
    launch(get_kernel(_UPDATE, "update_gather", X.dtype, _GATHER_BLOCK, dmax), k, _GATHER_BLOCK,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), sums, weights))


update_gather.graph_safe = True


@declares(_UPDATE, "update_gm_cl", _TYPES)
def update_gm_cl(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.1: a thread per point, a global spinlock per cluster."""
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    locks = cp.zeros(k, dtype=cp.int32)
    launch(get_kernel(_UPDATE, "update_gm_cl", X.dtype), _blocks(n), _BLOCK,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), sums, weights, locks))


@declares(_UPDATE, "update_gm_dl", _TYPES)
def update_gm_dl(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.2: a thread per (point, feature), a global spinlock per (cluster, feature)."""
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    locks = cp.zeros(k * d, dtype=cp.int32)
    launch(get_kernel(_UPDATE, "update_gm_dl", X.dtype), _blocks(n * d), _BLOCK,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), sums, weights, locks))


def _chunk(per_cluster_bytes: int, k: int, name: str, d: int) -> tuple[int, int]:
    budget = _shared_budget()
    chunk = min(k, budget // per_cluster_bytes)
    if chunk < 1:
        raise InvalidParameterError(
            f"update={name!r} keeps one cluster's {d} features in shared memory "
            f"({per_cluster_bytes} bytes), more than this GPU's {budget}; "
            "use update='atomic' or 'gm-cl'")
    return chunk, chunk * per_cluster_bytes


@declares(_UPDATE, "update_sm_cl", _TYPES)
def update_sm_cl(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.3: clusters in shared memory in chunks, shared spinlocks, then GM-CL."""
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    chunk, shared = _chunk((d + 1) * 8 + 8, k, "sm-cl", d)
    locks = cp.zeros(k, dtype=cp.int32)
    _launch_shared(get_kernel(_UPDATE, "update_sm_cl", X.dtype), _blocks(n), _BLOCK,
                   (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k),
                    np.int32(chunk), sums, weights, locks), shared)


@declares(_UPDATE, "update_sm_dl", _TYPES)
def update_sm_dl(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.4: SM-CL with a thread and a shared spinlock per (point|cluster, feature)."""
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    chunk, shared = _chunk((d + 1) * 8 + d * 4 + 4, k, "sm-dl", d)
    locks = cp.zeros(k * d, dtype=cp.int32)
    _launch_shared(get_kernel(_UPDATE, "update_sm_dl", X.dtype), _blocks(n * d), _BLOCK,
                   (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k),
                    np.int32(chunk), sums, weights, locks), shared)


@declares(_UPDATE, "update_gm_ct", _TYPES)
def update_gm_ct(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.5: a thread per cluster scans all points; sums in global memory."""
    XT, n, d, k = _prepare(X, sums, weights)
    launch(get_kernel(_UPDATE, "update_gm_ct", X.dtype), _blocks(k, 64), 64,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k), sums, weights))


@declares(_UPDATE, "update_gm_dt", _TYPES)
def update_gm_dt(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.5: a thread per (cluster, feature) scans all points; global memory."""
    XT, n, d, k = _prepare(X, sums, weights)
    launch(get_kernel(_UPDATE, "update_gm_dt", X.dtype), _blocks(k * d, 64), 64,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k), sums, weights))


@declares(_UPDATE, "update_sm_ct", _TYPES)
def update_sm_ct(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.5: GM-CT with each thread's running sums in shared memory."""
    XT, n, d, k = _prepare(X, sums, weights)
    block = 64
    dt = max(1, min(d, _DEFAULT_SHARED // (block * 8) - 1))
    launch(get_kernel(_UPDATE, "update_sm_ct", X.dtype), _blocks(k, block), block,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k), np.int32(dt),
            sums, weights), shared_mem=block * (dt + 1) * 8)


@declares(_UPDATE, "update_sm_dt", _TYPES)
def update_sm_dt(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 004 §5.5: GM-DT with each thread's running sum in shared memory."""
    XT, n, d, k = _prepare(X, sums, weights)
    block = 64
    launch(get_kernel(_UPDATE, "update_sm_dt", X.dtype), _blocks(k * d, block), block,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k), sums, weights),
           shared_mem=2 * block * 8)


@declares(_UPDATE, "update_sorted_segments", _TYPES)
def update_sort(X, labels, sample_weight, sums, weights, labels_old=None):
    """Sort points by label, then one fixed-order block reduction per (cluster, feature).

    The sort key ``label * n + i`` is unique, so the order, and therefore every
    floating-point sum, is the same run to run: bit-reproducible.
    """
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    keys = labels.astype(cp.int64) * n + cp.arange(n, dtype=cp.int64)
    order = cp.argsort(keys).astype(cp.int64)
    offsets = cp.zeros(k + 1, dtype=cp.int64)
    offsets[1:] = cp.cumsum(cp.bincount(labels, minlength=k)[:k])
    launch(get_kernel(_UPDATE, "update_sorted_segments", X.dtype), (k, d + 1), _BLOCK,
           (XT, sample_weight, order, offsets, np.int64(n), np.int32(d), sums, weights))


@declares(_UPDATE, "irregular_partial", _TYPES, (_IRREGULAR_GROUP,), (8,))
@declares(_UPDATE, "irregular_finish")
def update_irregular_reduction(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 000 §6-7: per work-group irregular (index-array) log2 reductions, then a final add.

    Returns the number of points whose label changed (seed 000's 4-byte readback) when
    ``labels_old`` is given.
    """
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    group = _IRREGULAR_GROUP
    n_groups = _blocks(n, group)
    batch = max(1, min(n_groups, _PARTIAL_BUDGET // (k * (d + 1) * 8)))
    partial = cp.empty((batch, k, d + 1), dtype=cp.float64)
    changed = cp.zeros(n_groups, dtype=cp.int32)
    partial_kernel = get_kernel(_UPDATE, "irregular_partial", X.dtype, group, 8)
    finish = get_kernel(_UPDATE, "irregular_finish")
    old = labels_old if labels_old is not None else _null()
    for group0 in range(0, n_groups, batch):
        groups = min(batch, n_groups - group0)
        partial[:groups].fill(0)
        launch(partial_kernel, groups, group,
               (XT, labels, old, sample_weight, np.int64(n), np.int32(d), np.int32(k),
                np.int64(group0), partial, changed[group0:group0 + groups]))
        launch(finish, k, _BLOCK, (partial, np.int64(groups), np.int32(d), np.int32(k), sums,
                                   weights))
    return None if labels_old is None else int(changed.sum())


@declares(_UPDATE, "masked_tree_cluster", _TYPES)
@declares(_UPDATE, "masked_tree_summation")
def update_masked_tree(X, labels, sample_weight, sums, weights, labels_old=None):
    """Seed 002 appendix: per block and cluster a masked tree sum, then halving passes."""
    cp = cupy_module()
    XT, n, d, k = _prepare(X, sums, weights)
    length = _blocks(n)
    partial = cp.empty((k, length, d + 1), dtype=cp.float64)
    launch(get_kernel(_UPDATE, "masked_tree_cluster", X.dtype), length, _BLOCK,
           (XT, labels, sample_weight, np.int64(n), np.int32(d), np.int32(k), partial))
    summation = get_kernel(_UPDATE, "masked_tree_summation")
    while length > 1:
        out_length = _blocks(length, 2 * _BLOCK)
        reduced = cp.empty((k, out_length, d + 1), dtype=cp.float64)
        launch(summation, out_length, _BLOCK,
               (partial, np.int64(length), np.int32(d), np.int32(k), reduced))
        partial, length = reduced, out_length
    sums[...] = partial[:, 0, :d]
    weights[...] = partial[:, 0, d]


class _Hybrid:
    """Seed 000/002's hybrid scheme: labels to the host, sums on the CPU, centroids back.

    X and the weights are copied to the host once per fit (:meth:`bind`); each
    iteration moves n labels down and k x (d + 1) sums up.
    """

    def bind(self, X, sample_weight):
        from gpumine.kmeans.reference import update_numpy

        cp = cupy_module()
        X_host = cp.asnumpy(X)
        weight_host = cp.asnumpy(sample_weight)

        def update(X, labels, sample_weight, sums, weights, labels_old=None):
            sums_host = np.empty(sums.shape, dtype=np.float64)
            weights_host = np.empty(weights.shape, dtype=np.float64)
            update_numpy(X_host, cp.asnumpy(labels), weight_host, sums_host, weights_host)
            sums.set(sums_host)
            weights.set(weights_host)

        return update

    def __call__(self, X, labels, sample_weight, sums, weights, labels_old=None):
        return self.bind(X, sample_weight)(X, labels, sample_weight, sums, weights)


hybrid = _Hybrid()


# -- the device Lloyd loop's own steps (gpumine.kmeans.lloyd) ---------------------------
def graphs_enabled() -> bool:
    """Whether the Lloyd loop may capture CUDA graphs (not with ``GPUMINE_DEBUG``, which
    synchronizes after every launch, nor with ``GPUMINE_GRAPHS=0``)."""
    return not os.environ.get("GPUMINE_DEBUG") and os.environ.get("GPUMINE_GRAPHS", "1") != "0"


_CAPTURE_STREAMS = threading.local()


def capture_stream():
    """The calling thread's stream for the Lloyd loop's graph captures on the current
    device, made once and kept.

    A capture needs a stream other than the legacy default one. CuPy's memory pool keeps
    freed blocks per stream, so a new stream per fit found none of the last fit's blocks:
    each fit's buffers came from ``cudaMalloc`` anew (27 calls in a 1-iteration fit at
    1M x 128, k = 1024 on the H200, record ``prof-auto-fits-1-2-20-h200-2026-11-28-
    5bb0432.txt``), and the blocks of every ended fit stayed in the pool under a stream that
    was gone. One stream per thread (a thread runs one fit at a time) and device keeps the
    pool's blocks reusable fit after fit.
    """
    cp = cupy_module()
    device = cp.cuda.runtime.getDevice()
    streams = getattr(_CAPTURE_STREAMS, "by_device", None)
    if streams is None or getattr(_CAPTURE_STREAMS, "pid", None) != os.getpid():
        streams = _CAPTURE_STREAMS.by_device = {}
        _CAPTURE_STREAMS.pid = os.getpid()
    stream = streams.get(device)
    if stream is None:
        stream = streams[device] = cp.cuda.Stream(non_blocking=True)
    return stream


class LoopBuffers:
    """Small device buffers a device Lloyd run reuses every iteration.

    Attributes
    ----------
    changed : cupy.ndarray (1,), uint64
        The E-step's changed-labels counter (kernels add to it, :func:`finish_centers`
        reads and zeroes it).
    status : cupy.ndarray (3,), float64
        What an iteration reads back: centre shift, empty clusters, labels changed.
    partial, ticket : cupy.ndarray
        :func:`finish_centers`' per-block shifts and its last-block ticket (zero between
        launches).
    """

    def __init__(self):
        import cupyx

        cp = cupy_module()
        self.changed = cp.zeros(1, dtype=cp.uint64)
        self.status = cp.zeros(3, dtype=cp.float64)
        self.partial = cp.empty(_FINISH_BLOCKS, dtype=cp.float64)
        self.ticket = cp.zeros(1, dtype=cp.uint32)
        self._status_host = cupyx.zeros_pinned(3, dtype=np.float64)

    def read_status(self) -> tuple[float, int, int]:
        """The iteration's one readback (24 bytes, into pinned memory): shift, empty, changed.

        A sync (24 bytes): it waits for the iteration's kernels.
        """
        self.status.get(out=self._status_host)
        shift, empty, changed = self._status_host.tolist()
        return shift, int(empty), int(changed)


_THREAD = threading.local()


def _pinned_status():
    """This thread's pinned host record for :class:`FusedLoop`'s readback, made once per
    thread (a pinned allocation per fit cost more than the small fits' kernels): each
    launch reads it back and copies it out (``tolist``) before the thread's next launch."""
    import cupyx

    status = getattr(_THREAD, "fused_status", None)
    if status is None:
        status = _THREAD.fused_status = cupyx.empty_pinned(_FUSED_STATUS, dtype=np.float64)
    return status


class FusedStatus(NamedTuple):
    """What a launch of :class:`FusedLoop` reports (its one readback)."""

    #: Iterations done (the last one's index + 1).
    done: int
    #: The last iteration's total squared centre shift.
    shift: float
    #: Empty clusters left to the host (more than :data:`FUSED_MAX_RELOCATIONS`), else 0.
    n_empty: int
    #: Labels changed in the last iteration.
    n_changed: int
    #: True when the kernel took the stopping rule and made the final pass (then
    #: ``inertia`` and ``n_distinct`` hold); False when it stopped for the host's relocation.
    finished: bool
    #: The inertia of the final labels and centres.
    inertia: float
    #: Clusters holding at least one point.
    n_distinct: int


#: Threads per point of the fused loop (``kernels/kmeans_loop.cu``'s TPP): its lanes split
#: the centres, then the features' sums. Measured choices are in :func:`_fused_tpp`.
FUSED_TPP = (1, 2, 4, 8)


def _fused_tpp(n: int, d: int) -> int:
    """Threads per point of the fused loop: with d <= 8, the most of 4, 2, 1 that keeps
    ``n * tpp`` within two thirds of one block per SM; else 1.

    Measured per iteration on the H100 (``loop-tpp-2026-11-24-a3f5be5.json``, same process,
    same labels): 5,000 x 8, k = 256 20.9 -> 14.6 us at tpp 4; slower wherever one thread a
    point already spans half the SMs (17,695 x 18: 25.3 -> 29.9 at tpp 4; 17,695 x 4, k = 16:
    9.5 -> 10.3 at tpp 2) and at d = 32 (bank conflicts and spills: 26.6 -> 57.8 at tpp 4)."""
    if d > 8:
        return 1
    room = device_attribute("MultiProcessorCount") * _BLOCK * 2 // 3
    return next(t for t in (4, 2, 1) if n * t <= room)


#: The fused loop's DMAX: every even d up to 32 (its E-step computes DMAX features a centre;
#: the padding is at most one). Corel's d = 18 as 18 instead of 20: 25.7 -> 24.4 us an
#: iteration in float32, 33.0 -> 30.8 in float64 (record loop-red-2026-11-24-a4c40f9.json).
LOOP_DIMS = tuple(range(2, ASSIGN_DIMS[-1] + 1, 2))


def _loop_dmax(d: int) -> int:
    return d + (d & 1)


@declares(_LOOP, "lloyd_loop", _TYPES, LOOP_DIMS, (_BLOCK,), FUSED_TPP)
class FusedLoop:
    """The device Lloyd loop as one cooperative kernel (``kernels/kmeans_loop.cu``).

    For small problems, where launching an iteration costs more than its ~10 us of work:
    the ``tiled`` E-step and the ``atomic`` M-step (the same arithmetic), the relocation of
    up to :data:`FUSED_MAX_RELOCATIONS` empty clusters (the points and order of
    :func:`relocate_empty_clusters`), the averaging, the shift and the stopping rule run on
    the device iteration after iteration, and then the final E-step, the inertia and the
    count of clusters used; the host reads back one status record per launch. With more
    empty clusters at once the kernel stops; the host relocates and launches again.

    Parameters
    ----------
    X : cupy.ndarray (n_samples, n_features), a view of a (d, n) column-major buffer
    sample_weight : cupy.ndarray (n_samples,), X's dtype
    centers_init : cupy.ndarray (n_clusters, n_features), X's dtype
    threads_per_point : int, optional
        One of :data:`FUSED_TPP` (the labels and sums are the same for each); default
        :func:`_fused_tpp`'s.
    """

    def __init__(self, X, sample_weight, centers_init, threads_per_point=None):
        cp = cupy_module()
        self.X, self.sample_weight = X, sample_weight
        self._XT = column_buffer(X)
        n, d = X.shape
        k = centers_init.shape[0]
        self.centers = cp.empty((2, k, d), dtype=X.dtype)
        first = cp.ascontiguousarray(centers_init, dtype=X.dtype)
        self.centers.data.copy_from_device_async(first.data, first.nbytes)  # centers[0]
        # -1 everywhere (all bits set): one memset, where cupy.full launches a kernel
        self.labels = cp.empty(n, dtype=cp.int32)
        self.labels.data.memset_async(0xFF, self.labels.nbytes)
        # One zeroed buffer (one memset) for the accumulators of both parities.
        zeros = cp.zeros(2 * k * d + 2 * k + 2, dtype=cp.float64)
        self.sums = zeros[:2 * k * d].reshape(2, k, d)
        self.weights = zeros[2 * k * d:2 * k * (d + 1)].reshape(2, k)
        self.changed = zeros[2 * k * (d + 1):].view(cp.uint64)  # 0.0 is all zero bits
        self._zeros = zeros
        dmax = _loop_dmax(d)
        tpp = threads_per_point or _fused_tpp(n, d)
        if tpp not in FUSED_TPP:
            raise InvalidParameterError(f"threads_per_point must be one of {FUSED_TPP}, "
                                        f"got {tpp}")
        self._kernel = get_kernel(_LOOP, "lloyd_loop", X.dtype, dmax, _BLOCK, tpp,
                                  cooperative=True)
        self._shared = FusedLoop.shared_bytes(k, d, X.dtype.itemsize)
        self._grid = max(1, min(resident_blocks(self._kernel, _BLOCK, self._shared),
                                _blocks(n * tpp, _BLOCK)))
        scratch = cp.empty(_FUSED_STATUS + 2 * self._grid, dtype=cp.float64)
        self.status, self._block_status = scratch[:_FUSED_STATUS], scratch[_FUSED_STATUS:]
        self._status_host = _pinned_status()

    @staticmethod
    def shared_bytes(k: int, d: int, itemsize: int) -> int:
        """Dynamic shared memory of a block: the padded centres and the block's sums."""
        dmax = _loop_dmax(d)
        return k * (dmax + _odd_stride(d) + 1) * itemsize

    @staticmethod
    def takes(X, n_clusters: int, assign, update) -> bool:
        """Whether this loop can run the fit: the default strategies (``tiled``, ``atomic``),
        d <= 32, at most :data:`FUSED_MAX_SAMPLES` rows, the centres and a block's sums in
        the default shared memory (beside the kernel's own ~1 KB), and not switched off
        (``GPUMINE_FUSED=0``, or ``GPUMINE_DEBUG``)."""
        n, d = X.shape
        return (assign is assign_tiled and update is update_atomic
                and d <= ASSIGN_DIMS[-1] and n <= FUSED_MAX_SAMPLES
                and (FusedLoop.shared_bytes(n_clusters, d, X.dtype.itemsize)
                     <= _DEFAULT_SHARED - _LOOP_STATIC_SHARED)
                and not os.environ.get("GPUMINE_DEBUG")
                and os.environ.get("GPUMINE_FUSED", "1") != "0")

    def run(self, first_iter: int, max_iter: int, tol: float) -> FusedStatus:
        """Iterations ``first_iter`` onwards, in one launch; one readback (56 bytes)."""
        n, d = self.X.shape
        k = self.centers.shape[1]
        launch(self._kernel, self._grid, _BLOCK,
               (self._XT, self.sample_weight, np.int64(n), np.int32(d), np.int32(k),
                np.int32(first_iter), np.int32(max_iter), np.float64(tol), self.centers,
                self.labels, self.sums, self.weights, self.changed, self._block_status,
                self.status), shared_mem=self._shared)
        self.status.get(out=self._status_host)  # sync: 56 bytes, once per launch
        done, shift, empty, changed, inertia, distinct, finished = self._status_host.tolist()
        return FusedStatus(int(done), shift, int(empty), int(changed), finished == 1.0,
                           inertia, int(distinct))

    def restart(self) -> None:
        """Zero the accumulators before launching again (after a relocation)."""
        self._zeros.fill(0)


@declares(_STEP, "finish_centers", _TYPES, (_BLOCK,))
def finish_centers(sums, weights, centers_old, centers_new, buffers, *, count=True):
    """Averaging, centre shift, empty-cluster count and changed count in one kernel (a grid
    over the k * d values, the last block adding the blocks' shifts in order).

    ``centers_new`` = ``sums / weights`` (a cluster still empty takes the heaviest
    cluster's centre); ``buffers.status`` gets (shift, n_empty, n_changed), the
    changed counter is read and zeroed when ``count``. Nothing is read back here.
    """
    k, d = centers_old.shape
    kernel = get_kernel(_STEP, "finish_centers", centers_old.dtype, _BLOCK)
    blocks = max(1, min(-(-k * d // _BLOCK), _FINISH_BLOCKS))
    launch(kernel, blocks, _BLOCK,
           (sums, weights, centers_old, np.int32(k), np.int32(d), centers_new,
            buffers.changed if count else _null(), buffers.status, buffers.partial,
            buffers.ticket))


@declares(_STEP, "point_distances", _TYPES)
@declares(_STEP, "relocate_empty", _TYPES)
def relocate_empty_clusters(X, sample_weight, centers_old, sums, weights, labels,
                            n_empty: int) -> None:
    """:func:`gpumine.kmeans.lloyd.relocate_empty_clusters` on the device, without a host sync.

    ``n_empty`` is the empty count of the iteration's status readback. The distances
    to the current centres are one kernel, the farthest points an ``argmax`` (one
    empty cluster, the common case) or ``argpartition``, and the moves one single-warp
    kernel that lists the empty clusters and moves the points in the host's order.
    ``sums`` and ``weights`` (INOUT) are the M-step's buffers before averaging.
    """
    cp = cupy_module()
    XT = column_buffer(X)
    n, d = X.shape
    k = weights.shape[0]
    centers_old = cp.ascontiguousarray(centers_old, dtype=X.dtype)
    distances = cp.empty(n, dtype=X.dtype)
    launch(get_kernel(_STEP, "point_distances", X.dtype), min(_blocks(n), 4096), _BLOCK,
           (XT, centers_old, labels, np.int64(n), np.int32(d), distances))
    if n_empty == 1:
        far = cp.argmax(distances).reshape(1)
    else:  # the n_empty largest, largest first (argpartition would sort too, and sync)
        far = cp.ascontiguousarray(cp.argsort(distances)[:-n_empty - 1:-1])
    launch(get_kernel(_STEP, "relocate_empty", X.dtype), 1, 32,
           (XT, sample_weight, labels, np.int64(n), np.int32(d), np.int32(k),
            far.astype(cp.int64, copy=False), np.int32(n_empty), distances.max(),
            cp.empty(n_empty, dtype=cp.int32), sums, weights))


@declares(_STEP, "squared_deviations", _TYPES, (_BLOCK,))
def feature_variance(X, mean):
    """Per-feature variance of X about ``mean`` (float64, (d,)), accumulated in double.

    A (blocks, d) grid of block sums added in a fixed order: the same value run to run,
    and fast where CuPy's ``var(axis=0)`` of a (n, d) column-major view gives each feature
    one block (4M x 8: 31 ms against well under 1 ms, record
    ``fit-timing-2026-11-24-*.json``). Nothing is read back.
    """
    cp = cupy_module()
    XT = column_buffer(X)
    n, d = X.shape
    blocks = max(1, min(_blocks(n), -(-device_attribute("MultiProcessorCount") * 8 // d)))
    partial = cp.empty((d, blocks), dtype=cp.float64)
    mean = cp.ascontiguousarray(mean, dtype=cp.float64)
    kernel = get_kernel(_STEP, "squared_deviations", X.dtype, _BLOCK)
    for j0 in range(0, d, _MAX_GRID_Y):  # features in grid.y, at most 65535 per launch
        j1 = min(d, j0 + _MAX_GRID_Y)
        launch(kernel, (blocks, j1 - j0), _BLOCK, (XT[j0:j1], mean[j0:j1], np.int64(n),
                                                   partial[j0:j1]))
    return divided_row_sums(partial, n)


def _inertia_sum(X, sample_weight, centers, labels):
    """The inertia as a 0-d float64 device array (no readback): per-block partial sums
    added in a fixed order, so the value is the same run to run."""
    cp = cupy_module()
    XT = column_buffer(X)
    n, d = X.shape
    blocks = min(_blocks(n), 1024)
    partial = cp.empty(blocks, dtype=cp.float64)
    centers = cp.ascontiguousarray(centers)
    launch(get_kernel(_STEP, "inertia_partial", X.dtype, centers.dtype, _BLOCK), blocks, _BLOCK,
           (XT, sample_weight, centers, labels, np.int64(n), np.int32(d), partial))
    return partial.sum()


@declares(_STEP, "inertia_partial", (("float", "float"), ("double", "double")), (_BLOCK,))
def inertia(X, sample_weight, centers, labels) -> float:
    """``sum_i w_i ||x_i - c_{l_i}||^2`` directly, in double; one 8-byte readback.

    Per-block partial sums are added in a fixed order, so the value is the same run to run.
    """
    return float(_inertia_sum(X, sample_weight, centers, labels))  # sync: 8 bytes


def inertia_and_distinct(X, sample_weight, centers, labels, n_clusters: int):
    """:func:`inertia` (the same value) and the number of distinct labels (clusters holding
    a point), in one 16-byte readback: a fit's end, where the two had been two syncs.

    Examples
    --------
    >>> import cupy as cp  # doctest: +SKIP
    >>> X = cp.asarray([[0.0], [1.0], [4.0]])  # doctest: +SKIP
    >>> inertia_and_distinct(X, cp.ones(3), cp.asarray([[0.5], [9.0], [4.0]]),
    ...                      cp.asarray([0, 0, 2], dtype=cp.int32), 3)  # doctest: +SKIP
    (0.5, 2)
    """
    cp = cupy_module()
    both = cp.empty(2, dtype=cp.float64)
    both[0] = _inertia_sum(X, sample_weight, centers, labels)
    both[1] = cp.count_nonzero(cp.bincount(labels, minlength=n_clusters))  # exact in float64
    total, distinct = both.get()  # sync: 16 bytes, once per run
    return float(total), int(distinct)


@declares(_INIT, "kmeans_plusplus", _TYPES, (_BLOCK,), _KPP_SHAPES)
def kmeans_plusplus(X, n_clusters, *, sample_weight, random_state, n_local_trials=None):
    """Greedy k-means++ on the device in one cooperative kernel launch.

    The same greedy algorithm as scikit-learn's ``_kmeans_plusplus``: the first centre
    drawn with probability proportional to the weight, each next one the best of
    ``2 + floor(ln k)`` candidates drawn proportionally to ``w * D(x)^2`` (the one that
    lowers the weighted potential most). Distances are direct ``sum (x - c)^2`` in double.
    The uniform numbers are drawn on the host from ``random_state`` -- the same
    sequence, in the same order, as the CPU strategy draws -- and uploaded once, so a
    ``random_state`` gives the same centres run to run (the grid, and so the order of
    the double sums, depends on the GPU model).

    Returns
    -------
    centers : cupy.ndarray (n_clusters, n_features), X's dtype
    """
    cp = cupy_module()
    XT = column_buffer(X)
    n, d = X.shape
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    m = int(n_local_trials)
    if not 1 <= m <= _KPP_TRIALS[-1]:
        raise InvalidParameterError(
            f"n_local_trials must be in 1..{_KPP_TRIALS[-1]} on the GPU, got {m}")
    trials = next(t for t in _KPP_TRIALS if t >= m)
    # 1 + (k - 1) m uniforms: RandomState draws doubles in sequence, so one call gives the
    # numbers the CPU strategy draws one centre at a time.
    uniforms = cp.asarray(random_state.random_sample(1 + (n_clusters - 1) * m))
    # the candidates' and the pending centre's coordinates, as doubles
    shared_candidates = (m + 1) * d * 8 <= _KPP_SHARED
    shared = (m + 1) * d * 8 if shared_candidates else 0
    # d <= 32 (and not the largest candidate bound): the point held in registers
    dmax = (next((m_ for m_ in _REGISTER_DIMS if m_ >= d), 0)
            if trials < _KPP_TRIALS[-1] else 0)
    kernel = get_kernel(_INIT, "kmeans_plusplus", X.dtype, _BLOCK, trials, dmax,
                        cooperative=True)
    grid = min(resident_blocks(kernel, _BLOCK, shared), _blocks(n, _BLOCK))
    chunk = -(-n // grid)
    chunk = -(-chunk // 32) * 32
    grid = -(-n // chunk)  # every block owns at least one point
    closest = cp.empty(n, dtype=cp.float64)
    tile_sums = cp.empty((2, trials, -(-n // 32)), dtype=cp.float64)
    partial = cp.empty((2, grid, trials), dtype=cp.float64)
    centers = cp.empty((n_clusters, d), dtype=X.dtype)
    chosen = cp.empty(n_clusters, dtype=cp.int64)
    # Unit weights (a fit without sample_weight) go in as null, which the kernel reads as 1
    # without loading them: n values less per centre (4M x 8, k = 200: 3.2 GB over the
    # init; k-means++ 40.1 -> 38.3 ms, records fit-timing-2026-11-24-{58fb0bf,9d2de8a}).
    unit = bool((sample_weight == 1).all())  # sync: one flag, once per init
    _launch_shared(kernel, grid, _BLOCK,
                   (XT, _null() if unit else sample_weight, np.int64(n), np.int32(d),
                    np.int32(n_clusters),
                    np.int32(m), np.int64(chunk), uniforms, np.int32(shared_candidates),
                    closest, tile_sums, partial, centers, chosen), shared)
    return centers

