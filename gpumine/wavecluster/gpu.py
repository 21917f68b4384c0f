"""WaveCluster on the GPU: every stage a kernel of ``kernels/wavecluster.cu``.

Each function mirrors its CPU counterpart in :mod:`gpumine.wavecluster.engine`,
:mod:`~gpumine.wavecluster.wavelet` and :mod:`~gpumine.wavecluster.labeling`
with the same arithmetic, so the GPU path gives the CPU path's labels.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpumine.backend import cupy_module, get_backend, upload
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.kernels import BLOCK, declares, device_attribute, get_kernel, launch, resident_blocks
from gpumine.wavecluster.labeling import neighbour_offsets
from gpumine.wavecluster.wavelet import coarse_shape, get_wavelet

__all__ = [
    "bounds",
    "grid_summaries",
    "joint_mass",
    "label_sliding_window",
    "label_union_find_gpu",
    "lookup",
    "lowpass",
    "nearest_cluster",
    "point_components",
    "quantize_histogram",
    "spread_labels",
    "stack_paint",
    "stack_plane",
    "stack_tree",
    "stages",
    "weighted_bincount",
]

_SOURCE = "wavecluster.cu"
_GROW = "wavecluster_grow.cu"
_BLOCK = BLOCK  # minmax_columns is compiled for it
#: The most grid axes the labelling kernels take (``WC_MAX_DIMS`` in wavecluster.cu);
#: the sliding window's 2^d-cell windows, held in registers, take at most 4.
_MAX_DIMS = 8
_SLIDING_WINDOW_MAX_DIMS = 4
_UF_TILE = 32  # UF_TILE in wavecluster.cu: 2-d union-find's tiles
_EMPTY = np.iinfo(np.int64).max
_SHARED_HISTOGRAM = 48 * 1024
_STREAM_BLOCKS_PER_SM = 8

_FLAGS = ("true", "false")  # a bool template argument
#: WC_STACK_GRIDS and WC_STACK_PLANES in wavecluster.cu: the grids and planes of one
#: ``stack_build`` launch (its parameter, ``StackPlan``, stays under 4 KB).
_STACK_GRIDS, _STACK_PLANES = 4, 128
#: ``PlaneGeometry``'s layout (stack_plane, stack_paint): 4 x 8 int64 extents.
_GEOMETRY = np.dtype([("v", np.int64, (4 * _MAX_DIMS,))])
#: WC_SUMMARY_GRIDS in wavecluster.cu: the grids of one ``grid_summary`` launch.
_SUMMARY_GRIDS = 4
#: ``SummaryPlan``'s layout, field for field: 57 int64 words, then two int32.
_SUMMARY_PLAN = np.dtype([("grid", np.uint64, (_SUMMARY_GRIDS,)),
                          ("shape", np.int64, (_SUMMARY_GRIDS, _MAX_DIMS)),
                          ("cells", np.int64, (_SUMMARY_GRIDS,)),
                          ("first_block", np.int64, (_SUMMARY_GRIDS + 1,)),
                          ("out", np.int64, (_SUMMARY_GRIDS,)),
                          ("partial", np.int64, (_SUMMARY_GRIDS,)),
                          ("done", np.int64, (_SUMMARY_GRIDS,)),
                          ("grids", np.int32), ("ndim", np.int32)], align=True)
#: Each SummaryPlan field's first 8-byte word.
_SUMMARY_WORD = {name: offset // 8 for name, (_, offset) in _SUMMARY_PLAN.fields.items()}
#: WC_JOINT_JOBS in wavecluster.cu: the tables of one ``joint_mass`` launch.
_JOINT_JOBS = 4
#: ``JointPlan``'s layout, field for field: 101 int64 words, then two int32.
_JOINT_PLAN = np.dtype([(name, np.uint64, (_JOINT_JOBS,))
                        for name in ("components", "upper", "density")]
                       + [(name, np.int64, (_JOINT_JOBS, _MAX_DIMS))
                          for name in ("shape", "upper_shape")]
                       + [(name, np.int64, (_JOINT_JOBS,))
                          for name in ("cells", "width", "cluster_at", "piece_at", "mass_at")]
                       + [("first_block", np.int64, (_JOINT_JOBS + 1,)), ("jobs", np.int32),
                          ("unused", np.int32)], align=True)
_JOINT_WORD = {name: offset // 8 for name, (_, offset) in _JOINT_PLAN.fields.items()}
#: ``StackPlan``'s layout, field for field (8-byte fields first: no padding).
_STACK_PLAN = np.dtype([("grid", np.uint64, (_STACK_GRIDS,)),
                        ("shape", np.int64, (_STACK_GRIDS, _MAX_DIMS)),
                        ("start", np.int64, (_STACK_GRIDS, _MAX_DIMS)),
                        ("extent", np.int64, (_STACK_GRIDS, _MAX_DIMS)),
                        ("plane", np.int64, (_MAX_DIMS,)),
                        ("threshold", np.float64, (_STACK_PLANES,)),
                        ("grid_of", np.int32, (_STACK_PLANES,))], align=True)
_STACK_WORD = {name: offset // 8 for name, (_, offset) in _STACK_PLAN.fields.items()}


def _blocks(count):
    return max(1, -(-int(count) // _BLOCK))


@functools.lru_cache(maxsize=256)
def _constant(device_id: int, values: tuple, dtype: str):
    """A few numbers (a grid's shape, a wavelet's taps) on device ``device_id``, uploaded
    once per value rather than once per call: a fit with ``threshold="auto"`` low-passes
    four grids, and each upload of a host array is a copy the host waits on. Read-only."""
    cp = cupy_module()
    with cp.cuda.Device(device_id):
        return cp.asarray(np.asarray(values, dtype=dtype))


_PADS = tuple((1,) * (_MAX_DIMS - k) for k in range(_MAX_DIMS + 1))


def _padded_shape(shape) -> tuple:
    """A grid shape as the kernels read it: 8 extents, 1s in front."""
    return _PADS[len(shape)] + tuple(map(int, shape))


def _shape_struct(shape):
    """A grid shape for the kernels: 8 int64 extents on the device, padded with 1s in front."""
    return cupy_module().asarray(np.array(_padded_shape(shape), dtype=np.int64))


@declares(_SOURCE, "minmax_columns")
def bounds(XT):
    """Per-feature (min, max) of column-major X in one fused pass: (2, d) on the host."""
    cp = cupy_module()
    d, n = XT.shape
    blocks = min(_blocks(n), 1024)
    partial = cp.empty((blocks, 2, d), dtype=cp.float64)
    launch(get_kernel(_SOURCE, "minmax_columns"), blocks, _BLOCK,
           (XT, np.int64(n), np.int32(d), partial))
    host = cp.asnumpy(partial)
    return np.stack([host[:, 0, :].min(axis=0), host[:, 1, :].max(axis=0)])


@declares(_SOURCE, "quantize_histogram", _FLAGS)
def quantize_histogram(XT, weight, grid_bounds, grid_shape, *, total=True):
    """Flat fine cell of every point (-1 outside), the weighted histogram and its sum (a 0-d
    array: the weight of the points inside, added up as the points are binned, so the
    ``"auto"`` threshold needs no pass over the grid; None with ``total=False``), on the
    device.

    ``weight`` None counts every point once (no array of ones).
    """
    cp = cupy_module()
    d, n = XT.shape
    cells = math.prod(grid_shape)
    histogram = cp.zeros(cells, dtype=cp.float64)
    # the sum in its own buffer: it outlives the grid
    total = cp.zeros((), dtype=cp.float64) if total else None
    point_cell = cp.empty(n, dtype=cp.int64)
    shared = cells * 8 <= _SHARED_HISTOGRAM
    kernel = get_kernel(_SOURCE, "quantize_histogram", "true" if shared else "false")
    blocks = (min(_blocks(n), device_attribute("MultiProcessorCount") * _STREAM_BLOCKS_PER_SM)
              if shared else _blocks(n))
    edges = upload(grid_bounds, cp, np.float64)  # (2, d), once
    lo, hi = edges[0], edges[1]
    m = _constant(cp.cuda.Device().id, tuple(int(s) for s in grid_shape), "int64")
    launch(kernel, blocks, _BLOCK, (XT, _optional(weight), np.int64(n), np.int32(d), lo, hi, m,
                                    np.int64(cells), point_cell, histogram, _optional(total)),
           shared_mem=cells * 8 if shared else 0)
    return point_cell, histogram.reshape(grid_shape), total


#: The most axes :func:`lowpass`'s one-launch two-tap level takes (2^d cells a thread).
_TWO_TAP_MAX_DIMS = 6


@declares(_SOURCE, "lowpass_axis")
@declares(_SOURCE, "lowpass_two_taps", tuple(str(d) for d in range(1, _TWO_TAP_MAX_DIMS + 1)))
def lowpass(grid, wavelet, levels):
    """Seed 003 Algorithm 1 / the CPU's :func:`~gpumine.wavecluster.wavelet.lowpass`.

    A two-tap filter (haar) on up to six axes takes one launch a level
    (``lowpass_two_taps``: every axis at once, the same roundings in the same order as
    the axis-by-axis kernel, which every other filter takes: a launch per axis and level).
    """
    cp = cupy_module()
    taps_host = np.asarray(get_wavelet(wavelet).dec_lo, dtype=np.float64)
    device = cp.cuda.Device().id
    out = cp.ascontiguousarray(grid, dtype=cp.float64)
    if taps_host.size == 2 and np.all(taps_host != 0) and 1 <= out.ndim <= _TWO_TAP_MAX_DIMS:
        kernel = get_kernel(_SOURCE, "lowpass_two_taps", str(out.ndim))
        for _ in range(levels):
            shape = tuple((s + 1) // 2 for s in out.shape)
            result = cp.empty(shape, dtype=cp.float64)
            launch(kernel, _blocks(result.size), _BLOCK,
                   (out, _constant(device, _padded_shape(out.shape), "int64"),
                    _constant(device, _padded_shape(shape), "int64"), taps_host[0],
                    taps_host[1], np.int64(result.size), result))
            out = result
        return out
    taps = _constant(device, tuple(taps_host.tolist()), "float64")
    kernel = get_kernel(_SOURCE, "lowpass_axis")
    for _ in range(levels):
        for axis in range(out.ndim):
            shape = out.shape
            outer = math.prod(shape[:axis])
            inner = math.prod(shape[axis + 1:])
            out_length = (shape[axis] + len(taps_host) - 1) // 2
            result = cp.empty((*shape[:axis], out_length, *shape[axis + 1:]), dtype=cp.float64)
            launch(kernel, _blocks(result.size), _BLOCK,
                   (out, np.int64(outer), np.int64(shape[axis]), np.int64(inner), taps,
                    np.int32(len(taps_host)), np.int64(out_length), result))
            out = result
    return out


def _ids(mask):
    """Flat index of foreground cells, the largest int64 elsewhere (Algorithm 1's output)."""
    cp = cupy_module()
    flat = mask.ravel()
    return cp.where(flat, cp.arange(flat.size, dtype=cp.int64), cp.int64(_EMPTY))


#: The parents' and counts' types of the union-find kernels, by whether a grid's cells
#: index below 2^31: int32 halves the bytes of the finds' scattered reads.
_PARENTS = ("int", "long long")


def _parent_type(cells: int):
    """The union-find parents' dtype for a grid of ``cells`` cells (:data:`_PARENTS`)."""
    cp = cupy_module()
    return cp.int32 if cells < 2**31 else cp.int64


@declares(_SOURCE, "uf_compress_count", _PARENTS)
@declares(_SOURCE, "component_rank", _PARENTS)
@declares(_SOURCE, "component_numbers", _PARENTS)
def _compact(parent, mask):
    """Number components 1..n in raster order of their smallest cell; 0 for background.

    Both labellers leave every foreground cell's parent chain ending at the smallest flat
    index of its component, which holds itself. One pass points every cell at that root
    and counts each block's roots; a component's number is the count of roots up to its
    own: the blocks' counts summed (CuPy's ``cumsum``, one value a block of cells), then
    each root's number written by its block, and every cell's read from its root. The
    blocks' counts, not a flag a cell, go through the prefix sum (each labelling's full
    int32 scan and its copy cost the 5-d blobs' auto fit 0.5 ms of 6 in kernels on the
    H200: ``wc-device-prof-100x-h200-5e36655.txt``). ``parent``: int32 or int64, as
    :func:`_parent_type` (or the sliding window's int64 ids); changed in place.
    """
    cp = cupy_module()
    flat = mask.ravel()
    cells = flat.size
    blocks = _blocks(cells)
    ends = cp.empty(blocks, dtype=parent.dtype)
    launch(get_kernel(_SOURCE, "uf_compress_count", parent.dtype), blocks, _BLOCK,
           (flat, parent, np.int64(cells), ends))
    cp.cumsum(ends, dtype=ends.dtype, out=ends)  # in place: a value a block of cells
    rank = cp.empty(cells, dtype=parent.dtype)  # written at the roots alone
    launch(get_kernel(_SOURCE, "component_rank", parent.dtype), blocks, _BLOCK,
           (flat, parent, np.int64(cells), ends, rank))
    labels = cp.empty(cells, dtype=cp.int64)
    launch(get_kernel(_SOURCE, "component_numbers", parent.dtype), _stream_blocks(cells),
           _BLOCK, (flat, parent, rank, np.int64(cells), labels))
    return labels.reshape(mask.shape), int(ends[-1])  # sync: the component count


@declares(_SOURCE, "sliding_window")
def label_sliding_window(mask, connectivity):
    """Seed 003 Algorithm 2: multi-pass 2^d sliding windows until no id changes.

    The paper's three 2-D sub-operations (steady, right, down) never put two cells that
    touch only diagonally across an odd row and column in one window, so every one of the
    2^d shift patterns is run (in 2-D: steady, right, down, right-down); a round of all of
    them without a change ends the loop (``ischanged``, a 4-byte readback per pass).
    """
    cp = cupy_module()
    ndim = mask.ndim
    if ndim > _SLIDING_WINDOW_MAX_DIMS:
        raise InvalidParameterError("sliding-window labels grids of up to "
                                    f"{_SLIDING_WINDOW_MAX_DIMS} dimensions, got {ndim}")
    ids = _ids(mask)
    shape = _shape_struct(mask.shape)
    kernel = get_kernel(_SOURCE, "sliding_window")
    changed = cp.zeros(1, dtype=cp.int32)
    while True:
        any_change = False
        for shift in range(1 << ndim):
            shifts = [(shift >> (ndim - 1 - a)) & 1 for a in range(ndim)]
            per_axis = [max(0, -(-(s - sh) // 2)) for s, sh in zip(mask.shape, shifts,
                                                                    strict=True)]
            windows = math.prod(per_axis)
            if windows == 0:
                continue
            # bit b of the mask shifts the b-th of the trailing `ndim` axes
            bits = sum(sh << a for a, sh in enumerate(shifts))
            changed.fill(0)
            launch(kernel, _blocks(windows), _BLOCK,
                   (ids, shape, np.int32(ndim), np.int32(bits), np.int32(connectivity),
                    np.int64(windows), _shape_struct(per_axis), changed))
            any_change |= bool(changed.get()[0])
        if not any_change:
            break
    return _compact(ids, mask)


@functools.lru_cache(maxsize=64)
def _union_find_constants(device_id: int, shape: tuple, connectivity: int):
    """The grid shape and the neighbour offsets as ``uf_union`` reads them, on device
    ``device_id``: each offset's flat step, its two via cells' flat steps (0 for a face
    offset; :func:`_via_offsets`) and the axes it steps down and up (bit ``a``: axis ``a``
    of the 8 the kernels index, 1s in front), uploaded once per shape, not once per level
    that ``threshold="auto"`` labels. Read-only."""
    cp = cupy_module()
    padded = _padded_shape(shape)
    strides = np.cumprod((1, *padded[:0:-1]))[::-1]
    half = neighbour_offsets(len(shape), connectivity)
    offsets = np.array([(0,) * (_MAX_DIMS - len(shape)) + o  # sync: none, host offsets
                        for o in half], dtype=np.int64).reshape(-1, _MAX_DIMS)
    via = np.array([(0,) * (_MAX_DIMS - len(shape)) + v  # sync: none, host offsets
                    for pair in map(_via_offsets, half) for v in pair],
                   dtype=np.int64).reshape(-1, _MAX_DIMS)
    bits = 1 << np.arange(_MAX_DIMS)
    step = offsets @ strides
    down = (offsets < 0) @ bits
    up = (offsets > 0) @ bits
    with cp.cuda.Device(device_id):
        return (_shape_struct(shape), cp.asarray(np.append(step, 0)),
                cp.asarray(np.append(via @ strides, (0, 0))),
                cp.asarray(np.append(down, 0).astype(np.int32)),
                cp.asarray(np.append(up, 0).astype(np.int32)), len(offsets))


def _via_offsets(offset: tuple) -> tuple:
    """``uf_union``'s two via cells of a neighbour ``offset`` across two axes or more: the
    offset with its first, then its last stepped axis not stepped (each a neighbour of the
    cell and of the cell at ``offset``); a face offset's are zero offsets (none).

    Examples
    --------
    >>> _via_offsets((1, -1, 0)), _via_offsets((0, 0, 1))
    (((0, -1, 0), (1, 0, 0)), ((0, 0, 0), (0, 0, 0)))
    """
    axes = [a for a, o in enumerate(offset) if o]
    if len(axes) < 2:
        return (0,) * len(offset), (0,) * len(offset)
    return tuple(tuple(0 if a == b else o for b, o in enumerate(offset))
                 for a in (axes[0], axes[-1]))


@declares(_SOURCE, "uf_tile_2d", _PARENTS)
@declares(_SOURCE, "uf_border_2d", _PARENTS)
@declares(_SOURCE, "uf_union", _PARENTS)
@declares(_SOURCE, "uf_init", _PARENTS)
def label_union_find_gpu(mask, connectivity):
    """Atomic union-find (label equivalence) over the foreground cells.

    2-d grids below 2^31 cells: each 32 x 32 tile is labelled in shared memory, then the
    pairs across tiles are united in global memory (measured on the H100 machine: the
    dense levels of the automatic threshold, 4M foreground cells of 4.2M, hooked in
    1.2 ms by the one-pass kernel, where every cell contends for a few roots). Other
    grids: one pass of hooking over every cell's neighbours, a diagonal one only where no
    path through a neighbour of both joins them (``uf_union``). Parents are int32 below
    2^31 cells (:func:`_parent_type`); :func:`_compact` numbers the components.
    """
    cp = cupy_module()
    if mask.ndim > _MAX_DIMS:
        raise InvalidParameterError(f"union-find-gpu labels grids of up to {_MAX_DIMS} "
                                    f"dimensions, got {mask.ndim}")
    mask = cp.ascontiguousarray(mask, dtype=cp.bool_)
    parent_type = _parent_type(mask.size)
    if (mask.ndim == 2 and mask.size < 2**31 and connectivity in (1, 2)
            and mask.shape[0] <= 65535 * _UF_TILE):  # the tiles' grid.y limit
        rows, cols = mask.shape
        parent = cp.empty(mask.size, dtype=parent_type)  # every cell written by the tiles
        args = (np.int32(rows), np.int32(cols), np.int32(connectivity))
        launch(get_kernel(_SOURCE, "uf_tile_2d", parent_type),
               (-(-cols // _UF_TILE), -(-rows // _UF_TILE)), _BLOCK, (mask, parent, *args))
        launch(get_kernel(_SOURCE, "uf_border_2d", parent_type), _blocks(mask.size), _BLOCK,
               (mask, parent, *args))
        return _compact(parent, mask)
    parent = cp.empty(mask.size, dtype=parent_type)
    launch(get_kernel(_SOURCE, "uf_init", parent_type), _stream_blocks(mask.size), _BLOCK,
           (parent, np.int64(mask.size)))
    shape, step, via, down, up, n_offsets = _union_find_constants(
        cp.cuda.Device().id, mask.shape, connectivity)
    launch(get_kernel(_SOURCE, "uf_union", parent_type), _blocks(mask.size), _BLOCK,
           (mask, parent, shape, step, via, down, up, np.int32(n_offsets),
            np.int64(mask.size)))
    return _compact(parent, mask)


@declares(_GROW, "grow_geodesic")
def spread_labels(labels, region, steps):
    """:func:`gpumine.wavecluster.hierarchy.grow_labels`'s breadth-first steps on the device,
    all in one cooperative launch (``kernels/wavecluster_grow.cu``): a grid barrier a step,
    where the host's loop pays a copy of the box each way and NumPy calls a step. (One block
    with a block barrier a step was no faster a fit: record
    ``wavecluster-growth-one-block-ab-h100-2026-11-26-039897f.txt``.)

    Parameters
    ----------
    labels : cupy.ndarray of int64, flat   -- IN
        The padded box's labels, 0 unlabelled (one empty cell all round).
    region : cupy.ndarray of bool, flat   -- IN
        Where labels may grow (False on the padding).
    steps : numpy.ndarray of int64
        The neighbours' flat offsets, both signs.

    Returns
    -------
    cupy.ndarray of int64
        The grown labels, flat.
    """
    cp = cupy_module()
    a = cp.ascontiguousarray(labels, dtype=cp.int64)
    b = a.copy()
    inside = cp.ascontiguousarray(region, dtype=cp.bool_)
    # sync: none, host offsets (uploaded once per box shape)
    offsets = _constant(cp.cuda.Device().id, tuple(int(o) for o in steps), "int64")
    changed = cp.zeros(3, dtype=cp.int32)
    kernel = get_kernel(_GROW, "grow_geodesic", cooperative=True)
    grid = max(1, min(resident_blocks(kernel, _BLOCK), _blocks(a.size)))
    launch(kernel, grid, _BLOCK, (a, b, inside, offsets, np.int32(len(steps)),
                                  np.int64(a.size), changed))
    return a


@functools.lru_cache(maxsize=64)
def _ring_constants(device_id: int, rings: tuple, ndim: int):
    """:func:`nearest_cluster`'s offsets (n, 8) and each ring's end, on device ``device_id``,
    uploaded once per neighbourhood. Read-only."""
    flat = [(0,) * (_MAX_DIMS - ndim) + tuple(o) for ring in rings for o in ring]
    ends = np.cumsum([len(ring) for ring in rings])
    return (_constant(device_id, tuple(map(tuple, flat or [(0,) * _MAX_DIMS])), "int32"),
            _constant(device_id, tuple(int(e) for e in ends), "int32"))


@declares(_SOURCE, "nearest_cluster")
def nearest_cluster(own, components, density, occupied, zero_only, rings, none):
    """:func:`gpumine.wavecluster.engine.add_border_cells`'s join in one launch: each
    candidate cell (``own`` is ``none``, ``density`` at least ``occupied`` and, with
    ``zero_only``, ``components`` 0) takes the least ``own`` number over the first of
    ``rings`` (:func:`~gpumine.wavecluster.engine.offset_rings`) that holds one below
    ``none``, else keeps ``components``; other cells keep ``components``. The engine's
    whole-grid minima (two steps of the neighbourhood for the specks: some 30 CuPy calls on
    a 2-d grid), in one thread a cell.

    Parameters
    ----------
    own, components : cupy.ndarray of int64   -- IN
        The grid's significant cluster numbers (``none`` elsewhere), and its labelling.
    density : cupy.ndarray of float64   -- IN
        The coarse grid.
    occupied : float
        A cell is occupied from this density on.
    zero_only : bool
        Only the cells outside every component are candidates (the border); else every
        occupied cell outside the significant clusters (the specks).
    rings : tuple
        Per ring, its offsets (ndim-tuples).
    none : int

    Returns
    -------
    cupy.ndarray of int64
        The joined labelling, the grid's shape.
    """
    cp = cupy_module()
    device = cp.cuda.Device().id
    offsets, ends = _ring_constants(device, rings, own.ndim)
    shape = _constant(device, _padded_shape(own.shape), "int64")
    out = cp.empty(own.shape, dtype=cp.int64)
    launch(get_kernel(_SOURCE, "nearest_cluster"), _blocks(own.size), _BLOCK,
           (cp.ascontiguousarray(own, dtype=cp.int64),
            cp.ascontiguousarray(components, dtype=cp.int64),
            cp.ascontiguousarray(density, dtype=cp.float64), np.float64(occupied),
            np.int32(bool(zero_only)), shape, offsets, ends, np.int32(len(rings)),
            np.int64(own.size), np.int64(none), out))
    return out


@declares(_SOURCE, "joint_mass")
def joint_mass(jobs):
    """:func:`gpumine.wavecluster.levels.joint_tables`'s tables in one launch (per
    :data:`_JOINT_JOBS` tables; the plan is the launch's parameter), their host tables in
    one upload: for each job ``(components, upper, cluster_index, piece_index,
    density, width)``, the ``density`` of the finer cells of each cluster
    (``cluster_index[components]``, 0: none) under each next-level piece
    (``piece_index[upper]`` at the cell's ``c // 2``, 0: none), as a flat (clusters + 1) x
    ``width`` table; bin 0 is left 0. Where CuPy takes, per table, a gather, ``d`` repeats,
    a slice, another gather, two products and the bincount.

    Parameters
    ----------
    jobs : list of tuple
        ``components, upper`` (cupy.ndarray of int -- IN): the finer level's labelling and
        the next level's, on their own grids; ``cluster_index, piece_index``
        (numpy.ndarray of int64): host tables, each number's row and column;
        ``density`` (cupy.ndarray of float64 -- IN): the finer grid's densities;
        ``width`` (int): the table's columns (pieces + 1).

    Returns
    -------
    cupy.ndarray of float64
        The tables one after another, ``(cluster_index.max() + 1) * width`` masses each.
    """
    cp = cupy_module()
    hosts = [table for job in jobs for table in job[2:4]]
    # where each host table starts in the one upload
    starts = np.cumsum([0, *(table.size for table in hosts)]).tolist()  # sync: none, host
    tables = upload(np.concatenate(hosts), cp, np.int64)
    sizes = [(int(job[2].max()) + 1) * job[5] for job in jobs]  # sync: none, host tables
    mass_at = np.cumsum([0, *sizes]).tolist()  # sync: none, host numbers
    mass = cp.zeros(mass_at[-1], dtype=cp.float64)
    kernel, at = get_kernel(_SOURCE, "joint_mass"), _JOINT_WORD
    held = []  # the launch's arrays, referenced until it is queued
    for first in range(0, len(jobs), _JOINT_JOBS):
        part = range(first, min(first + _JOINT_JOBS, len(jobs)))
        # the launch's parameter as flat 8-byte words (a field at a time costs more)
        words = [0] * (_JOINT_PLAN.itemsize // 8)
        for slot, k in enumerate(part):
            components, upper, _, _, density, width = jobs[k]
            arrays = (cp.ascontiguousarray(components, dtype=cp.int64),
                      cp.ascontiguousarray(upper, dtype=cp.int64),
                      cp.ascontiguousarray(density, dtype=cp.float64))
            held.append(arrays)
            for name, array in zip(("components", "upper", "density"), arrays, strict=True):
                words[at[name] + slot] = array.data.ptr
            for name, shape in (("shape", components.shape), ("upper_shape", upper.shape)):
                words[at[name] + slot * _MAX_DIMS:at[name] + (slot + 1) * _MAX_DIMS] = (
                    _padded_shape(shape))
            words[at["cells"] + slot], words[at["width"] + slot] = components.size, width
            words[at["cluster_at"] + slot] = starts[2 * k]
            words[at["piece_at"] + slot] = starts[2 * k + 1]
            words[at["mass_at"] + slot] = mass_at[k]
            words[at["first_block"] + slot + 1] = (words[at["first_block"] + slot]
                                                  + _stream_blocks(components.size))
        words[at["jobs"]] = len(part)  # jobs, unused: two little-endian int32
        plan = np.array(words, dtype=np.uint64).view(_JOINT_PLAN)[0]
        launch(kernel, words[at["first_block"] + len(part)], _BLOCK, (plan, tables, mass))
    return mass


@declares(_SOURCE, "grid_summary")
def grid_summaries(grids, weight):
    """:func:`gpumine.wavecluster.engine._summaries`'s numbers in one launch (per
    :data:`_SUMMARY_GRIDS` grids; the plan is the launch's parameter) and one transfer:
    ``[weight, then per grid its mass and its axes' profiles]`` (each axis's densest cell at
    each index) as one host array. The profiles are the exact maxima; each mass is a
    deterministic sum (a fixed order, not CuPy's).

    Parameters
    ----------
    grids : list of cupy.ndarray of float64   -- IN
    weight : float or 0-d cupy.ndarray
        Copied to the head of the transfer (a device number is read back with the rest).

    Returns
    -------
    numpy.ndarray of float64
    """
    cp = cupy_module()
    kernel = get_kernel(_SOURCE, "grid_summary")
    grids = [cp.ascontiguousarray(grid, dtype=cp.float64) for grid in grids]
    sizes = [1 + sum(grid.shape) for grid in grids]
    head = 1 + sum(sizes)
    blocks = [_stream_blocks(grid.size) for grid in grids]
    # one buffer: the transfer's head, then per grid a finish counter and its partial sums
    buffer = cp.zeros(head + len(grids) + sum(blocks), dtype=cp.float64)
    on_device = isinstance(weight, cp.ndarray)
    outs = np.cumsum([1, *sizes[:-1]]).tolist()  # sync: none, host numbers
    partials = np.cumsum([head + len(grids), *blocks[:-1]]).tolist()  # sync: none, host
    for first in range(0, len(grids), _SUMMARY_GRIDS):
        part = range(first, min(first + _SUMMARY_GRIDS, len(grids)))
        # the launch's parameter as flat 8-byte words (a field at a time costs more)
        words = [0] * (_SUMMARY_PLAN.itemsize // 8)
        at = _SUMMARY_WORD
        for slot, k in enumerate(part):
            words[at["grid"] + slot] = grids[k].data.ptr
            shape = at["shape"] + slot * _MAX_DIMS
            words[shape:shape + _MAX_DIMS] = _padded_shape(grids[k].shape)
            words[at["cells"] + slot] = grids[k].size
            words[at["first_block"] + slot + 1] = words[at["first_block"] + slot] + blocks[k]
            words[at["out"] + slot], words[at["partial"] + slot] = outs[k], partials[k]
            words[at["done"] + slot] = head + k
        # grids and ndim: two int32 in one little-endian word
        words[at["grids"]] = len(part) | (grids[0].ndim << 32)
        plan = np.array(words, dtype=np.uint64).view(_SUMMARY_PLAN)[0]
        host_weight = 0.0 if on_device else float(weight)  # sync: none, a host number
        launch(kernel, words[at["first_block"] + len(part)], _BLOCK,
               (plan, weight.astype(cp.float64, copy=False) if on_device else np.uint64(0),
                np.float64(host_weight), buffer))
    # sync: every grid's mass and profiles (and the weight), once for all the grids
    return np.asarray(get_backend("gpu").to_host(buffer[:head]))


@declares(_SOURCE, "stack_tree")
def stack_tree(labels, n, weights, transfer: bool = True):
    """:func:`gpumine.wavecluster.hierarchy._read`'s tree in three launches and one
    transfer: ``[each plane's largest number (m), each component's mass (n + 1), each
    one's parent in the plane below (n + 1)]`` as one host array of doubles (bins 0 and
    the first plane's parents are not meaningful).

    Parameters
    ----------
    labels : cupy.ndarray of int64, (m, ...)   -- IN
        A stack's labelling, numbers 1..n.
    n : int
    weights : cupy.ndarray of float64   -- IN
        The densities, the shape of ``labels``.
    transfer : bool, default=True
        False: the array stays on the device, no sync (a large tree, of which ``_read``
        brings back only the significant components). The parents and the planes' largest
        numbers are those CuPy's scatter and per-plane ``max`` give (a component's cells
        share one parent; the maximum of positive doubles is that of their bits), found in
        one pass where those took two: 0.31 and 0.45 ms at 1054 x 1054 on the H200 (record
        ``wc-device-prof-100x-h200-5e36655.txt``).

    Returns
    -------
    numpy.ndarray of float64, or cupy.ndarray without ``transfer``
    """
    cp = cupy_module()
    m = labels.shape[0]
    flat = cp.ascontiguousarray(labels, dtype=cp.int64).ravel()
    packed = cp.zeros(m + 2 * (n + 1), dtype=cp.float64)
    if weights.ndim > 1 and weights.strides[0] == 0:  # one plane's densities, broadcast
        weights = weights[0]  # read once a plane by the bincount, not copied m times
    weighted_bincount(flat, cp.ascontiguousarray(weights, dtype=cp.float64).ravel(), n + 1,
                      out=packed[m:m + n + 1])
    launch(get_kernel(_SOURCE, "stack_tree"), _stream_blocks(flat.size), _BLOCK,
           (flat, np.int64(m), np.int64(flat.size // m), np.int64(n), packed))
    if not transfer:
        return packed
    # sync: the planes' last numbers and every component's mass and parent, once
    return np.asarray(get_backend("gpu").to_host(packed))


@declares(_SOURCE, "stack_build")
def stack_build(grids, boxes, counts, thresholds, common):
    """:class:`~gpumine.wavecluster.hierarchy._LevelStack.shared`'s planes in one launch (a
    launch per :data:`_STACK_PLANES` planes or :data:`_STACK_GRIDS` grids): grid k's box
    in the corner of each of its ``counts[k]`` planes, zeros elsewhere, and each plane's
    level (density >= its threshold). The geometry and thresholds travel in the launch's
    parameter: no upload, no sync.

    Parameters
    ----------
    grids : list of cupy.ndarray of float64   -- IN
        One number of dimensions (at most 8).
    boxes : list of tuple of slice
        Each grid's box (host slices with starts and stops).
    counts : list of int
        Each grid's planes, in order.
    thresholds : numpy.ndarray of float64
        Each plane's level, ``sum(counts)`` of them.
    common : tuple of int
        The planes' shape; each box fits it.

    Returns
    -------
    weights : cupy.ndarray of float64, (sum(counts), *common)
    mask : cupy.ndarray of bool, (sum(counts), *common)
    """
    cp = cupy_module()
    total, cells, ndim = sum(counts), math.prod(common), len(common)
    weights = cp.empty((total, *common), dtype=cp.float64)
    mask = cp.empty((total, *common), dtype=cp.bool_)
    grids = [cp.ascontiguousarray(grid, dtype=cp.float64) for grid in grids]
    owner = np.repeat(np.arange(len(counts)), counts)  # each plane's grid
    ends = np.cumsum(counts).tolist()  # sync: none, host numbers: each grid's planes' end
    at = _STACK_WORD
    kernel, first = get_kernel(_SOURCE, "stack_build"), 0
    while first < total:
        # the launch: the planes from `first` on, of at most _STACK_GRIDS grids
        base = int(owner[first])  # sync: none, a host array
        last = min(first + _STACK_PLANES, ends[min(base + _STACK_GRIDS, len(counts)) - 1])
        # the launch's parameter as flat 8-byte words (a field at a time costs more)
        head = [0] * at["plane"]
        for slot, k in enumerate(range(base, int(owner[last - 1]) + 1)):  # sync: none, host
            head[at["grid"] + slot] = grids[k].data.ptr
            shape = at["shape"] + slot * _MAX_DIMS
            head[shape:shape + _MAX_DIMS] = _padded_shape(grids[k].shape)
            start = at["start"] + (slot + 1) * _MAX_DIMS - ndim
            head[start:start + ndim] = [sl.start for sl in boxes[k]]
            extent = at["extent"] + slot * _MAX_DIMS
            head[extent:extent + _MAX_DIMS] = _padded_shape([sl.stop - sl.start
                                                             for sl in boxes[k]])
        words = np.zeros(_STACK_PLAN.itemsize // 8, np.uint64)  # sync: none, a host buffer
        words[:len(head)] = head
        words[at["plane"]:at["plane"] + _MAX_DIMS] = _padded_shape(common)
        plan = words.view(_STACK_PLAN)[0]
        plan["threshold"][:last - first] = thresholds[first:last]
        plan["grid_of"][:last - first] = owner[first:last] - base
        launch(kernel, _blocks((last - first) * cells), _BLOCK,
               (plan, np.int64(first), np.int64(last - first), np.int64(cells), weights, mask))
        first = last
    return weights, mask


def _stack_geometry(shape, plane_shape, box):
    """stack_plane's and stack_paint's geometry, passed by value (``PlaneGeometry``): the
    grid's shape, the plane's, the box's start and extent, 8 extents each. Built once per
    geometry (a few microseconds against about 19 for the structured scalar; an ``"auto"``
    fit asks for a handful, most of them alike). Read-only."""
    return _geometry(tuple(map(int, shape)), tuple(map(int, plane_shape)),
                     tuple((int(sl.start), int(sl.stop))  # sync: none, host slices
                           for sl in box))


@functools.lru_cache(maxsize=256)
def _geometry(shape: tuple, plane_shape: tuple, box: tuple):
    words = (_padded_shape(shape) + _padded_shape(plane_shape)
             + (0,) * (_MAX_DIMS - len(shape)) + tuple(start for start, _ in box)
             + _padded_shape([stop - start for start, stop in box]))
    return np.array(words, dtype=np.int64).view(_GEOMETRY)[0]


@declares(_SOURCE, "stack_paint")
def stack_paint(planes, table, shape, box):
    """:func:`gpumine.wavecluster.hierarchy._paint_kept`'s painting in one launch: each cell of
    a grid of ``shape`` takes ``table[v]`` for the first plane of ``planes`` whose number v
    at the cell (inside ``box``, in the planes' corner) maps to a nonzero entry; else 0.

    Parameters
    ----------
    planes : cupy.ndarray of int64, (count, ...)   -- IN
        Levels of a stack, the stack's own numbers.
    table : numpy.ndarray of int64
        The numbers' clusters (0: none), at least the planes' largest number + 1 entries
        (uploaded once).
    shape : tuple of int
    box : tuple of slice

    Returns
    -------
    cupy.ndarray of int64
    """
    cp = cupy_module()
    planes = cp.ascontiguousarray(planes, dtype=cp.int64)
    geometry = _stack_geometry(shape, planes.shape[1:], box)
    out = cp.empty(shape, dtype=cp.int64)
    launch(get_kernel(_SOURCE, "stack_paint"), _blocks(out.size), _BLOCK,
           (planes, np.int32(planes.shape[0]), np.int64(planes[0].size),
            upload(table, cp, np.int64),  # the host table, uploaded once a call
            geometry, np.int64(out.size), out))
    return out


@declares(_SOURCE, "stack_plane")
def stack_plane(plane, shape, box, start):
    """:meth:`gpumine.wavecluster.hierarchy._LevelStack.labelling` in one launch: a grid of
    ``shape`` holding ``plane`` (one level of a stack; the box's cells in its corner) less
    ``start`` inside ``box`` (slices), 0 elsewhere and where the plane holds 0.

    Parameters
    ----------
    plane : cupy.ndarray of int64   -- IN
        One plane of a stack, at least the box's extents.
    shape : tuple of int
    box : tuple of slice
    start : int

    Returns
    -------
    cupy.ndarray of int64
    """
    cp = cupy_module()
    geometry = _stack_geometry(shape, plane.shape, box)
    out = cp.empty(shape, dtype=cp.int64)
    launch(get_kernel(_SOURCE, "stack_plane"), _blocks(out.size), _BLOCK,
           (cp.ascontiguousarray(plane, dtype=cp.int64), geometry, np.int64(start),
            np.int64(out.size), out))
    return out


@declares(_SOURCE, "point_components")
def point_components(point_cell, components, wavelet, levels, grid_shape, outside=0):
    """``components`` (a coarse grid) at every point's coarse cell; ``outside`` off the grid.

    The CPU's :func:`~gpumine.wavecluster.wavelet.coarse_cells` rule in one kernel.
    """
    cp = cupy_module()
    n = point_cell.size
    shift = get_wavelet(wavelet).shift
    scale = 2 ** levels
    offset = shift * (scale - 1) + (scale // 2 if shift else 0)
    device = cp.cuda.Device().id
    fine = _constant(device, tuple(int(s) for s in grid_shape), "int64")
    coarse = _constant(device, tuple(coarse_shape(grid_shape, wavelet, levels)), "int64")
    out = cp.empty(n, dtype=cp.int64)
    launch(get_kernel(_SOURCE, "point_components"), _stream_blocks(n), _BLOCK,
           (point_cell, np.int64(n), np.int32(len(grid_shape)), fine, coarse, np.int64(offset),
            np.int64(scale), cp.ascontiguousarray(components.ravel(), dtype=cp.int64),
            np.int64(outside), out))
    return out


def lookup(X, grid_labels, bounds, grid_shape, wavelet, levels):
    """:func:`gpumine.wavecluster.engine.lookup` on the device: labels stay there."""
    cp = cupy_module()
    XT = X.T if X.T.flags.c_contiguous else cp.ascontiguousarray(X.T)
    point_cell, _, _ = quantize_histogram(XT, None, bounds, grid_shape, total=False)
    return point_components(point_cell, cp.asarray(grid_labels), wavelet, levels, grid_shape,
                            outside=-1).astype(cp.int32)


@declares(_SOURCE, "weighted_bincount", _FLAGS)
def weighted_bincount(values, weight, bins, out=None):
    """``bincount(values, weights=weight, minlength=bins)`` with block-private bins, except
    that bin 0 (the background) is left 0: it is never needed, and counting it would
    serialize most of the atomics on one address. ``out``: ``bins`` zeroed float64 to add
    into (a slice of a caller's buffer); None: a new one. A ``weight`` shorter than
    ``values`` (whose size it divides) repeats: value i weighs ``weight[i % weight.size]``
    (a stack's planes over one plane's densities, :func:`stack_tree`)."""
    cp = cupy_module()
    n = values.size
    out = cp.zeros(bins, dtype=cp.float64) if out is None else out
    period = n if weight is None else weight.size
    if n and (period == 0 or n % period):
        raise InvalidInputError(f"{period} weights do not repeat over {n} values")
    shared = bins * 8 <= _SHARED_HISTOGRAM
    launch(get_kernel(_SOURCE, "weighted_bincount", "true" if shared else "false"),
           _stream_blocks(n), _BLOCK, (values, _optional(weight), np.int64(n), np.int64(bins),
                                       np.int64(max(period, 1)), out),
           shared_mem=bins * 8 if shared else 0)
    return out


def _stream_blocks(n):
    return min(_blocks(n), device_attribute("MultiProcessorCount") * _STREAM_BLOCKS_PER_SM)


def _optional(array):
    return np.uint64(0) if array is None else array


def _narrow_labels(n_clusters: int):
    """The narrowest signed integer type holding the labels -1 .. ``n_clusters`` - 1."""
    return next(t for t in (np.int8, np.int16, np.int32, np.int64)
                if np.iinfo(t).max >= n_clusters - 1)


def _histogram(X, weight, grid_bounds, grid_shape):
    """:func:`quantize_histogram` of a (n, d) view of a column-major buffer."""
    XT = X.T if X.T.flags.c_contiguous else cupy_module().ascontiguousarray(X.T)
    return quantize_histogram(XT, weight, grid_bounds, grid_shape)


def _device_results(remap, point_component, components, n_clusters, prepared):
    remap = upload(remap, cupy_module(), remap.dtype)
    return remap[point_component], remap[components]


def _host_buffers(n_samples, coarse):
    """The host results' pages, written by host threads while the device works."""
    backend = get_backend("gpu")
    return backend.host_buffer(n_samples, np.int32), backend.host_buffer(coarse, np.int32)


def _host_results(remap, point_component, components, n_clusters, prepared):
    """The labels brought to the host once: they cross the bus in the narrowest integer
    type that holds -1 .. n_clusters - 1 (int8 up to 128 clusters: an eighth of the bytes)
    and the host threads widen them into the int32 buffers (into int64 buffers it measured
    4.2 against 7.2 ms for 16.7M labels)."""
    cp = cupy_module()
    backend = get_backend("gpu")
    labels_out, grid_labels_out = prepared
    remap = cp.asarray(remap.astype(_narrow_labels(n_clusters)))
    # the results, once, through pinned staging
    return (backend.to_host(remap[point_component], out=labels_out),  # sync: n labels
            backend.to_host(remap[components], out=grid_labels_out))  # sync: the grid's


def stages(*, device_labels: bool = True):
    """The pipeline's steps on the device (:class:`gpumine.wavecluster.pipeline.Stages`).

    The same arithmetic as the CPU's; every point's cell, the grids and the components stay
    on the device. ``device_labels`` (CuPy input): the labels stay there too; False: they
    come to the host once, at the end.
    """
    from gpumine.wavecluster.pipeline import Stages

    return Stages(
        xp=cupy_module(), histogram=_histogram, lowpass=lowpass,
        point_components=point_components, weigh=weighted_bincount,
        results=_device_results if device_labels else _host_results,
        prepare=None if device_labels else _host_buffers, to_host=get_backend("gpu").to_host,
        spread=spread_labels, nearest=nearest_cluster, joint=joint_mass,
        summaries=grid_summaries, tree=stack_tree, plane=stack_plane, paint=stack_paint,
        planes=stack_build)
