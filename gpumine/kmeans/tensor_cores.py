"""Exact k-means assignment on tensor cores: split-FP16 scores, a rigorous margin test, a re-check.

``assign="tc-exact"`` shifts points and centres by the centres' mean, rounds them to
float32, computes every score ``s_j = ||c_j||^2 - 2 x.c_j`` of the shifted values on the
tensor cores, keeps the best and second-best score of each row, and decides the row's
label from them only when the margin ``s_2 - s_1`` is larger than what rounding can move;
the other rows are queued and assigned again with the direct sum ``(x - c)^2`` of the
original values in the data's precision, exactly as ``assign="tiled"`` does. The labels
are therefore those of the tiled kernel, bit for bit, ties to the lowest index.

The products
------------
For ``d <= 128`` a fused kernel multiplies with FP16 ``mma.sync`` (m16n8k16, twice TF32's
rate) on operands split in two. FP16 has an 11-bit significand like TF32 but a narrow
exponent range, so each row of points is scaled by its own power of two ``2^s_x`` and all
centres by one, ``2^s_c`` (from the largest centre norm), so that every scaled value is
below ``2^13`` and the row's largest value (and ``cmax``) at least ``2^12``; powers of two
scale exactly. Each scaled float32 ``v`` is split as ``v = hi + lo + r`` with ``hi`` the
FP16 rounding of ``v`` (to nearest, ``|v - hi| <= 2**-11 |v|`` in FP16's normal range),
``lo`` that of ``v - hi`` (exact in float32) and ``|r| <= 2**-22 |v| + 2**-25`` (the
absolute term: FP16's subnormal spacing ``2**-24``); the kernel accumulates ``lo.hi +
hi.lo`` and ``hi.hi`` in FP32, the small products before the large ones: up to 64 features
every small product of a tile goes into the accumulator first, at 128 they go into an
accumulator of their own, added to the large ones' once every feature is in. The products
of FP16 numbers are exact. The tensor core's FP32 accumulation is modelled as blocks of at
most four products and the accumulator: the block's terms are aligned to the largest of them
and cut to float32's 24 bits (truncation: each term loses less than ``2**-23`` of the largest,
``M``), and the block's sum is cut to 24 bits once more (less than ``2**-23`` of the sum). A
block with ``t`` products thus moves the result by less than ``2**-23 (t + 2) S``, ``S`` the
block's magnitudes (accumulator and products), and ``S`` is at most the magnitudes summed so
far. Whether the hardware sums 4, 8 or 16 products a block, an m16n8k16 instruction is at most
four such blocks, each carrying at most ``t + 2`` of ``2**-23``, and a block of zeros (the
padding past d) moves nothing: over the ``ceil(d / 16)`` instructions of a product's
features that is ``m = d + 8 floor(d / 16) + 2 min(4, d mod 16)`` units, so the large
products (magnitudes ``sum |x_l c_l|``, times ``1 + 2**-9`` for the splits) move the result
by at most ``2**-23 m`` of them, and the small ones, ``2**-10`` of a large one (``|lo| <=
2**-11 |v|``) in two instructions a step, by ``2**-33 * 2m``, whatever the order (up to 64
features the small products go first into the same accumulator, at 128 into their own,
added with one more rounding at the end).
Past 64 features the split kernel *flushes* its large products: each instruction's hi.hi
products start from a zero accumulator and are then added to a float32 register (round to
nearest). An instruction then moves its result by at most ``2**-23 * 24`` of its own
magnitudes, which add up to the product's, and each of the ``ceil(d / 16)`` additions by
``2**-24`` of the magnitudes so far: ``m = 24 + ceil(d / 16) / 2`` units in place of the
sum above (:func:`~gpumine.kmeans.accumulation.flushed_units`: 28 against 192 at 128
features). An addition whose sum the kernels' flush of subnormals makes zero moves it by
less than ``2**-126`` in the scaled units, where ``|x| cmax >= 2**24``: far inside the
slack of the absolute term below, as for the one addition of the small products. The
one-product kernel (the screen, tc-fast) keeps one accumulator over every feature, and its
own, wider bound (``error_bound(d, dtype, "half-held")``). On 1M rows of 128 features
around 64 blobs with k = 1024, a CPU emulation of the margin test gives 17.6 % of the rows
left to the re-check by the one accumulator's bound and 3.8 % by the flushed one (record
``split-bound-flush-emulation-cpu-2026-11-29-c8e1111.txt``). On the H200, whole
``"auto"`` fits against the kernel before in one process, fits equal: steady iterations
0.975x at 1M x 128, k = 1024 on those blobs, 0.971x at 100 features, 1.008x on uniform data
at 128 (where the split kernel takes only the screen's leftovers), 20-iteration fits
0.998-1.012x (record ``split-flush-ab-h200-2026-11-29-ef1af57.json``): the additions cost
about what the re-check saves.
On the H100 the worst error seen on inputs built to be cut (every product just under the
accumulator's last bit) is ``4 * 2**-23`` of the magnitudes an instruction, against the
model's 24 (:mod:`gpumine.kmeans.accumulation` measures a device against the model; record
``tc-accumulation-probe-h100-2026-11-28-*.json``); the model before
2026-11-28, a chain of ``d`` additions of ``2**-21`` each (64 an instruction), made the bound
2.6 times as wide at 32 to 128 features. With ``beta = (1 + 2**-9) (2**-23 m + 2**-33 * 2m +
2**-24)`` (the last for the final addition), the dropped ``lo.lo`` and ``r`` terms and the
accumulator's own growth (``1.002``):

    |G_hat - x.c| <= [3.01 * 2**-22 + 1.002 beta + 1.01 * 2**-24] sum |x_l c_l|
                     + 2**-24 (||x||_1 + ||c||_1)                  (scaled values)

and since the scaled ``|x| >= 2**12`` and ``cmax >= 2**12``, ``||x||_1 + ||c||_1 <=
sqrt(d) (|x| + cmax) <= 2**-11 sqrt(d) |x| cmax``: the absolute term is at most
``2**-35 sqrt(d) |x| cmax``, taken as ``2**-34 sqrt(d)`` into the bracket, which is
homogeneous and so holds unscaled. The row's product is unscaled by ``-2^(1 - s_x - s_c)``
inside the score's one FMA (exact: a power of two); a row whose factor leaves float32's
range, or with a non-finite value, is never decided.

(The three products of a feature step in turn, as before 2026-11-27, made every large
product go through up to ``3d`` additions of the chain model: a bound three times as wide,
and three times the rows re-checked on uniform data.)

For wider data the product is one cuBLAS SGEMM in float32 arithmetic (compute type
``CUBLAS_COMPUTE_32F_PEDANTIC``, no TF32), any summation order:
``|G_hat - x.c| <= gamma_{d+1}(2**-24) sum |x_l c_l|``. Either way the bracket is
``kappa_p`` and, by Cauchy-Schwarz, ``sum |x_l c_l| <= |x| |c|``.

The bound
---------
``||c||^2`` is summed in float64 and rounded to float32, and the score
``fma(-2, G_hat, ||c||^2)`` is rounded once more, so with ``cmax = max_j ||c_j||``
(rounded up), ``u = 2**-24`` and ``kappa_g = (kappa_p + 3u) (1 + 2**-20)``:

    |s_hat_j - s_j| <= kappa_g (2 |x| cmax + cmax^2) + a (1 + |x| + cmax)

where ``a = 8 d 2**-126`` covers products and inputs that underflow float32's normal
range. Shifting by ``m`` and rounding to float32 moves each distance by at most
``kappa_s (|x| + cmax)^2``, ``kappa_s = 2.01 u``; ``e`` is the sum of both, and holds
for every centre of the row (norms of the shifted values).

The direct distance the re-check (and ``assign="tiled"``) computes, one rounding for the
difference and one fused multiply-add per feature in the data's unit roundoff ``u_T``,
satisfies ``|D_hat - D| <= kappa_d D`` with
``kappa_d = 2 u_T + u_T^2 + gamma_{d+1}(u_T) (1 + u_T)^2``. For the row's best ``s_1``
(index ``i``) and second-best ``s_2`` and any ``j != i``: ``D_j >= |x|^2 + s_2 - e`` and
``D_i <= |x|^2 + s_1 + e``, so ``D_hat_j > D_hat_i`` -- the direct computation picks
``i`` as well, strictly -- whenever

    s_2 - s_1 > 2 e + kappa_d (2 |x|^2 + s_1 + s_2 + 2 e).

That is the test ``top2_decides`` applies (in float64); a NaN or infinite margin (input
past float32's range) is never decided. ``tests/test_kmeans_tensor_cores.py`` checks the
bound on emulated scaled-FP16 arithmetic (float32 additions rounded to nearest, and the
accumulation model's cut blocks, on its worst case too) and the labels against ``tiled`` on
adversarial data: near-ties, data far from the origin or near float32's underflow, d from 1
to 4096, float32 and float64.

The screen
----------
In a fit (:meth:`_TCExact.bind`: :class:`ScreenedRun`) the fused kernel may first multiply
``hi.hi`` alone, tc-fast's one product, about 0.58 of the split kernel's time at 128
features, and decide each row whose margin also covers what the dropped parts move. With
``x_h``, ``c_h`` the unscaled FP16 hi parts, ``x.c - x_h.c_h = (x - x_h).c + x_h.(c - c_h)``,
so by Cauchy-Schwarz

    |x.c - x_h.c_h| <= rho_x cmax + (|x| + rho_x) rho_c,

``rho_x = ||x - x_h||`` summed exactly as the row is split (``v - hi`` is exact in
float32; the sum of squares in float64) and ``rho_c`` the largest ``||c_j - c_h,j||``
(``tc_center_residuals``, rounded up). The products of the hi parts accumulate as the
split kernel's large products do (the bracket above covers them: ``|x_h c_h| <= (1 +
2**-9) |x c|`` elementwise), so the screen's score error is ``e`` plus twice that, times
``1 + 2**-20`` for its own rounding in float64. The norms are the actual residuals, about
``2**-12.4`` of ``|x|`` and ``cmax`` on uniform data, where the elementwise worst case
``2**-11`` would give ``2**-10``: on the issue's uniform 1M x 128, k = 1024 the screen
leaves 3.4 % of the rows against 7.9 % (the split bound 0.29 %; computed on 20,000
sampled rows on the CPU).

The one-product kernel (the screen and tc-fast) keeps each row's top two on *keys*: the
float score with its low ``b`` bits replaced by the centre's number in the lane (``b`` bits
for ``k_pad / 4`` numbers, up to ``k_pad = 2**14``; more centres take the plain top-2), so
that a score costs one logic and three min/max instructions instead of five, the index coming
back from the best key's bits. A key moves a normal score by less than ``2**(b - 23)
|s|``, with ``|s| <= cmax^2 + 2 |x| cmax + e``; the kernels flush subnormals, so a key
below ``2**-126`` moves by less than that and loses its number: the screen's margin adds
``2**(b - 23) (cmax^2 + 2 |x| cmax + e) + 2**-126`` (times ``1 + 2**-20``), and a row
whose best key is below float's normal range is never decided. On the issue's uniform 1M
x 128, k = 1024 (``b = 8``) the screen then leaves 11 % more rows (38,797 against 35,016)
and a bound run's call is 11 % shorter on the H200 (record
``tc-source-ab-keys-h200-2026-11-28-cc919d2.json``).
The split kernel then takes the rows the screen left, and its own queue goes to the
re-check as before: the labels are those of the tiled kernel either way. X being
column-major, a scattered row's every value is a 32-byte sector of its own, so the screen
copies the first rows it leaves (float data from 64 padded features, up to
:data:`SCREEN_COPY_SHARE` of the rows) into a compact column-major buffer, reading them from
L2 a tile after it staged them; the split kernel stages those as it stages every row, the
rest through their indices. On clustered data (blobs: the split bound leaves 40
%) the screen would leave nearly every row, so the plan keeps it only while it left at most
:data:`SCREEN_SHARE` of them -- the count coming from the screen itself, or from the split
kernel, which counts the rows the screen's margin would leave as it decides its own.

From 33 features (17 from 2M rows) the queued rows first go through a pruned re-check
(:func:`_recheck_pruned`): each row's best centre by the scores rules out, by the triangle
inequality, every centre farther from it than twice the row's distance, and the few left
decide the label by the same direct distances; rows with more than 128 such candidates go
on. On clustered data, where the bound queues many rows (it scales with the norms after the
shift, the margins with the clusters' spread), that is most of them.

The re-check copies the first queued rows (up to 64 MB, 2^19 rows, and 2^23 answers: rows
times ranges) into a compact column-major buffer, so it reads them coalesced instead of one
scattered sector per feature and centre tile (on the H100 this made 1M x 128, k = 1024 1.6
ms faster), and assigns them against up to 32 ranges of the centres at once (whole tiles of
up to 32 centres), a block row per range, then merges the ranges' answers in order (the
lowest index of the smallest distance, as one loop over every centre finds it): a few
thousand queued rows alone would keep one block per multiprocessor busy.

``assign="tc-fast"`` multiplies ``hi.hi`` alone (TF32 GEMM past d = 128) and decides every
row it can scale: FP16 (11-bit) labels, not exact, for users who ask for them.

Examples
--------
>>> from gpumine import GPUKMeans
>>> GPUKMeans(8, assign="tc-exact", device="gpu")      # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from gpumine.backend import cupy_module
from gpumine.exceptions import IncompatibleStrategy, InvalidParameterError
from gpumine.kernels import (
    BLOCK,
    declares,
    device_attribute,
    get_kernel,
    header_define,
    launch,
    resident_blocks,
)
from gpumine.kmeans.accumulation import flushed_units, model_units
from gpumine.kmeans.gpu import TILE_SIZES, assign_tiled, column_buffer, kernel_pointer, tiled_shape

__all__ = ["FUSED_DIMS", "INDIRECT_WAVES", "LISTED_DIMS", "SCREEN_COPY_SHARE", "SCREEN_MIN_ROWS",
           "SCREEN_SAMPLE_ROWS", "SCREEN_SHARE", "SCREEN_WAVES", "ScreenedRun", "assign_listed",
           "assign_tc_exact", "assign_tc_fast", "error_bound", "has_mma", "queued_rows",
           "sample_rows", "samples_plan"]

_SOURCE = "kmeans_assign_tc.cu"
#: Padded feature counts of the fused kernel (16 features an mma step); wider data goes
#: through the cuBLAS path.
FUSED_DIMS = (16, 32, 64, 128)
#: ... of which the widths whose kernels can seed Hamerly's bounds (where ``assign="hamerly"``
#: scans by its register loop, at most 32 features): :meth:`ScreenedRun.seed`.
SEED_DIMS = (16, 32)
#: ... and those whose kernels scan the rows a bounds run lists (:func:`assign_listed`:
#: ``assign="hamerly"`` on the tensor cores), every fused width.
LISTED_DIMS = FUSED_DIMS
_BM, _BN = 128, 64  # the fused kernel's rows a block; centres padded to a multiple of _BN
_PASSES = ("true", "false")  # the fused kernel's SPLIT: the split products, or hi.hi alone
#: The most padded centres for which the one-product kernel (the screen, tc-fast) keeps its
#: top-2 on keys (module docstring, "The screen"; ``GPUMINE_TC_KEY_CENTRES`` in common.cuh).
KEY_CENTRES = header_define("GPUMINE_TC_KEY_CENTRES")
_MEAN_ROWS = 32  # tc_center_mean's threads a feature (at most 32)
_RECHECK_BLOCK = BLOCK  # rows per block of the re-check, as assign_tiled's block
_RECHECK_BLOCKS_PER_SM = 2  # the re-check's fixed grid, per multiprocessor
_RECHECK_GATHER_BYTES = 64 << 20  # the compact copy of the first queued rows, at most
_RECHECK_SPLIT_ROWS = 1 << 19  # ... and at most this many rows (its ranges' scratch)
_RECHECK_RANGES = 32  # the compact rows' centres in up to this many ranges, a block row each
#                       (32 against 16: 1M x 128, k = 1024 1.489 -> 1.428 ms; 64 and 100
#                       features and 50k x 32, k = 2048 2-4 % faster, the rest within the
#                       spread; 64 or 128 ranges of smaller tiles no better;
#                       tc-recheck-ranges-h200-2026-11-28-db6c596.json)
_RECHECK_TILE = 32  # ... in tiles of at most this many centres (a range: whole tiles)
_RECHECK_SPLIT_BLOCKS = 64  # ... in this many blocks a multiprocessor, over all the ranges
#                             (4 to 64 within 1 % on the H200, the empty blocks cheap:
#                             tc-recheck-ranges-blocks-h200-2026-11-28-d20ebd9.json)
_RECHECK_SLOTS = 1 << 23  # the ranges' answers kept at most (ranges x compact rows)
_PRUNE_MIN_DIMS = 33  # recheck_pruned from this many features, ...
_PRUNE_MID_DIMS = 17  # ... and from this many with at least _PRUNE_MID_ROWS rows: its launches
_PRUNE_MID_ROWS = 1 << 21  # cost a small fit more than it saves (50k x 32 x 2048 +25 %); from
#                            4M rows neutral on uniform data, 10M x 32 x 1024 blobs 10.5 -> 8.3
#                            ms (records tc-prune-min-dims-*-h100-2026-11-27-*)
_PRUNE_MAX_K = 4096  # recheck_pruned up to this many centres (their gaps: k^2 floats) ...
_PRUNE_MAX_ROW_BYTES = 4096  # ... and rows of up to this many bytes (a warp's row in shared)
_PRUNE_CANDIDATES = 128  # a row with more candidates goes on to the full re-check
_PRUNE_MIN_ROWS = 1 << 14  # fewer queued rows go on at once (the full re-check is cheap
#                            then: uniform 1M x 128, k = 1024 queues 3,000-8,300; blobs
#                            125,000-400,000), and the centres' gaps are not computed
_PRUNE_WARPS = 8  # warps a block of recheck_pruned, a row at a time each
# (16 against 8: 1M x 128, k = 1024 2.73-2.76 -> 2.59-2.64 ms, the rest within 3 %; record
# tc-recheck-ranges-h100-2026-11-27-*)
_PRUNE_NEAREST = BLOCK  # each centre's nearest gaps kept, sorted (select_gap_rows: a thread
#                         each); more than _PRUNE_CANDIDATES, so a row reaching past them goes on
_PRUNE_LOAD_BYTES = 2048  # a warp loads up to 4 queued rows of this many bytes together
_GEMM_ELEMENTS = 1 << 24  # elements of the n x k product held at once on the cuBLAS path
_CUDA_R_32F = 0
_CUBLAS_OP_T = 1
_CUBLAS_COMPUTE_32F_PEDANTIC = 69
_CUBLAS_COMPUTE_32F_FAST_TF32 = 77
_CUBLAS_GEMM_DEFAULT = -1

_TYPES = ("float", "double")
#: The screen's padded widths, each with the most rows (a share of them) it may leave for a
#: bound run to keep it first: the screen plus the split kernel on those rows must not cost
#: more than the split kernel on every row. Measured on the H200 (record
#: ``tc-screen-share-h200-2026-11-28-ada29f9.json``: uniform data and blobs whose left share
#: spans 0-99 %), the screen kept costs as much as the split kernel alone at about 41 % of
#: the rows left at 128 features, 38 % at 64 and 28 % at 32; each limit is a little below
#: (where the two cost the same, the screen only adds a pass to a graph).
SCREEN_SHARE = {32: 0.2, 64: 0.3, 128: 0.35}
#: ... from this many rows (fewer: a call is too short for its extra launches).
SCREEN_MIN_ROWS = 1 << 16
#: A bound run's first call has no plan yet: from four times this many rows it first runs the
#: split kernel on this many rows (tiles of 128 spread over X), counting what the screen would
#: leave there, and takes that count's plan at once (the screen then the split kernel on its rows,
#: or the split kernel alone), where it used to take the split kernel on every row. A share
#: of 2^14 rows drawn at random is within 1.2 % of the whole's (three standard deviations)
#: next to limits of 20-35 %; 128 tiles of neighbours vary more where neighbours are alike.
SCREEN_SAMPLE_ROWS = 1 << 14
#: The split kernel after the screen takes the rows it left in a grid of this many waves of
#: its resident blocks, each block a tile of 128 rows after another (0: a block a tile of
#: every row, most of them leaving at once). Measured on the H200 (record
#: ``tc-settings-indirect-waves-h200-2026-11-28-2629092.json``): one wave 4 % faster than
#: a block a tile at 1M x 128 and 1M x 100, k = 1024 from the first rows as centres, the
#: rest within 1 %; two to eight waves within 1 % of a block a tile.
INDIRECT_WAVES = 1
#: The screen's grid in waves of its resident blocks, each block a tile of 128 rows after
#: another (0: a block a tile). A first call's screen after its sample takes at least one.
#: On the H200 one wave read 3-5 % slower than a block a tile, two 1-3 % (1M x 128 and 1M x
#: 64, 10M x 32, k = 1024; record ``tc-settings-screen-waves-2026-11-28-7d1f12c.json``).
SCREEN_WAVES = 0
#: The screen's padded widths where it copies the first rows it leaves, up to this share of
#: the rows, into a compact column-major buffer (float32 data), from which the split kernel
#: stages them; the rest it reads from X, a value at a time from scattered rows (a 32-byte
#: sector a value: d of them a row). Measured on the H200 (record
#: ``tc-source-ab-screen-copy-h200-2026-11-28-3f991d6.json``, uniform data, centres the first
#: k rows, the screen leaving 3-4 % of the rows): a bound call 1.44 -> 1.39 ms at 1M x 128, k
#: = 1024, 4 % faster at 64 and 100 features; at 32 (a row 32 sectors) the copy's cost in the
#: screen took what it saved (cb10f05's record), so the kernels compile it from 64 only. The
#: copy costs a sixteenth of X's memory; rows past it are read as before.
SCREEN_COPY_SHARE = {64: 1 / 16, 128: 1 / 16}

_BOUNDS: dict = {}


def _gamma(m: int, u: float) -> float:
    return m * u / (1 - m * u)


def _accumulation(d: int, flushed: bool = True) -> float:
    """The module docstring's ``beta``: what the fused kernel's FP32 accumulation on the tensor
    cores can move a product of d features, relative to ``sum |x_l c_l|`` (blocks of at most
    four products a truncation, four blocks an m16n8k16 instruction:
    :func:`~gpumine.kmeans.accumulation.model_units`, which the GPU tests hold the device to).

    Past 64 features (the split kernel's feature steps not held in registers) its large
    products are flushed: each instruction's from a zero accumulator, added in float32
    (:func:`~gpumine.kmeans.accumulation.flushed_units`); the small products keep one
    accumulator over every feature, as the one-product kernel's do (``flushed`` False).

    Examples
    --------
    >>> bool(_accumulation(64) * 2.0**23 < 100), bool(_accumulation(128) * 2.0**23 < 30)
    (True, True)
    """
    units = model_units(d)
    # the split kernel flushes where it does not hold its fragments (HalfTile::HELD)
    held = d > FUSED_DIMS[-1] or _holds_fragments(_padded_width(d), split=True)
    large = flushed_units(d) if flushed and not held else units
    grow = 1 + 2.0 ** -9  # the splits' magnitudes over the products'
    return grow * (2.0 ** -23 * large + 2.0 ** -33 * 2 * units + 2.0 ** -24)


def error_bound(d: int, dtype, path: str = "half") -> np.ndarray:
    """``[kappa_g, kappa_d, a, 0, kappa_s]`` of the module docstring.

    ``path`` is ``"half"`` (the fused split-FP16 kernel, d <= 128, its large products
    flushed an instruction at a time past 64 features), ``"half-held"`` (the one-product
    kernel, the screen and tc-fast: one accumulator over every feature) or ``"sgemm"``
    (cuBLAS float32 GEMM beyond).

    Examples
    --------
    >>> kappa_g, kappa_d, a, fast, kappa_s = error_bound(128, np.float32)
    >>> bool(1e-6 < kappa_g < 1e-5 and kappa_d < 1e-5 and fast == 0)
    True
    >>> bool(error_bound(128, np.float32, "half-held")[0] > 4 * kappa_g)
    True
    >>> bool(error_bound(64, np.float32, "half-held")[0] == error_bound(64, np.float32)[0])
    True
    """
    u = 2.0 ** -24
    u_data = u if np.dtype(dtype) == np.float32 else 2.0 ** -53
    if path in ("half", "half-held"):
        kappa_p = (3.01 * 2.0 ** -22 + 1.01 * 2.0 ** -24 + 2.0 ** -34 * d**0.5
                   + 1.002 * _accumulation(d, flushed=path == "half"))
    elif path == "sgemm":
        kappa_p = _gamma(d + 1, u)
    else:
        raise InvalidParameterError(
            f"path must be 'half', 'half-held' or 'sgemm', not {path!r}")
    kappa_g = (kappa_p + 3 * u) * (1 + 2.0 ** -20)
    kappa_d = (2 * u_data + u_data**2 + _gamma(d + 1, u_data) * (1 + u_data) ** 2) \
        * (1 + 2.0 ** -20)
    return np.array([kappa_g, kappa_d, 8.0 * d * 2.0 ** -126, 0.0, 2.01 * u],
                    dtype=np.float64)


def _device_bound(cp, d: int, dtype, path: str, exact: bool):
    """The bound as a device array, cached per device, d, dtype, path and mode (no copy per
    call). Its fourth entry is 1 for ``tc-fast``: the kernels then decide every row. The
    fused kernels' (``"half"``) holds ten: the split kernel's five, then the one-product
    kernel's (``"half-held"``: the screen's, and what the split kernel counts for it)."""
    key = (cp.cuda.runtime.getDevice(), d, np.dtype(dtype).name, path, exact)
    bound = _BOUNDS.get(key)
    if bound is None:
        host = error_bound(d, dtype, path)
        if path == "half":
            host = np.concatenate([host, error_bound(d, dtype, "half-held")])
        host[3::5] = 0.0 if exact else 1.0  # each kernel's tc-fast flag
        bound = _BOUNDS[key] = cp.asarray(host)
    return bound


_LISTED_PLANS: dict = {}


def _listed_plan(cp):
    """A device int32 ``[1]`` (the split kernel's plan for listed rows), cached per device
    (made on a device's first call, never while a stream captures)."""
    device = cp.cuda.runtime.getDevice()
    if device not in _LISTED_PLANS:
        _LISTED_PLANS[device] = cp.ones(1, dtype=cp.int32)
    return _LISTED_PLANS[device]


_MMA_80: dict = {}


def has_mma(cp) -> bool:
    """Compute capability 8.0 or newer (FP16 m16n8k16 and TF32 mma.sync, cp.async), cached
    per device."""
    device = cp.cuda.runtime.getDevice()
    if device not in _MMA_80:
        _MMA_80[device] = int(cp.cuda.Device(device).compute_capability) >= 80
    return _MMA_80[device]


def _holds_fragments(dp: int, split: bool) -> bool:
    """Whether ``assign_tc_half<T, dp, split>`` holds the warp's row fragments in registers
    for the whole kernel (``HalfTile::HELD``: up to 64 features, and the one-product kernel
    at every width); where it does not (the split kernel at 128), it reads them a feature
    step at a time and flushes its large products (:func:`_accumulation`)."""
    return dp <= 64 or not split


def half_shared_bytes(dp: int, exact: bool = True) -> int:
    """Dynamic shared memory of ``assign_tc_half<T, dp, exact>`` (its comment's layout:
    the split kernel's centre tiles of 64, 32 at dp = 128, hi and lo parts; the one-product
    kernel's hi parts alone, tiles of 128 up to dp = 32, else 64; one area for the rows and
    the centres where the fragments are held: up to dp = 64, and the one-product kernel's
    at 128)."""
    held = _holds_fragments(dp, exact)
    sw = dp // 2 + 4
    bn = (64 if held else 32) if exact else (128 if dp <= 32 else 64)
    staging, centres = 2 * _BM * sw, (4 if exact else 2) * bn * sw
    areas = max(staging, centres) if held else staging + centres
    # the areas, the centre norms and row coefficients (words), the row norms, the shift and
    # the screen's terms (doubles), the rows' indices (8 bytes), the rows' previous labels
    # and a flag (ints, four for alignment)
    return (areas + 2 * bn + _BM) * 4 + (2 * _BM + dp) * 8 + _BM * 8 + (_BM + 4) * 4


def _padded_width(d: int) -> int:
    for width in FUSED_DIMS:
        if d <= width:
            return width
    return -(-d // 8) * 8


class _Scratch:
    """The assignment's device buffers: new ones each call, or, kept (a run's), the same
    ones every call once the first has made them -- so a run's later calls allocate
    nothing and can be captured into a CUDA graph (a buffer asked for anew while a stream
    captures is an error, not a silent allocation)."""

    def __init__(self, keep: bool = False):
        self._keep = keep
        self._arrays: dict = {}

    def empty(self, name: str, shape, dtype):
        cp = cupy_module()
        shape = tuple(shape) if isinstance(shape, tuple) else (int(shape),)
        if not self._keep:
            return cp.empty(shape, dtype=dtype)
        array = self._arrays.get(name)
        if array is None or array.shape != shape or array.dtype != np.dtype(dtype):
            if cp.cuda.get_current_stream().is_capturing():
                raise IncompatibleStrategy(
                    f"tc-exact's buffer {name!r} {shape} was not made before the capture: "
                    "call the run once outside a CUDA graph capture first")
            array = self._arrays[name] = cp.empty(shape, dtype=dtype)
        return array

    def zeros(self, name: str, shape, dtype):
        array = self.empty(name, shape, dtype)
        array.fill(0)
        return array


@declares(_SOURCE, "tc_center_mean", _TYPES)
@declares(_SOURCE, "tc_prepare_centers", _TYPES)
@declares(_SOURCE, "assign_recheck", _TYPES, TILE_SIZES)
@declares(_SOURCE, "tc_split_centers")
@declares(_SOURCE, "assign_tc_half", _TYPES, FUSED_DIMS, _PASSES, ("false",), ("false",))
@declares(_SOURCE, "assign_tc_half", _TYPES, FUSED_DIMS, ("false",), ("false",), ("true",))
@declares(_SOURCE, "assign_tc_half", _TYPES, SEED_DIMS, _PASSES, ("true",), ("false",))
@declares(_SOURCE, "assign_tc_half", _TYPES, SEED_DIMS, ("false",), ("true",), ("true",))
@declares(_SOURCE, "tc_center_residuals")
@declares(_SOURCE, "tc_screen_plan")
def _assign(X, centers, labels, changed, exact: bool, run=None, bounds=None):
    """Launch the assignment; returns the device counter of rows queued for the re-check.

    ``run``: a :class:`ScreenedRun` whose plan may put the screen first (module docstring,
    "The screen") and whose buffers the call reuses; None: the split products on every
    row, in buffers of the call's own. ``bounds``: None, or float32 ``(upper, lower)`` of n
    rows, filled with +inf and 0 by the caller (:meth:`BoundAssign.seeded
    <gpumine.kmeans.bounds.BoundAssign.seeded>`), that receive the bounds of every row the
    fused kernels decide for these centres (``seed_bounds``: from its top-2 scores; the
    re-checked rows, and every row of the paths that write none, keep the fill), so a bounds
    assignment goes on from this call without a full scan (:meth:`ScreenedRun.seed`).

    Before compute capability 8.0 (no FP16 m16n8k16 mma) tc-exact runs the tiled kernel,
    whose labels it reproduces anyway; tc-fast has nothing to fall back on and raises.
    """
    cp = cupy_module()
    if not has_mma(cp):
        if not exact:
            raise IncompatibleStrategy("assign='tc-fast' needs FP16 and TF32 tensor cores "
                                       "(compute capability 8.0 or newer); use 'tiled'")
        assign_tiled(X, centers, labels, changed)  # bounds as the caller filled them
        return cp.zeros(1, dtype=cp.uint32)
    scratch = run.scratch if run is not None else _Scratch()
    XT = column_buffer(X)
    n, d = X.shape
    k = centers.shape[0]
    centers, shift, padded, norms, counters, c_hi, c_lo = _prepare(cp, scratch, X, centers)
    dp = _padded_width(d)
    fused = dp in FUSED_DIMS
    k_pad = -(-k // _BN) * _BN
    cmax, queue_size = counters[:1], counters[1:2]
    queue = scratch.empty("queue", n, cp.int64)
    queue_best = scratch.empty("queue_best", n, cp.int32)
    bound = _device_bound(cp, d, X.dtype, "half" if fused else "sgemm", exact)
    if fused:
        # the bounds for a seed (SEED_DIMS: the widths a bounds assignment takes)
        seeds = bounds is not None and dp in SEED_DIMS
        pointers = tuple(kernel_pointer(b) for b in (bounds if seeds else (None, None)))

        # the one-product kernel keys its top-2 up to KEY_CENTRES (module docstring)
        keys = k_pad <= KEY_CENTRES

        def fused_kernel(split):
            return _half_kernel(X.dtype, dp, split, seeds, keys)

        common = (XT, shift, c_hi, c_lo, norms, cmax, bound, np.int64(n), np.int32(d),
                  np.int32(k_pad))
        kernel, shared = fused_kernel(exact)
        if exact and run is not None and run.screens(n, dp):
            c_residual, screen_queue, misses = counters[2:3], counters[3:4], counters[4:5]
            launch(get_kernel(_SOURCE, "tc_center_residuals"), -(-k_pad * 32 // BLOCK), BLOCK,
                   (padded, np.int32(k_pad), np.int32(dp), cmax, c_residual))
            known = run.known_plan()
            sampled = run.samples(n)
            if sampled:  # the first call: its plan from a sample, both passes launched
                _sample_plan(run, scratch, kernel, shared, common, labels, changed, c_residual,
                             pointers)
                known = None
            rows = scratch.empty("rows", n, cp.int64)
            screen, screen_shared = fused_kernel(False)  # compiled before any capture
            # the screen's copy of the first rows it leaves, float data (the split kernel
            # stages them from it as it stages every row, not a scattered value at a time)
            cap = min(-(-int(n * SCREEN_COPY_SHARE.get(dp, 0)) // _BM), -(-n // _BM)) * _BM
            copy = (scratch.empty("screen_copy", (d, cap), X.dtype)
                    if X.dtype == np.float32 and cap else None)
            copy_args = (kernel_pointer(copy), np.int64(cap if copy is not None else 0))
            # the split kernel's grid over the screen's rows (asked before any capture)
            grid = every = -(-n // _BM)
            if INDIRECT_WAVES:
                grid = min(every, INDIRECT_WAVES * resident_blocks(kernel, _BM, shared))
            if known == 0:  # the split kernel takes every row, whatever the device's plan
                rows = None
            else:  # the screen (it leaves at once where the device's plan is 0)
                # its queued rows' best centres go to queue_best, which the split kernel's
                # own queue overwrites after it (stream order); nothing reads the screen's.
                # After a sample, a wave of blocks taking tiles in turn: where the sample's
                # plan is 0 a block a tile would be thousands of blocks that only leave.
                waves = max(SCREEN_WAVES, 1) if sampled else SCREEN_WAVES
                screen_grid = (min(every, waves * resident_blocks(screen, _BM, screen_shared))
                               if waves else every)
                launch(screen, screen_grid, _BM,
                       (*common, run.plan, kernel_pointer(None), kernel_pointer(None),
                        c_residual, kernel_pointer(None), labels, kernel_pointer(changed),
                        screen_queue, rows, queue_best, *pointers, *copy_args),
                       shared_mem=screen_shared)
            # the screen's rows, or all of them where the device's plan is 0
            launch(kernel, every if rows is None else grid, _BM,
                   (*common, run.plan, kernel_pointer(rows), screen_queue, c_residual, misses,
                    labels, kernel_pointer(changed), queue_size, queue, queue_best, *pointers,
                    *copy_args),
                   shared_mem=shared)
            launch(get_kernel(_SOURCE, "tc_screen_plan"), 1, 1,
                   (run.plan, screen_queue, misses, np.uint32(run.limit(n, dp))))
            run.plan_sent()
        else:
            launch(kernel, -(-n // _BM), _BM,
                   (*common, *(kernel_pointer(None),) * 5, labels, kernel_pointer(changed),
                    queue_size, queue, queue_best, *pointers, kernel_pointer(None),
                    np.int64(0)),
                   shared_mem=shared)
    else:
        _assign_gemm(cp, X, k, shift, padded, norms, cmax, bound, labels, changed,
                     queue_size, queue, queue_best, exact)
    if exact or fused:  # tc-fast's fused kernel queues the rows it cannot scale
        rest_size, rest = queue_size, queue
        if exact and _prunes(n, d, k, X.dtype.itemsize):
            rest_size, rest = _recheck_pruned(XT, centers, queue_size, queue, queue_best,
                                              labels, changed, scratch)
        _recheck(XT, centers, rest_size, rest, labels, changed, scratch)
    return queue_size


def _half_kernel(dtype, dp: int, split: bool, seeds: bool, keys: bool):
    """``assign_tc_half<dtype, dp, split, seeds, keys and not split>`` and its dynamic shared
    memory (opted in past 48 KB): the fused kernel a call launches."""
    kernel = get_kernel(_SOURCE, "assign_tc_half", dtype, dp, "true" if split else "false",
                        "true" if seeds else "false", "true" if keys and not split else "false")
    shared = half_shared_bytes(dp, split)
    if shared > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = shared
    return kernel, shared


def _prepare(cp, scratch, X, centers):
    """The call's centres: contiguous in X's dtype, their mean (the shift), shifted and
    padded to ``(k_pad, dp)`` float32 with their norms and the largest (``counters[0]``,
    the other four zeroed: queued rows, the screen's rho_c, its queue and misses), and on
    the fused path their FP16 hi and lo parts (else None, None)."""
    d = X.shape[1]
    k = centers.shape[0]
    centers = cp.ascontiguousarray(centers, dtype=X.dtype)
    shift = scratch.empty("shift", d, cp.float64)
    launch(get_kernel(_SOURCE, "tc_center_mean", X.dtype), (-(-d // 32),), (32, _MEAN_ROWS),
           (centers, np.int32(k), np.int32(d), shift))
    dp = _padded_width(d)
    k_pad = -(-k // _BN) * _BN
    padded = scratch.empty("padded", (k_pad, dp), cp.float32)
    norms = scratch.empty("norms", k_pad, cp.float32)
    # [max ||c|| as float bits, rows queued, the screen's rho_c as float bits, rows the
    # screen queued, rows it would have queued]
    counters = scratch.zeros("counters", 5, cp.uint32)
    launch(get_kernel(_SOURCE, "tc_prepare_centers", X.dtype), k_pad, 128,
           (centers, shift, np.int32(k), np.int32(d), np.int32(dp), padded, norms, counters[:1]))
    c_hi = c_lo = None
    if dp in FUSED_DIMS:
        words = k_pad * dp // 2
        c_hi = scratch.empty("c_hi", words, cp.uint32)
        c_lo = scratch.empty("c_lo", words, cp.uint32)
        launch(get_kernel(_SOURCE, "tc_split_centers"), -(-words // BLOCK), BLOCK,
               (padded, np.int64(words), counters[:1], c_hi, c_lo))
    return centers, shift, padded, norms, counters, c_hi, c_lo


@declares(_SOURCE, "assign_tc_half", _TYPES, LISTED_DIMS, _PASSES, ("true",), ("false",))
@declares(_SOURCE, "assign_tc_half", _TYPES, LISTED_DIMS, ("false",), ("true",), ("true",))
@declares(_SOURCE, "tc_listed_plan")
@declares(_SOURCE, "tc_listed_forward")
def assign_listed(X, centers, labels, changed, rows, row_count, bounds, scratch,
                  plan=None, sample=False) -> None:
    """tc-exact over the rows a bounds assignment lists (``assign="hamerly"``'s scan on
    tensor cores, :class:`~gpumine.kmeans.bounds.BoundAssign`), their number read on the
    device (fixed grids, no host sync): the split kernel over them -- or, where ``plan``
    says so, the screen first and the split kernel over the rows it leaves -- writing the
    bounds of the rows it decides into ``bounds`` (``seed_bounds``), then the re-check of
    the rows the kernels leave, whose bounds stay as the caller wrote them.

    ``plan`` (a run's device int32 ``(1,)``, 2 to start; None, or a width the screen does
    not take, :data:`SCREEN_SHARE`: the split kernel alone) follows the screen's share as
    a :class:`ScreenedRun`'s plan does, over the listed rows: 1, the screen then the split
    kernel; 2, the split kernel alone, counting the rows the screen would leave; the next
    call screens while those are at most :data:`SCREEN_SHARE` of the listed rows
    (``tc_listed_plan``). Both passes are launched every call, the one the device's plan
    does not take leaving at once. With ``sample`` (a bounds run's first call, which lists
    every row) and from four times :data:`SCREEN_SAMPLE_ROWS` rows, the call first takes
    its plan from a sample of the rows (:func:`_sample_pass`), as a :class:`ScreenedRun`'s
    first call does: without it, that call's split kernel took every row, about 2.5 ms at
    1M x 128, k = 1024 where the screen takes 1.1 (H200, record
    ``first-calls-h200-2026-11-29-7921aa2.txt``).

    Parameters
    ----------
    X : cupy.ndarray (n, d), a view of a (d, n) column-major buffer, d <= 128
    centers : cupy.ndarray (k, d)
    labels : cupy.ndarray int32 (n)
        The listed rows' labels are replaced (changes counted in ``changed``).
    changed : cupy.ndarray uint64 (1) or None
    rows, row_count : cupy.ndarray int64 (n) and uint32 (1)
        The listed rows and how many.
    bounds : (upper, lower), cupy.ndarray float32 (n) each
    scratch : _Scratch
        The caller's buffers (kept: its later calls allocate nothing).
    plan : cupy.ndarray int32 (1) or None
    sample : bool
        The call lists every row (a full scan): the plan may come from a sample first.
    """
    cp = cupy_module()
    n, d = X.shape
    k = centers.shape[0]
    dp = _padded_width(d)
    if dp not in LISTED_DIMS or not has_mma(cp):
        raise IncompatibleStrategy(
            f"the listed rows' tensor-core pass takes {LISTED_DIMS[-1]} features at most and "
            "compute capability 8.0")
    XT = column_buffer(X)
    centers, shift, padded, norms, counters, c_hi, c_lo = _prepare(cp, scratch, X, centers)
    queue_size = counters[1:2]
    queue = scratch.empty("queue", n, cp.int64)
    queue_best = scratch.empty("queue_best", n, cp.int32)
    k_pad = -(-k // _BN) * _BN
    bound = _device_bound(cp, d, X.dtype, "half", True)
    null = kernel_pointer(None)
    common = (XT, shift, c_hi, c_lo, norms, counters[:1], bound, np.int64(n), np.int32(d),
              np.int32(k_pad))

    keys = k_pad <= KEY_CENTRES  # the one-product kernel's keyed top-2 (module docstring)

    def kernel_of(split):
        kernel, shared = _half_kernel(X.dtype, dp, split, True, keys)
        grid = min(-(-n // _BM), max(INDIRECT_WAVES, 1) * resident_blocks(kernel, _BM, shared))
        return kernel, shared, grid

    kernel, shared, grid = kernel_of(True)
    if plan is None or dp not in SCREEN_SHARE:  # the split kernel alone
        launch(kernel, grid, _BM,
               (*common, _listed_plan(cp), rows, row_count, null, null, labels,
                kernel_pointer(changed), queue_size, queue, queue_best, *bounds, null,
                np.int64(0)),
               shared_mem=shared)
    else:
        c_residual, screen_queue, misses = counters[2:3], counters[3:4], counters[4:5]
        launch(get_kernel(_SOURCE, "tc_center_residuals"), -(-k_pad * 32 // BLOCK), BLOCK,
               (padded, np.int32(k_pad), np.int32(dp), counters[:1], c_residual))
        if sample and samples_plan(n):  # every row listed: a sample's plan
            counts = _sample_pass(n, scratch, kernel, shared, common, labels, changed,
                                  c_residual, bounds)
            # the plan reads the screen's count under plan 1, the misses under 2: both these
            launch(get_kernel(_SOURCE, "tc_listed_plan"), 1, 1,
                   (plan, counts[:1], counts[1:2], counts[1:2], np.float64(SCREEN_SHARE[dp])))
        left = scratch.empty("listed_left", n, cp.int64)
        screen, screen_shared, screen_grid = kernel_of(False)
        # plan 1: the screen over the listed rows, its queue into `left`
        launch(screen, screen_grid, _BM,
               (*common, plan, rows, row_count, c_residual, null, labels,
                kernel_pointer(changed), screen_queue, left, queue_best, *bounds, null,
                np.int64(0)),
               shared_mem=screen_shared)
        # plan 2: the listed rows into `left` as they are
        launch(get_kernel(_SOURCE, "tc_listed_forward"),
               device_attribute("MultiProcessorCount") * 4, BLOCK,
               (plan, rows, row_count, left, screen_queue))
        launch(kernel, grid, _BM,
               (*common, plan, left, screen_queue, c_residual, misses, labels,
                kernel_pointer(changed), queue_size, queue, queue_best, *bounds, null,
                np.int64(0)),
               shared_mem=shared)
        launch(get_kernel(_SOURCE, "tc_listed_plan"), 1, 1,
               (plan, row_count, screen_queue, misses, np.float64(SCREEN_SHARE[dp])))
    rest_size, rest = queue_size, queue
    if _prunes(n, d, k, X.dtype.itemsize):
        rest_size, rest = _recheck_pruned(XT, centers, queue_size, queue, queue_best, labels,
                                          changed, scratch)
    _recheck(XT, centers, rest_size, rest, labels, changed, scratch)


def _sample_plan(run, scratch, kernel, shared, common, labels, changed, c_residual,
                 pointers) -> None:
    """A bound run's first plan from :data:`SCREEN_SAMPLE_ROWS` rows (:func:`_sample_pass`),
    then ``tc_screen_plan`` with the sample's limit."""
    left = _sample_pass(run.X.shape[0], scratch, kernel, shared, common, labels, changed,
                        c_residual, pointers)[1:2]
    launch(get_kernel(_SOURCE, "tc_screen_plan"), 1, 1,
           (run.plan, left, left, np.uint32(run.limit(SCREEN_SAMPLE_ROWS,
                                                      _padded_width(run.X.shape[1])))))


def _sample_pass(n, scratch, kernel, shared, common, labels, changed, c_residual,
                 pointers):
    """The split kernel (``kernel``) on :data:`SCREEN_SAMPLE_ROWS` of the n rows
    (:func:`sample_rows`) under plan 2, counting the rows the screen's margin would leave
    there: a first call's plan (:func:`_sample_plan`; a bounds run's full scan,
    :func:`assign_listed`). Returns the sample's counts, device uint32 ``(3,)``: its rows,
    the rows the screen would leave there and the rows the split kernel queued.

    The sample's decided rows get their labels and count in ``changed`` as in any pass (the
    call's full pass then finds them unchanged: each change counted once), and a seed call's
    bounds (``pointers``, which the full pass writes again); its queue goes to buffers of the
    sample's own, so its undecided rows are left to the full pass.
    """
    cp = cupy_module()
    m = SCREEN_SAMPLE_ROWS
    # one upload from the host (the rows, then the plan and the counts in two int64 words):
    # built with CuPy, the rows and fills were seven small launches of Python's time
    host = np.empty(m + 2, dtype=np.int64)
    host[:m] = sample_rows(n, m)
    # plan 2; [rows in the sample, rows the screen would leave there, rows queued]
    host[m:].view(np.int32)[:] = (2, m, 0, 0)
    sample = scratch.empty("sample", m + 2, cp.int64)
    sample.set(host)  # sync: none, a copy of pageable host memory in stream order
    rows = sample[:m]
    words = sample[m:].view(cp.int32)
    plan, counts = words[:1], words[1:].view(cp.uint32)
    queue = scratch.empty("sample_queue", m, cp.int64)
    queue_best = scratch.empty("sample_queue_best", m, cp.int32)
    launch(kernel, -(-m // _BM), _BM,
           (*common, plan, rows, counts[:1], c_residual, counts[1:2], labels,
            kernel_pointer(changed), counts[2:3], queue, queue_best, *pointers,
            kernel_pointer(None), np.int64(0)),
           shared_mem=shared)
    return counts


def samples_plan(n: int) -> bool:
    """Whether a first call over ``n`` rows takes its plan from a sample: from four times
    :data:`SCREEN_SAMPLE_ROWS` rows (below that the sample would be a quarter or more of
    the call). One rule for a :class:`ScreenedRun`'s first call and a bounds run's
    (:func:`assign_listed`'s ``sample``).

    Examples
    --------
    >>> samples_plan(4 * SCREEN_SAMPLE_ROWS), samples_plan(4 * SCREEN_SAMPLE_ROWS - 1)
    (True, False)
    """
    return n >= 4 * SCREEN_SAMPLE_ROWS


def sample_rows(n: int, m: int, xp=np):
    """The first call's sample: ``m // 128`` tiles of 128 consecutive rows, evenly spread
    over n rows (``m`` a multiple of 128, ``n >= m``), as int64 row numbers.

    Whole tiles, because X is column-major: scattered rows cost the split kernel a 32-byte
    sector a value (16,384 strided rows took 110 us at 1M x 128, k = 1024 on the H200,
    record ``prof-auto-fits-1-20-h200-2026-11-28-dfa82ce.txt``), a tile of consecutive
    rows whole sectors.

    Examples
    --------
    >>> sample_rows(1000, 256).reshape(2, 128)[:, :2].tolist()
    [[0, 1], [500, 501]]
    """
    tiles = m // _BM
    starts = xp.arange(tiles, dtype=xp.int64) * (n // tiles)
    return (starts[:, None] + xp.arange(_BM, dtype=xp.int64)[None, :]).reshape(-1)


def _prunes(n: int, d: int, k: int, itemsize: int) -> bool:
    """Whether tc-exact's queued rows go through :func:`_recheck_pruned` first: from
    ``_PRUNE_MIN_DIMS`` features (``_PRUNE_MID_DIMS`` from ``_PRUNE_MID_ROWS`` rows), up to
    ``_PRUNE_MAX_K`` centres and ``_PRUNE_MAX_ROW_BYTES`` a row, and only with at least
    ``_PRUNE_MIN_ROWS`` rows (fewer can never queue enough: nothing is launched)."""
    wide = d >= _PRUNE_MIN_DIMS or (d >= _PRUNE_MID_DIMS and n >= _PRUNE_MID_ROWS)
    return (wide and n >= _PRUNE_MIN_ROWS and k <= _PRUNE_MAX_K
            and d * itemsize <= _PRUNE_MAX_ROW_BYTES)


@declares(_SOURCE, "centre_gaps", _TYPES)
@declares(_SOURCE, "select_gap_rows")
@declares(_SOURCE, "recheck_pruned", _TYPES, (_PRUNE_CANDIDATES,))
def _recheck_pruned(XT, centers, queue_size, queue, queue_best, labels, changed, scratch=None):
    """The queued rows with few candidates, by the gaps between centres; returns the
    device counter and the rows left for :func:`_recheck`.

    A queued row's best centre by the scores, ``b``, is usually its label, and on
    clustered data every centre of another cluster is farther from ``b`` than twice the
    row's distance to it: by the triangle inequality such a centre cannot be nearer (the
    kernel's comment has the rounding). ``centre_gaps`` bounds the k x k distances between
    centres from below once per call; ``recheck_pruned`` takes a row's distances to the
    other centres (candidates) in float64, a warp a distance, and computes ``tiled``'s own
    float32 distance only for those that can still be the label by it (mostly one: then it
    is the label without), so the label is tiled's; a row with more than
    ``_PRUNE_CANDIDATES`` candidates goes on. On 1M blob rows of 128 features around 64
    centres with k = 1024, 40 % of the rows are queued (the bound scales with the rows' and
    centres' norms, the margins with the blobs' spread) and each has about the sixteen
    centres of its blob as candidates, not 1024. With fewer than ``_PRUNE_MIN_ROWS``
    queued (read on the device), every queued row goes on. The caller checks
    :func:`_prunes` (at most ``_PRUNE_MAX_K`` centres and ``_PRUNE_MAX_ROW_BYTES`` a row).

    Each centre's ``_PRUNE_NEAREST`` smallest gaps are selected and sorted once a call
    (``select_gap_rows``: a radix selection and a bitonic sort a centre), so a row's
    candidates are a prefix of its best centre's list, read in a sector or two instead of k
    floats; and a warp loads two or four consecutive queued rows together (rows of at most
    ``_PRUNE_LOAD_BYTES / 4`` and ``/ 2`` bytes), fewer sectors of the column-major points
    than one row at a time. With a full sort of each row, 2.27 -> 1.53 ms for the 403,665
    queued rows above (record ``tc-recheck-prune-variants-h100-2026-11-27-*``).
    """
    cp = cupy_module()
    scratch = _Scratch() if scratch is None else scratch
    d, n = XT.shape
    k = centers.shape[0]
    gaps = scratch.empty("gaps", (k, k), cp.float32)
    tiles = -(-k // 64)
    launch(get_kernel(_SOURCE, "centre_gaps", XT.dtype), (tiles, tiles), 256,
           (centers, np.int32(k), np.int32(d), queue_size, np.uint32(_PRUNE_MIN_ROWS), gaps))
    width = min(k, _PRUNE_NEAREST)
    nearest = scratch.empty("nearest", (k, width), cp.float32)
    order = scratch.empty("order", (k, width), cp.int32)
    launch(get_kernel(_SOURCE, "select_gap_rows"), k, _PRUNE_NEAREST,
           (gaps, np.int32(k), np.int32(width), queue_size, np.uint32(_PRUNE_MIN_ROWS), nearest,
            order))
    # the direct distance's relative and absolute error: NumPy floats on the host, no sync
    kappa_d, absolute = (float(v) for v in error_bound(d, XT.dtype)[1:3])
    rest_size = scratch.zeros("rest_size", 1, cp.uint32)
    rest = scratch.empty("rest", n, cp.int64)
    row_bytes = d * XT.dtype.itemsize
    rows = next(r for r in (4, 2, 1) if r * row_bytes <= _PRUNE_LOAD_BYTES or r == 1)
    stride = -(-row_bytes // 16) * 16 + 32
    shared = _PRUNE_WARPS * (rows * stride + 12 * _PRUNE_CANDIDATES)
    sms = device_attribute("MultiProcessorCount")
    launch(get_kernel(_SOURCE, "recheck_pruned", XT.dtype, _PRUNE_CANDIDATES),
           min(-(-n // (_PRUNE_WARPS * rows)), sms * 8), 32 * _PRUNE_WARPS,
           (XT, np.int64(n), np.int32(d), centers, np.int32(k), nearest, order,
            np.int32(width), np.int32(rows), np.float64(kappa_d), np.float64(absolute),
            queue_size, queue, queue_best, np.uint32(_PRUNE_MIN_ROWS), labels,
            kernel_pointer(changed), rest_size, rest), shared_mem=shared)
    return rest_size, rest


@declares(_SOURCE, "gather_queued", _TYPES)
@declares(_SOURCE, "assign_recheck_split", _TYPES, TILE_SIZES)
@declares(_SOURCE, "recheck_merge", _TYPES)
def _recheck(XT, centers, queue_size, queue, labels, changed, scratch=None):
    """The queued rows' direct assignment, with fixed grids (no host read of the queue's
    length): the first rows (at most ``_RECHECK_GATHER_BYTES`` and ``_RECHECK_SPLIT_ROWS``)
    gathered into a compact buffer (gather_queued) and assigned against up to
    ``_RECHECK_RANGES`` ranges of centres at once (assign_recheck_split: a few thousand
    queued rows alone kept a block per multiprocessor busy), the ranges' answers merged
    (recheck_merge); any further rows by assign_recheck from the scattered rows."""
    cp = cupy_module()
    scratch = _Scratch() if scratch is None else scratch
    d, n = XT.shape
    k = centers.shape[0]
    tile, dt = tiled_shape(k, d, XT.dtype.itemsize)
    shared = tile * dt * XT.dtype.itemsize
    sms = device_attribute("MultiProcessorCount")
    blocks = min(-(-n // _RECHECK_BLOCK), sms * _RECHECK_BLOCKS_PER_SM)
    split_tile = min(tile, _RECHECK_TILE)
    chunk = -(-max(split_tile, -(-k // _RECHECK_RANGES)) // split_tile) * split_tile
    ranges = -(-k // chunk)  # whole tiles a range
    rows = min(max(1, _RECHECK_GATHER_BYTES // (d * XT.dtype.itemsize)), _RECHECK_SPLIT_ROWS,
               max(1, _RECHECK_SLOTS // ranges))
    cap = min(-(-n // _RECHECK_BLOCK), max(1, rows // _RECHECK_BLOCK)) * _RECHECK_BLOCK
    compact = scratch.empty("compact", (d, cap), XT.dtype)
    best = scratch.empty("best", (ranges, cap), XT.dtype)
    best_index = scratch.empty("best_index", (ranges, cap), cp.int32)
    launch(get_kernel(_SOURCE, "gather_queued", XT.dtype), sms * 8, BLOCK,
           (XT, np.int64(n), np.int32(d), queue_size, queue, np.int64(cap), compact))
    launch(get_kernel(_SOURCE, "assign_recheck_split", XT.dtype, split_tile),
           (max(1, min(cap // _RECHECK_BLOCK, -(-sms * _RECHECK_SPLIT_BLOCKS // ranges))),
            ranges), _RECHECK_BLOCK,
           (compact, np.int64(cap), centers, np.int32(d), np.int32(k), np.int32(dt),
            np.int32(chunk), queue_size, best, best_index),
           shared_mem=split_tile * dt * XT.dtype.itemsize)
    launch(get_kernel(_SOURCE, "recheck_merge", XT.dtype), min(cap // BLOCK, sms * 8), BLOCK,
           (np.int64(cap), np.int32(ranges), queue_size, queue, best, best_index, labels,
            kernel_pointer(changed)))
    launch(get_kernel(_SOURCE, "assign_recheck", XT.dtype, tile), blocks, _RECHECK_BLOCK,
           (XT, centers, np.int64(n), np.int32(d), np.int32(k), np.int32(dt), np.int64(cap),
            queue_size, queue, labels, kernel_pointer(changed)), shared_mem=shared)


@declares(_SOURCE, "tc_gemm_epilogue")
def _assign_gemm(cp, X, k, shift, padded, norms, cmax, bound, labels, changed, queue_size,
                 queue, queue_best, exact):
    """d past the fused kernel: cuBLAS GEMM over row tiles (float32 arithmetic for tc-exact,
    TF32 for tc-fast) of the shifted points, then the top-2 epilogue."""
    from cupy_backends.cuda.libs import cublas

    n, d = X.shape
    k_pad, dp = padded.shape
    rows = max(1, min(n, _GEMM_ELEMENTS // k_pad, _GEMM_ELEMENTS // d))
    products = cp.empty((rows, k_pad), dtype=cp.float32)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    compute = _CUBLAS_COMPUTE_32F_PEDANTIC if exact else _CUBLAS_COMPUTE_32F_FAST_TF32
    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
    epilogue = get_kernel(_SOURCE, "tc_gemm_epilogue")
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        # the shifted tile in float32, column-major (rows x d): one rounding from float64
        block = cp.asfortranarray((X[start:stop].astype(cp.float64) - shift)
                                  .astype(cp.float32))
        x_norm2 = (block.astype(cp.float64) ** 2).sum(axis=1)
        # products^T (k_pad x rows, column-major) = padded (d x k_pad)^T . block (rows x d)^T
        cublas.gemmEx(handle, _CUBLAS_OP_T, _CUBLAS_OP_T, k_pad, stop - start, d,
                      one.ctypes.data, padded.data.ptr, _CUDA_R_32F, dp,
                      block.data.ptr, _CUDA_R_32F, stop - start,
                      zero.ctypes.data, products.data.ptr, _CUDA_R_32F, k_pad,
                      compute, _CUBLAS_GEMM_DEFAULT)
        launch(epilogue, -(-(stop - start) * 32 // BLOCK), BLOCK,
               (products, np.int32(k_pad), norms, x_norm2, cmax, bound,
                np.int64(stop - start), np.int64(start), np.int32(k), labels,
                kernel_pointer(changed), queue_size, queue, queue_best))


class _TCExact:
    """``assign="tc-exact"``: exact labels from FP16 tensor-core scores, re-checking the rows
    the bound cannot decide.

    The labels equal ``assign="tiled"``'s bit for bit (module docstring). Rows decided on
    the tensor cores never touch the host; the re-check kernel has a fixed grid and reads
    the queue's length on the device, so no call here waits for the GPU. A call takes the
    split products on every row; :meth:`bind` gives a fit's run, whose calls put the screen
    first while it pays (:class:`ScreenedRun`).

    Parameters
    ----------
    X : cupy.ndarray, shape (n_samples, n_features)
        A view of a column-major buffer (``X.T`` C-contiguous), float32 or float64.
    centers : cupy.ndarray, shape (n_clusters, n_features)
    labels : cupy.ndarray of int32, shape (n_samples,)
        Previous labels in, new labels out.
    changed : cupy.ndarray of uint64, shape (1,), optional
        The number of labels that changed is added to it.
    """

    counts_changes = True

    def __call__(self, X, centers, labels, changed=None):
        _assign(X, centers, labels, changed, exact=True)

    def bind(self, X):
        """A :class:`ScreenedRun` for the calls of one fit over ``X``."""
        return ScreenedRun(X)


assign_tc_exact = _TCExact()


class ScreenedRun:
    """tc-exact bound to one fit over X: each call's pass chosen from the last one's count.

    The screen (module docstring) pays where it decides most rows: on unclustered data
    about 97 % at 128 features, where the split kernel then takes the rest; on clustered
    data, where the bound leaves many rows to the re-check anyway, it would only add a
    pass. The device holds the plan: the split kernel alone first, counting the rows the
    screen's margin would leave; the screen first on the next call if those were at most
    :data:`SCREEN_SHARE` of the rows (for the padded width), and so on from each call's
    count (:func:`_assign`). From four times :data:`SCREEN_SAMPLE_ROWS` rows the first call
    takes its plan from a sample of that many rows instead (the split kernel counting there,
    :func:`_sample_plan`), so that on unclustered data it is already the screen's. The
    plan also comes back to pinned host memory after each call, asynchronously: where that
    copy has landed when the next call starts (the fit loop's readback each iteration waits
    for it), a call launches only the pass it takes, else both, the other leaving at once
    (the split kernel takes every row where the screen was not launched). No call waits
    for the GPU.

    The run keeps its device buffers (:class:`_Scratch`), so after the first call its
    calls only launch kernels: up to 128 features (the fused kernels; wider data goes
    through cuBLAS) it is ``graph_safe``, and the fit loop captures its iterations into a
    CUDA graph, each later iteration one graph launch: both passes in it where the plan
    at the capture (the loop's second iteration) was the screen, the device's plan picking
    at each replay; the split kernel alone where it was not.

    Parameters
    ----------
    X : cupy.ndarray (n_samples, n_features), a view of a (d, n) column-major buffer

    Examples
    --------
    >>> from gpumine.kmeans.tensor_cores import assign_tc_exact
    >>> run = assign_tc_exact.bind(X)            # doctest: +SKIP
    >>> run(X, centers, labels)                  # doctest: +SKIP
    """

    counts_changes = True

    def __init__(self, X):
        import cupyx

        cp = cupy_module()
        self.X = X
        self.plan = cp.zeros(1, dtype=cp.int32)  # 0: the split kernel alone, counting
        self.scratch = _Scratch(keep=True)
        # launches only, past the first call: the fused kernels (cuBLAS past them is not)
        self.graph_safe = _padded_width(X.shape[1]) in FUSED_DIMS
        self._host = cupyx.empty_pinned(1, dtype=np.int32)
        self._host[0] = 0
        self._sent = None  # the event after the last copy of the plan; None: none in flight
        self._first = True  # no call yet: the first takes its plan from a sample

    def __call__(self, X, centers, labels, changed=None):
        if X is not self.X:  # another array than the run's: no plan for it
            assign_tc_exact(X, centers, labels, changed)
            return
        _assign(X, centers, labels, changed, exact=True, run=self)

    def seed(self, bounded, centers, labels, changed=None) -> None:
        """This run's call, which also gives ``bounded`` (a :class:`BoundAssign
        <gpumine.kmeans.bounds.BoundAssign>` of the same X) the bounds of every row for
        these centres and labels: its next call goes on from them without a full scan.

        A decided row's bounds come from its top-2 scores and their error bound (the module
        docstring, "The bound": ``D_i <= |x|^2 + s_1 + e``, ``D_j >= |x|^2 + s_2 - e``); a
        row the re-check assigns gets none (+inf and 0), so the bounds call scans it. The
        kernels that write them are instantiated apart (``SEED``), so the run's other calls
        cost what they did; a seed call cost 6.89 ms against a plain call's 6.53 at 10M x 32,
        k = 1024 on the H200 (record ``tc-seed-template-ab-h200-efa3907.json``), where
        without it ``hamerly``'s next call would compute every row's distance to every
        centre.
        """
        if bounded.X is not self.X:
            raise InvalidParameterError(
                "the bounds assignment is bound to another array than this run")
        upper, lower = bounded.seeded(centers)
        _assign(self.X, centers, labels, changed, exact=True, run=self, bounds=(upper, lower))

    @staticmethod
    def screens(n: int, dp: int) -> bool:
        """Whether calls over n rows at padded width dp consider the screen at all."""
        return dp in SCREEN_SHARE and n >= SCREEN_MIN_ROWS

    def samples(self, n: int) -> bool:
        """Whether this call is the run's first over at least four samples' rows (it takes
        its plan from a sample, :data:`SCREEN_SAMPLE_ROWS`); later calls answer False."""
        first, self._first = self._first, False
        return first and samples_plan(n)

    @staticmethod
    def limit(n: int, dp: int) -> int:
        """The most rows the screen may leave for the plan to keep it."""
        return int(SCREEN_SHARE[dp] * n)

    def known_plan(self):
        """The plan as the last copy brought it, or None while that copy is in flight.

        A capture takes it too: a graph made under plan 0 holds the split kernel alone,
        over every row, whatever the device's plan becomes (no early-leaving screen on
        clustered data); made under plan 1 or unknown, both passes, the device's plan
        picking."""
        if self._sent is not None and not self._sent.done:
            return None
        plan = int(self._host[0])  # sync: none, pinned host memory the event says landed
        return None if plan < 0 else plan

    def plan_sent(self) -> None:
        """Copy the plan the last call left to the host, without waiting for it (not from
        a capture: a graph's replays leave the host's copy unknown)."""
        cp = cupy_module()
        stream = cp.cuda.get_current_stream()
        if stream.is_capturing():
            self._sent = None
            self._host[0] = -1  # unknown: both passes, until a call outside a graph
            return
        self.plan.get(stream=stream, out=self._host, blocking=False)
        self._sent = stream.record()


def assign_tc_fast(X, centers, labels, changed=None):
    """FP16 (TF32 past d = 128) labels without the re-check: fast, *not* exact (near-ties may
    go either way).

    Same parameters as :func:`assign_tc_exact`.
    """
    _assign(X, centers, labels, changed, exact=False)


def queued_rows(X, centers) -> int:
    """How many rows of ``X`` the bound leaves to the direct re-check (a diagnostic).

    Runs the assignment once on scratch labels and reads the count back: a host sync,
    meant for benchmarks and tests, not for the fit loop.
    """
    cp = cupy_module()
    labels = cp.zeros(X.shape[0], dtype=cp.int32)
    queue_size = _assign(X, centers, labels, None, exact=True)
    return int(queue_size.get()[0])  # sync: the diagnostic's one readback


assign_tc_fast.counts_changes = True
