"""The component tree of a grid's density levels on the device: the GPU's ``levels_tree``.

:func:`levels_tree` gives what :func:`gpumine.wavecluster.cpu_fast.levels_tree` gives on the
CPU -- every level's connected components, their masses and their parents one level down --
from one union-find over the cells (``kernels/wavecluster.cu``, ``tree_*``): the levels'
bands join from the top level down, a launch a band, so each neighbour pair is looked at once
where a stack of labelled levels (:func:`gpumine.wavecluster.hierarchy.stack_levels`)
labels each cell once for every level it lies in. The ``"auto"`` threshold takes a grid's
levels from it where they do not fit one stack
(:func:`~gpumine.wavecluster.hierarchy.stack_levels`).
"""

from __future__ import annotations

import numpy as np

from gpumine.backend import cupy_module, get_backend, upload
from gpumine.exceptions import InvalidParameterError
from gpumine.kernels import declares, get_kernel, launch, resident_blocks
from gpumine.wavecluster.gpu import _BLOCK, _blocks, _stream_blocks, _union_find_constants

__all__ = ["DeviceLevelsTree", "levels_tree"]

_SOURCE = "wavecluster_tree.cu"
_MAX_DIMS = 8


class DeviceLevelsTree:
    """:class:`gpumine.wavecluster.cpu_fast.LevelsTree` with the cells on the device.

    ``level``, ``number``, ``mass``, ``parent`` and ``ends`` are host arrays with the CPU
    tree's meaning (one entry per component of every level, the top level's first, each
    level's in raster order of its first cell; ``ends[j]`` one past level j's last entry);
    :meth:`labels` and :meth:`paint` give device arrays of the grid's shape.
    """

    def __init__(self, shape, cell_node, node_level, node_parent, mass, parent, ends):
        self.shape = shape
        self._cell_node, self._node_level, self._node_parent = cell_node, node_level, node_parent
        self.mass, self.parent, self.ends = mass, parent, ends
        m = ends.size
        begins = np.append(ends[1:], 0)  # sync: none, host numbers
        counts = ends - begins
        # the top level's nodes first: level m - 1 down to 0
        self.level = np.repeat(np.arange(m - 1, -1, -1, dtype=np.int64), counts[::-1])
        self.number = np.arange(ends[0] if m else 0, dtype=np.int64) - begins[self.level] + 1

    def significant(self, minimum: float) -> list:
        """:meth:`gpumine.wavecluster.cpu_fast.LevelsTree.significant`: per level from 0 up to
        the first holding no component of mass at least ``minimum`` (not included), its such
        components' ``(numbers, masses, parents' numbers one level down)``."""
        keep = self.mass >= minimum
        out = []
        for j in range(self.ends.size):
            begin = self._begin(j)
            k = begin + np.flatnonzero(keep[begin:self.ends[j]])
            if not k.size:
                break
            parents = (self.number[self.parent[k]] if j > 0
                       else np.zeros(k.size, dtype=np.int64))
            out.append((self.number[k], self.mass[k], parents))
        return out

    def _begin(self, j: int) -> int:
        """The index of level j's first node (the levels above come first)."""
        return int(self.ends[j + 1]) if j + 1 < self.ends.size else 0  # sync: none, host

    def nodes(self, j: int, numbers):
        """The node indices of level j's components ``numbers`` (1..)."""
        return self._begin(j) + np.asarray(numbers, dtype=np.int64) - 1

    def count(self, j: int) -> int:
        """How many components level j holds."""
        return int(self.ends[j]) - self._begin(j)  # sync: none, host numbers

    @declares(_SOURCE, "tree_labels")
    def labels(self, j: int):
        """Level j's labelling ``(labels, n)``: int64 on the device, 0 below the level, 1..n
        in raster order of each component's first cell (one launch)."""
        cp = cupy_module()
        cells = self._cell_node.size
        out = cp.empty(self.shape, dtype=cp.int64)
        launch(get_kernel(_SOURCE, "tree_labels"), _stream_blocks(cells), _BLOCK,
               (self._cell_node, self._node_level, self._node_parent, np.int32(j),
                np.int64(self._begin(j)), np.int64(cells), out))
        return out, self.count(j)

    @declares(_SOURCE, "tree_paint")
    def paint(self, value):
        """Each cell's value from its node or the nearest of the node's ancestors that has
        one (``value``: one per node, 0 none; host): :meth:`LevelsTree.paint
        <gpumine.wavecluster.cpu_fast.LevelsTree.paint>` in one launch."""
        cp = cupy_module()
        cells = self._cell_node.size
        out = cp.empty(self.shape, dtype=cp.int64)
        launch(get_kernel(_SOURCE, "tree_paint"), _stream_blocks(cells), _BLOCK,
               (self._cell_node, self._node_parent, upload(value, cp, np.int64),
                np.int64(cells), out))
        return out


@declares(_SOURCE, "tree_bands", ("int", "long long"))
@declares(_SOURCE, "tree_rows", ("int", "long long"))
@declares(_SOURCE, "tree_nodes", ("int", "long long"))
@declares(_SOURCE, "tree_cells", ("int", "long long"))
@declares(_SOURCE, "tree_mass")
def levels_tree(coarse, thresholds, connectivity: int) -> DeviceLevelsTree:
    """Every level's connected components of a device grid in one union-find: a component
    tree, as :func:`gpumine.wavecluster.cpu_fast.levels_tree` builds it on the CPU (the same
    components, numbers and parents; the masses summed in another order).

    Level j is the foreground ``coarse >= thresholds[j]`` (float64). The cells of band j (the
    last level they reach) join their neighbours of band j and above in one launch, from the
    top band down; after band j the sets are level j's components. A root hooked in band j
    roots a component of every level above j up to its own band and of none below, so the
    nodes (a component of a level) are numbered, the top level's first and each level's in
    raster order of their first cells, by one prefix sum over a (levels, roots) table; a
    node's parent is its root's own node one level down or, where the root was hooked
    there, the node of the set it was hooked into (kept at the end of that band).
    Launches: the union-find in one (cooperative: a grid barrier between the steps of a
    band and between bands, where a launch a step cost more than the stacks on the
    H100), about eight in all; three syncs (the roots' count, the levels' counts, the
    masses and parents).

    Parameters
    ----------
    coarse : cupy.ndarray   -- IN
        The densities (any real dtype), at most 8 dimensions.
    thresholds : sequence of float
        The levels' thresholds, ascending.
    connectivity : int
        As in :mod:`gpumine.wavecluster.labeling`.

    Returns
    -------
    DeviceLevelsTree

    Examples
    --------
    >>> import cupy as cp  # doctest: +SKIP
    >>> tree = levels_tree(cp.array([3.0, 1.0, 2.0, 0.0, 5.0]), [1.0, 2.5], 1)  # doctest: +SKIP
    >>> tree.labels(0)[0].tolist(), tree.mass.tolist()  # doctest: +SKIP
    ([1, 1, 1, 0, 2], [3.0, 5.0, 6.0, 5.0])
    """
    cp = cupy_module()
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if thresholds.ndim != 1 or np.any(np.diff(thresholds) < 0):
        raise InvalidParameterError("levels_tree needs ascending thresholds, one per level")
    if coarse.ndim > _MAX_DIMS:
        raise InvalidParameterError(f"levels_tree takes grids of up to {_MAX_DIMS} "
                                    f"dimensions, got {coarse.ndim}")
    shape = tuple(coarse.shape)
    values = cp.ascontiguousarray(coarse, dtype=cp.float64).ravel()
    cells, m = values.size, thresholds.size
    to_host = get_backend("gpu").to_host
    rank_type = cp.int32 if cells < 2**31 else cp.int64
    type_name = "int" if rank_type is cp.int32 else "long long"
    level = cp.empty(cells, dtype=cp.int32)
    parent = cp.empty(cells, dtype=cp.int64)
    hooked = cp.empty(cells, dtype=cp.int32)
    own_root = cp.empty(cells, dtype=cp.int64)  # read only where written: a cell's band
    hook_root = cp.empty(cells, dtype=cp.int64)  # and where a root was hooked
    rank = cp.empty(cells, dtype=rank_type)
    grid, step, down, up, n_offsets = _union_find_constants(cp.cuda.Device().id, shape,
                                                            connectivity, True)
    bands = get_kernel(_SOURCE, "tree_bands", type_name, cooperative=True)
    launch(bands, max(1, min(resident_blocks(bands, _BLOCK), _blocks(cells))), _BLOCK,
           (values, upload(thresholds, cp, np.float64), np.int32(m), grid, step, down, up,
            np.int32(n_offsets), np.int64(cells), level, parent, hooked, own_root, hook_root,
            rank))
    cp.cumsum(rank, out=rank)
    roots = int(rank[-1]) if cells else 0  # sync: how many cells root a component
    if roots * max(m, 1) >= 2**31:
        raise InvalidParameterError("levels_tree: more than 2^31 components over the levels")
    # every node's index + 1: the (m, roots) flags, the top level's row first, summed
    node_index = cp.empty(m * roots, dtype=cp.int32)
    if roots:
        launch(get_kernel(_SOURCE, "tree_rows", type_name), _stream_blocks(cells), _BLOCK,
               (level, hooked, rank, np.int64(cells), np.int32(m), np.int64(roots), node_index))
        cp.cumsum(node_index, out=node_index)
        # sync: one past each level's last node (the rows' last sums, top level first)
        ends = to_host(node_index.reshape(m, roots)[:, -1])[::-1].astype(np.int64)
    else:
        ends = np.zeros(m, dtype=np.int64)
    nodes = int(ends[0]) if m else 0  # sync: none, host numbers
    node_level = cp.empty(nodes, dtype=cp.int32)
    node_parent = cp.empty(nodes, dtype=cp.int64)
    cell_node = cp.empty(cells, dtype=cp.int64)
    direct = cp.zeros(nodes + 1, dtype=cp.float64)
    packed = cp.zeros(1 + 2 * nodes, dtype=cp.float64)
    launch(get_kernel(_SOURCE, "tree_nodes", type_name), _stream_blocks(cells), _BLOCK,
           (level, hooked, hook_root, rank, node_index, np.int64(cells), np.int32(m),
            np.int64(roots), node_level, node_parent))
    launch(get_kernel(_SOURCE, "tree_cells", type_name), _stream_blocks(cells), _BLOCK,
           (level, own_root, rank, node_index, values, np.int64(cells), np.int32(m),
            np.int64(roots), cell_node, direct))
    if nodes:
        launch(get_kernel(_SOURCE, "tree_mass"), _stream_blocks(nodes), _BLOCK,
               (node_parent, direct, np.int64(nodes), np.int32(m), packed))
    host = to_host(packed)  # sync: every node's mass and parent, once
    return DeviceLevelsTree(shape, cell_node, node_level, node_parent, host[1:1 + nodes],
                            host[1 + nodes:].astype(np.int64), ends)
