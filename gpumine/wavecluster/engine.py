"""The WaveCluster engine's rules: quantize -> wavelet low-pass -> threshold -> label -> lookup.

Seed paper 003 (Algorithm 1) and the original WaveCluster (VLDB'98). Everything
here takes validated float arrays; the estimator resolves parameters. The pipeline that
runs these steps, in memory or over chunks, on either backend, is
:mod:`gpumine.wavecluster.pipeline`.

Automatic choices (``"auto"``), measured on the clustering-benchmark shapes
(README table):

* grid size: the coarse grid should hold about two cells per point --
  ``r = round((2 * N) ** (1 / d))`` coarse cells per axis, where ``N`` is the
  total sample weight (the number of points when unweighted) -- so the fine grid
  has ``r * 2**levels`` cells per axis (at least 4); with one feature,
  ``r = round(sqrt(2 * N))`` (:func:`auto_grid_shape` says why);
* threshold, counted in points per coarse cell (a cell's transformed density
  divided by the grid's mass per unit of weight, so the wavelet's gain and the
  data's scale drop out): every occupied cell (at least half a point) is
  foreground, unless that makes a single significant component (at least
  ``min_cluster_size``) -- the sign of a background that percolates. Then the
  threshold rises through 2, 3, 4, 6, 8, ... points per cell to the first level
  where two or more significant components appear *and* stay at the next level;
  if none does, every occupied cell stays foreground. The reasoning: with about
  two coarse cells per point a cluster's cells are occupied and touch, so
  occupied-and-connected is the right foreground, and noise cells are isolated and
  drop out through the minimum size -- until the background is dense enough, or
  the neighbourhood large enough (3^d - 1 neighbours: 80 in 4-d), for noise cells
  to touch one another and join every cluster into one. Raising the threshold by
  whole points removes the background first (its cells hold one or two points),
  and asking that the split survive one more level rejects the clumps a uniform
  background alone shows at two points per cell. (The previous rule, a tenth of
  the mean occupied density, was below one point per cell on nearly every data
  set, so it never removed a background: a 4-d set with 20 % uniform noise came
  out as one cluster.) Then each significant component of that level is split where
  it holds clusters that separate only at a higher density and persist above it
  (:mod:`gpumine.wavecluster.hierarchy`: spiral arms meeting at the centre, blobs whose
  tails overlap). Then the wavelet's coarser (haar) levels, with 2^d, 4^d, 8^d times the
  points per cell, give a second opinion: where a cluster holds two or more clusters of the
  level above it is split between them, from the coarsest level down
  (:mod:`gpumine.wavecluster.levels`: small sets of touching blobs, whose cells hold a point
  or two, too few levels for the split step). Last, where the base level is above one point
  per cell, every occupied
  cell (at least half a point) that shares a face with a cluster's cell joins that cluster
  (the lowest-numbered, if several): the clusters' *border* (:func:`add_border_cells`),
  as DBSCAN's border points join the core points they touch. Raising the threshold to
  drop the background also drops the outskirts of every cluster, whose cells hold a
  point or two like the background's; one face-neighbour ring gives them back, and an
  isolated background cell rarely touches a cluster. Measured on the 45 sets of the
  quality benchmark: mean adjusted Rand index 0.918 -> 0.924 (blobs in 20 % noise,
  d = 3..6: +0.01 to +0.06 on 11 of 12, -0.02 on one 6-d draw; nothing else changes);
  on 44 held-out draws of 11 other shapes it never lowers the index (0.654 -> 0.684).
  The full neighbourhood ring (0.917: in 6-d a ring of 728 neighbours takes in
  background) and two face rings (0.921) were worse. Where the base level is one point,
  every occupied cell is already foreground, and a cluster's outskirts come apart into
  *specks*: cells of a point or two, one empty cell away, too light to be clusters, so
  noise. There every occupied cell outside the clusters within two steps of the
  labelling's neighbourhood of a cluster's cell joins the nearest cluster (the
  lowest-numbered among the nearest), as DBSCAN with a radius of two cells would take
  it. Measured on the 45 sets: 0.924 -> 0.926 (moons, bridges, the 10x densities: +0.01
  to +0.03; compound -0.03, the 3-d tori -0.02, the spirals -0.01: their specks are
  background); on the 33 draws of ``benchmarks/wavecluster_heldout.py``, shapes the
  rule was not developed on, 0.902 -> 0.909 (circles, moons, lines, blobs of unequal
  spread: +0.01 to +0.05; eight 3-d Gaussians in 10 % noise -0.04). One step
  adds nothing (a speck touching a cluster is part of it); three give 0.923 and a lowest
  index of 0.77 on the 45 sets; face steps instead gave the same means. ``gpumine bench run
  wavecluster-quality`` measures the rule;
* minimum cluster size: 1 % of the total weight;
* connectivity: all 3^d - 1 neighbours up to d = 3, cells that differ in at most two
  coordinates from d = 4 on (:func:`auto_connectivity`).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from gpumine.backend import upload
from gpumine.validation import is_device_array
from gpumine.wavecluster import hierarchy
from gpumine.wavecluster.hierarchy import (
    plan_levels,
    resolve_stacked,
    split_persistent,
    stack_is_faster,
    stack_levels,
    threshold_levels,
)
from gpumine.wavecluster.labeling import neighbour_offsets, shifted_slices
from gpumine.wavecluster.levels import split_by_coarser_level, table_indices
from gpumine.wavecluster.wavelet import coarse_cells, coarse_shape

__all__ = [
    "WaveClusterResult",
    "add_border_cells",
    "auto_connectivity",
    "auto_grid_shape",
    "choose_base",
    "chunk_bounds",
    "cluster_ids",
    "lookup",
    "mean_occupied_density",
    "offset_rings",
    "quantize",
    "resolve_threshold",
]

AUTO_CELLS_PER_POINT = 2.0
#: Thresholds the ``"auto"`` rule tries for its base level, in points per coarse cell
#: (module docstring); the split step climbs above it in sqrt(2) steps.
AUTO_THRESHOLD_LEVELS = tuple(itertools.islice(threshold_levels(), 12))
AUTO_MIN_CLUSTER_FRACTION = 0.01
#: The ``"auto"`` rule's border cells touch a cluster's cell with this connectivity (1: a
#: shared face; module docstring); 0 adds none.
AUTO_BORDER_CONNECTIVITY = 1
#: At a base level of one point, a speck (an occupied cell outside the clusters) this many steps
#: of the labelling's neighbourhood from a cluster joins it (module docstring); 0 adds none.
AUTO_SPECK_STEPS = 2
#: Cells times offsets the host gathers at once for the specks (8 MB of indices).
SPECK_BLOCK = 1 << 20
#: How many of the wavelet's coarser (haar) levels the ``"auto"`` rule asks which clusters
#: split (:mod:`gpumine.wavecluster.levels`); 0 asks none.
AUTO_COARSER_LEVELS = 3
#: The coarser levels' clusters include their own split step (:mod:`gpumine.wavecluster.levels`).
#: Without it (scratch runs at a1a58ce, 2026-11-26): the 45 quality sets and the 33 held-out
#: draws unchanged, the clustering-benchmark collection 0.763 -> 0.759 (smile3 1.00 -> 0.71,
#: ds3c3sc6 0.38 -> 0.25), for about a tenth of the ``"auto"`` fit's time on the CPU (moons at
#: 1x: 5.8 -> 5.2 ms against 1.6 given the threshold).
AUTO_COARSER_SPLIT = True
#: On the CPU the coarser levels' rule runs on the host's thread pool, beside the coarse
#: grid's (:func:`_coarser_found`); False: one after another in the calling thread.
AUTO_COARSER_THREADS = True
#: ... for coarse grids of at least this many cells (smaller ones' rule is mostly Python
#: steps, which hold the GIL: threads hand it to and fro. On this project's 2-core VM the
#: small spirals at 1x, 12,544 cells, ran 0.98-1.02x their one-thread time in single fits
#: (record ``wavecluster-threads-ab-2026-11-28-a17e802.json``) but 1.12x in blocks of ten
#: back to back (a scratch run), the 2-d sets from 30,000 cells 0.80-0.95x
#: (``-9adfd0a.json``)).
AUTO_COARSER_THREAD_CELLS = 1 << 14
#: The CPU's small grids (:func:`~gpumine.wavecluster.hierarchy.stack_is_faster`) label the
#: coarse grid's and the coarser levels' thresholds in one stack, as the GPU does
#: (:func:`~gpumine.wavecluster.hierarchy.stack_levels`); False: a stack each.
SHARE_HOST_STACKS = False
#: From this many features on, ``connectivity=None`` is 2 rather than d.
AUTO_FULL_CONNECTIVITY_UP_TO = 3
#: Bytes per fine-grid cell the CPU path needs at its peak (grid, padded copies, labels).
BYTES_PER_CELL = 32


@dataclass
class WaveClusterResult:
    """What a fit produces (see :class:`gpumine.WaveCluster` for the meaning)."""

    labels: np.ndarray
    grid_labels: np.ndarray
    grid_shape: tuple
    bounds: np.ndarray
    threshold: float
    n_clusters: int


def auto_grid_shape(total_weight: float, n_features: int, levels: int) -> tuple:
    """Fine grid shape of the ``"auto"`` rule (module docstring).

    One feature is the exception: a 1-d cluster's cells are connected only if none of them
    is empty, so two cells per point leaves every cluster in fragments (three Gaussians in
    20 % noise, 5,000 points: 11 clusters, adjusted Rand index -0.04). There the grid has as
    many coarse cells as a 2-d one has per axis, ``sqrt(2 N)``, a cell holding ``sqrt(N /
    2)`` points on average -- more as N grows, so a cluster's cells stay occupied. Measured
    on five 1-d shapes (clumps in noise, touching segments, 200 to 100,000 points, 10x
    densities), two draws each: mean adjusted Rand index 0.11 -> 0.89.

    Examples
    --------
    >>> auto_grid_shape(5000, 2, 1), auto_grid_shape(5000, 1, 1)
    ((200, 200), (200,))
    """
    exponent = 1.0 / max(n_features, 2)
    coarse = max(2, round((AUTO_CELLS_PER_POINT * total_weight) ** exponent))
    return (max(4, coarse * 2 ** levels),) * n_features


def quantize(X, bounds, grid_shape):
    """Cell index (n, d) of every point, and a mask of the points inside ``bounds``.

    Cell ``floor((x - lo) / (hi - lo) * m)``, the upper bound falling in the last cell.
    """
    lo, hi = bounds
    shape = np.asarray(grid_shape)
    scaled = (X - lo) / (hi - lo) * shape
    inside = np.all((X >= lo) & (X <= hi), axis=1)
    cells = np.clip(np.floor(scaled), 0, shape - 1).astype(np.int64)
    return cells, inside


def lookup(X, grid_labels, bounds, grid_shape, wavelet, levels):
    """Label of every point of X through the coarse-grid labels; -1 outside ``bounds``."""
    cells, inside = quantize(X, bounds, grid_shape)
    coarse = coarse_cells(cells, wavelet, levels, grid_shape)
    labels = grid_labels[tuple(coarse.T)]
    return np.where(inside, labels, -1).astype(np.int32)


def _on_host(values):
    """A few values on the host: a device chunk's per-feature bound is copied back."""
    return values.get() if is_device_array(values) else values  # sync: d values, GPU only


def chunk_bounds(chunks):
    """One pass over a chunk source: the rows, and the per-feature (min, max) of the rows of
    positive weight (all rows when the weights are None) as a (2, d) array (None if none)."""
    rows, lo, hi = 0, None, None
    for X, w in chunks():
        rows += X.shape[0]
        kept = X if w is None else X[w > 0]  # sync on the GPU: the kept rows, once a chunk
        if kept.shape[0]:
            chunk_lo, chunk_hi = _on_host(kept.min(axis=0)), _on_host(kept.max(axis=0))
            lo = chunk_lo if lo is None else np.minimum(lo, chunk_lo)
            hi = chunk_hi if hi is None else np.maximum(hi, chunk_hi)
    return rows, None if lo is None else np.stack([lo, hi]).astype(np.float64)


def auto_connectivity(n_features: int) -> int:
    """The neighbourhood of ``connectivity=None``: d up to 3 features, then 2.

    With every one of the 3^d - 1 neighbours (728 in 6-d), coarse cells of a
    uniform background, or the thin outskirts of two blobs, touch through corners
    far more often than through faces, so separate clusters join along diagonal
    chains. Cells that differ in at most two coordinates (2d^2 neighbours) keep a
    blob's cells connected and close part of those chains; face neighbours alone
    (connectivity 1) split the thin 2-d and 3-d shapes. Measured on the 45 sets of
    ``gpumine bench run wavecluster-quality`` (mean adjusted Rand index): 0.851 with
    d everywhere, 0.868 with this rule, 0.806 with 1 everywhere. The 6-d set with
    20 % uniform noise that found 2 of 4 blobs finds 3 (0.466 -> 0.746). Three 5-d
    and 6-d draws still merge two blobs, which separate only at 6 to 48 points per
    cell.

    Examples
    --------
    >>> [auto_connectivity(d) for d in range(1, 7)]
    [1, 2, 3, 2, 2, 2]
    """
    return n_features if n_features <= AUTO_FULL_CONNECTIVITY_UP_TO else 2


def resolve_threshold(threshold, coarse, *, grid_weight, min_cluster_size, label,
                      connectivity, xp=np, weigh=None, to_host=np.asarray, spread=None,
                      coarser=None, nearest=None, joint=None, summaries=None, tree=None,
                      plane=None, paint=None, planes=None,
                      levels_tree=None) -> tuple[float, tuple]:
    """The threshold (``"auto"``: the rule of the module docstring) and its foreground labelled.

    Parameters
    ----------
    threshold : float or "auto"
    coarse : array   -- IN
        The transformed (coarse) grid, on the backend of ``xp``.
    grid_weight : float or 0-d array
        The weight of the points in the grid (the fine grid's sum: their number when
        unweighted and all inside the bounds). A 0-d array of ``xp`` is read back with the
        coarse grids' masses, in their one transfer.
    min_cluster_size : float
        A component is significant from this weight on.
    label : callable
        The fit's ``wavecluster.label`` strategy (same backend as ``coarse``).
    connectivity : int
    xp : module
        ``numpy`` or ``cupy``. On the GPU ``"auto"`` reads back the grid's mass and each
        axis's profile once, then a few numbers per stack of levels
        (:func:`~gpumine.wavecluster.hierarchy.resolve_stacked`).
    weigh : callable, optional
        ``weigh(values, weights, bins)``: the weight of each component, as
        ``xp.bincount(values, weights=weights, minlength=bins)`` (the default) gives
        it; bin 0, the background, is not read. The GPU passes its block-private
        :func:`gpumine.wavecluster.gpu.weighted_bincount`.
    to_host : callable
        Brings a small backend array to the host (the split step's component numbers).
    spread : callable, optional
        The backend's growth of split pieces (``Stages.spread``); None: NumPy's.
    coarser : callable, optional
        ``coarser(coarse) -> grid or None``: the wavelet's next level of ``coarse`` (haar's
        only), whose clusters split the ones they lie within
        (:func:`~gpumine.wavecluster.levels.split_by_coarser_level`); None: not looked at.
    nearest : callable, optional
        The backend's one-pass border and specks (:func:`add_border_cells`); None: NumPy's
        way on ``xp``.
    joint : callable, optional
        The backend's one-pass table of the coarser levels' split
        (:func:`~gpumine.wavecluster.levels.split_by_coarser_level`); None: ``weigh``'s.
    summaries, tree, plane, paint, planes : callable, optional
        The backend's grids' masses and profiles in one transfer, stacks' trees in one
        transfer, a stack's level as a grid's labelling, its levels painted at once, and
        several grids' levels stacked at once (:class:`~gpumine.wavecluster.pipeline.Stages`);
        None: CuPy or NumPy calls on ``xp``.
    levels_tree : callable, optional
        The backend's component tree of a grid's levels in one pass (``Stages.levels_tree``:
        the CPU's, with Numba); where given, every CPU grid's levels come from it
        (:func:`_base_and_split`) in place of stacks or a level at a time.

    Returns
    -------
    threshold : float
        In the coarse grid's units (foreground: ``coarse >= threshold``, or
        ``coarse > 0`` when it is 0).
    labelled : tuple
        ``(components, n_components)``: ``label``'s labelling of that foreground (the
        rule's own labelling of the level it chose, not done twice; with ``levels_tree``,
        the tree's, the same numbers); with ``"auto"``, the components that split replaced
        by their pieces (:mod:`gpumine.wavecluster.hierarchy`: all levels labelled in stacks,
        or, for a large CPU grid without Numba, level by level and the split inside the
        components' boxes, or taken from one component tree).
    """

    def foreground(value):
        return label(coarse > value if value == 0 else coarse >= value, connectivity)

    if threshold != "auto":
        return float(threshold), foreground(float(threshold))
    if weigh is None:
        def weigh(values, weights, bins):
            return xp.bincount(values, weights=weights, minlength=bins)
    kwargs = {"grid_weight": grid_weight, "min_cluster_size": min_cluster_size, "label": label,
              "connectivity": connectivity, "xp": xp, "weigh": weigh, "to_host": to_host,
              "spread": spread, "summaries": summaries, "tree": tree, "plane": plane,
              "paint": paint, "levels_tree": levels_tree}
    if xp is not np or (SHARE_HOST_STACKS and levels_tree is None
                        and stack_is_faster(coarse.shape, connectivity)):
        found = _base_and_opinions(coarse, coarser if AUTO_COARSER_LEVELS else None, kwargs,
                                   joint, planes)
    else:
        kwargs["grid_weight"] = float(grid_weight)  # sync: none, the CPU path
        above = (_coarser_found(coarse, coarser, kwargs)
                 if coarser is not None and AUTO_COARSER_LEVELS else None)
        found = _base_and_split(coarse, **kwargs)
        if above is not None:
            grids, above_found = above
            above_found = [level.result() for level in above_found]  # (a raise: here)
            if found is not None:
                found = (*found[:3], *_split_down(coarse, found, grids, above_found, kwargs,
                                                  joint))
    if found is None:
        return 0.0, foreground(0.0)
    points, unit, minimum, labelled, numbers = found
    return (points - 0.5) * unit, add_border_cells(
        *labelled, coarse, base_points=points, unit=unit, minimum=minimum,
        connectivity=connectivity, xp=xp, weigh=weigh, nearest=nearest, numbers=numbers)


def _coarser_grids(coarse, coarser) -> list:
    """The next :data:`AUTO_COARSER_LEVELS` levels the wavelet produces above ``coarse``,
    finest first; fewer where ``coarser`` gives None (a grid too small to halve)."""
    grids = []
    grid = coarser(coarse)
    while grid is not None and len(grids) < AUTO_COARSER_LEVELS:
        grids.append(grid)
        grid = coarser(grid) if len(grids) < AUTO_COARSER_LEVELS else None
    return grids


def _coarser_found(coarse, coarser, kwargs) -> tuple:
    """The CPU's coarser levels (:func:`_split_down`'s ``grids`` and ``above_found``): the
    next :data:`AUTO_COARSER_LEVELS` levels the wavelet produces, fewer where ``coarser``
    gives None (a grid too small to halve), and for each a future of its
    :func:`_base_and_split` (its base level and split, pieces not grown back).

    Each level's rule depends on its grid alone, so with :data:`AUTO_COARSER_THREADS` they
    run on the host pool (:func:`gpumine.backend.host_pool`) while the calling thread takes
    ``coarse``'s own (from :data:`AUTO_COARSER_THREAD_CELLS` coarse cells): the compiled
    steps (Numba's, without the GIL) of one grid overlap the others'. The results are those
    of the levels taken one after another."""
    from concurrent.futures import Future

    from gpumine.backend import host_pool, host_pool_threads

    grids = _coarser_grids(coarse, coarser)

    def level(grid):
        return _base_and_split(grid, **kwargs, grow=False, split=AUTO_COARSER_SPLIT)

    if (AUTO_COARSER_THREADS and coarse.size >= AUTO_COARSER_THREAD_CELLS
            and host_pool_threads() > 1):
        return grids, [host_pool().submit(level, grid) for grid in grids]
    done = []
    for grid in grids:
        future = Future()
        future.set_result(level(grid))
        done.append(future)
    return grids, done


def _split_down(coarse, found, grids, above_found, kwargs, joint=None) -> tuple:
    """The coarser levels' opinions: each of the wavelet's coarser levels, from the coarsest
    of ``grids`` down, splits the clusters of the level below it
    (:func:`~gpumine.wavecluster.levels.split_by_coarser_level`): a level's clusters are its
    base level and split (pieces not grown back), split by the level above, down to
    ``coarse``'s labelling (``found``: its :func:`_base_and_split`); ``above_found[i]`` is
    ``grids[i]``'s (None: an empty grid, which splits nothing). Returns ``((components,
    n_components), significant)``, ``significant`` the significant components' numbers
    (host; None where ``found``'s were not known)."""
    options = {key: kwargs[key] for key in ("connectivity", "xp", "weigh", "to_host",
                                             "spread")}
    options["joint"] = joint
    levels = [(coarse, found), *zip(grids, above_found, strict=True)]  # finest first
    # each level's table under the level above as that level was found: all read back at
    # once, and used wherever the level above did not split (then its labelling is that)
    tables = _joint_tables(levels, joint, options["to_host"])
    above = None  # the level above: (components, n_components, significant, grid, minimum)
    for k in range(len(levels) - 1, -1, -1):
        grid, level = levels[k]
        if level is None:
            above = None
            continue
        labelled, significant = level[3], level[4]
        if above is not None:
            unsplit = above[0] is levels[k + 1][1][3][0]
            *labelled, significant = split_by_coarser_level(
                *labelled, grid, above[0], above[1], above[3], minimum=level[2],
                upper_minimum=above[4], significant=significant, upper_significant=above[2],
                mass=tables.get(k) if unsplit else None, **options)
        above = (*labelled, significant, grid, level[2])
    return (above[0], above[1]), above[2]


def _joint_tables(levels, joint, to_host) -> dict:
    """:func:`_split_down`'s tables, level k's (``levels[k]``: a grid and its
    :func:`_base_and_split`) under level k + 1's labelling as found, in one transfer: ``{k:
    (clusters + 1) x (pieces + 1) host masses}``, for the levels whose split has a table
    (both levels found, with significant numbers; a cluster and two pieces at least). Empty
    without the backend's ``joint``."""
    if joint is None:
        return {}
    shapes, jobs = {}, []
    for k in range(len(levels) - 1):
        (grid, level), (_, upper) = levels[k], levels[k + 1]
        if level is None or upper is None or level[4] is None or upper[4] is None:
            continue
        if len(level[4]) == 0 or len(upper[4]) < 2:
            continue  # split_by_coarser_level reads no table
        rows, columns, width = table_indices(level[4], level[3][1], upper[4], upper[3][1])
        jobs.append((level[3][0], upper[3][0], rows, columns, grid, width))
        shapes[k] = (len(level[4]) + 1, width)
    if not jobs:
        return {}
    # sync: every level's table, once for all the levels (one upload of their host tables)
    packed = np.asarray(to_host(joint(jobs)), dtype=np.float64)
    out, start = {}, 0
    for k, (rows, width) in shapes.items():
        out[k] = packed[start:start + rows * width].reshape(rows, width)
        start += rows * width
    return out


def _summaries(grids, xp, to_host, weight=0.0, summaries=None) -> tuple:
    """``weight`` (a number, or a 0-d array of ``xp``) as a float, and each grid's mass and,
    per axis, its densest cell at each index (host values): one transfer for all.
    ``summaries``: the backend's way to the same host array (``[weight, then per grid its
    mass and profiles]``); None: reductions on ``xp``."""
    if summaries is not None:
        packed = summaries(grids, weight)  # sync: one transfer, inside
    else:
        parts = [xp.asarray(weight, dtype=xp.float64).reshape(1)]
        for grid in grids:
            axes = range(grid.ndim)
            parts += [grid.sum().reshape(1), *(grid.max(axis=tuple(b for b in axes if b != a))
                                               if grid.ndim > 1 else grid for a in axes)]
        # sync: every grid's mass and profiles, once for all the grids
        packed = np.asarray(to_host(xp.concatenate(parts)))
    out, start = [], 1
    for grid in grids:
        mass = float(packed[start])  # sync: none, a host copy already
        edges = np.cumsum((start + 1, *grid.shape)).tolist()  # sync: none, host numbers
        profiles = [packed[a:b] for a, b in itertools.pairwise(edges)]
        out.append((mass, profiles))
        start += 1 + sum(grid.shape)
    return float(packed[0]), out  # sync: none, a host copy already


def _base_and_opinions(coarse, coarser, kwargs, joint=None, planes=None):
    """The ``"auto"`` rule's base level and split on ``coarse`` and on each of the wavelet's
    coarser levels (``coarser`` None: none), then the coarser levels' opinions
    (:func:`_split_down`), every grid's levels labelled at once where they fit
    (:func:`~gpumine.wavecluster.hierarchy.stack_levels`): :func:`_base_and_split`'s result
    for ``coarse`` with the opinions applied, or None for an empty grid. The same clusters as
    :func:`_base_and_split`, :func:`_coarser_found` and :func:`_split_down` (the GPU's way:
    a labelling and two syncs in all where those take them for every grid). ``planes``: the
    backend's stacking of the grids' levels (:class:`~gpumine.wavecluster.pipeline.Stages`)."""
    xp, to_host = kwargs["xp"], kwargs["to_host"]
    grids = [coarse, *(_coarser_grids(coarse, coarser) if coarser is not None else ())]
    grid_weight, summaries = _summaries(grids, xp, to_host, kwargs["grid_weight"],
                                        kwargs.get("summaries"))
    if grid_weight <= 0 or summaries[0][0] <= 0:
        return None
    common = {key: kwargs[key] for key in ("label", "connectivity", "xp", "weigh", "to_host")}
    backend = {key: kwargs.get(key) for key in ("tree", "plane", "paint")}
    jobs, plans = [], []
    for k, (grid, (mass, projections)) in enumerate(zip(grids, summaries, strict=True)):
        if mass <= 0:
            plans.append(None)
            continue
        unit = mass / grid_weight  # the grid's mass per unit of weight: "one point"
        minimum = max(kwargs["min_cluster_size"], np.finfo(float).tiny) * unit
        split = True if k == 0 else AUTO_COARSER_SPLIT
        levels, halves = plan_levels(projections, unit=unit,
                                     base_levels=AUTO_THRESHOLD_LEVELS, split=split)
        plans.append((unit, minimum, projections, split, len(jobs), halves))
        jobs.append((grid, levels, projections, unit, minimum))
    stacks = stack_levels(jobs, **common, **backend, planes=planes)
    found = []
    for k, (grid, plan) in enumerate(zip(grids, plans, strict=True)):
        if plan is None:
            found.append(None)
            continue
        unit, minimum, projections, split, index, halves = plan
        points, labelled, significant = resolve_stacked(
            grid, projections, unit=unit, minimum=minimum, base_levels=AUTO_THRESHOLD_LEVELS,
            choose_base=choose_base, **common, spread=kwargs["spread"], grow=k == 0,
            split=split, stack=stacks[index], halves=halves)
        found.append((points, unit, minimum, labelled, significant))
    if len(grids) > 1:
        return (*found[0][:3], *_split_down(coarse, found[0], grids[1:], found[1:], kwargs,
                                            joint))
    return found[0]


def _base_and_split(coarse, *, grid_weight, min_cluster_size, label, connectivity, xp, weigh,
                    to_host, spread, grow=True, split=True, summaries=None, tree=None,
                    plane=None, paint=None, levels_tree=None):
    """The ``"auto"`` rule's base level and split step on one grid: ``(base points, unit,
    minimum, (components, n_components), significant)``, or None for an empty grid (module
    docstring); ``significant``: the numbers of the significant components (host), where
    the levels were stacked or taken from ``levels_tree``, else None. Without ``grow`` the
    split's pieces keep only their own cells (the next level's second opinion needs no
    more)."""
    if levels_tree is not None and coarse.size > hierarchy.TREE_CELLS:
        levels_tree = None  # a grid too large for the tree's memory: the stacks' way
    stacked = (xp is not np or levels_tree is not None
               or stack_is_faster(coarse.shape, connectivity))
    if levels_tree is not None:
        # a tree (the CPU's) needs no boxes, so no profiles: the mass and the peak
        mass = float(coarse.sum())  # sync: none, the CPU path
        projections = [np.asarray([coarse.max()], dtype=np.float64)]  # plan_levels' peak
    elif stacked:
        _, ((mass, projections),) = _summaries([coarse], xp, to_host, summaries=summaries)
    else:
        mass = float(coarse.sum())  # sync: none, the CPU path
    if grid_weight <= 0 or mass <= 0:
        return None
    unit = mass / grid_weight  # the coarse grid's mass per unit of weight: "one point"
    minimum = max(min_cluster_size, np.finfo(float).tiny) * unit
    if stacked:
        points, labelled, significant = resolve_stacked(
            coarse, projections, unit=unit, minimum=minimum, base_levels=AUTO_THRESHOLD_LEVELS,
            choose_base=choose_base, label=label, connectivity=connectivity, xp=xp,
            weigh=weigh, to_host=to_host, spread=spread, grow=grow, split=split, tree=tree,
            plane=plane, paint=paint, levels_tree=levels_tree)
        return points, unit, minimum, labelled, significant
    # a large CPU grid: level by level, the split inside the components' boxes
    labelled = {}

    def count(i):
        points = AUTO_THRESHOLD_LEVELS[i]
        threshold = (points - 0.5) * unit
        labelled[points] = label(coarse >= threshold, connectivity)
        keep = {AUTO_THRESHOLD_LEVELS[0], AUTO_THRESHOLD_LEVELS[max(i - 1, 0)], points}
        for other in [p for p in labelled if p not in keep]:
            del labelled[other]  # the first level and the last two: choose_base's candidates
        components, n_components = labelled[points]
        sizes = weigh(components.ravel(), coarse.ravel(), n_components + 1)
        return int((sizes[1:] >= minimum).sum())  # sync: none, the CPU path

    chosen = AUTO_THRESHOLD_LEVELS[choose_base(count)]
    components, n_components = labelled.pop(chosen)
    labelled.clear()
    if not split:
        return chosen, unit, minimum, (components, n_components), None
    return chosen, unit, minimum, split_persistent(
        coarse, components, n_components, base_points=chosen, unit=unit, minimum=minimum,
        connectivity=connectivity, grow=grow), None


def add_border_cells(components, n_components, coarse, *, base_points: float, unit: float,
                     minimum: float, connectivity: int, xp=np, weigh, nearest=None,
                     numbers=None) -> tuple:
    """The ``"auto"`` rule's last step (module docstring): the clusters' border.

    * Above a base level of one point: each occupied cell (at least half a point) outside
      every component that touches a significant component's cell
      (:data:`AUTO_BORDER_CONNECTIVITY`: shares a face) joins it, the lowest-numbered if
      several.
    * At a base level of one point, where every occupied cell is already foreground: each
      occupied cell outside the significant components (a speck: an insignificant
      component's cell) within :data:`AUTO_SPECK_STEPS` steps of ``connectivity`` of a
      significant component's cell joins the nearest, the lowest-numbered among the
      nearest.

    Integer minima over shifted views: no sync, the same on both backends.

    Parameters
    ----------
    components : array of int   -- IN
        The rule's labelling (0: background).
    n_components : int
    coarse : array   -- IN
    base_points : float
        The base level, in points per coarse cell.
    unit, minimum : float
        One point's mass, and the significant mass, in coarse units.
    connectivity : int
        The labelling's neighbourhood (the specks' steps).
    xp : module
    weigh : callable
        ``weigh(values, weights, bins)`` (bin 0 need not be counted).
    nearest : callable, optional
        ``nearest(own, components, coarse, occupied, zero_only, rings, none)``: the
        backend's one-pass join (the GPU's ``nearest_cluster`` kernel) -- each candidate
        cell (``own`` is ``none``, the density at least ``occupied``, and, with
        ``zero_only``, ``components`` 0) takes the least of ``own`` (a significant
        cluster's number, ``none`` elsewhere) over the first ring of :func:`offset_rings`
        that holds one, else keeps ``components``. None: minima over shifted views of the
        whole grid (NumPy's specks: only near the specks), the same numbers.
    numbers : array of int, optional
        The numbers of the significant components, where the caller knows them (host);
        None: weighed here.

    Returns
    -------
    tuple
        ``(components, n_components)`` with the border cells.

    Examples
    --------
    >>> import numpy as np
    >>> coarse = np.array([[3.0, 3.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    >>> components = np.array([[1, 1, 0, 0], [0, 0, 0, 0]])
    >>> weigh = lambda v, w, bins: np.bincount(v, weights=w, minlength=bins)
    >>> add_border_cells(components, 1, coarse, base_points=2, unit=1.0, minimum=1.0,
    ...                  connectivity=2, weigh=weigh)[0]  # a face joins; a diagonal does not
    array([[1, 1, 1, 0],
           [0, 0, 0, 0]])
    >>> specks = np.array([[1, 1, 0, 2, 0, 0, 3]])  # at one point a cell: 2 is 2 steps away
    >>> add_border_cells(specks, 3, np.array([[3.0, 3, 0, 1, 0, 0, 1]]), base_points=1,
    ...                  unit=1.0, minimum=2.0, connectivity=1, weigh=weigh)[0]
    array([[1, 1, 0, 1, 0, 0, 3]])
    """
    at_one_point = base_points <= AUTO_THRESHOLD_LEVELS[0]
    if not (AUTO_SPECK_STEPS if at_one_point else AUTO_BORDER_CONNECTIVITY):
        return components, n_components
    none = n_components + 1  # larger than every number: no labelled neighbour
    if numbers is None:
        sizes = weigh(components.ravel(), coarse.ravel(), n_components + 1)
        significant = sizes >= minimum
        significant[0] = False
        own = xp.where(significant[components], components, none)
    else:
        table = np.full(n_components + 1, none, dtype=np.int64)  # sync: none, a host table
        table[np.asarray(numbers, dtype=np.int64)] = numbers
        own = upload(table, xp)[components]  # one upload of n_components + 1 numbers
    if nearest is not None:
        # the specks (every occupied cell outside the clusters), or the border (the occupied
        # cells outside every component), joined in one pass
        steps = AUTO_SPECK_STEPS if at_one_point else 1
        return nearest(own, components, coarse, 0.5 * unit, not at_one_point, offset_rings(
            own.ndim, connectivity if at_one_point else AUTO_BORDER_CONNECTIVITY, steps),
            none), n_components
    if at_one_point:
        # every occupied cell is foreground here, but a split's painting (hierarchy) keeps
        # only the clusters: the specks are the occupied cells outside them
        specks = (own == none) & (coarse >= 0.5 * unit)
        if xp is np:
            return _join_specks_host(components, own, specks, connectivity, none), n_components
        return (_specks_whole_grid(components, own, specks, none, connectivity, xp),
                n_components)
    lowest = _lowest_neighbour(own, AUTO_BORDER_CONNECTIVITY, xp)
    border = (components == 0) & (coarse >= 0.5 * unit) & (lowest < none)
    return xp.where(border, lowest, components), n_components


def _join_specks_host(components, own, specks, connectivity, none):
    """:func:`add_border_cells`'s specks on the host: each speck looks up only the cells
    within :data:`AUTO_SPECK_STEPS` steps of it (the specks are a small share of the grid;
    the whole-grid minima cost a large 2-d fit a third of its time), unless
    there are so many offsets (4 or more features) that the whole grid is cheaper. The same
    numbers as the whole-grid steps."""
    reach = _offsets_within(own.ndim, connectivity, AUTO_SPECK_STEPS)
    cells = np.flatnonzero(specks)  # sync: none, host arrays
    if cells.size * len(reach[-1]) > own.size * len(reach[0]):
        return _specks_whole_grid(components, own, specks, none, connectivity, np)
    margin = AUTO_SPECK_STEPS
    padded = np.pad(own, margin, constant_values=none).ravel()
    strides = np.cumprod((1, *(s + 2 * margin for s in own.shape[:0:-1])))[::-1]
    at = np.unravel_index(cells, own.shape)
    flat = sum((c + margin) * stride for c, stride in zip(at, strides, strict=True))
    nearest = np.full(cells.size, none, dtype=own.dtype)
    for offsets in reach:  # within 1, 2, ... steps: a speck keeps the nearest it reached
        steps = np.asarray(offsets) @ strides
        block = max(1, SPECK_BLOCK // steps.size)  # index arrays of SPECK_BLOCK at most
        for start in range(0, cells.size, block):
            part = slice(start, start + block)
            found = padded[flat[part, None] + steps[None, :]].min(axis=1)
            nearest[part] = np.where(nearest[part] < none, nearest[part], found)
    joined = nearest < none
    out = components.copy()
    out.ravel()[cells[joined]] = nearest[joined]
    return out


def _specks_whole_grid(components, own, specks, none, connectivity, xp):
    """The specks joined by minima over the whole grid, a step at a time (the host's way for
    many offsets, and any backend's without a ``nearest`` kernel; the GPU's kernel computes
    the same numbers): no sync."""
    nearest = own
    for _ in range(AUTO_SPECK_STEPS):  # a cell keeps the number it reached first
        nearest = xp.where(nearest < none, nearest,
                           _lowest_neighbour(nearest, connectivity, xp))
    return xp.where(specks & (nearest < none), nearest, components)


@functools.lru_cache(maxsize=64)
def offset_rings(ndim: int, connectivity: int, steps: int) -> tuple:
    """The offsets (ndim-tuples) first reached in exactly s = 1..``steps`` steps of
    ``connectivity``, ring by ring: a cell within s steps of another is reached through
    cells between them, so the grid's edges cut no ring short. Cached: each fit asks.

    Examples
    --------
    >>> [len(ring) for ring in offset_rings(2, 1, 2)]  # 4 faces, then 8 cells two steps away
    [4, 8]
    """
    reach = _offsets_within(ndim, connectivity, steps)
    rings, seen = [], set()
    for within in reach:
        rings.append(tuple(o for o in within if o not in seen))
        seen.update(within)
    return tuple(rings)


@functools.lru_cache(maxsize=64)
def _offsets_within(ndim, connectivity, steps) -> tuple:
    """Per number of steps s = 1..steps of ``connectivity``, the offsets (ndim-tuples, the
    origin left out) of the cells reachable in at most s steps. Cached: each fit's specks
    ask (a walk over sets of tuples, 0.2 ms a 2-d fit on the 2-core VM)."""
    half = np.array(neighbour_offsets(ndim, connectivity), dtype=np.int64).reshape(-1, ndim)
    one = {tuple(o) for o in np.concatenate([half, -half]).tolist()}
    reached, front, out = set(one), set(one), [sorted(one)]
    for _ in range(steps - 1):
        front = {tuple(a + b for a, b in zip(p, q, strict=True)) for p in front for q in one}
        reached |= front
        out.append(sorted(reached - {(0,) * ndim}))
    return tuple(tuple(within) for within in out)


def _lowest_neighbour(values, connectivity, xp):
    """Per cell, the least of its value and its neighbours' (``connectivity``)."""
    lowest = values.copy()
    for offset in neighbour_offsets(values.ndim, connectivity):
        cells, neighbours = shifted_slices(values.shape, offset)
        lowest[cells] = xp.minimum(lowest[cells], values[neighbours])
        lowest[neighbours] = xp.minimum(lowest[neighbours], values[cells])
    return lowest


def choose_base(count) -> int:
    """The base rule of the module docstring: the index of the chosen level in
    :data:`AUTO_THRESHOLD_LEVELS`, ``count(i)`` being the number of significant components at
    ``AUTO_THRESHOLD_LEVELS[i]`` (called in order of i, and only as far as the rule reads).

    Examples
    --------
    >>> counts = [1, 1, 2, 3, 3, 3]  # one percolating component, then three that stay
    >>> AUTO_THRESHOLD_LEVELS[choose_base(lambda i: counts[i] if i < len(counts) else 0)]
    4
    >>> choose_base(lambda i: [3, 3][i])  # several from the first level on: keep it
    0
    """
    if count(0) != 1:  # not one component: no percolating background to remove
        return 0
    counts = [count(1)]
    for i in range(2, len(AUTO_THRESHOLD_LEVELS)):
        counts.append(count(i))
        if counts[-2] >= 2 and counts[-1] == counts[-2]:
            return i - 1
        if counts[-1] == 0:  # nothing significant left: higher levels hold only less
            return 0
    return 0


def mean_occupied_density(coarse, xp=np) -> float:
    """Mean transformed density of the non-empty coarse cells (the benchmarks' scale)."""
    occupied = coarse > 0
    count = int(occupied.sum())  # sync: one count (benchmarks only)
    total = float(xp.where(occupied, coarse, 0).sum())  # sync: 8 bytes (benchmarks only)
    return total / count if count else 0.0


def cluster_ids(sizes, min_cluster_size):
    """Map component numbers (0 = background) to cluster ids, -1 for noise.

    ``sizes[c]`` is the weight of the points in component c. Components lighter
    than ``min_cluster_size`` become noise; the others get ids 0, 1, ... by
    decreasing size, ties going to the lower component number (components are
    numbered in raster order of their first cell by every labelling strategy).
    """
    sizes = np.asarray(sizes, dtype=np.float64).copy()
    sizes[0] = 0
    kept = np.flatnonzero(sizes >= max(min_cluster_size, np.finfo(float).tiny))
    kept = kept[kept > 0]
    order = kept[np.lexsort((kept, -sizes[kept]))]
    remap = np.full(sizes.size, -1, dtype=np.int32)  # the labels' type (KMeans's int32)
    remap[order] = np.arange(order.size)
    return remap


def required_bytes(grid_shape) -> int:
    """Memory the CPU pipeline needs for a fine grid of ``grid_shape``."""
    return BYTES_PER_CELL * math.prod(int(s) for s in grid_shape)


__all__ += ["coarse_shape", "required_bytes"]
