"""The ``"auto"`` threshold's look at the wavelet's coarser levels: clusters they split.

:func:`gpumine.wavecluster.engine.resolve_threshold` finds the clusters of the coarse grid
(base level, then :mod:`gpumine.wavecluster.hierarchy`'s split). With about two coarse
cells per point a cell holds a point or two, so on small data the densities are too coarse
for the split step to see blobs that touch: the levels between their saddle and their peaks
are one or two, and the split asks for four. One more haar level -- the cells 2 x 2 (2^d)
together, what the transform produces next -- holds 2^d times the points per cell, and
there the same rule (base level and split) sees the blobs apart. But that level also merges
what the finer one keeps apart (spiral arms, a thin gap) and joins clusters differently, so
its clusters are only a second opinion:

The rule
--------
Each cluster C of the finer level (a significant component, after the split step) is
compared with the next level's clusters, each taken over the finer cells it covers (cell
c of the finer grid lies in cell c // 2 of the next). A next-level cluster P is a *piece*
of C when at least :data:`AUTO_COARSER_CONTAIN` (half) of P's mass lies in C's cells and
that part is significant. Where C holds two or more pieces each of at least the split
step's minimum share (a quarter) of the heaviest, C splits: C's cells under each piece seed
it, and the rest of C goes to the seed it reaches first through C's cells (breadth first,
ties to the lowest number; :func:`~gpumine.wavecluster.hierarchy.grow_labels`), so that no
point changes between cluster and noise. A next-level cluster that reaches into several
finer ones (arms the coarser grid merged) is a piece of none, or of one only.

The estimator consults these levels with ``levels="auto"`` (its default; an integer
``levels`` takes that level's clusters alone). The next level's clusters are its own base
level and split step (without their growth:
the pieces' own cells are what is compared, and without border or specks), themselves
split the same way by the level above them: the engine asks
:data:`~gpumine.wavecluster.engine.AUTO_COARSER_LEVELS` (3) levels, from the coarsest
down, each a quarter (2-d) of the cells of the one below, and stops early at a grid with
an axis of fewer than 4 cells.

Measured (mean adjusted Rand index; records ``wavecluster-heldout-clustering-benchmark-*``,
``wavecluster-heldout-*`` and ``wavecluster-quality-*`` at a9c1971, one level, and
f60c8d9, three): on the 113 labelled 2-d and 3-d sets of the clustering-benchmark
collection (github.com/deric/clustering-benchmark; sets the rule was not developed on)
0.735 without, 0.751 with one level, 0.770 with three -- DBSCAN's best-eps oracle scores
0.762 there and HDBSCAN's defaults 0.709. Up: two touching diamonds 0.00 -> 0.73, flame
0.01 -> 0.92, pathbased 0.00 -> 0.43, dpb 0.66 -> 0.92, s-set2 0.72 -> 0.92, squares of
four blobs +0.3 each, aggregation 0.81 -> 0.92 and five more by +0.03 to +0.14; down:
donut3 1.00 -> 0.87 and 2d-3c-no123 0.80 -> 0.69 (clusters whose coarser pieces are their
lobes). On the quality benchmark's 45 sets 0.926 -> 0.929 (aggregation, from the second
level; nothing else changes); on the 33 held-out draws of
``benchmarks/wavecluster_heldout.py`` nothing changes. A fourth and further levels changed
no index of these 191 sets (scratch). On 60 draws of 3 to 5 Gaussian blobs
(scikit-learn's ``make_blobs``, unit spread, centres in [-6, 6]^2, 300 to 3,000 points;
scratch) the first level takes the mean from 0.459 to 0.513 (8 draws up, none down;
HDBSCAN 0.472, DBSCAN's oracle 0.529); the second and third change none of those draws.
Variants tried in scratch runs on the collection's 114 sets (its rings included) with one
level: the next level's clusters with their border and specks (0.746, against 0.747 for
this rule), and pieces counted by the points of a refit on a grid half as fine, the rest
of a cluster's points going to the nearest piece's centre (0.758; without the containment
test a spiral draw of the 45 fell 0.89 -> 0.76).
Cost on the CPU (record ``wavecluster-auto-cost-2026-11-26-f60c8d9``): each level's tree,
a quarter (2-d) of the cells but two more doublings of density to climb (about 1 ms of
NumPy calls a level on small grids), and two passes over the finer grid: a 2-d fit with
``"auto"`` takes 2.4-4.1x the fit given its threshold, against 1.8-2.1x without. Not
measured on a GPU at the time; on the H100 (record
``wavecluster-auto-cost-h100-2026-11-26-cdc14d9``) each level costs the device path about
1.7 ms of CuPy calls and syncs, and a fit from device data with ``"auto"`` takes 7.3-10.3x
the fit given its threshold (2.7-4.5x without the coarser levels). Since then the GPU labels
the levels' thresholds in the coarse grid's stack
(:func:`~gpumine.wavecluster.hierarchy.stack_levels`), takes their significant clusters from
the tree (``significant``) and their table from one kernel (``joint``): 3.9-6.3x on the sets
at 1x and 10x, 4.7-8.5x at 40x (records ``wavecluster-auto-cost-h100-2026-11-26-cc64e3e``
and its repeat; 7.0-10.6x for the previous version, measured in one call with
``-973ffd4``). The steps around the labelling have since become a launch each
(:mod:`gpumine.wavecluster.hierarchy`'s cost paragraph); README ("WaveCluster") has the
cost measured since.
"""

from __future__ import annotations

import functools

import numpy as np

from gpumine.backend import upload
from gpumine.wavecluster.hierarchy import AUTO_SPLIT_MIN_SHARE, grow_labels

__all__ = ["AUTO_COARSER_CONTAIN", "joint_table", "joint_tables", "next_level_cells",
           "split_by_coarser_level", "table_indices"]

#: A next-level cluster is a piece of a finer cluster holding at least this share of its mass.
AUTO_COARSER_CONTAIN = 0.5


def next_level_cells(upper, shape, xp=np):
    """The next (haar) level's labels at every cell of a finer grid of ``shape``: cell c
    of the finer grid lies in cell ``c // 2`` of the next.

    Examples
    --------
    >>> import numpy as np
    >>> next_level_cells(np.array([[1, 2], [3, 0]]), (3, 4))
    array([[1, 1, 2, 2],
           [1, 1, 2, 2],
           [3, 3, 0, 0]])
    """
    out = upper
    for axis in range(len(shape)):
        out = xp.repeat(out, 2, axis=axis)
    return out[tuple(slice(0, s) for s in shape)]


def table_indices(significant, n_components, upper_significant, n_upper) -> tuple:
    """:func:`split_by_coarser_level`'s host tables: each significant cluster's row (1, 2, ...;
    0 for every other number), each significant piece's column, and the table's width
    (pieces + 1).

    Examples
    --------
    >>> rows, columns, width = table_indices([2, 3], 4, [1], 2)
    >>> rows.tolist(), columns.tolist(), width
    ([0, 0, 1, 2, 0], [0, 1, 0], 2)
    """
    clusters = np.asarray(significant, dtype=np.int64)
    pieces = np.asarray(upper_significant, dtype=np.int64)
    cluster_index = np.zeros(n_components + 1, dtype=np.int64)  # sync: none, host tables
    cluster_index[clusters] = np.arange(1, clusters.size + 1)
    piece_index = np.zeros(n_upper + 1, dtype=np.int64)  # sync: none, a host table
    piece_index[pieces] = np.arange(1, pieces.size + 1)
    return cluster_index, piece_index, pieces.size + 1


def joint_table(components, upper, cluster_index, piece_index, density, width, *, xp=np,
                weigh):
    """:func:`split_by_coarser_level`'s table on ``xp``: the ``density`` of the finer cells of
    each cluster (``cluster_index[components]``, 0: none) under each next-level piece
    (``piece_index[upper]`` at the cell's ``c // 2``), as a flat (clusters + 1) x ``width``
    array; bin 0 is not read. The contract of the backend's ``joint``
    (:func:`gpumine.wavecluster.gpu.joint_mass` does it in one launch).

    Examples
    --------
    >>> import numpy as np
    >>> table = joint_table(np.array([1, 1, 2, 0]), np.array([1, 2]), np.array([0, 1, 2]),
    ...                     np.array([0, 1, 0]), np.ones(4), 2,  # sync: none, host
    ...                     weigh=lambda v, w, b: np.bincount(v, weights=w, minlength=b))
    >>> table.reshape(3, 2)[1:].tolist()  # cluster 1: 2 under piece 1; cluster 2: 1 under none
    [[0.0, 2.0], [1.0, 0.0]]
    """
    pieces = next_level_cells(xp.asarray(piece_index)[upper], components.shape, xp)
    rows = int(np.max(cluster_index)) + 1  # sync: none, a host table
    return weigh((xp.asarray(cluster_index)[components] * width + pieces).ravel(),
                 density.ravel(), rows * width)


def joint_tables(jobs, *, xp=np, weigh):
    """Several :func:`joint_table`'s, one after another in one flat array: ``jobs`` is a list
    of ``(components, upper, cluster_index, piece_index, density, width)``. The contract of
    the backend's ``joint`` (:func:`gpumine.wavecluster.gpu.joint_mass`: one upload of the
    host tables and one launch for up to four tables).

    Examples
    --------
    >>> import numpy as np
    >>> job = (np.array([1, 1, 2, 0]), np.array([1, 2]), np.array([0, 1, 2]),
    ...        np.array([0, 1, 0]), np.ones(4), 2)  # sync: none, host arrays
    >>> joint_tables([job, job], weigh=lambda v, w, b: np.bincount(v, weights=w,
    ...                                                             minlength=b)).size
    12
    """
    return xp.concatenate([joint_table(*job, xp=xp, weigh=weigh) for job in jobs])


def split_by_coarser_level(components, n_components, coarse, upper, n_upper, upper_grid, *,
                           minimum: float, upper_minimum: float, connectivity: int, xp=np,
                           weigh, to_host, spread=None, significant=None,
                           upper_significant=None, joint=None, mass=None) -> tuple:
    """The rule of the module docstring.

    Parameters
    ----------
    components : array of int   -- IN
        The finer level's clusters (0: background; numbers 1..n_components, those lighter
        than ``minimum`` not clusters).
    n_components : int
    coarse : array   -- IN
        The finer grid's densities.
    upper : array of int   -- IN
        The next level's clusters, on its own grid (each axis ``(s + 1) // 2``).
    n_upper : int
    upper_grid : array   -- IN
        The next level's densities (haar: a cell's mass is its finer cells' times a
        constant, so the next level's significant clusters are those of the finer mass).
    minimum, upper_minimum : float
        The significant mass in each grid's units.
    connectivity : int
    xp : module
    weigh : callable
        ``weigh(values, weights, bins)`` (bin 0 need not be counted).
    to_host : callable
    spread : callable, optional
        The backend's growth (:func:`~gpumine.wavecluster.hierarchy.grow_labels`).
    significant, upper_significant : ndarray of int, optional
        The numbers of each level's significant clusters, where the caller knows them (the
        stacked tree, or this function's last result): then they are not weighed and read
        back. None: weighed here (one sync).
    joint : callable, optional
        ``joint([(components, upper, cluster_index, piece_index, coarse, width)])``: the
        backend's table of each cluster's mass under each piece in one pass (the GPU's
        :func:`~gpumine.wavecluster.gpu.joint_mass`; the contract of :func:`joint_tables`);
        None: gathers and ``weigh``.
    mass : numpy.ndarray, optional
        That table on the host, (clusters + 1) x (pieces + 1) by :func:`table_indices` of
        ``significant`` and ``upper_significant``, where the caller read it back already
        (several levels' in one transfer); None: made and read back here.

    Returns
    -------
    tuple
        ``(components, n_components, significant)``: unchanged where nothing splits, else a
        split cluster's cells renumbered n_components + 1, ... by piece; and the numbers of
        the significant clusters (host), the new pieces among them: each holds its seed,
        at least ``minimum``.
    """
    if significant is None or upper_significant is None:
        sizes = weigh(components.ravel(), coarse.ravel(), n_components + 1)
        upper_sizes = weigh(upper.ravel(), upper_grid.ravel(), n_upper + 1)
        # sync: both levels' cluster masses, once a level
        host = np.asarray(to_host(xp.concatenate([sizes, upper_sizes])), dtype=np.float64)
        significant = np.flatnonzero(host[1:n_components + 1] >= minimum) + 1
        upper_significant = np.flatnonzero(host[n_components + 2:] >= upper_minimum) + 1
    clusters = np.asarray(significant, dtype=np.int64)
    pieces = np.asarray(upper_significant, dtype=np.int64)
    if clusters.size == 0 or pieces.size < 2:  # no piece to split anything by
        return components, n_components, clusters
    cluster_index, piece_index, width = table_indices(clusters, n_components, pieces, n_upper)
    parent = None  # each finer cell's piece, where a cluster splits

    def pieces_of_cells():
        return next_level_cells(upload(piece_index, xp)[upper], coarse.shape, xp)

    if mass is None:
        table = (joint or functools.partial(joint_tables, xp=xp, weigh=weigh))(
            [(components, upper, cluster_index, piece_index, coarse, width)])
        # sync: each cluster's mass under each piece, (clusters + 1) x (pieces + 1) numbers
        mass = np.asarray(to_host(table), dtype=np.float64).reshape(clusters.size + 1, width)
    total = mass.sum(axis=0)  # each piece's mass, in clusters or not (bin (0, 0) unread)
    out, next_number, kept = components, n_components + 1, []
    for k in range(1, clusters.size + 1):
        held = np.flatnonzero((mass[k, 1:] >= AUTO_COARSER_CONTAIN * total[1:])
                              & (mass[k, 1:] >= minimum)) + 1
        if held.size >= 2:
            held = held[mass[k, held] >= AUTO_SPLIT_MIN_SHARE * mass[k, held].max()]
        if held.size < 2:
            kept.append(int(clusters[k - 1]))  # sync: none, a host number
            continue
        numbers = np.zeros(width, dtype=np.int64)  # sync: none, a host table of width numbers
        numbers[held] = np.arange(next_number, next_number + held.size)
        next_number += held.size
        region = components == int(clusters[k - 1])  # sync: none, a host number
        parent = pieces_of_cells() if parent is None else parent  # once for all splits
        seeds = xp.where(region, upload(numbers, xp)[parent], 0)
        grown = grow_labels(seeds.astype(components.dtype), region, connectivity, xp=xp,
                            to_host=to_host, spread=spread)
        out = xp.where(region, grown, out)
    return out, next_number - 1, np.concatenate(
        [np.asarray(kept, dtype=np.int64), np.arange(n_components + 1, next_number)])
