"""The ``"auto"`` threshold's coarser wavelet levels (:mod:`gpumine.wavecluster.levels`)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from gpumine import WaveCluster
from gpumine.exceptions import InvalidParameterError
from gpumine.wavecluster import engine, hierarchy
from gpumine.wavecluster.levels import joint_tables, next_level_cells, split_by_coarser_level


def _weigh(values, weights, bins):
    return np.bincount(values, weights=weights, minlength=bins)


def _significant(labels, grid, minimum):
    sizes = _weigh(labels.ravel(), grid.ravel(), int(labels.max()) + 1)
    return np.flatnonzero(sizes[1:] >= minimum) + 1


def _split(components, n, coarse, upper, minimum=2.0):
    """The next level's grid: haar's, each cell the sum of its finer cells over 2^(d/2).
    Also checks the significant numbers it returns (those of its result), and that given
    both levels' significant numbers it reads back one array fewer for the same result."""
    upper_grid = np.zeros(upper.shape)
    for i in range(coarse.shape[0]):
        for j in range(coarse.shape[1]):
            upper_grid[i // 2, j // 2] += coarse[i, j] / 2
    reads = {True: 0, False: 0}
    results = {}
    for given in (False, True):
        def to_host(values, given=given):
            reads[given] += 1
            return np.asarray(values)
        known = ({"significant": _significant(components, coarse, minimum),
                  "upper_significant": _significant(upper, upper_grid, minimum / 2)}
                 if given else {})
        results[given] = split_by_coarser_level(
            components, n, coarse, upper, int(upper.max()), upper_grid, minimum=minimum,
            upper_minimum=minimum / 2, connectivity=2, weigh=_weigh, to_host=to_host, **known)
    got, count, significant = results[False]
    np.testing.assert_array_equal(np.sort(significant), _significant(got, coarse, minimum))
    assert results[True][1] == count
    np.testing.assert_array_equal(results[True][0], got)
    np.testing.assert_array_equal(results[True][2], significant)
    assert reads[True] == reads[False] - 1
    return got, count


def test_next_level_clusters_split_the_finer_cluster_they_lie_in():
    """One finer cluster (a 2 x 8 strip) under two next-level clusters (the strip's halves):
    two pieces, numbered after the finer level's numbers, every cell kept."""
    coarse = np.ones((2, 8))
    components = np.ones((2, 8), dtype=np.int64)
    got, n = _split(components, 1, coarse, np.array([[1, 1, 2, 2]]))
    assert n == 3
    np.testing.assert_array_equal(got, np.repeat([[2, 2, 2, 2, 3, 3, 3, 3]], 2, axis=0))
    # a piece lighter than a quarter of the heaviest: no split
    light = coarse.copy()
    light[:, 6:] = 0.5  # piece 2: 2 against 12
    got, n = _split(components, 1, light, np.array([[1, 1, 1, 2]]))
    assert n == 1 and (got == components).all()
    # a piece lighter than the significant mass: no split
    got, n = _split(components, 1, coarse, np.array([[1, 1, 1, 2]]), minimum=5.0)
    assert n == 1 and (got == components).all()


def test_a_next_level_cluster_across_finer_ones_splits_none():
    """Next-level cluster 1 covers finer cluster 1 and part of 2 (most of it in 1), cluster 2
    the rest of 2: each finer cluster holds one piece at most, so nothing splits; a cluster
    lighter than the significant mass is left alone too."""
    coarse = np.ones((2, 8))
    components = np.array([[1, 1, 1, 1, 0, 2, 2, 2]] * 2)
    got, n = _split(components, 2, coarse, np.array([[1, 1, 1, 2]]))
    assert n == 2 and (got == components).all()
    got, n = _split(components, 2, coarse, np.array([[1, 2, 3, 3]]), minimum=7.0)
    assert n == 2 and (got == components).all()  # 1's halves weigh 4 each: not significant


def test_next_level_cells_cover_odd_shapes():
    upper = np.arange(1, 7).reshape(2, 3)
    got = next_level_cells(upper, (3, 5))
    assert got.shape == (3, 5)
    np.testing.assert_array_equal(got[np.arange(3)[:, None], np.arange(5)],
                                  upper[np.arange(3)[:, None] // 2, np.arange(5) // 2])


@pytest.mark.parametrize("host_tree_work", [hierarchy.HOST_TREE_WORK, 0, "tree"])
def test_touching_blobs_come_apart_at_the_next_level(host_tree_work, monkeypatch,
                                                     levels_tree):
    """Four Gaussian blobs of 250 points, two pairs touching: at about two cells per point
    the coarse grid's cells hold a point or two and the split step keeps each pair whole
    (2 clusters); the next level's cells hold four times as many and separate them. No
    point changes between cluster and noise, and the stacked, level-by-level and
    component-tree CPU paths agree."""
    levels_tree(host_tree_work == "tree")
    if host_tree_work != "tree":
        monkeypatch.setattr(hierarchy, "HOST_TREE_WORK", host_tree_work)
    X, y = make_blobs(1000, centers=4, cluster_std=1.0, center_box=(-6, 6), random_state=2)
    model = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(engine, "AUTO_COARSER_LEVELS", 0)
    finer = WaveCluster(device="cpu").fit(X)
    assert finer.n_clusters_ == 2 and model.n_clusters_ == 4
    assert adjusted_rand_score(y, model.labels_) > adjusted_rand_score(y, finer.labels_) + 0.3
    np.testing.assert_array_equal(model.labels_ >= 0, finer.labels_ >= 0)
    monkeypatch.undo()
    other = WaveCluster(device="cpu").fit(X)  # the defaults
    np.testing.assert_array_equal(model.labels_, other.labels_)


def test_the_next_level_is_haar_only():
    """bior2.2's cells do not nest level to level: its fits never look at the next level."""
    X, _ = make_blobs(1000, centers=4, cluster_std=1.0, center_box=(-6, 6), random_state=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "AUTO_COARSER_LEVELS", 0)
        without = WaveCluster(device="cpu", wavelet="bior2.2").fit(X).labels_
    np.testing.assert_array_equal(WaveCluster(device="cpu", wavelet="bior2.2").fit(X).labels_,
                                  without)


def test_a_level_is_split_by_the_level_above_it():
    """Five blobs of 200 points: the coarse grid and the next level each see one cluster;
    the levels above see them apart, and their opinion reaches the coarse grid through the
    levels between (three levels: four clusters; one level: still one)."""
    X, y = make_blobs(1000, centers=5, cluster_std=1.0, center_box=(-8, 8), random_state=94)
    found = {}
    for levels in (0, 1, 3):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(engine, "AUTO_COARSER_LEVELS", levels)
            found[levels] = WaveCluster(device="cpu").fit(X)
    assert found[0].n_clusters_ == found[1].n_clusters_ == 1
    assert found[3].n_clusters_ == 4
    assert adjusted_rand_score(y, found[3].labels_) > adjusted_rand_score(
        y, found[1].labels_) + 0.5
    np.testing.assert_array_equal(found[3].labels_ >= 0, found[0].labels_ >= 0)


def test_levels_auto_consults_the_coarser_levels_and_an_integer_does_not():
    """``levels="auto"`` (the default): one level, the coarser ones consulted; ``levels=1``:
    the same transform, its own clusters alone (what no coarser level gives); ``levels=2``: a
    grid twice as fine per axis, two levels down."""
    X, _ = make_blobs(1000, centers=5, cluster_std=1.0, center_box=(-8, 8), random_state=94)
    auto = WaveCluster(device="cpu").fit(X)
    assert WaveCluster(device="cpu").get_params()["levels"] == "auto"
    assert auto.levels_ == 1 and auto.n_clusters_ == 4
    one = WaveCluster(device="cpu", levels=1).fit(X)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "AUTO_COARSER_LEVELS", 0)
        none = WaveCluster(device="cpu").fit(X)
    assert one.levels_ == 1 and one.n_clusters_ == 1
    np.testing.assert_array_equal(one.labels_, none.labels_)
    np.testing.assert_array_equal(one.grid_shape_, auto.grid_shape_)
    two = WaveCluster(device="cpu", levels=2).fit(X)
    assert two.levels_ == 2
    assert [s // 2 for s in two.grid_shape_] == list(auto.grid_shape_)
    np.testing.assert_array_equal(two.predict(X), two.labels_)


@pytest.mark.parametrize("levels", ["deep", 0, 2.0, True])
def test_bad_levels_name_the_choices(levels):
    with pytest.raises(InvalidParameterError, match="levels must be 'auto' or an integer >= 1"):
        WaveCluster(device="cpu", levels=levels).fit(np.random.RandomState(0).rand(50, 2))


@pytest.mark.parametrize("host_tree_work", [None, 0, "tree"])
def test_coarser_levels_without_their_split_step(host_tree_work, levels_tree):
    """``AUTO_COARSER_SPLIT = False`` (the coarser levels' clusters are their base level
    alone): the five blobs still come apart at the coarser levels' base, the same on the
    stacked labelling, on the CPU's level-by-level one and on the component tree."""
    X, _ = make_blobs(1000, centers=5, cluster_std=1.0, center_box=(-8, 8), random_state=94)
    default = WaveCluster(device="cpu").fit(X)
    levels_tree(host_tree_work == "tree")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "AUTO_COARSER_SPLIT", False)
        if host_tree_work not in (None, "tree"):
            patch.setattr(hierarchy, "HOST_TREE_WORK", host_tree_work)
        base_only = WaveCluster(device="cpu").fit(X)
    assert base_only.n_clusters_ == 4
    np.testing.assert_array_equal(base_only.labels_, default.labels_)


@pytest.mark.parametrize("host_tree_work", [None, 0, "tree"])
def test_coarser_levels_on_threads_as_one_after_another(host_tree_work, levels_tree,
                                                        monkeypatch):
    """On the CPU the coarser levels' rule runs on the host pool beside the coarse grid's
    (``AUTO_COARSER_THREADS``), as many levels submitted as there are: the same threshold,
    clusters and labels as one after another, on sets where the coarser levels split (the
    five blobs) and where they do not, on the stacked, level-by-level and tree paths."""
    from gpumine import backend
    from gpumine.datasets import make_shape_sets

    levels_tree(host_tree_work == "tree")
    if host_tree_work not in (None, "tree"):
        monkeypatch.setattr(hierarchy, "HOST_TREE_WORK", host_tree_work)
    monkeypatch.setattr(backend, "host_pool_threads", lambda: 2)  # threads on any host
    monkeypatch.setattr(engine, "AUTO_COARSER_THREAD_CELLS", 0)  # and on every grid
    submitted = []
    real_pool = backend.host_pool

    class Pool:
        def submit(self, fn, *args):
            submitted.append(fn)
            return real_pool().submit(fn, *args)

    monkeypatch.setattr(backend, "host_pool", Pool)
    blobs, _ = make_blobs(1000, centers=5, cluster_std=1.0, center_box=(-8, 8),
                          random_state=94)
    shapes = make_shape_sets(scale=1.0, random_state=0)
    for X in (blobs, shapes["moons"][0], shapes["spirals"][0]):
        fits = {}
        for threads in (True, False):
            monkeypatch.setattr(engine, "AUTO_COARSER_THREADS", threads)
            count = len(submitted)
            fits[threads] = WaveCluster(device="cpu").fit(X)
            assert (len(submitted) - count == engine.AUTO_COARSER_LEVELS) == threads
        assert fits[True].threshold_ == fits[False].threshold_
        assert fits[True].n_clusters_ == fits[False].n_clusters_
        np.testing.assert_array_equal(fits[True].labels_, fits[False].labels_)
    assert fits[True].n_clusters_ >= 3  # the spirals' arms


def test_a_coarser_level_raising_on_a_thread_reaches_the_caller(monkeypatch):
    """An error in a coarser level's rule, on the host pool or in the calling thread, is
    raised by the fit."""
    from gpumine import backend

    monkeypatch.setattr(backend, "host_pool_threads", lambda: 2)  # threads on any host
    monkeypatch.setattr(engine, "AUTO_COARSER_THREAD_CELLS", 0)  # and on every grid
    real = engine._base_and_split

    def failing(grid, **kwargs):
        if kwargs.get("grow") is False:
            raise RuntimeError("a coarser level failed")
        return real(grid, **kwargs)

    monkeypatch.setattr(engine, "_base_and_split", failing)
    X, _ = make_blobs(1000, centers=5, cluster_std=1.0, center_box=(-8, 8), random_state=94)
    for threads in (True, False):
        monkeypatch.setattr(engine, "AUTO_COARSER_THREADS", threads)
        with pytest.raises(RuntimeError, match="a coarser level failed"):
            WaveCluster(device="cpu").fit(X)


def test_tables_read_together_are_made_anew_below_a_level_that_split():
    """``_split_down`` reads every level's table under the level above at once (the GPU's
    one transfer), as the levels were found; where a level then splits, the level below it
    is compared with the split pieces, not with that stale table. Three 1-d levels: the top
    splits the middle's first cluster in two, and that split splits the finest's first
    cluster -- which the middle level as found would not."""
    from gpumine.wavecluster import engine

    def found(components, significant):
        components = np.asarray(components)
        return (1, 1.0, 0.5, (components, int(components.max())), np.asarray(significant))

    def weigh(values, weights, bins):
        return np.bincount(values, weights=weights, minlength=bins)

    joint = functools.partial(joint_tables, xp=np, weigh=weigh)
    finest = found([1] * 8 + [2] * 4 + [0] * 4, [1, 2])
    middle = found([1, 1, 1, 1, 2, 2, 0, 0], [1, 2])
    top = found([1, 2, 3, 0], [1, 2, 3])
    grids = [np.ones(8), np.ones(4)]
    kwargs = {"connectivity": 1, "xp": np, "to_host": np.asarray, "spread": None,
              "weigh": weigh}
    read = []
    tables = engine._joint_tables

    def together(*args):
        read.append(tables(*args))
        return read[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "_joint_tables", together)
        (got, n_got), significant = engine._split_down(np.ones(16), finest, grids,
                                                        [middle, top], kwargs, joint)
    (want, n_want), _ = engine._split_down(np.ones(16), finest, grids, [middle, top],
                                           kwargs)
    assert sorted(read[0]) == [0, 1]  # both tables read back together
    np.testing.assert_array_equal(got, want)
    assert n_got == n_want == 4  # the finest's first cluster split in two
    assert len(np.unique(got[:8])) == 2 and sorted(significant.tolist()) == [2, 3, 4]


@pytest.mark.parametrize("shape", [(33,), (37, 41), (9, 10, 7), (5, 4, 6, 3), (3, 4, 3, 5, 2)])
def test_compiled_joint_equals_the_gathers(shape):
    """cpu_fast.joint (the CPU stages' ``joint`` with Numba) equals joint_tables' gathers and
    bincount to the bit, bin 0 included: two jobs of different tables and widths one after
    another, odd extents included (the next level's last cell covers one finer cell)."""
    pytest.importorskip("numba")
    from gpumine.backend import get_backend
    from gpumine.wavecluster import cpu_fast, pipeline

    assert pipeline.stages_for(get_backend("cpu")).joint is cpu_fast.joint
    rng = np.random.default_rng(len(shape))
    upper_shape = tuple((s + 1) // 2 for s in shape)
    jobs = []
    for cluster_index, piece_index in [
            (np.array([0, 1, 0, 2, 3, 0, 4]), np.array([0, 1, 2, 0, 3])),  # 4 rows, 3 columns
            (np.array([0, 0, 1, 0, 0, 0, 2]), np.array([0, 0, 1, 2, 0]))]:  # 2 rows, 2 columns
        jobs.append((rng.integers(0, 7, size=shape), rng.integers(0, 5, size=upper_shape),
                     cluster_index, piece_index, rng.uniform(0, 2, size=shape),
                     int(piece_index.max()) + 1))
    expected = joint_tables(jobs, weigh=lambda v, w, bins: np.bincount(v, weights=w,
                                                                       minlength=bins))
    got = cpu_fast.joint(jobs)
    assert (got > 0).mean() > 0.5  # most bins have cells
    assert got.dtype == np.float64 and np.array_equal(got.view(np.int64),
                                                      expected.view(np.int64))
