"""Compiled CPU steps of WaveCluster (Numba): the histogram, the growth of split pieces, a
stack's tree.

The ``"auto"`` rule grows the pieces of a split component back over it, breadth first
(:func:`gpumine.wavecluster.hierarchy.grow_labels`). In NumPy every step costs about a
dozen calls on the cells just reached, and a spiral arm takes a hundred steps or more:
most of a CPU fit of the spirals. :func:`spread` runs the same steps as one compiled loop
(the CPU's ``Stages.spread``; the GPU has its own, one cooperative launch).
:func:`stack_tree` reads a stack of labelled levels -- each plane's largest number, each
component's mass and parent -- in one pass where NumPy takes a bincount, a scatter, a
maximum and their copies (the CPU's ``Stages.tree``). :func:`histogram` quantizes the points
and counts them into the fine grid in one pass where NumPy makes a dozen arrays of n rows
(the CPU's ``Stages.histogram``); :func:`bounds` finds every feature's range in one pass (NumPy's
``min(axis=0)`` over rows of two features takes a hundred times longer than over columns).
:func:`levels_tree` finds the connected components of every density level of a grid at once,
a component tree (the CPU's ``Stages.levels_tree``): the ``"auto"`` rule's levels without
labelling each one; :class:`LevelsTree` reads each level's significant components off it and
paints a split's clusters through its nodes. :func:`lowpass` is haar's low-pass an axis a call
(the CPU's ``Stages.lowpass``; the ``"auto"`` rule's coarser levels are three more of them a
fit), :func:`nearest` the border and specks in one pass over the grid (``Stages.nearest``),
:func:`joint` the coarser levels' tables (``Stages.joint``): each the contract of the GPU's
kernel of that step, and NumPy's numbers.

Numba is optional (``pip install gpumine[fast]``, part of ``dev``); without it the NumPy
steps run. The first call compiles (about a second), cached on disk afterwards.

Examples
--------
>>> import numpy as np
>>> from gpumine.wavecluster.cpu_fast import spread
>>> grown = np.array([0, 1, 0, 0, 0, 2, 0], dtype=np.int64)  # a padded 1-d box of 5 cells
>>> inside = np.array([False, True, True, True, True, True, False])
>>> spread(grown, inside, np.array([1, -1])).tolist()
[0, 1, 1, 1, 2, 2, 0]
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import math

import numpy as np

from gpumine.exceptions import InvalidParameterError
from gpumine.wavecluster.labeling import flat_steps
from gpumine.wavecluster.wavelet import get_wavelet
from gpumine.wavecluster.wavelet import lowpass as wavelet_lowpass

__all__ = ["LevelsTree", "available", "bounds", "histogram", "joint", "levels_tree",
           "lowpass", "nearest", "spread", "stack_tree"]

_KERNELS: dict = {}
#: :func:`levels_tree` indexes in int32 below this many cells times levels (tests lower it).
_INDEX32_BELOW = 2 ** 31


def available() -> bool:
    """Whether Numba can be imported (:func:`spread` needs it)."""
    return importlib.util.find_spec("numba") is not None


def _kernels() -> dict:
    """Compile-on-first-use: importing this module never imports Numba."""
    if _KERNELS:
        return _KERNELS
    import numba

    @numba.njit(cache=True, nogil=True)
    def grow(grown, inside, steps):
        # INOUT grown (cells) int64: positive labels, 0 unlabelled; IN inside (cells) bool;
        # IN steps (s) int64: the neighbours' flat offsets, both signs (a padded box: every
        # labelled cell's neighbours lie inside the array)
        cells = grown.size
        front = np.empty(cells, dtype=np.int64)
        reached = np.empty(cells, dtype=np.int64)
        # a reached cell's lowest label, this step (sync: none, CPU memory in a Numba loop)
        lowest = np.zeros(cells, dtype=np.int64)  # sync: none, host scratch
        count = 0
        for c in range(cells):
            if grown[c] != 0:
                front[count] = c
                count += 1
        while count:
            new = 0
            for a in range(count):
                cell = front[a]
                label = grown[cell]
                for step in steps:
                    other = cell + step
                    if inside[other] and grown[other] == 0:
                        if lowest[other] == 0:
                            reached[new] = other
                            new += 1
                            lowest[other] = label
                        elif label < lowest[other]:
                            lowest[other] = label
            for a in range(new):  # labelled after the step: grown is this step's start
                cell = reached[a]
                grown[cell] = lowest[cell]
                lowest[cell] = 0
            front, reached = reached, front
            count = new
        return grown

    @numba.njit(cache=True, nogil=True)
    def tree(labels, weights, n, packed):
        # IN labels (m, cells) int64: numbers 1..n, 0 background; IN weights (m, cells) f8
        # (any strides: a broadcast plane too); IN n; OUT packed (m + 2 (n + 1)) f8, zeroed:
        # each plane's largest number, each number's mass, its parent in the plane below
        m, cells = labels.shape
        for p in range(m):
            top = 0
            for c in range(cells):
                v = labels[p, c]
                if v != 0:
                    packed[m + v] += weights[p, c]  # flat order, as bincount adds
                    if p > 0:
                        packed[m + n + 1 + v] = labels[p - 1, c]
                    if v > top:
                        top = v
            packed[p] = top
        return packed

    @numba.njit(cache=True, nogil=True)
    def quantize_histogram(X, weight, weighted, lo, hi, shape, cells, inside, grid):
        # IN X (n, d) float32/64; IN weight (n) float32/64, read when weighted; IN lo, hi (d)
        # float64; IN shape (d) int64; OUT cells (n, d) int64; OUT inside (n) bool;
        # INOUT grid (prod(shape)) float64, zeros in
        n, d = X.shape
        for i in range(n):
            ok = True
            flat = 0
            for j in range(d):
                x = np.float64(X[i, j])
                ok = ok and x >= lo[j] and x <= hi[j]
                v = np.floor((x - lo[j]) / (hi[j] - lo[j]) * np.float64(shape[j]))
                top = np.float64(shape[j] - 1)
                v = 0.0 if v < 0.0 else (top if v > top else v)
                cells[i, j] = np.int64(v)
                flat = flat * shape[j] + cells[i, j]
            inside[i] = ok
            if ok:
                grid[flat] += np.float64(weight[i]) if weighted else 1.0
        return grid

    @numba.njit(cache=True, nogil=True)
    def minmax(X, out):
        # IN X (n, d), n >= 1, any layout; OUT out (2, d), X's dtype: per-feature min, max
        n, d = X.shape
        for j in range(d):
            out[0, j] = X[0, j]
            out[1, j] = X[0, j]
        for i in range(1, n):
            for j in range(d):
                x = X[i, j]
                if x < out[0, j]:
                    out[0, j] = x
                if x > out[1, j]:
                    out[1, j] = x
        return out

    @numba.njit(cache=True, nogil=True)
    def find(parent, c):
        # IN/OUT parent (cells) int64: union-find links (halved on the way up)
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    @numba.njit(cache=True, nogil=True)
    def grown(array, size):
        # IN array (any) int64/float64: a copy at least twice as long, the first values kept
        out = np.empty(max(2 * array.size, size), dtype=array.dtype)
        out[:array.size] = array
        return out

    @numba.njit(cache=True, nogil=True)
    def levels_tree(values, thresholds, steps, level, parent, mass, root_node, cell_node,
                    order, roots, merged, node_level, node_number, node_mass, node_parent,
                    node_root):
        # IN values (cells) f8: the densities, -inf on a padding of one cell all round (so
        # that a neighbour's flat index stays inside); IN thresholds (m) f8, ascending; IN
        # steps (s) int64: the neighbours' flat offsets, both signs. Scratch, contents not
        # read (allocated by NumPy: three arrays of 112k cells made and filled in Numba took
        # 1.3 ms on this VM, NumPy's np.full 0.04 ms): level, parent, root_node, order,
        # roots, merged (cells) int32 or int64 (all index arrays one type), mass (cells)
        # f8; OUT cell_node (cells): each cell's component at its own level, -1 none;
        # OUT node_* (capacity): the nodes -- every component of every level, the top
        # level's first, each level's in raster order of its first cell: their level,
        # number (1.. within the level), mass and parent node (the component holding it one
        # level down; -1 at level 0) -- grown where they need more. Returns the node
        # arrays (cut to the nodes) and level_end (m): one past each level's last node.
        cells = values.size
        m = thresholds.size
        # each cell's highest level, and the cells of each level in raster order (a
        # counting sort over the cells in some level, listed in `merged` as they are
        # found: it is free until the levels' merges). The level is a count of the
        # thresholds at most the value, without a branch a threshold (a binary search's
        # unpredictable branches and a second pass over every cell took 0.73 of the tree's
        # 2.6 ms on a 333 x 333 grid of 25,398 occupied cells, 0.46 now)
        start = np.zeros(m + 1, dtype=np.int64)  # sync: none, host scratch
        parent[:] = -1  # -1: not yet in any level's foreground
        cell_node[:] = -1
        occupied = 0
        if m > 0:
            bottom = thresholds[0]
            for c in range(cells):
                v = values[c]
                if v >= bottom:
                    j = 0
                    for t in range(1, m):
                        j += thresholds[t] <= v
                    level[c] = j
                    start[j + 1] += 1
                    merged[occupied] = c
                    occupied += 1
        for j in range(m):
            start[j + 1] += start[j]
        fill = start[:m].copy()
        for a in range(occupied):
            c = merged[a]
            j = level[c]
            order[fill[j]] = c
            fill[j] += 1
        level_end = np.empty(m, dtype=np.int64)
        n_roots = n_old = nodes = above = 0  # above: the level above's first node
        for j in range(m - 1, -1, -1):
            # the level's cells join in raster order, each with its neighbours already in
            # (the levels above, and this level's earlier cells): each pair is looked at once
            for a in range(start[j], start[j + 1]):
                c = order[a]
                parent[c] = c
                mass[c] = values[c]
                roots[n_roots] = c
                n_roots += 1
                rc = c
                for step in steps:
                    other = c + step
                    if parent[other] < 0:
                        continue
                    ro = find(parent, other)
                    if ro == rc:
                        continue
                    # the lower index is the root: the component's first cell
                    if ro < rc:
                        parent[rc] = ro
                        mass[ro] += mass[rc]
                        rc = ro
                    else:
                        parent[ro] = rc
                        mass[rc] += mass[ro]
            # the components' first cells in raster order: the level above's (sorted) and
            # this level's new cells (raster order) that are still roots, merged
            old = 0
            for a in range(n_old):
                r = roots[a]
                if parent[r] == r:
                    roots[old] = r
                    old += 1
            new = old
            for a in range(n_old, n_roots):
                r = roots[a]
                if parent[r] == r:
                    roots[new] = r
                    new += 1
            a, b, n_roots = 0, old, 0
            while a < old or b < new:
                if b >= new or (a < old and roots[a] < roots[b]):
                    merged[n_roots] = roots[a]
                    a += 1
                else:
                    merged[n_roots] = roots[b]
                    b += 1
                n_roots += 1
            roots, merged = merged, roots
            n_old = n_roots
            if nodes + n_roots > node_level.size:
                capacity = nodes + n_roots
                node_level = grown(node_level, capacity)
                node_number = grown(node_number, capacity)
                node_mass = grown(node_mass, capacity)
                node_parent = grown(node_parent, capacity)
                node_root = grown(node_root, capacity)
            for i in range(n_roots):
                r = roots[i]
                k = nodes + i
                node_level[k] = j
                node_number[k] = i + 1
                node_mass[k] = mass[r]
                node_parent[k] = -1
                node_root[k] = r
                root_node[r] = k
            for k in range(above, nodes):  # the level above's components: their parents
                node_parent[k] = root_node[find(parent, node_root[k])]
            for a in range(start[j], start[j + 1]):
                c = order[a]
                cell_node[c] = root_node[find(parent, c)]
            above = nodes
            nodes += n_roots
            level_end[j] = nodes
        return (node_level[:nodes], node_number[:nodes], node_mass[:nodes],
                node_parent[:nodes], level_end)

    @numba.njit(cache=True, nogil=True)
    def level_labels(cell_node, node_level, node_number, node_parent, end, j, out):
        # IN cell_node (cells) int64, node_level/number/parent (nodes) int64: levels_tree's;
        # IN end: one past level j's last node; OUT out (cells) int64: each cell's number at
        # level j, 0 where the cell is below it
        number = np.zeros(end, dtype=np.int64)  # sync: none, host scratch
        for k in range(end - 1, -1, -1):  # a node's parent comes after it: filled first
            if node_level[k] == j:
                number[k] = node_number[k]
            else:
                number[k] = number[node_parent[k]]
        for c in range(cell_node.size):
            k = cell_node[c]
            out[c] = number[k] if 0 <= k < end else 0
        return out

    @numba.njit(cache=True, nogil=True)
    def haar_axis(grid, tap, out):
        # IN grid (outer, length, inner) f8; IN tap f8: both taps' value; OUT out (outer,
        # (length + 1) // 2, inner) f8: tap * grid[2m + 1] + tap * grid[2m] along the middle
        # axis, the first product 0.0 past an odd length (wavelet._haar_axis's order)
        outer, length, inner = grid.shape
        half = out.shape[1]
        for o in range(outer):
            for m in range(half):
                odd = 2 * m + 1
                for i in range(inner):
                    first = tap * grid[o, odd, i] if odd < length else 0.0
                    out[o, m, i] = first + tap * grid[o, 2 * m, i]
        return out

    @numba.njit(cache=True, nogil=True)
    def significant_slabs(level, number, mass, parent, ends, minimum):
        # IN level, number, parent (nodes) int32/int64, mass (nodes) f8, ends (m) int64:
        # levels_tree's (the top level's nodes first, each level's in number order); IN
        # minimum f8. Returns, for the levels below the first holding no node of mass >=
        # minimum (top; m where all do) from level 0 up, their significant nodes' numbers,
        # masses and parents' numbers (int64, f8, int64; 0 at level 0) and edges (top + 1)
        # int64: level j's are edges[j]:edges[j + 1]
        m = ends.size
        top = m
        for j in range(m):
            begin = ends[j + 1] if j + 1 < m else 0
            held = False
            for k in range(begin, ends[j]):
                if mass[k] >= minimum:
                    held = True
                    break
            if not held:
                top = j
                break
        total = 0
        for j in range(top):
            begin = ends[j + 1] if j + 1 < m else 0
            for k in range(begin, ends[j]):
                if mass[k] >= minimum:
                    total += 1
        numbers = np.empty(total, dtype=np.int64)
        masses = np.empty(total)
        parents = np.empty(total, dtype=np.int64)
        edges = np.empty(top + 1, dtype=np.int64)
        at = 0
        for j in range(top):
            edges[j] = at
            begin = ends[j + 1] if j + 1 < m else 0
            for k in range(begin, ends[j]):
                if mass[k] >= minimum:
                    numbers[at] = number[k]
                    masses[at] = mass[k]
                    parents[at] = number[parent[k]] if level[k] > 0 else 0
                    at += 1
        edges[top] = at
        return numbers, masses, parents, edges

    @numba.njit(cache=True, nogil=True)
    def nearest_cluster(own, components, density, occupied, zero_only, shape, strides,
                        origin, steps, ring_ends, none, out):
        # IN own (padded cells) int64: the significant clusters' numbers, none elsewhere and
        # on a padding of len(ring_ends) cells all round; IN components, density (cells)
        # int64, f8: the grid, C order; IN occupied f8, zero_only bool; IN shape, strides
        # (ndim) int64: the grid's shape, the padded grid's strides; IN origin: the padded
        # index of cell 0; IN steps (offsets) int64: the rings' flat offsets in the padded
        # grid, ring after ring (ring_ends); OUT out (cells) int64: gpu.nearest_cluster's
        ndim = shape.size
        row = shape[ndim - 1]
        if components.size == 0:
            return out
        at = np.zeros(ndim, dtype=np.int64)  # sync: none, host scratch
        start = origin  # the padded index of each row's first cell (an odometer over rows)
        for first in range(0, components.size, row):
            for i in range(row):
                t, p = first + i, start + i
                best = none
                if own[p] == none and density[t] >= occupied and (not zero_only
                                                                   or components[t] == 0):
                    o = 0
                    for r in range(ring_ends.size):  # the first ring holding one ends it
                        while o < ring_ends[r]:
                            value = own[p + steps[o]]
                            if value < best:
                                best = value
                            o += 1
                        if best < none:
                            break
                out[t] = best if best < none else components[t]
            a = ndim - 2
            while a >= 0:
                at[a] += 1
                start += strides[a]
                if at[a] < shape[a]:
                    break
                start -= strides[a] * shape[a]
                at[a] = 0
                a -= 1
        return out

    @numba.njit(cache=True, nogil=True)
    def node_paint(cell_node, parent, value, out):
        # IN cell_node (cells), parent (nodes): levels_tree's; IN/OUT value (nodes) int64:
        # each node's value, 0 for none, then (a node's parent comes after it) each node
        # without one takes its parent's; OUT out (cells) int64: each cell's node's value
        for k in range(value.size - 1, -1, -1):
            if value[k] == 0 and parent[k] >= 0:
                value[k] = value[parent[k]]
        for c in range(cell_node.size):
            k = cell_node[c]
            out[c] = value[k] if k >= 0 else 0
        return out

    @numba.njit(cache=True, nogil=True)
    def joint_table(components, shape, upper, upper_strides, cluster_index, piece_index,
                    density, width, out):
        # IN components (cells) int64, shape (ndim) int64: the finer labelling, C order; IN
        # upper (upper cells) int64, upper_strides (ndim) int64: the next level's labelling
        # and its C strides; IN cluster_index, piece_index int64: each number's row and
        # column; IN density (cells) f8; OUT out (rows * width) f8, zeros in: each cell's
        # density added at (its cluster's row, its c // 2 cell's piece column), cells in
        # flat order (NumPy's bincount's order)
        ndim = shape.size
        row = shape[ndim - 1]
        if components.size == 0:
            return out
        at = np.zeros(ndim, dtype=np.int64)  # sync: none, host scratch
        start = 0  # the next level's flat index of each row's first cell's c // 2
        for first in range(0, components.size, row):
            for i in range(row):
                t = first + i
                piece = piece_index[upper[start + (i // 2) * upper_strides[ndim - 1]]]
                out[cluster_index[components[t]] * width + piece] += density[t]
            a = ndim - 2
            while a >= 0:
                at[a] += 1
                start = 0
                for b in range(ndim - 1):
                    start += (at[b] // 2) * upper_strides[b]
                if at[a] < shape[a]:
                    break
                at[a] = 0
                a -= 1
        return out

    # all at once (one update under the GIL): a thread that finds the table filled finds
    # every kernel in it (the "auto" rule's coarser levels run on the host pool)
    _KERNELS.update({
        "joint_table": joint_table, "node_paint": node_paint,
        "nearest_cluster": nearest_cluster, "significant_slabs": significant_slabs,
        "haar_axis": haar_axis, "grow": grow, "tree": tree, "histogram": quantize_histogram,
        "minmax": minmax, "levels_tree": levels_tree, "level_labels": level_labels})
    return _KERNELS


def lowpass(grid, wavelet="haar", levels: int = 1):
    """``Stages.lowpass`` on the CPU: :func:`gpumine.wavecluster.wavelet.lowpass`, a wavelet of
    two equal taps (haar) compiled, an axis a call into a new array (NumPy's way slices,
    multiplies and pads: the three coarser levels of a 2-d auto fit of 5,556 points took
    0.30 ms that way on the 2-core VM, 0.04 ms compiled); the same products and sums in the
    same order, so the same values (test). Other wavelets: NumPy's.

    Parameters
    ----------
    grid : numpy.ndarray, float64   -- IN
    wavelet : str
    levels : int >= 1

    Returns
    -------
    numpy.ndarray of float64, the shape of :func:`~gpumine.wavecluster.wavelet.coarse_shape`

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import lowpass
    >>> lowpass(np.array([[1.0, 3.0, 2.0], [5.0, 0.0, 4.0]])).round(3).tolist()
    [[4.5, 3.0]]
    """
    taps = get_wavelet(wavelet).dec_lo
    if len(taps) != 2 or taps[0] != taps[1]:
        return wavelet_lowpass(grid, wavelet, levels)
    kernel = _kernels()["haar_axis"]
    tap = float(taps[0])  # sync: none, the filter's host tap (CPU only), once
    out = np.ascontiguousarray(grid, dtype=np.float64)
    for _ in range(levels):
        for axis in range(out.ndim):
            shape = out.shape
            outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
            result = np.empty((*shape[:axis], (shape[axis] + 1) // 2, *shape[axis + 1:]))
            kernel(out.reshape(outer, shape[axis], inner), tap, result.reshape(outer, -1, inner))
            out = result
    return out


def joint(jobs):
    """``Stages.joint`` on the CPU, compiled: the contract of
    :func:`gpumine.wavecluster.levels.joint_tables` (and of the GPU's
    :func:`gpumine.wavecluster.gpu.joint_mass`): for each job ``(components, upper,
    cluster_index, piece_index, density, width)`` the ``density`` of the finer cells of each
    cluster under each next-level piece (the cell's ``c // 2``), one pass a table where NumPy
    takes a gather, ``d`` repeats, a slice, another gather and a bincount; the cells added
    in the same order, so the same numbers (test).

    Parameters
    ----------
    jobs : list of tuple
        As :func:`~gpumine.wavecluster.levels.joint_tables` takes them.

    Returns
    -------
    numpy.ndarray of float64
        The tables one after another, ``(cluster_index.max() + 1) * width`` masses each.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import joint
    >>> job = (np.array([1, 1, 2, 0]), np.array([1, 2]), np.array([0, 1, 2]),
    ...        np.array([0, 1, 0]), np.ones(4), 2)  # sync: none, host; two clusters
    >>> joint([job]).reshape(3, 2)[1:].tolist()  # cluster 1 under piece 1, cluster 2 under none
    [[0.0, 2.0], [1.0, 0.0]]
    """
    kernel = _kernels()["joint_table"]
    tables = []
    for components, upper, cluster_index, piece_index, density, width in jobs:
        components = np.ascontiguousarray(components, dtype=np.int64)
        upper = np.ascontiguousarray(upper, dtype=np.int64)
        cluster_index = np.ascontiguousarray(cluster_index, dtype=np.int64)
        out = np.zeros((int(cluster_index.max()) + 1) * int(width))  # sync: none, host
        kernel(components.ravel(), np.asarray(components.shape, dtype=np.int64),
               upper.ravel(), (np.asarray(upper.strides) // upper.itemsize).astype(np.int64),
               cluster_index, np.ascontiguousarray(piece_index, dtype=np.int64),
               np.ascontiguousarray(density, dtype=np.float64).ravel(), int(width), out)
        tables.append(out)
    return np.concatenate(tables) if tables else np.zeros(0)  # sync: none, host tables


def nearest(own, components, density, occupied, zero_only, rings, none):
    """``Stages.nearest`` on the CPU, compiled: the contract of
    :func:`gpumine.wavecluster.gpu.nearest_cluster` (each candidate cell -- ``own`` is
    ``none``, ``density`` at least ``occupied`` and, with ``zero_only``, ``components`` 0 --
    takes the least ``own`` number over the first of ``rings`` that holds one below
    ``none``, else keeps ``components``) in one pass over the grid, where NumPy's specks look
    up each speck's neighbourhood in blocks and the border takes minima over shifted views:
    the same numbers (test).

    Parameters
    ----------
    own, components : numpy.ndarray of int   -- IN
    density : numpy.ndarray of float64   -- IN
    occupied : float
    zero_only : bool
    rings : tuple
        Per ring, its offsets (ndim-tuples): :func:`~gpumine.wavecluster.engine.offset_rings`.
    none : int

    Returns
    -------
    numpy.ndarray of int64
        The joined labelling, the grid's shape.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import nearest
    >>> components = np.array([[1, 0, 0, 0, 2]])  # two clusters' cells, occupied between
    >>> own = np.where(components > 0, components, 9)  # 9: none
    >>> nearest(own, components, np.ones((1, 5)), 0.5, False,  # sync: none, host arrays
    ...         (((0, 1), (0, -1)), ((0, 2), (0, -2))), 9).tolist()  # the middle: 1 < 2
    [[1, 1, 1, 2, 2]]
    """
    own = np.asarray(own, dtype=np.int64)
    margin = len(rings)
    padded = np.full([s + 2 * margin for s in own.shape], none, dtype=np.int64)
    padded[tuple(slice(margin, margin + s) for s in own.shape)] = own
    shape, strides, origin, steps, ends = _ring_steps(own.shape, rings)
    out = np.empty(own.shape, dtype=np.int64)
    _kernels()["nearest_cluster"](
        padded.ravel(), np.ascontiguousarray(components, dtype=np.int64).ravel(),
        np.ascontiguousarray(density, dtype=np.float64).ravel(), float(occupied),
        bool(zero_only), shape, strides, origin, steps, ends, int(none), out.ravel())
    return out


@functools.lru_cache(maxsize=64)
def _ring_steps(shape: tuple, rings: tuple) -> tuple:
    """:func:`nearest`'s geometry of a grid of ``shape`` padded by ``len(rings)`` cells all
    round: the shape, the padded strides, cell 0's padded index, the rings' flat offsets and
    each ring's end (int64, read-only). Cached: a fit asks once per grid, with the same
    rings (:func:`~gpumine.wavecluster.engine.offset_rings` is cached too)."""
    margin = len(rings)
    strides = np.cumprod((1, *(s + 2 * margin for s in shape[:0:-1])))[::-1].astype(np.int64)
    steps = np.array([o for ring in rings for o in ring], dtype=np.int64).reshape(-1, len(shape))
    arrays = (np.asarray(shape, dtype=np.int64), strides, steps @ strides,
              np.cumsum([len(ring) for ring in rings]).astype(np.int64))
    for array in arrays:
        array.flags.writeable = False
    return arrays[0], arrays[1], int(margin * strides.sum()), arrays[2], arrays[3]


def spread(labels, region, steps):
    """:func:`~gpumine.wavecluster.hierarchy.grow_labels`'s steps, compiled: each step every
    unlabelled cell of ``region`` next to a cell labelled the step before takes the lowest
    label among those neighbours (``Stages.spread``'s contract).

    Parameters
    ----------
    labels : numpy.ndarray of int64, flat   -- IN/OUT
        The padded box's labels, 0 unlabelled (one empty cell all round); grown in place.
    region : numpy.ndarray of bool, flat   -- IN
        Where labels may grow (False on the padding).
    steps : numpy.ndarray of int64
        The neighbours' flat offsets, both signs.

    Returns
    -------
    numpy.ndarray of int64
        ``labels``, grown.
    """
    grown = np.ascontiguousarray(labels, dtype=np.int64)
    return _kernels()["grow"](grown, np.ascontiguousarray(region, dtype=np.bool_),
                              np.ascontiguousarray(steps, dtype=np.int64))


def stack_tree(labels, n, weights, transfer: bool = True):
    """:func:`~gpumine.wavecluster.hierarchy._read`'s small tree in one compiled pass
    (``Stages.tree``'s contract, the GPU's :func:`gpumine.wavecluster.gpu.stack_tree`): ``[each
    plane's largest number (m), each component's mass (n + 1), each one's parent in the
    plane below (n + 1)]`` as one array of doubles (bin 0 and the first plane's parents are
    not meaningful). The masses add the cells in flat order, as NumPy's ``bincount`` does,
    so they are the same numbers.

    Parameters
    ----------
    labels : numpy.ndarray of int64, (m, ...)   -- IN
        A stack's labelling, numbers 1..n.
    n : int
    weights : numpy.ndarray of float64   -- IN
        The densities, the shape of ``labels`` (a broadcast view of one plane is not copied).
    transfer : bool, default=True
        The contract's (the GPU's leaves its array on the device without it); here the
        array is on the host either way.

    Returns
    -------
    numpy.ndarray of float64

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import stack_tree
    >>> labels = np.array([[1, 1, 0, 2], [0, 3, 0, 0]])  # two planes of four cells
    >>> weights = np.broadcast_to(np.array([1.0, 2.0, 5.0, 4.0]), labels.shape)
    >>> stack_tree(labels, 3, weights).tolist()  # tops, masses 0..3, parents 0..3
    [2.0, 3.0, 0.0, 3.0, 4.0, 2.0, 0.0, 0.0, 0.0, 1.0]
    """
    m = labels.shape[0]
    flat = np.ascontiguousarray(labels, dtype=np.int64).reshape(m, -1)
    packed = np.zeros(m + 2 * (int(n) + 1))  # sync: none, host arrays
    return _kernels()["tree"](flat, np.asarray(weights, dtype=np.float64).reshape(m, -1),
                              int(n), packed)  # sync: none, host arrays


def histogram(X, weight, bounds, grid_shape):
    """``Stages.histogram`` on the CPU in one compiled pass: the cells and inside mask of
    :func:`~gpumine.wavecluster.engine.quantize`, and the fine grid those points count into
    (their weights, when given, added in row order as NumPy's ``bincount`` adds them: the
    same numbers as the NumPy steps, ``pipeline._cpu_histogram``).

    Parameters
    ----------
    X : numpy.ndarray (n, d), float32 or float64   -- IN
    weight : numpy.ndarray (n,) or None   -- IN
    bounds : numpy.ndarray (2, d), float64
        The grid's lower and upper bounds per feature.
    grid_shape : tuple of int

    Returns
    -------
    ((cells, inside), grid, None)
        ``cells`` (n, d) int64 and ``inside`` (n,) bool of every point, the grid (float64,
        ``grid_shape``); no sum (the contract's third item).

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import histogram
    >>> X = np.array([[0.0, 0.0], [1.0, 1.0], [0.4, 0.9], [2.0, 0.5]])
    >>> (cells, inside), grid, _ = histogram(X, None, np.array([[0.0, 0.0], [1.0, 1.0]]), (2, 2))
    >>> inside.tolist(), grid.tolist()
    ([True, True, True, False], [[1.0, 1.0], [0.0, 1.0]])
    """
    X = np.asarray(X)  # any layout: a fit's columns are column-major (compiled for each)
    n, d = X.shape
    lo = np.ascontiguousarray(bounds[0], dtype=np.float64)
    hi = np.ascontiguousarray(bounds[1], dtype=np.float64)
    shape = np.asarray(grid_shape, dtype=np.int64)
    cells = np.empty((n, d), dtype=np.int64)
    inside = np.empty(n, dtype=np.bool_)
    grid = np.zeros(int(np.prod(shape)))  # sync: none, host arrays
    weighted = weight is not None
    weights = np.ascontiguousarray(weight) if weighted else np.empty(0, dtype=X.dtype)
    _kernels()["histogram"](X, weights, weighted, lo, hi, shape, cells, inside, grid)
    shape_out = tuple(int(s) for s in grid_shape)  # sync: none, host numbers
    return (cells, inside), grid.reshape(shape_out), None


def bounds(X):
    """Every feature's minimum and maximum, ``np.stack([X.min(0), X.max(0)])`` in one compiled
    pass over X in any memory layout (the same values: finite data, exact comparisons).

    Parameters
    ----------
    X : numpy.ndarray (n, d), n >= 1   -- IN

    Returns
    -------
    numpy.ndarray (2, d), X's dtype

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import bounds
    >>> bounds(np.array([[0.5, 3.0], [-1.0, 4.0], [2.0, 3.5]])).tolist()
    [[-1.0, 3.0], [2.0, 4.0]]
    """
    X = np.asarray(X)
    out = np.empty((2, X.shape[1]), dtype=X.dtype)
    return _kernels()["minmax"](X, out)


class LevelsTree:
    """The connected components of every level of a grid (:func:`levels_tree`'s result).

    ``level``, ``number``, ``mass``, ``parent`` : numpy.ndarray
        One entry per component of every level, the top level's first, each level's in
        raster order of its first cell: its level (0 the lowest), its number in that level's
        labelling (1..), its mass (the sum of its cells' densities) and the index of its
        parent, the component holding it one level down (-1 at level 0).
    ends : numpy.ndarray
        One past each level's last entry (level j's are ``ends[j + 1]:ends[j]``, the top
        level's from 0).
    """

    def __init__(self, shape, cell_node, level, number, mass, parent, ends):
        self.shape, self._cell_node = shape, cell_node
        self.level, self.number, self.mass, self.parent, self.ends = (level, number, mass,
                                                                     parent, ends)

    def significant(self, minimum: float) -> list:
        """Per level from 0 up to the first that holds no component of mass at least
        ``minimum`` (not included), its such components' ``(numbers, masses, parents'
        numbers in the level below)`` (int64, float64, int64; parents 0 at level 0), each
        level's in number order: :class:`~gpumine.wavecluster.hierarchy._LevelStack`'s
        ``tree``, in one compiled pass."""
        numbers, masses, parents, edges = _kernels()["significant_slabs"](
            self.level, self.number, self.mass, self.parent, self.ends, float(minimum))
        edges = edges.tolist()  # sync: none, host numbers
        return [(numbers[a:b], masses[a:b], parents[a:b]) for a, b in itertools.pairwise(edges)]

    def _begin(self, j: int) -> int:
        """The index of level j's first node (the levels above come first)."""
        return int(self.ends[j + 1]) if j + 1 < self.ends.size else 0  # sync: none, host

    def _inner(self, padded):
        """A flat labelling of the padded grid, cut to the grid (a new C-order array)."""
        inner = tuple(slice(1, s + 1) for s in self.shape)
        return np.ascontiguousarray(padded.reshape([s + 2 for s in self.shape])[inner])

    def nodes(self, j: int, numbers):
        """The node indices of level j's components ``numbers`` (1..)."""
        return self._begin(j) + np.asarray(numbers, dtype=np.int64) - 1

    def paint(self, value):
        """Each cell's value from its node (its component at its own highest level) or, where
        that has none, the nearest of the node's ancestors (its components down the levels)
        that has one: ``value`` (one per node, 0: none; copied) painted over the grid in one
        compiled pass. With the values on some components of the levels (none inside another), every
        cell of such a component takes its value, every other cell 0: the labelling of
        those components, whatever their levels."""
        padded = np.empty(self._cell_node.size, dtype=np.int64)
        _kernels()["node_paint"](self._cell_node, self.parent,
                                 np.array(value, dtype=np.int64), padded)
        return self._inner(padded)

    def count(self, j: int) -> int:
        """How many components level j holds."""
        return int(self.ends[j]) - self._begin(j)  # sync: none, host numbers

    def labels(self, j: int):
        """Level j's labelling ``(labels, n)``, as a labelling strategy gives it: int64, 0
        below the level, 1..n in raster order of each component's first cell."""
        padded = np.empty(self._cell_node.size, dtype=np.int64)
        _kernels()["level_labels"](self._cell_node, self.level, self.number, self.parent,
                                   int(self.ends[j]), j, padded)  # sync: none, host numbers
        return self._inner(padded), self.count(j)


def levels_tree(coarse, thresholds, connectivity: int):
    """Every level's connected components in one compiled pass: a component tree.

    Level j is the foreground ``coarse >= thresholds[j]`` (compared in float64). The cells
    join a union-find by decreasing level, the top level's first: after level j's cells have
    joined their neighbours in the levels at or above, the sets are level j's components,
    each with its mass and first cell; each component of level j + 1 lies in one of them,
    its parent. Where labelling each level (or a stack of them) visits every cell of every
    level it lies in, this visits each cell once and each neighbour pair once, plus a sort
    of each level's components by first cell.

    Parameters
    ----------
    coarse : numpy.ndarray   -- IN
        The densities (any real dtype, any layout).
    thresholds : sequence of float
        The levels' thresholds, ascending.
    connectivity : int
        As in :mod:`gpumine.wavecluster.labeling` (1: neighbours that share a face).

    Returns
    -------
    LevelsTree

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.wavecluster.cpu_fast import levels_tree
    >>> tree = levels_tree(np.array([3.0, 1.0, 2.0, 0.0, 5.0]), [1.0, 2.5], 1)
    >>> tree.labels(0), tree.labels(1)
    ((array([1, 1, 1, 0, 2]), 2), (array([1, 0, 0, 0, 2]), 2))
    >>> tree.mass.tolist(), tree.parent.tolist()  # level 1's two, then level 0's two
    ([3.0, 5.0, 6.0, 5.0], [2, 3, -1, -1])
    """
    coarse = np.asarray(coarse)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if thresholds.ndim != 1 or np.any(np.diff(thresholds) < 0):
        raise InvalidParameterError("levels_tree needs ascending thresholds, one per level")
    shape = coarse.shape
    values = np.full([s + 2 for s in shape], -np.inf)
    values[tuple(slice(1, s + 1) for s in shape)] = coarse
    steps = flat_steps(values.shape, connectivity)
    cells = values.size
    # scratch and outputs from NumPy (untouched pages cost nothing): the cells' arrays, and
    # room for nodes a quarter of the cells (about a tenth on the shape sets; more are grown
    # inside); indices in int32 where every cell and every node (at most a cell a level)
    # fits, half the memory of int64
    index = np.int32 if cells * max(thresholds.size, 1) < _INDEX32_BELOW else np.int64
    level, parent, root_node, cell_node, order, roots, merged = np.empty((7, cells),
                                                                         dtype=index)
    room = max(cells // 4, 64)
    node_level, node_number, node_parent, node_root = np.empty((4, room), dtype=index)
    *nodes, ends = _kernels()["levels_tree"](
        values.ravel(), thresholds, steps, level, parent, np.empty(cells), root_node,
        cell_node, order, roots, merged, node_level, node_number, np.empty(room),
        node_parent, node_root)
    return LevelsTree(shape, cell_node, *nodes, ends)
