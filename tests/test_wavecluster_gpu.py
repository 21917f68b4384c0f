"""WaveCluster's GPU kernels against its CPU path (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from gpumine import WaveCluster, registry
from gpumine.datasets import read_arff_points
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.wavecluster import engine
from gpumine.wavecluster.wavelet import lowpass

pytestmark = pytest.mark.gpu

SHAPES = ["cluto-t4-8k", "cluto-t7-10k", "aggregation", "compound", "jain", "3-spiral", "atom",
          "chainlink", "hepta"]


@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
@pytest.mark.parametrize("shape", [(33,), (40, 17), (9, 8, 7), (6, 5, 6, 4), (5, 4, 3, 6, 5),
                                   (3, 4, 3, 2, 3, 5), (3, 2, 3, 2, 2, 3, 2)])
@pytest.mark.parametrize("levels", [1, 2])
def test_lowpass_gpu_equals_cpu(cp, wavelet, shape, levels, rng):
    from gpumine.wavecluster import gpu

    grid = rng.poisson(2.0, size=shape).astype(np.float64) * rng.uniform(0.5, 2, size=shape)
    np.testing.assert_array_equal(cp.asnumpy(gpu.lowpass(cp.asarray(grid), wavelet, levels)),
                                  lowpass(grid, wavelet, levels))


@pytest.mark.parametrize("grid_shape", [(16, 16), (300, 200), (8, 8, 8), (5, 6, 7, 8)])
def test_bounds_and_quantize_equal_cpu(cp, grid_shape, rng):
    from gpumine.wavecluster import gpu

    d = len(grid_shape)
    X = rng.normal(size=(20001, d))
    X_device = cp.ascontiguousarray(cp.asarray(X).T)
    bounds = gpu.bounds(X_device)
    np.testing.assert_array_equal(bounds, np.stack([X.min(0), X.max(0)]))
    weight = rng.randint(1, 4, len(X)).astype(np.float64)
    point_cell, hist, total = gpu.quantize_histogram(X_device, cp.asarray(weight), bounds,
                                                     grid_shape)
    cells, _ = engine.quantize(X, bounds, grid_shape)
    np.testing.assert_array_equal(cp.asnumpy(point_cell),
                                  np.ravel_multi_index(tuple(cells.T), grid_shape))
    expected = np.bincount(np.ravel_multi_index(tuple(cells.T), grid_shape), weights=weight,
                           minlength=int(np.prod(grid_shape))).reshape(grid_shape)
    np.testing.assert_array_equal(cp.asnumpy(hist), expected)
    assert float(total) == weight.sum()  # integer weights: exact in any order
    # narrower bounds: the points outside neither bin nor count, with or without weights
    inner = np.stack([np.quantile(X, 0.2, axis=0), np.quantile(X, 0.8, axis=0)])
    inside = ((X >= inner[0]) & (X <= inner[1])).all(axis=1)
    for w in (weight, None):
        point_cell, hist, total = gpu.quantize_histogram(
            X_device, None if w is None else cp.asarray(w), inner, grid_shape)
        assert int((cp.asnumpy(point_cell) >= 0).sum()) == int(inside.sum())
        expected_total = inside.sum() if w is None else w[inside].sum()
        assert float(total) == float(cp.asnumpy(hist).sum()) == expected_total
        # predict's lookup asks for no sum: the same cells and bins
        cells_only, hist_only, none = gpu.quantize_histogram(
            X_device, None if w is None else cp.asarray(w), inner, grid_shape, total=False)
        assert none is None
        np.testing.assert_array_equal(cp.asnumpy(cells_only), cp.asnumpy(point_cell))
        np.testing.assert_array_equal(cp.asnumpy(hist_only), cp.asnumpy(hist))



@pytest.mark.parametrize("name", ["sliding-window", "union-find-gpu"])
def test_gpu_labelling_matches_scipy(cp, name, rng, snake):
    label = registry.load_strategy("wavecluster.label", name)
    masks = [snake(101), np.ones((64, 48), bool), np.zeros((9, 9), bool),
             rng.random_sample(500) < 0.6, rng.random_sample((6, 7, 5, 6)) < 0.4]
    masks += [rng.random_sample((128, 96)) < p for p in (0.2, 0.45, 0.59, 0.8)]
    # 2-d grids are labelled by 32 x 32 tiles: ragged edge tiles, one row, one column
    masks += [rng.random_sample(shape) < p for shape in ((333, 77), (1, 200), (200, 1))
              for p in (0.3, 0.6, 0.95)]
    masks += [rng.random_sample((20, 16, 12)) < p for p in (0.2, 0.3, 0.6)]
    for mask in masks:
        for connectivity in range(1, mask.ndim + 1):
            got, n_got = label(cp.asarray(mask), connectivity)
            expected, n_expected = ndimage.label(
                mask, structure=ndimage.generate_binary_structure(mask.ndim, connectivity))
            got = cp.asnumpy(got)
            assert n_got == n_expected, (mask.shape, connectivity)
            # numbered in raster order of the first cell, like scipy: equal arrays
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shape", [(5, 4, 6, 3, 5), (3, 4, 3, 5, 3, 4), (3, 2, 3, 3, 2, 3, 2, 3)])
def test_union_find_gpu_labels_up_to_eight_dimensions(cp, shape, rng):
    """Sparse to dense masks; connectivity 1, 2 and full."""
    label = registry.load_strategy("wavecluster.label", "union-find-gpu")
    for p in (0.15, 0.4, 0.75):
        mask = rng.random_sample(shape) < p
        for connectivity in (1, 2, mask.ndim):
            got, n_got = label(cp.asarray(mask), connectivity)
            expected, n_expected = ndimage.label(
                mask, structure=ndimage.generate_binary_structure(mask.ndim, connectivity))
            assert n_got == n_expected, (shape, p, connectivity)
            np.testing.assert_array_equal(cp.asnumpy(got), expected)
    with pytest.raises(InvalidParameterError, match="up to 8 dimensions, got 9"):
        label(cp.zeros((2,) * 9, dtype=bool), 1)


def test_union_find_gpu_with_int64_parents(cp, monkeypatch, rng):
    """The parents' int64 kernels (grids of 2^31 cells and more), forced on small grids: the
    same labels as scipy's, on the 2-d tiles' path and the n-d one, with many components a
    block of cells (the numbering's counts) and components across blocks."""
    from gpumine.wavecluster import gpu

    monkeypatch.setattr(gpu, "_parent_type", lambda cells: cp.int64)
    label = registry.load_strategy("wavecluster.label", "union-find-gpu")
    for shape in ((333, 77), (1, 700), (20, 16, 12), (5, 4, 6, 3, 5)):
        for p in (0.2, 0.6):
            mask = rng.random_sample(shape) < p
            for connectivity in (1, mask.ndim):
                got, n_got = label(cp.asarray(mask), connectivity)
                expected, n_expected = ndimage.label(
                    mask, structure=ndimage.generate_binary_structure(mask.ndim, connectivity))
                assert n_got == n_expected, (shape, p, connectivity)
                np.testing.assert_array_equal(cp.asnumpy(got), expected)


def test_union_find_gpu_is_stable_under_races(cp, rng):
    """Many masks near the percolation threshold, where the concurrent hooking and path
    splitting race the most: every labelling equals scipy's (a race once left one cell of
    a 128 x 96 mask pointing at a non-root)."""
    label = registry.load_strategy("wavecluster.label", "union-find-gpu")
    for trial in range(24):
        p = (0.45, 0.59, 0.7)[trial % 3]
        mask = rng.random_sample((512, 384)) < p
        connectivity = 1 + trial % 2
        got, n_got = label(cp.asarray(mask), connectivity)
        expected, n_expected = ndimage.label(
            mask, structure=ndimage.generate_binary_structure(2, connectivity))
        assert n_got == n_expected
        np.testing.assert_array_equal(cp.asnumpy(got), expected)


def test_weighted_bincount_leaves_the_background_bin_zero(cp, rng):
    from gpumine.wavecluster import gpu

    for bins in (7, 100_000):  # shared-memory bins, then global atomics
        values = rng.randint(0, bins, 300_001).astype(np.int64)
        values[rng.random_sample(values.size) < 0.7] = 0  # mostly background
        weight = rng.uniform(0, 2, values.size)
        expected = np.bincount(values, weights=weight, minlength=bins)
        expected[0] = 0
        for w in (weight, None):
            got = gpu.weighted_bincount(cp.asarray(values), None if w is None else cp.asarray(w),
                                        bins).get()
            want = expected if w is not None else np.bincount(values, minlength=bins) * (
                np.arange(bins) > 0)
            np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("period", [1, 7, 4096, 1 << 20])
def test_weighted_bincount_repeats_a_shorter_weight(cp, period, rng):
    """A weight of ``period`` values repeats over the values (value i weighs weight[i %
    period], a stack's planes over one plane): periods below the grid's stride over the
    values and, at 2^20 (four periods of values), above it; a weight that does not divide
    them is refused."""
    from gpumine.wavecluster import gpu

    for bins in (7, 100_000):
        values = rng.randint(0, bins, period * max(4, 300_000 // period)).astype(np.int64)
        values[rng.random_sample(values.size) < 0.5] = 0
        weight = rng.uniform(0, 2, period)
        expected = np.bincount(values, weights=np.tile(weight, values.size // period),
                               minlength=bins)
        expected[0] = 0
        got = gpu.weighted_bincount(cp.asarray(values), cp.asarray(weight), bins).get()
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    with pytest.raises(InvalidInputError, match="do not repeat"):  # an odd count, two weights
        gpu.weighted_bincount(cp.asarray(values[:12_345]), cp.ones(2), 7)


@pytest.mark.parametrize("shape", [(33,), (37, 41), (9, 10, 7), (5, 4, 6, 3)])
def test_joint_mass_equals_the_gathers(cp, shape, rng):
    """The coarser levels' tables, a launch each and one upload (``joint_mass``), equal the
    gathers and bincount of split_by_coarser_level's CPU path, one after another (two jobs
    of different tables and widths), odd extents included (the next level's last cell
    covers one finer cell), bin 0 left 0."""
    from gpumine.wavecluster import gpu
    from gpumine.wavecluster.levels import next_level_cells

    upper_shape = tuple((s + 1) // 2 for s in shape)
    jobs, expected = [], []
    for cluster_index, piece_index in [
            (np.array([0, 1, 0, 2, 3, 0, 4]), np.array([0, 1, 2, 0, 3])),  # 4 rows, 3 columns
            (np.array([0, 0, 1, 0, 0, 0, 2]), np.array([0, 0, 1, 2, 0]))]:  # 2 rows, 2 columns
        components = rng.randint(0, 7, size=shape)
        upper = rng.randint(0, 5, size=upper_shape)
        width = int(piece_index.max()) + 1
        density = rng.uniform(0, 2, size=shape)
        parent = next_level_cells(piece_index[upper], shape)
        table = np.bincount((cluster_index[components] * width + parent).ravel(),
                            weights=density.ravel(),
                            minlength=(cluster_index.max() + 1) * width)
        table[0] = 0
        assert (table[1:] > 0).mean() > 0.5  # most bins have cells
        expected.append(table)
        jobs.append((cp.asarray(components), cp.asarray(upper), cluster_index, piece_index,
                     cp.asarray(density), width))
    got = gpu.joint_mass(jobs)
    np.testing.assert_allclose(got.get(), np.concatenate(expected), rtol=1e-12)


@pytest.mark.parametrize("shape", [(33,), (37, 41), (9, 10, 7), (5, 4, 6, 3, 5), (300, 301)])
def test_grid_summaries_equal_the_reductions(cp, shape, rng):
    """``grid_summaries`` (one launch for up to four grids, one transfer) gives
    engine._summaries' host array: the weight, then per grid its mass (a deterministic sum:
    the same bits twice) and each axis's exact maxima -- negative densities too (a bior2.2
    grid has them), grids of many blocks whose warps straddle rows, and six grids of two
    sizes (two launches)."""
    from gpumine.wavecluster import gpu

    half = tuple((s + 1) // 2 for s in shape)
    grids = [rng.normal(size=shape), rng.uniform(0, 3, size=shape)]
    grids.append(np.where(rng.random_sample(shape) < 0.9, 0.0, grids[1]))  # mostly empty
    grids += [rng.normal(size=half), rng.uniform(0, 3, size=half), np.zeros(half)]
    device = [cp.asarray(g) for g in grids]
    for weight in (cp.asarray(123.5), 7.25):
        got = gpu.grid_summaries(device, weight)
        again = gpu.grid_summaries(device, weight)
        np.testing.assert_array_equal(got, again)
        want = [float(weight)]
        for g in grids:
            axes = range(g.ndim)
            want += [g.sum(), *(g.max(axis=tuple(b for b in axes if b != a)) if g.ndim > 1
                                else g for a in axes)]
        want = np.concatenate([np.ravel(w) for w in want])
        assert got.shape == want.shape
        masses = np.cumsum([1] + [1 + sum(g.shape) for g in grids[:-1]])  # each grid's mass
        np.testing.assert_allclose(got[masses], want[masses], rtol=1e-12)
        rest = np.ones(got.size, bool)
        rest[masses] = False
        np.testing.assert_array_equal(got[rest], want[rest])


def _stacked_labels(rng, plane_shape, m):
    """A stack of m nested levels of a smooth random grid, each plane labelled by SciPy and
    numbered after the planes below (the stack's numbering): (labels, n, weights)."""
    grid = ndimage.uniform_filter(rng.uniform(0, 1, plane_shape), 3)
    thresholds = np.quantile(grid, np.linspace(0.3, 0.95, m))
    labels = np.zeros((m, *plane_shape), np.int64)
    n = 0
    for j, t in enumerate(thresholds):
        plane, count = ndimage.label(grid >= t)
        labels[j] = np.where(plane > 0, plane + n, 0)
        n += count
    return labels, n, np.broadcast_to(grid, labels.shape).copy()


@pytest.mark.parametrize(("plane_shape", "m"), [((40, 37), 6), ((9, 8, 7), 4), ((300, 200), 3)])
def test_stack_tree_equals_the_scatter(cp, plane_shape, m, rng):
    """``stack_tree`` (a bincount, one launch and one transfer) gives what _read's calls on
    the array module give: each plane's largest number, each component's mass and its
    parent in the plane below (the first plane's: 0)."""
    from gpumine.wavecluster import gpu, hierarchy

    labels, n, weights = _stacked_labels(rng, plane_shape, m)
    assert n > m  # several components a plane
    got = gpu.stack_tree(cp.asarray(labels), n, cp.asarray(weights))
    mass, up, tops = hierarchy._tree_on(labels, n, weights, np,
                                        lambda v, w, b: np.bincount(v, weights=w, minlength=b))
    np.testing.assert_array_equal(got[:m], tops)
    np.testing.assert_allclose(got[m + 1:m + n + 1], mass[1:], rtol=1e-12)
    np.testing.assert_array_equal(got[m + n + 2:], up[1:])
    first = labels[0][labels[0] > 0]
    assert (got[m + n + 1 + first] == 0).all()
    # one plane's densities broadcast over the planes (a _LevelStack's): the same tree (the
    # masses to the rounding of the atomics' order)
    plane = cp.asarray(weights[0])
    broadcast = gpu.stack_tree(cp.asarray(labels), n, cp.broadcast_to(plane, labels.shape))
    np.testing.assert_array_equal(broadcast[:m], got[:m])
    np.testing.assert_allclose(broadcast[m:m + n + 1], got[m:m + n + 1], rtol=1e-12)
    np.testing.assert_array_equal(broadcast[m + n + 1:], got[m + n + 1:])


@pytest.mark.parametrize(("shape", "box", "plane_shape"), [
    ((30, 20), (slice(3, 12), slice(0, 20)), (14, 20)),
    ((9, 8, 7), (slice(1, 9), slice(2, 5), slice(0, 6)), (10, 6, 7)),
    ((17,), (slice(16, 17),), (5,))])
def test_stack_plane_equals_the_slices(cp, shape, box, plane_shape, rng):
    """``stack_plane`` (one launch) gives _LevelStack.labelling's slices: the plane's corner
    in the box, less the plane's start, 0 outside the box and where the plane holds 0."""
    from gpumine.wavecluster import gpu

    start = 40
    plane = rng.randint(start + 1, start + 30, size=plane_shape)
    plane[rng.random_sample(plane_shape) < 0.4] = 0
    want = np.zeros(shape, np.int64)
    part = plane[tuple(slice(0, sl.stop - sl.start) for sl in box)]
    want[box] = np.maximum(part - start, 0)
    got = gpu.stack_plane(cp.asarray(plane), shape, box, start)
    np.testing.assert_array_equal(got.get(), want)



@pytest.mark.parametrize(("shapes", "counts"), [
    ([(30, 20), (15, 10), (8, 5)], [5, 3, 2]),  # the "auto" rule's grids: one launch
    ([(40,), (20,), (33,), (9,), (17,), (5,)], [2, 1, 3, 1, 2, 2]),  # 6 grids: two launches
    ([(9, 8, 7)], [300]),  # 300 planes: three launches
    ([(6, 5, 4, 5, 3), (3, 3, 2, 3, 2)], [4, 3])])
def test_stack_build_equals_the_copies(cp, shapes, counts, rng):
    """``stack_build`` (the plan in the launch's parameter) gives hierarchy.stack_planes'
    planes and masks: each grid's box in the corner of its planes, zeros elsewhere (a
    negative threshold marks them too), over several launches where the planes or grids
    exceed one launch's."""
    from gpumine.wavecluster import gpu, hierarchy

    grids, boxes = [], []
    for shape in shapes:
        grids.append(rng.uniform(0, 4, size=shape))
        starts = [rng.randint(0, s) for s in shape]
        boxes.append(tuple(slice(a, rng.randint(a + 1, s + 1))
                           for a, s in zip(starts, shape, strict=True)))
    common = tuple(max(box[a].stop - box[a].start for box in boxes) + (a == 0)
                   for a in range(len(shapes[0])))
    thresholds = rng.uniform(-0.5, 4, size=sum(counts))
    want_weights, want_mask = hierarchy.stack_planes(grids, boxes, counts, thresholds, common)
    got_weights, got_mask = gpu.stack_build([cp.asarray(g) for g in grids], boxes, counts,
                                            thresholds, common)
    assert 0.1 < want_mask.mean() < 0.9
    np.testing.assert_array_equal(got_weights.get(), want_weights)
    np.testing.assert_array_equal(got_mask.get(), want_mask)


@pytest.mark.parametrize(("shape", "box", "plane_shape", "count"), [
    ((30, 20), (slice(3, 12), slice(0, 20)), (14, 20), 4),
    ((9, 8, 7), (slice(1, 9), slice(2, 5), slice(0, 6)), (10, 6, 7), 1),
    ((6, 5, 4, 5, 3), (slice(0, 6), slice(1, 4), slice(0, 4), slice(2, 5), slice(0, 3)),
     (7, 3, 4, 3, 3), 3)])
def test_stack_paint_takes_the_first_plane_the_table_maps(cp, shape, box, plane_shape, count,
                                                          rng):
    """``stack_paint`` (one launch): each cell of the box takes the table's entry for the first
    plane whose number there maps to a nonzero one; 0 outside the box and where none does."""
    from gpumine.wavecluster import gpu

    planes = rng.randint(0, 50, size=(count, *plane_shape))
    table = np.where(rng.random_sample(50) < 0.5, rng.randint(1, 9, 50), 0)
    table[0] = 0
    part = planes[(slice(None), *(slice(0, sl.stop - sl.start) for sl in box))]
    found = np.zeros(part.shape[1:], np.int64)
    for values in part[::-1]:
        found = np.where(table[values] != 0, table[values], found)
    want = np.zeros(shape, np.int64)
    want[box] = found
    assert (found != 0).mean() > 0.3
    got = gpu.stack_paint(cp.asarray(planes), table, shape, box)
    np.testing.assert_array_equal(got.get(), want)


@pytest.mark.parametrize(("shape", "connectivity"), [
    ((300,), 1), ((37, 41), 1), ((37, 41), 2), ((9, 11, 7), 3), ((5, 6, 4, 5), 2),
    ((4, 3, 5, 3, 4, 3), 2)])
@pytest.mark.parametrize("base_points", [1, 2])  # the specks (two rings), the border (one)
def test_nearest_cluster_joins_as_the_whole_grid_minima(cp, shape, connectivity, base_points,
                                                        rng, border_case):
    """add_border_cells with the GPU's one-pass kernel (``nearest_cluster``) gives the
    engine's whole-grid minima on the device and NumPy's on the host (specks near a
    cluster's cell only), on random labellings with clusters of every size (some below the
    significant mass), occupied and empty cells, at the grid's edges and corners too."""
    from gpumine.wavecluster import gpu

    def weigh(values, weights, bins):
        return cp.bincount(values, weights=weights, minlength=bins)

    for _ in range(3):
        components, coarse, sizes = border_case(rng, shape)
        options = {"base_points": base_points, "unit": 1.0,  # about half the clusters light
                   "minimum": float(np.median(sizes)), "connectivity": connectivity}
        host, _ = engine.add_border_cells(
            components, 8, coarse, **options,
            weigh=lambda v, w, bins: np.bincount(v, weights=w, minlength=bins))
        whole, _ = engine.add_border_cells(cp.asarray(components), 8, cp.asarray(coarse),
                                           **options, xp=cp, weigh=weigh)
        one_pass, _ = engine.add_border_cells(cp.asarray(components), 8, cp.asarray(coarse),
                                              **options, xp=cp, weigh=weigh,
                                              nearest=gpu.nearest_cluster)
        known, _ = engine.add_border_cells(  # the significant numbers given, not weighed
            cp.asarray(components), 8, cp.asarray(coarse), **options, xp=cp, weigh=weigh,
            nearest=gpu.nearest_cluster,
            numbers=np.flatnonzero(sizes >= options["minimum"]) + 1)
        assert not np.array_equal(host, components)  # something joined
        np.testing.assert_array_equal(cp.asnumpy(whole), host)
        np.testing.assert_array_equal(cp.asnumpy(one_pass), host)
        np.testing.assert_array_equal(cp.asnumpy(known), host)


@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("label", ["sliding-window", "union-find-gpu"])
def test_gpu_fit_gives_the_cpu_labels(name, label, shared_datasets):
    X, _, _ = read_arff_points(shared_datasets / "shapes" / f"{name}.arff")
    cpu = WaveCluster(device="cpu").fit(X)
    gpu = WaveCluster(device="gpu", label=label).fit(X)
    assert gpu.device_ == "gpu"
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_array_equal(gpu.grid_labels_, cpu.grid_labels_)
    assert gpu.threshold_ == pytest.approx(cpu.threshold_, rel=1e-12)


def test_gpu_fit_weighted_4d_and_bior(rng):
    X = np.vstack([rng.normal(0, 0.2, (3000, 4)), rng.normal(3, 0.2, (3000, 4))])
    w = rng.randint(1, 3, len(X))
    for params in ({}, {"wavelet": "bior2.2"}, {"connectivity": 1, "grid_size": 12}):
        cpu = WaveCluster(device="cpu", **params).fit(X, sample_weight=w)
        gpu = WaveCluster(device="gpu", **params).fit(X, sample_weight=w)
        np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
        assert cpu.n_clusters_ == 2


def _discs(n, seed):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.2, 0.8, size=(5, 2))
    X = np.concatenate([rng.uniform(size=(n // 4, 2)),
                        centres[rng.integers(0, 5, n - n // 4)]
                        + rng.normal(scale=0.03, size=(n - n // 4, 2))])
    return X + 1000.0  # far from the origin


@pytest.mark.parametrize("label", ["union-find-gpu", "sliding-window"])
@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
def test_cupy_in_cupy_out_equals_cpu(cp, label, wavelet):
    X = _discs(40_000, 1)
    cpu = WaveCluster(wavelet=wavelet, device="cpu").fit(X)
    gpu = WaveCluster(wavelet=wavelet, label=label, device="gpu").fit(cp.asarray(X))
    assert isinstance(gpu.labels_, cp.ndarray) and isinstance(gpu.grid_labels_, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(gpu.labels_), cpu.labels_)
    np.testing.assert_array_equal(cp.asnumpy(gpu.grid_labels_), cpu.grid_labels_)
    np.testing.assert_array_equal(gpu.predict(X[:500]), cpu.labels_[:500])  # host predict
    probe = np.concatenate([X[:500], [[0.0, 0.0], [5000.0, 5000.0]]])  # two outside the bounds
    got = gpu.predict(cp.asarray(probe))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), cpu.predict(probe))
    assert cpu.predict(probe)[-2:].tolist() == [-1, -1]


def test_weights_none_equal_ones_on_device(cp):
    X = _discs(20_000, 2)
    plain = WaveCluster(device="gpu").fit(X)
    ones = WaveCluster(device="gpu").fit(X, sample_weight=np.ones(len(X)))
    device_ones = WaveCluster(device="gpu").fit(cp.asarray(X), sample_weight=cp.ones(len(X)))
    np.testing.assert_array_equal(plain.labels_, ones.labels_)
    np.testing.assert_array_equal(plain.labels_, cp.asnumpy(device_ones.labels_))
    weight = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    np.testing.assert_array_equal(
        WaveCluster(device="gpu").fit(X, sample_weight=weight).labels_,
        WaveCluster(device="cpu").fit(X, sample_weight=weight).labels_)


@pytest.mark.parametrize("blobs", [3, 225])  # labels cross the bus as int8, then int16
def test_labels_are_int32_on_every_path(cp, blobs):
    rng = np.random.default_rng(0)
    side = int(np.ceil(np.sqrt(blobs)))
    lattice = np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2)
    X = np.concatenate([lattice[rng.integers(0, blobs, 60_000)]
                        + rng.normal(scale=0.06, size=(60_000, 2)),
                        rng.uniform(-0.5, side - 0.5, size=(1_000, 2))])  # noise: label -1
    cpu = WaveCluster(device="cpu", min_cluster_size=10).fit(X)
    gpu = WaveCluster(device="gpu", min_cluster_size=10).fit(X)
    assert (cpu.labels_ == -1).any() and (cpu.n_clusters_ > 127) == (blobs > 127)
    assert gpu.labels_.dtype == np.int32 and gpu.grid_labels_.dtype == np.int32
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_array_equal(gpu.grid_labels_, cpu.grid_labels_)
    device = WaveCluster(device="gpu", min_cluster_size=10).fit(cp.asarray(X))
    assert device.labels_.dtype == cp.int32 and device.grid_labels_.dtype == cp.int32
    assert device.predict(cp.asarray(X)).dtype == cp.int32 and gpu.predict(X).dtype == np.int32
    np.testing.assert_array_equal(cp.asnumpy(device.labels_), cpu.labels_)


def test_pinned_staging_copies_exactly(cp, monkeypatch):
    import gpumine.backend as backend_module

    monkeypatch.setattr(backend_module, "STAGING_MIN_BYTES", 1)
    monkeypatch.setattr(backend_module, "_STAGING_CHUNK_BYTES", 4096 + 8)  # ragged chunks
    X = np.random.default_rng(5).normal(size=(10_001, 3))
    got = backend_module.get_backend("gpu").to_device_columns(X)
    np.testing.assert_array_equal(cp.asnumpy(got), X)


def test_staged_copies_in_turn_do_not_overwrite_a_transpose_in_flight(cp):
    """Partitions copied one after another (gpumine.dask's resident partitions): each staged
    copy's device buffer may be the memory the previous copy's transpose still reads on the
    current stream; the side stream must wait for it."""
    backend = __import__("gpumine.backend", fromlist=["get_backend"]).get_backend("gpu")
    rng = np.random.default_rng(8)
    parts = [rng.normal(size=(2_200_000, 8)).astype(np.float32)  # 70 MB: staged
             for _ in range(6)]
    copies = [backend.to_device_columns(part) for part in parts]
    for part, copy in zip(parts, copies, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(copy), part)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_pinned_staging_copies_back_exactly(cp, monkeypatch, dtype):
    import gpumine.backend as backend_module

    monkeypatch.setattr(backend_module, "STAGING_MIN_BYTES", 1)
    monkeypatch.setattr(backend_module, "_STAGING_CHUNK_BYTES", 4096 + 8)  # ragged chunks
    expected = (np.random.default_rng(6).normal(size=30_001) * 1e6).astype(dtype)
    device = cp.asarray(expected) * 1  # queued work the copy must wait for
    got = backend_module.get_backend("gpu").to_host(device)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["blobs-noise20-d3", "blobs-noise20-d4", "blobs-noise20-d6",
                                  "spirals", "moons", "tori-3d", "clumps-1d", "touching-blobs"])
@pytest.mark.parametrize("label", ["sliding-window", "union-find-gpu"])
def test_gpu_auto_threshold_equals_the_cpu_one(name, label):
    """The automatic threshold's levels (labelled on the device) choose what the CPU chooses,
    also where the background percolates and the threshold rises; at one point per cell the
    specks join the same clusters (one kernel on the GPU, lookups near each speck on
    the host: moons, spirals, tori), and the next level splits the same touching blobs."""
    from gpumine.datasets import make_shape_sets

    if name == "touching-blobs":  # small and touching: the next level splits them
        from sklearn.datasets import make_blobs

        X, _ = make_blobs(1000, centers=4, cluster_std=1.0, center_box=(-6, 6), random_state=2)
    elif name == "clumps-1d":  # one feature: each axis's profile is the grid itself
        rng = np.random.default_rng(0)
        X = np.concatenate([rng.normal(0, 0.3, 2000), rng.normal(3, 0.5, 1500),
                            rng.normal(6, 0.2, 500), rng.uniform(-2, 8, 1000)])[:, None]
    else:
        X, _ = make_shape_sets(random_state=0)[name]
    if label == "sliding-window" and X.shape[1] > 4:  # its windows: 2^d cells in registers
        with pytest.raises(InvalidParameterError, match=r"up to 4 dimensions.*6 features"):
            WaveCluster(device="gpu", label=label).fit(X)
        return
    cpu = WaveCluster(device="cpu").fit(X)
    gpu = WaveCluster(device="gpu", label=label).fit(X)
    assert gpu.threshold_ == pytest.approx(cpu.threshold_, rel=1e-12)
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_array_equal(gpu.grid_labels_, cpu.grid_labels_)


def test_streamed_fit_on_the_gpu_equals_the_in_memory_one(cp, tmp_path):
    """batch_rows over host and CuPy arrays, a Parquet dataset, and weights: the labels of
    the in-memory GPU fit (and of the CPU), in the input's namespace."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    X = _discs(30_001, 3)
    memory = WaveCluster(device="gpu").fit(X)
    np.testing.assert_array_equal(memory.labels_, WaveCluster(device="cpu").fit(X).labels_)
    streamed = WaveCluster(device="gpu", batch_rows=7_000).fit(X)
    assert isinstance(streamed.labels_, np.ndarray) and streamed.labels_.dtype == np.int32
    np.testing.assert_array_equal(streamed.labels_, memory.labels_)
    np.testing.assert_array_equal(streamed.grid_labels_, memory.grid_labels_)
    assert streamed.threshold_ == memory.threshold_ and streamed.n_clusters_ >= 2
    on_device = WaveCluster(device="gpu", batch_rows=7_000).fit(cp.asarray(X))
    assert isinstance(on_device.labels_, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(on_device.labels_), memory.labels_)
    for i, part in enumerate(np.array_split(X, 3)):
        pq.write_table(pa.table({f"x{j}": part[:, j] for j in range(2)}),
                       tmp_path / f"{i}.parquet", row_group_size=4_000)
    dataset = ds.dataset(sorted(tmp_path.glob("*.parquet")), format="parquet")
    np.testing.assert_array_equal(WaveCluster(device="gpu", batch_rows=5_000).fit(dataset)
                                  .labels_, memory.labels_)
    weight = np.full(len(X), 2.0)
    np.testing.assert_array_equal(
        WaveCluster(device="gpu", batch_rows=9_000).fit(X, sample_weight=weight).labels_,
        WaveCluster(device="gpu").fit(X, sample_weight=weight).labels_)
