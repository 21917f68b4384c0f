"""The ``"auto"`` threshold's second step: clusters that separate only at a higher density.

:func:`gpumine.wavecluster.engine.resolve_threshold` picks a base level, a density that
removes the background. A significant component at that level may still hold several
clusters that touch at a density above the background's but far below their own: the
arms of a spiral meeting at its centre, two Gaussian blobs whose tails overlap in 5-d
noise. :func:`split_persistent` finds them over the density levels above the base, on the
coarse grid the wavelet already produced, with the fit's own labelling strategy, on
either backend.

The rule
--------
The levels climb from the base in steps of a factor sqrt(2), 2^(k/2) points per coarse
cell (:func:`split_levels`), until one holds no significant component (at least
``min_cluster_size``). The significant components of all levels form a tree: the
foreground of a level lies inside the one below. A significant component C at level i
*splits* at the first level j > i at which two or more of its significant descendants
*persist*: each still has a significant descendant :data:`AUTO_SPLIT_PERSISTENCE` (4)
steps further up, at four times the density at which it separated -- and holds at least
:data:`AUTO_SPLIT_MIN_SHARE` (a quarter) of the heaviest such descendant's mass. C is then
replaced by those descendants, each resolved by the same rule, and every cell of C that
none of them holds goes to the one it reaches first through C's cells (breadth-first
growth, ties to the lowest number; :func:`grow_labels`); C's descendants
at level j that do not persist are such cells. A C that never splits is one cluster.

Why persistence: density fluctuations along one cluster (a ring, a moon, the sparse shell
of a 3-d set) cut it into pieces at one level that die out within a level or two -- their
peaks are barely above the level at which they separate; two clusters joined by a low
saddle separate into pieces that live on up to their own, much higher peaks. Growing the
pieces back over C keeps every point C held (the base level decided what is noise) and
follows C's shape, so a spiral arm goes to the arm's own dense centre, not to the
Euclidean-nearest one. Measured with ``gpumine bench run wavecluster-quality`` (45 sets,
mean adjusted Rand index, README): 0.868 with the base rule alone, 0.918 with this step,
no set below 0.80; the three spiral draws go from 0.56 / 0.06 / 0.49 to about 0.9 and the
5-d and 6-d blobs in noise that merged two blobs are found whole. Persistence to three
times the density (the base rule's 1, 2, 3, 4, 6, ... sequence, three levels up) scores
0.913: it also splits the sparse shell of the atom set (0.995 -> 0.758); to twice the
density, rings, moons and that shell split (0.885); to about six times, the spirals stay
merged (0.877). Without the minimum share, a denser stretch of one of chainlink's rings
comes away as a cluster. Requiring the persisting pieces to hold a given share of C's own
mass was tried and rejected: it helps on these sets only in a narrow band (0.4 of C's
mass; 0.5 undoes the spirals). On 11 other shapes (FCPS-like and scikit-learn's, four
draws each) the step never lowered the index.

Cost: the levels -- the base rule's and the sqrt(2) levels up to the densest cell's (about
three per doubling of the peak density) -- are labelled together, stacked, in one call of
the fit's labelling strategy (:func:`resolve_stacked`; on the GPU, a handful of syncs in
all rather than a labelling, a count and a transfer per level), on the GPU and, without
Numba, for small CPU grids (:data:`HOST_TREE_WORK`); a large CPU grid is then labelled
level by level, the split step's levels only inside the previous level's component boxes
(:func:`split_persistent`). With Numba the CPU takes every grid's levels (up to
:data:`TREE_CELLS` coarse cells) from one component tree (:class:`_TreeLevels`,
:func:`gpumine.wavecluster.cpu_fast.levels_tree`: a union-find over the cells by decreasing
level visits each cell once, where a stack labels each cell once for every level it lies
in; the same components, test). Where a component splits, the pieces are grown back over it
(:func:`grow_labels`). On the GPU the coarse grid's levels and those of the wavelet's coarser
levels (:mod:`gpumine.wavecluster.levels`) share one stack where they fit
(:func:`stack_levels`), and the steps around the labelling are a launch each, through the
backend's hooks (:class:`~gpumine.wavecluster.pipeline.Stages`): the grids' masses and
profiles (``summaries``), a stack's tree (``tree``), a level as a labelling (``plane``) and a
split's leaves painted through one table of the stack's numbers (``paint``,
:func:`_paint_kept`). README ("WaveCluster") has the measured cost.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import ndimage

from gpumine.backend import upload
from gpumine.wavecluster.labeling import flat_steps, neighbour_offsets

__all__ = [
    "AUTO_SPLIT_MIN_SHARE",
    "AUTO_SPLIT_PERSISTENCE",
    "CROP_CELLS",
    "GROW_WHOLE_CELLS",
    "SMALL_TREE",
    "STACK_CELLS",
    "TREE_CELLS",
    "grow_labels",
    "plan_levels",
    "resolve_stacked",
    "split_levels",
    "split_persistent",
    "stack_is_faster",
    "stack_levels",
    "stack_planes",
    "threshold_levels",
]

#: How many sqrt(2) steps further up a descendant must stay significant to count: 4, four
#: times the density (module docstring).
AUTO_SPLIT_PERSISTENCE = 4
#: Up to this much work per level (coarse cells times neighbours) a CPU grid's levels are
#: labelled stacked (:func:`resolve_stacked`, as on the GPU); beyond, level by level, the
#: split step's inside the components' boxes (:func:`split_persistent`).
HOST_TREE_WORK = 2 ** 19
#: Up to this many coarse cells a CPU grid's levels come from one component tree (with
#: Numba, :class:`_TreeLevels`): its arrays take about 50 bytes a cell (400 MB here, where
#: the fine grid of a 2-d fit takes 256 MB); larger grids are labelled level by level.
TREE_CELLS = 2 ** 23
#: A persisting piece counts only with at least this share of its heaviest sibling's mass.
AUTO_SPLIT_MIN_SHARE = 0.25
#: :func:`resolve_stacked` labels at most this many cells (levels times the coarse grid,
#: an empty plane each) in one call; more levels take more calls.
STACK_CELLS = 2 ** 24
#: :func:`resolve_stacked` starts a new stack, in a box at most half the size, where the
#: cells it saves (the box's shrinkage times the levels left) reach this many: about what a
#: call's launches and syncs cost in labelling on a GPU.
CROP_CELLS = 2 ** 22
#: Below this many components in a stack all their masses and parents come to the host in
#: one transfer; from it on, only the significant ones (a count first: two syncs).
SMALL_TREE = 2 ** 16
#: Up to this many cells a device grid's labels grow over the whole grid
#: (:func:`grow_labels`): no bounding box, so no reductions and no sync to find one. A step
#: of the device's growth reads and writes every cell of what it is given, a few MB here
#: (the L2 cache holds them), where the box's reductions and transfer cost the host 0.4 to
#: 0.6 ms of a small ``"auto"`` fit.
GROW_WHOLE_CELLS = 2 ** 18


def threshold_levels():
    """The base rule's levels in points per coarse cell: 1, 2, then 3 * 2**k and 2**(k + 2)
    for k = 0, 1, ... (endless; callers stop).

    Examples
    --------
    >>> import itertools
    >>> list(itertools.islice(threshold_levels(), 10))
    [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    """
    yield 1
    yield 2
    power = 2
    while True:
        yield 3 * power // 2
        yield 2 * power
        power *= 2


def split_levels(base_points):
    """The split step's levels above ``base_points``: 2^(k/2) points per coarse cell
    (endless; callers stop).

    Examples
    --------
    >>> import itertools
    >>> [round(p, 2) for p in itertools.islice(split_levels(2), 5)]
    [2.83, 4.0, 5.66, 8.0, 11.31]
    """
    step = math.floor(2 * math.log2(base_points)) + 1 if base_points >= 1 else 0
    while True:
        points = 2.0 ** (step / 2)
        if points > base_points:
            yield points
        step += 1


def stack_is_faster(shape, connectivity: int) -> bool:
    """Whether a CPU grid of ``shape`` is small enough (:data:`HOST_TREE_WORK`: its cells
    times their neighbours) that labelling its levels whole, stacked, is faster than level
    by level inside the components' boxes."""
    cells = math.prod(int(s) for s in shape)
    return cells * 2 * len(neighbour_offsets(len(shape), connectivity)) <= HOST_TREE_WORK


def _bounding_box(region, xp, to_host) -> tuple:
    """Slices of the smallest box holding every True cell of ``region`` (not empty)."""
    axes = range(region.ndim)
    projections = [region.any(axis=tuple(a for a in axes if a != axis)) for axis in axes]
    flags = to_host(xp.concatenate(projections))  # sync: one flag per grid row, once
    return _box(np.split(np.asarray(flags), np.cumsum(region.shape[:-1])))


def _box(flags) -> tuple:
    """Slices from the first to the last True of each axis's host flags (none empty)."""
    box = []
    for axis in flags:
        hit = np.flatnonzero(axis)
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))  # sync: none, host values
    return tuple(box)


def grow_labels(labels, region, connectivity: int, *, xp=np, to_host=np.asarray,
                spread=None):
    """Geodesic growth of labels through a region, breadth first.

    Each step, every unlabelled (0) cell of ``region`` next to a labelled one (the
    neighbourhood of ``connectivity``, as in :mod:`gpumine.wavecluster.labeling`) takes
    the lowest label among those neighbours, until no cell of the region that a label can
    reach is left. The steps run on the region's bounding box (on a device grid of up to
    :data:`GROW_WHOLE_CELLS` cells, on the whole grid: the same labels, no sync), padded
    by one empty cell: by ``spread`` on the backend (the GPU's one cooperative launch, the
    CPU's compiled loop with Numba: :func:`gpumine.wavecluster.cpu_fast.spread`), or by
    NumPy on a host copy of the box; both follow this rule, so both backends agree. The
    whole grid gives the labels the box gives: every labelled cell next to the region lies
    in it (a split's pieces are its own cells; the other components of its level do not
    touch it, nor do the leaves below, each inside another component of that level).

    Parameters
    ----------
    labels : array of int   -- IN/OUT
        Positive labels, 0 for unlabelled; grown in place inside ``region``.
    region : array of bool   -- IN
        Same shape: the cells labels may grow into.
    connectivity : int
    xp : module
        ``numpy`` or ``cupy``.
    to_host : callable
        Brings a backend array to the host (the bounding box's flags; the box, without
        ``spread``).
    spread : callable, optional
        ``spread(labels, region, steps) -> labels`` on flat padded ``xp`` arrays, ``steps``
        the neighbours' flat offsets (``Stages.spread``); None: :func:`_spread_host`.

    Returns
    -------
    labels : array of int
        ``labels``, grown.

    Examples
    --------
    >>> import numpy as np
    >>> labels = np.array([[1, 0, 0, 0, 2]])
    >>> grow_labels(labels, np.ones((1, 5), bool), 1)  # sync: none, a host example
    array([[1, 1, 1, 2, 2]])
    """
    if spread is not None and xp is not np and region.size <= GROW_WHOLE_CELLS:
        box = tuple(slice(0, s) for s in region.shape)  # the whole grid: no sync
    else:
        box = _bounding_box(region, xp, to_host)
    shape = tuple(sl.stop - sl.start for sl in box)
    padded = tuple(s + 2 for s in shape)
    # padded by one empty cell all round, so that a neighbour's flat index stays inside
    steps = flat_steps(padded, connectivity)
    if spread is None:
        # on the host: many small steps, each a few microseconds of NumPy on the cells just
        # reached
        grown = _spread_host(np.pad(np.asarray(to_host(labels[box])), 1).ravel(),  # sync: box
                             np.pad(np.asarray(to_host(region[box])), 1).ravel(),  # sync: box
                             steps)
        grown = xp.asarray(grown)
    else:
        grown = spread(_pad_one(labels[box], xp).ravel(), _pad_one(region[box], xp).ravel(),
                       steps)
    labels[box] = grown.reshape(padded)[(slice(1, -1),) * len(shape)]
    return labels


def _pad_one(array, xp):
    """``array`` in a new one with an empty cell all round (``xp.pad(array, 1)``'s values: a
    zeroed array and one copy, where ``pad`` takes several calls)."""
    out = xp.zeros(tuple(s + 2 for s in array.shape), dtype=array.dtype)
    out[(slice(1, -1),) * array.ndim] = array
    return out


def _spread_host(grown, inside, steps):
    """:func:`grow_labels`'s steps in NumPy on a flat padded box (``grown`` in place)."""
    # breadth first: the cells labelled last step are the only labelled neighbours a newly
    # reached cell can have, so each step looks from them alone
    front = np.flatnonzero(grown)
    while front.size:
        reached = (front[:, None] + steps).ravel()
        label = np.repeat(grown[front], steps.size)
        new = inside[reached] & (grown[reached] == 0)
        reached, label = reached[new], label[new]
        order = np.lexsort((label, reached))  # per cell, its lowest label first
        reached, label = reached[order], label[order]
        first = np.ones(reached.size, dtype=bool)  # sync: none, host (the growth's copy)
        first[1:] = reached[1:] != reached[:-1]
        front = reached[first]
        grown[front] = label[first]
    return grown


def resolve_stacked(coarse, projections, *, unit: float, minimum: float, base_levels,
                    choose_base, label, connectivity: int, xp=np, weigh, to_host,
                    spread=None, grow: bool = True, split: bool = True,
                    stack=None, halves=None, tree=None, plane=None,
                    paint=None, levels_tree=None) -> tuple[float, tuple, np.ndarray]:
    """The whole ``"auto"`` rule (base level, then the split) from the levels stacked.

    Every level either step may look at -- the base rule's ``base_levels`` and the split
    step's sqrt(2) levels, up to the densest cell -- is labelled in one call of ``label``:
    the levels' masks stacked along the first axis, an empty plane after each so that no
    component crosses from one level to the next (:data:`STACK_CELLS` bounds a call; more
    levels take more calls, a later one inside its first level's bounding box where that
    saves :data:`CROP_CELLS`). One bincount weighs every component of every level, one
    scatter finds each one's parent in the level below, and one transfer brings the tree to
    the host, where the base rule (``choose_base``) and the split (:func:`_decide`) read it.
    The chosen level's components, and the pieces a split grows back, are slices of the
    same stack. Levels above the first that holds nothing significant are not labelled. On
    the GPU: two syncs per call (the labelling's count and the transfer; three from
    :data:`SMALL_TREE` components on), against a labelling, a count and a transfer for
    each level one at a time.

    Parameters
    ----------
    coarse : array   -- IN
        The transformed (coarse) grid, on the backend of ``xp``.
    projections : list of ndarray
        Per axis, the densest cell at each index (``coarse.max`` over the other axes), on
        the host: the peak (no level above it holds a cell) and each level's bounding box.
    unit, minimum : float
        One point's mass, and the significant mass, in coarse units.
    base_levels : sequence of float
        The base rule's levels in points per coarse cell.
    choose_base : callable
        ``choose_base(count) -> index into base_levels``, ``count(i)`` being the number of
        significant components at ``base_levels[i]``.
    label : callable
        The fit's ``wavecluster.label`` strategy.
    connectivity : int
    xp : module
    weigh : callable
        ``weigh(values, weights, bins)`` as in :class:`~gpumine.wavecluster.pipeline.Stages`.
    to_host : callable
    spread : callable, optional
        The growth's steps on the backend (``Stages.spread``; :func:`grow_labels`).
    grow : bool, default=True
        Grow a split's pieces back over their component (else they keep their own cells).
    split : bool, default=True
        False: the base level alone (the split step's levels are not labelled).
    stack : optional
        The levels (:func:`plan_levels`) already labelled, one of :func:`stack_levels`'s
        results; None: labelled here.
    halves : list of float, optional
        With ``stack``: :func:`plan_levels`'s sqrt(2) levels for it (None: planned again).
    tree, plane, paint : callable, optional
        The backend's stack reading, level slicing and painting
        (:class:`~gpumine.wavecluster.pipeline.Stages`), where ``stack`` is None.
    levels_tree : callable, optional
        The backend's component tree of every level in one pass (``Stages.levels_tree``, the
        CPU's with Numba): used in place of a stack where ``stack`` is None.

    Returns
    -------
    base_points : float
        The base level (the threshold is ``(base_points - 0.5) * unit``).
    labelled : tuple
        ``(components, n_components)``: the base level's components, or, where some split,
        the clusters (0 outside the base foreground, 1..n).
    significant : ndarray of int
        The numbers of ``labelled``'s significant components (host; every cluster where
        some split: each holds a leaf of the tree).
    """
    if stack is None or halves is None:
        levels, halves = plan_levels(projections, unit=unit, base_levels=base_levels,
                                     split=split)
    if stack is None and levels_tree is not None:
        stack = _TreeLevels(coarse, levels, unit=unit, minimum=minimum,
                            levels_tree=levels_tree, label=label, connectivity=connectivity,
                            xp=xp)
    elif stack is None:
        stack = _LevelStack(coarse, levels, projections, unit=unit, minimum=minimum,
                            label=label, connectivity=connectivity, xp=xp, weigh=weigh,
                            to_host=to_host, tree=tree, plane=plane, paint=paint)
    where = {p: j for j, p in enumerate(stack.levels)}

    def count(i):
        j = where.get(base_levels[i])
        return 0 if j is None or j >= len(stack.tree) else len(stack.tree[j][0])

    base_points = base_levels[choose_base(count)]
    chosen = where[base_points]
    components, n_components = stack.labelling(chosen)
    if chosen >= len(stack.tree):  # nothing significant
        none = np.zeros(0, np.int64)  # sync: none, an empty host array: nothing significant
        return base_points, (components, n_components), none
    significant = stack.tree[chosen][0]  # the chosen level's numbers
    if not split:
        return base_points, (components, n_components), significant
    # the split's levels: the base, then the sqrt(2) levels above it while any holds a
    # significant component (the tree ends at the first that holds none)
    path = [chosen] + [where[p] for p in halves
                       if p > base_points and where[p] < len(stack.tree)]
    ids, masses, parents = [], [], []
    for t, j in enumerate(path):
        found, mass, below = stack.tree[j]
        ids.append(found)
        masses.append(mass)
        # the tree's own parents where the path's last level is the one below (about two
        # thirds of the steps on the shape sets), else up the tree
        parents.append(None if t == 0 else below if path[t - 1] == j - 1
                       else stack.ancestors(found, j, path[t - 1]))
    leaves, splits = _decide(ids, masses, parents)
    if not splits:
        return base_points, (components, n_components), significant
    if stack.paint is not None and stack.kept is not None:
        painted = _paint_kept(stack, path, ids, leaves, splits, connectivity, xp, to_host,
                              spread, grow)
        return base_points, painted, np.arange(1, painted[1] + 1)
    if isinstance(stack, _TreeLevels):
        painted = stack.paint_clusters(path, ids, leaves, splits, spread, grow)
        return base_points, painted, np.arange(1, painted[1] + 1)

    def labelling(level):
        return stack.labelling(path[level])

    def numbers(level, labelled, positions):
        # every labelling strategy numbers components in raster order of their first cell
        return np.sort(ids[level][positions])

    painted = _paint(leaves, splits, labelling, numbers,
                     lambda level, labelled, positions: ids[level][positions],
                     components, connectivity, xp, to_host, spread, grow)
    return base_points, painted, np.arange(1, painted[1] + 1)  # every leaf is significant


def plan_levels(projections, *, unit: float, base_levels, split: bool = True) -> tuple:
    """The levels :func:`resolve_stacked` labels, in points per coarse cell, sorted: the base
    rule's ``base_levels`` up to the densest cell (the first always) and, with ``split``,
    the split step's sqrt(2) levels up to it; and those sqrt(2) levels (``halves``).

    Examples
    --------
    >>> import numpy as np
    >>> levels, halves = plan_levels([np.array([0.0, 4.2])], unit=1.0,
    ...                              base_levels=(1, 2, 3, 4, 6))
    >>> [round(p, 2) for p in levels], [round(p, 2) for p in halves]
    ([1, 1.41, 2, 2.83, 3, 4], [1.41, 2.0, 2.83, 4.0])
    """
    peak = float(projections[0].max())  # sync: none, host values
    halves, step = [], 1
    while (2.0 ** (step / 2) - 0.5) * unit <= peak:
        halves.append(2.0 ** (step / 2))
        step += 1
    reached = [p for p in base_levels[1:] if (p - 0.5) * unit <= peak]
    return sorted({base_levels[0], *reached, *(halves if split else ())}), halves


def stack_levels(jobs, *, label, connectivity: int, xp, weigh, to_host, tree=None,
                 plane=None, paint=None, planes=None) -> list:
    """Several grids' levels labelled at once: one :class:`_LevelStack` per job.

    ``jobs`` is a list of ``(coarse, levels, projections, unit, minimum)``, one per grid
    (the ``"auto"`` rule's coarse grid and the wavelet's coarser levels; one number of
    dimensions). Where all their levels fit :data:`STACK_CELLS` cells in planes of a common
    shape -- each grid's first-level box in the corner of a plane as large as the largest,
    an empty row at least after each -- they are labelled in one call and read back in one
    transfer (:meth:`_LevelStack.shared`): on the GPU one labelling and two syncs for all
    the grids, against that for each. Else the first grid (the finest) is stacked alone and
    the others share a stack, if they fit; else each grid is stacked on its own. Every way
    gives the same trees and labellings: a plane's numbering follows the raster order of its
    cells, which the padding keeps. ``tree``, ``plane`` and ``paint``: the backend's reading
    of a stack and its levels, ``planes`` its stacking of several grids' levels
    (:class:`~gpumine.wavecluster.pipeline.Stages`; None: calls on ``xp``).
    """
    options = {"label": label, "connectivity": connectivity, "xp": xp, "weigh": weigh,
               "to_host": to_host, "tree": tree, "plane": plane, "paint": paint}
    boxes = _first_boxes(jobs)  # once for every way of sharing
    # all the grids in one stack; else the first (the largest) alone and the rest in one
    for alone in range(min(len(jobs) - 1, 2)):
        shared = _LevelStack.shared(jobs[alone:], **options, boxes=boxes[alone:],
                                    planes=planes)
        if shared is not None:
            return [_LevelStack(coarse, levels, projections, unit=unit, minimum=minimum,
                                **options)
                    for coarse, levels, projections, unit, minimum in jobs[:alone]] + shared
    return [_LevelStack(coarse, levels, projections, unit=unit, minimum=minimum, **options)
            for coarse, levels, projections, unit, minimum in jobs]


def stack_planes(grids, boxes, counts, thresholds, common, *, xp=np) -> tuple:
    """Several grids' levels as the planes of one stack (:meth:`_LevelStack.shared`): grid
    k's ``boxes[k]`` in the corner of each of its ``counts[k]`` planes of shape ``common``,
    zeros elsewhere, and each plane's level, ``density >= thresholds[plane]``. Returns
    ``(weights, mask)``, each ``(sum(counts), *common)``. The contract of the backend's
    ``planes`` (:func:`gpumine.wavecluster.gpu.stack_build` does it in one launch).

    Examples
    --------
    >>> weights, mask = stack_planes([np.array([1.0, 3.0, 2.0])], [(slice(1, 3),)], [2],
    ...                              np.array([2.5, 1.5]), (3,))
    >>> weights.tolist(), mask.tolist()
    ([[3.0, 2.0, 0.0], [3.0, 2.0, 0.0]], [[True, False, False], [True, True, False]])
    """
    weights = xp.zeros((sum(counts), *common), dtype=grids[0].dtype)
    first = 0
    for grid, box, count in zip(grids, boxes, counts, strict=True):
        part = grid[box]  # each of the grid's planes its densities (broadcast over them)
        weights[(slice(first, first + count), *(slice(0, e) for e in part.shape))] = part
        first += count
    mask = weights >= xp.asarray(thresholds).reshape((-1,) + (1,) * len(common))
    return weights, mask


def _profile_boxes(projections, thresholds) -> list:
    """The bounding box of ``coarse >= t`` for each threshold t, from the axes' profiles
    (each axis's densest cell per index; host arrays), all thresholds and axes at once (the
    profiles padded to one length with -inf, which no threshold reaches). Each is at most
    the peak: no box is empty."""
    thresholds = np.asarray(thresholds, dtype=np.float64)
    padded = _padded_profiles(projections)
    width = padded.shape[1]
    above = padded[:, None, :] >= thresholds[None, :, None]  # (axes, levels, cells)
    first = np.argmax(above, axis=2).T.tolist()  # sync: none, host arrays
    last = (width - np.argmax(above[:, :, ::-1], axis=2)).T.tolist()  # sync: none, host
    return [tuple(map(slice, starts, stops)) for starts, stops in zip(first, last, strict=True)]


def _padded_profiles(profiles):
    """Axes' profiles (host arrays) as the rows of one array, padded to one length with
    -inf, which no threshold reaches."""
    padded = np.full((len(profiles), max(profile.size for profile in profiles)), -np.inf)
    for row, profile in enumerate(profiles):
        padded[row, :profile.size] = profile
    return padded


def _first_boxes(jobs) -> list:
    """Each job's (:func:`stack_levels`) first-level box, as :func:`_profile_boxes` finds it,
    every grid's axes at once (one row per axis, with its grid's threshold)."""
    thresholds = np.repeat([(levels[0] - 0.5) * unit for _, levels, _, unit, _ in jobs],
                           [len(job[2]) for job in jobs])
    padded = _padded_profiles([profile for job in jobs for profile in job[2]])
    width = padded.shape[1]
    above = padded >= thresholds[:, None]
    first = np.argmax(above, axis=1).tolist()  # sync: none, host arrays
    last = (width - np.argmax(above[:, ::-1], axis=1)).tolist()  # sync: none, host arrays
    boxes, at = [], 0
    for job in jobs:
        boxes.append(tuple(map(slice, first[at:at + len(job[2])], last[at:at + len(job[2])])))
        at += len(job[2])
    return boxes


def _stack_cells(box) -> int:
    """Cells a level of ``box`` takes in a stack (with its empty plane)."""
    sizes = [sl.stop - sl.start for sl in box]
    return (sizes[0] + 1) * math.prod(sizes[1:])


def _read(labels, n, weights, minima, firsts, xp, weigh, to_host, tree=None) -> tuple:
    """Per plane of a stack's labelling ``labels`` (m, ...) of ``n`` components: its
    significant components' numbers (their mass at least the plane's ``minima``), masses and
    parents' numbers in the plane below (zeros for the planes in ``firsts``: a grid's first
    level) (host); and each plane's first and last number in the labelling. ``weights``:
    the densities, the shape of ``labels``. ``tree``: the backend's reading of the tree
    (:class:`~gpumine.wavecluster.pipeline.Stages`): from :data:`SMALL_TREE` components on
    it stays on the backend and only the significant ones come back; None: calls on
    ``xp``."""
    m = labels.shape[0]
    lightest = float(np.min(minima))  # sync: none, host values
    if n < SMALL_TREE and tree is not None:
        packed = tree(labels, n, weights)  # sync: one transfer, inside
        mass, up = packed[m:m + n + 1], packed[m + n + 1:].astype(np.int64)
        found = np.flatnonzero(mass[1:] >= lightest) + 1
        mass, up = mass[found], up[found]
    elif n < SMALL_TREE:
        mass, up, tops = _tree_on(labels, n, weights, xp, weigh)
        # sync: every component's mass and parent and the planes' last numbers, once
        packed = np.asarray(to_host(xp.concatenate([tops, mass, up.astype(xp.float64)])))
        mass, up = packed[m:m + n + 1], packed[m + n + 1:].astype(np.int64)
        found = np.flatnonzero(mass[1:] >= lightest) + 1
        mass, up = mass[found], up[found]
    else:
        if tree is not None:  # the backend's one pass, left where it ran
            packed = tree(labels, n, weights, transfer=False)  # sync: none
            tops, mass, up = packed[:m], packed[m:m + n + 1], packed[m + n + 1:]
        else:
            mass, up, tops = _tree_on(labels, n, weights, xp, weigh)
            up = up.astype(xp.float64)
        found = xp.flatnonzero(mass[1:] >= lightest) + 1  # sync: the count, once a stack
        # sync: the planes' last numbers and three numbers a significant component, once
        packed = np.asarray(to_host(xp.concatenate([
            tops, found.astype(xp.float64), mass[found], up[found]])))
        found, mass, up = packed[m:].reshape(3, -1)
        found, up = found.astype(np.int64), up.astype(np.int64)
    ends = np.maximum.accumulate(packed[:m].astype(np.int64))  # empty planes: no number
    starts = np.concatenate([[0], ends[:-1]])
    level = np.searchsorted(ends, found)  # a plane's numbers follow the plane's below
    kept = mass >= np.asarray(minima)[level]  # each plane's own minimum
    found, mass, up, level = found[kept], mass[kept], up[kept], level[kept]
    # found is sorted: so is level; plane j's entries are edges[j]:edges[j + 1]
    edges = np.searchsorted(level, np.arange(m + 1)).tolist()  # sync: none, host arrays
    # each number in its own plane's numbering, each parent in the plane below's; a grid's
    # first plane has no parents (all at once, then cut into planes by slicing: np.split
    # costs a few NumPy calls a piece, over tens of planes)
    first = np.isin(level, np.fromiter(firsts, np.int64, len(firsts)))
    parents = np.where(first, 0, up - starts[np.maximum(level - 1, 0)])
    numbers = found - starts[level]
    slabs = [(numbers[a:b], mass[a:b], parents[a:b])
             for a, b in itertools.pairwise(edges)]
    return slabs, starts, ends


def _tree_on(labels, n, weights, xp, weigh) -> tuple:
    """A stack's components' masses and parents' numbers (``n + 1`` each, on ``xp``) and its
    planes' largest numbers (float64): :func:`_read`'s tree, by calls on ``xp``."""
    mass = weigh(labels.ravel(), weights.ravel(), n + 1)
    up = xp.zeros(n + 1, dtype=labels.dtype)
    up[labels[1:].ravel()] = labels[:-1].ravel()  # a component's cells share one parent
    tops = labels.reshape(labels.shape[0], -1).max(axis=1).astype(xp.float64)
    return mass, up, tops


class _LevelStack:
    """The significant components of every level of :func:`resolve_stacked`, labelled in
    stacks of :data:`STACK_CELLS` cells.

    ``tree[j]`` is ``(numbers, masses, parents)`` of level j's significant components, on
    the host: their numbers in level j's own labelling (1..n in raster order of the first
    cell), their masses, and their parents' numbers in level j - 1's (zeros at level 0).
    The tree stops at the first level that holds nothing significant.
    """

    def __init__(self, coarse, levels, projections, *, unit, minimum, label, connectivity,
                 xp, weigh, to_host, tree=None, plane=None, paint=None):
        self.coarse, self.levels, self.unit = coarse, levels, unit
        self.label, self.connectivity, self.xp = label, connectivity, xp
        self.plane, self.paint = plane, paint
        # each level's bounding box, from the axes' profiles: a later stack labels only the
        # box of its first level, which holds every level above
        boxes = _profile_boxes(projections, [(p - 0.5) * unit for p in levels])
        self.tree, self.kept = [], None
        done = 0
        while done < len(levels):
            first = max(done - 1, 0)  # a later stack repeats the level under it: its parents
            cells = _stack_cells(boxes[first])
            last = done + 1
            while last < len(levels) and (last + 1 - first) * cells <= STACK_CELLS:
                smaller = _stack_cells(boxes[last - 1])
                if smaller * 2 <= cells and (len(levels) - last) * (cells - smaller) >= CROP_CELLS:
                    break  # the levels from here on fit a box half the size: a new stack
                last += 1
            padded = self._padded(boxes[first])
            labels, n = self._label(padded, levels[first:last])
            m = labels.shape[0]
            slabs, starts, ends = _read(labels, n, xp.broadcast_to(padded, labels.shape),
                                        np.full(m, minimum), {0}, xp, weigh, to_host, tree)
            del padded
            if first == 0 and last == len(levels):
                self.kept = (labels, boxes[0], starts, ends)  # one stack held every level
            if not self._grow_tree(slabs[done - first:]):
                return
            done = last

    def _grow_tree(self, slabs) -> bool:
        """Append levels' slabs to the tree up to the first that holds nothing significant
        (nor does any level above it): False there."""
        for slab in slabs:
            if slab[0].size == 0:
                return False
            self.tree.append(slab)
        return True

    @classmethod
    def shared(cls, jobs, *, label, connectivity, xp, weigh, to_host, tree=None, plane=None,
               paint=None, boxes=None, planes=None):
        """:func:`stack_levels`'s one call for every job, or None where the planes would
        exceed :data:`STACK_CELLS` cells. ``boxes``: each job's first-level box (None: found
        here). ``planes``: the backend's stacking
        (:class:`~gpumine.wavecluster.pipeline.Stages`; None: a copy a grid and a comparison
        on ``xp``)."""
        if boxes is None:
            boxes = _first_boxes(jobs)
        extents = [tuple(sl.stop - sl.start for sl in box) for box in boxes]
        common = (max(e[0] for e in extents) + 1,
                  *(max(e[a] for e in extents) for a in range(1, len(extents[0]))))
        counts = [len(job[1]) for job in jobs]
        if sum(counts) * math.prod(common) > STACK_CELLS:
            return None
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        thresholds = np.concatenate([[(p - 0.5) * job[3] for p in job[1]] for job in jobs])
        weights, mask = (planes or functools.partial(stack_planes, xp=xp))(
            [job[0] for job in jobs], boxes, counts, thresholds, common)
        labels, n = label(mask.reshape((-1, *common[1:])), connectivity)
        labels = labels.reshape((sum(counts), *common))
        minima = np.repeat([job[4] for job in jobs], counts)
        slabs, starts, ends = _read(labels, n, weights, minima, set(firsts.tolist()), xp, weigh,
                                    to_host, tree)
        stacks = []
        for k, (coarse, levels, _, unit, _) in enumerate(jobs):
            stack = cls.__new__(cls)
            stack.coarse, stack.levels, stack.unit = coarse, levels, unit
            stack.label, stack.connectivity, stack.xp = label, connectivity, xp
            stack.plane, stack.paint = plane, paint
            part = slice(firsts[k], firsts[k] + counts[k])
            stack.tree = []
            stack.kept = (labels[part], boxes[k], starts[part], ends[part])
            stack._grow_tree(slabs[part])
            stacks.append(stack)
        return stacks

    def _padded(self, box):
        """The grid's ``box`` with an empty plane after it: stacked, the planes keep levels
        apart."""
        part = self.coarse[box]
        padded = self.xp.zeros((part.shape[0] + 1, *part.shape[1:]), dtype=part.dtype)
        padded[:part.shape[0]] = part
        return padded

    def _label(self, padded, points):
        """One labelling of the levels ``points`` of a box (``padded``, :meth:`_padded`):
        (labels (m, b0 + 1, ...), count). Numbers run in raster order of the first cell, in
        the box as in the grid."""
        xp = self.xp
        thresholds = upload([(p - 0.5) * self.unit for p in points], xp, np.float64)
        mask = padded[None] >= thresholds.reshape((-1,) + (1,) * padded.ndim)
        labels, n = self.label(mask.reshape((-1, *padded.shape[1:])), self.connectivity)
        return labels.reshape((len(points), *padded.shape)), n

    def ancestors(self, numbers, j, i):
        """The numbers at level i < j of the components ``numbers`` of level j."""
        numbers = numbers.tolist()  # sync: none, host arrays
        for t in range(j, i, -1):
            found, _, parents = self.tree[t]
            up = dict(zip(found.tolist(), parents.tolist(), strict=True))
            numbers = [up[c] for c in numbers]
        return np.asarray(numbers, dtype=np.int64)

    def labelling(self, j):
        """Level j's labelling ``(labels, n)``: a slice of the stack when one stack held
        every level, else labelled anew."""
        xp, shape = self.xp, self.coarse.shape
        if self.kept is None:
            return self.label(self.coarse >= (self.levels[j] - 0.5) * self.unit,
                              self.connectivity)
        labels, box, starts, ends = self.kept
        if self.plane is not None:
            start, count = int(starts[j]), int(ends[j] - starts[j])  # sync: none, host numbers
            return self.plane(labels[j], shape, box, start), count
        part = labels[j][tuple(slice(0, sl.stop - sl.start) for sl in box)]
        out = xp.zeros(shape, dtype=labels.dtype)
        # the plane's numbers run from starts[j] + 1; less starts[j], its 0s go below 0
        out[box] = xp.maximum(part - int(starts[j]), 0)  # sync: none, host numbers
        return out, int(ends[j] - starts[j])  # sync: none, host numbers


class _TreeLevels(_LevelStack):
    """:class:`_LevelStack`'s ``tree`` and labellings from one component tree of the levels
    (the backend's ``levels_tree``: the CPU's compiled union-find,
    :func:`gpumine.wavecluster.cpu_fast.levels_tree`), where a stack labels every level
    whole: the same components, numbers and parents (test), each level's labelling read off
    the tree. The tree stops, as a stack's does, at the first level that holds nothing
    significant."""

    def __init__(self, coarse, levels, *, unit, minimum, levels_tree, label, connectivity,
                 xp):
        self.coarse, self.levels, self.unit = coarse, levels, unit
        self.label, self.connectivity, self.xp = label, connectivity, xp
        self.plane = self.paint = self.kept = None
        self.components = levels_tree(coarse, [(p - 0.5) * unit for p in levels], connectivity)
        # the significant components of each level up to the first that holds none
        self.tree = self.components.significant(minimum)

    def labelling(self, j):
        """Level j's labelling ``(labels, n)``, off the tree."""
        return self.components.labels(j)

    def ancestors(self, numbers, j, i):
        """The numbers at level i < j of the components ``numbers`` of level j: up the
        tree's parent links (where a stack maps each level's numbers through a dict)."""
        tree = self.components
        nodes = tree.nodes(j, numbers)
        for _ in range(j - i):
            nodes = tree.parent[nodes]
        return tree.number[nodes].astype(np.int64)

    def paint_clusters(self, path, ids, leaves, splits, spread, grow):
        """:func:`_paint`'s clusters off the tree, as :func:`_paint_kept` paints them from a
        stack: every leaf in one pass through the tree's nodes (numbered as :func:`_paint`
        numbers them: levels from the top down, each level's in the order of their numbers),
        then each level's splits grown, from the top level down, each split's region one
        more pass (the same labels, for :func:`_paint_kept`'s reasons). ``path[i]`` is the
        tree's level of ``ids[i]``."""
        tree = self.components
        value = np.zeros(tree.level.size, np.int64)  # sync: none, host arrays
        next_id = 1
        for level in sorted({i for i, _ in leaves}, reverse=True):
            numbers = np.sort(ids[level][[k for i, k in leaves if i == level]])
            value[tree.nodes(path[level], numbers)] = np.arange(next_id,
                                                                 next_id + numbers.size)
            next_id += numbers.size
        out = tree.paint(value)
        for level in sorted({i for i, _ in splits}, reverse=True) if grow else ():
            mark = np.zeros(tree.level.size, np.int64)  # sync: none, host arrays
            mark[tree.nodes(path[level], ids[level][[k for i, k in splits if i == level]])] = 1
            out = grow_labels(out, tree.paint(mark) != 0, self.connectivity, spread=spread)
        return out, next_id - 1


def split_persistent(coarse, components, n_components, *, base_points: float, unit: float,
                     minimum: float, connectivity: int, grow: bool = True):
    """The split step on the CPU for a large grid (the module docstring's rule).

    Each level is labelled with SciPy only inside the bounding boxes of the previous
    level's significant components (one small labelling each), where a whole-grid
    labelling per level (or a stack of them, :func:`resolve_stacked`) would cost more
    than the fit (5-d blobs: 1.3-1.8x the fit given the threshold, against 4-6x).

    Parameters
    ----------
    coarse : ndarray   -- IN
        The transformed (coarse) grid.
    components : ndarray of int   -- IN
        The base level's labelling.
    n_components : int
    base_points : float
        The base level in points per coarse cell (the threshold is
        ``(base_points - 0.5) * unit``).
    unit : float
        The coarse grid's mass per unit of weight: "one point".
    minimum : float
        A component is significant from this mass on (coarse units).
    connectivity : int

    Returns
    -------
    components : ndarray of int
        ``components`` itself when nothing splits; else a new labelling, 0 outside the
        base foreground and 1..n for the clusters (a cluster's cells are those of the
        components it was grown from).
    n_components : int
    """
    structure = ndimage.generate_binary_structure(coarse.ndim, connectivity)
    base = components

    def pieces(labelled, n, offset, weights):
        """The significant components of a labelled box: (global box, mask, mass, first
        cell's flat index) each."""
        mass = np.bincount(labelled.ravel(), weights=weights.ravel(), minlength=n + 1)
        kept = np.flatnonzero(mass[1:] >= minimum) + 1
        if not kept.size:
            return []
        # find_objects builds a box for every number: renumber the kept ones 1..m first
        # (a background level holds thousands of specks; 667 x 667 cells, 47k components:
        # 44 ms, against under 1 ms for a few)
        table = np.zeros(n + 1, dtype=np.int32)  # sync: none, the CPU path
        table[kept] = np.arange(1, kept.size + 1, dtype=np.int32)
        boxes = ndimage.find_objects(table[labelled])
        found = []
        for c, box in zip(kept, boxes, strict=True):
            mask = labelled[box] == c
            corner = [o + b.start for o, b in zip(offset, box, strict=True)]
            first = np.add(np.unravel_index(int(np.argmax(mask)),  # sync: none, host (CPU)
                                            mask.shape), corner)
            found.append((tuple(slice(c0, c0 + m) for c0, m in zip(corner, mask.shape,
                                                                     strict=True)),
                          mask, float(mass[c]),  # sync: none, host (CPU path)
                          int(np.ravel_multi_index(first, coarse.shape))))  # sync: none
        return found

    # pass 1: the tree; a node is (box, mask, mass, first cell), its parent a position
    nodes = pieces(base, n_components, (0,) * coarse.ndim, coarse)
    levels, tree, parents = [base_points], [nodes], [None]
    for points in split_levels(base_points):
        threshold = (points - 0.5) * unit
        found, up = [], []
        for position, (box, region, _, _) in enumerate(tree[-1]):
            part = coarse[box]
            mask = region & (part >= threshold)
            labelled, n = ndimage.label(mask, structure)
            if n:
                children = pieces(labelled, n, [b.start for b in box], part)
                found += children
                up += [position + 1] * len(children)
        if not found:
            break
        levels.append(points)
        tree.append(found)
        parents.append(np.asarray(up))
    ids = [np.arange(1, len(level) + 1) for level in tree]
    masses = [np.asarray([node[2] for node in level]) for level in tree]
    leaves, splits = _decide(ids, masses, parents)
    if not splits:
        return components, n_components

    def labelling(level):
        if level == 0:
            return base, n_components
        return ndimage.label(coarse >= (levels[level] - 0.5) * unit, structure)

    def split_numbers(level, labelled, positions):
        return labelled.ravel()[[tree[level][k][3] for k in positions]]

    def numbers(level, labelled, positions):
        firsts = sorted(tree[level][k][3] for k in positions)
        return labelled.ravel()[firsts]

    return _paint(leaves, splits, labelling, numbers, split_numbers, base, connectivity,
                  np, np.asarray, grow=grow)


def _paint(leaves, splits, labelling, numbers, split_numbers, like, connectivity, xp,
           to_host, spread=None, grow=True):
    """The split's pass 2 (:func:`resolve_stacked`, :func:`split_persistent`): from the top
    level down, number the leaves, then grow each split's pieces over its component (with
    ``grow``; without, the pieces keep only their own cells).
    ``labelling(level) -> (labelled, n)``; ``numbers(level, labelled, positions)``: the
    leaves' numbers in ``labelled``, in raster order of their first cell;
    ``split_numbers(level, labelled, positions)``: the splitting components' numbers in
    ``labelled``."""
    out = xp.zeros_like(like)
    next_id = 1
    for level in sorted({i for i, _ in leaves} | {i for i, _ in splits if grow},
                        reverse=True):
        labelled, n = labelling(level)
        here = [k for i, k in leaves if i == level]
        if here:
            table = xp.zeros(n + 1, dtype=out.dtype)
            table[upload(numbers(level, labelled, here), xp)] = xp.arange(
                next_id, next_id + len(here), dtype=out.dtype)
            next_id += len(here)
            out = xp.where(out == 0, table[labelled], out)
        grown = [k for i, k in splits if i == level and grow]
        if grown:  # the regions of one level's splits are apart: grow them together
            inside = xp.zeros(n + 1, dtype=bool)
            inside[upload(split_numbers(level, labelled, grown), xp)] = True
            out = grow_labels(out, inside[labelled], connectivity, xp=xp, to_host=to_host,
                              spread=spread)
    return out, next_id - 1


def _paint_kept(stack, path, ids, leaves, splits, connectivity, xp, to_host, spread, grow):
    """:func:`_paint`'s clusters from a stack that held every level, with the backend's
    ``paint`` (:class:`~gpumine.wavecluster.pipeline.Stages`): every leaf painted in one pass
    through one table of the stack's numbers, then each level's splits grown, from the top
    level down. The same labels: the leaves are numbered as :func:`_paint` numbers them
    (levels from the top down, each level's in the order of their numbers), they are apart,
    and no leaf touches a region that a split grows over before it (a leaf below a split's
    level lies in another component of its own level), so painting them all first changes
    no growth. ``path[i]`` is the stack's level of ``ids[i]``."""
    labels, box, starts, ends = stack.kept
    shape = stack.coarse.shape
    table = np.zeros(int(ends.max()) + 1, np.int64)  # sync: none, a host table
    next_id = 1
    for level in sorted({i for i, _ in leaves}, reverse=True):
        numbers = np.sort(ids[level][[k for i, k in leaves if i == level]])
        table[numbers + starts[path[level]]] = np.arange(next_id, next_id + numbers.size)
        next_id += numbers.size
    out = stack.paint(labels, table, shape, box)
    for level in sorted({i for i, _ in splits}, reverse=True) if grow else ():
        mark = np.zeros(table.size, np.int64)  # sync: none, a host table
        mark[ids[level][[k for i, k in splits if i == level]] + starts[path[level]]] = 1
        planes = labels[path[level]:path[level] + 1]
        region = stack.paint(planes, mark, shape, box)  # sync: none, mark's upload (n + 1 ints)
        region = region != 0  # sync: none, a comparison on the device
        out = grow_labels(out, region, connectivity, xp=xp, to_host=to_host, spread=spread)
    return out, next_id - 1


def _decide(ids, masses, parents) -> tuple[list, list]:
    """The rule on the tree (host lists): ``(leaves, splits)``, each a list of
    ``(level index, position in ids[level])``."""
    # Python numbers throughout: a tree of a few components a level over tens of levels is
    # walked component by component, where NumPy scalars cost several times more
    ids = [np.asarray(level).tolist() for level in ids]  # sync: none, host arrays
    masses = [np.asarray(level).tolist() for level in masses]  # sync: none, host arrays
    depth = len(ids)
    children = [[[] for _ in level] for level in ids]
    for j in range(1, depth):
        position = {c: k for k, c in enumerate(ids[j - 1])}
        kids = children[j - 1]
        for k, p in enumerate(np.asarray(parents[j]).tolist()):  # sync: none, host arrays
            kids[position[p]].append(k)
    last = [[j] * len(level) for j, level in enumerate(ids)]  # highest level reached
    for j in range(depth - 2, -1, -1):
        above, here = last[j + 1], last[j]
        for k, kids in enumerate(children[j]):
            for c in kids:
                if above[c] > here[k]:
                    here[k] = above[c]
    leaves, splits = [], []
    pending = [(0, k) for k in range(len(ids[0]))]
    while pending:
        i, k = pending.pop()
        front = [k]
        for j in range(i + 1, depth):
            kids = children[j - 1]
            # a single component's descendants are its children's list (read, not changed)
            front = kids[front[0]] if len(front) == 1 else [c for p in front for c in kids[p]]
            if not front:
                leaves.append((i, k))
                break
            if len(front) < 2:
                continue
            reach, persistent = last[j], j + AUTO_SPLIT_PERSISTENCE
            kept = [c for c in front if reach[c] >= persistent]
            if len(kept) >= 2:  # pieces far lighter than the heaviest are bumps on it
                mass = masses[j]
                floor = AUTO_SPLIT_MIN_SHARE * max(mass[c] for c in kept)
                kept = [c for c in kept if mass[c] >= floor]
            if len(kept) >= 2:
                splits.append((i, k))
                pending.extend((j, c) for c in kept)
                break
        else:
            leaves.append((i, k))
    return sorted(leaves), sorted(splits)
