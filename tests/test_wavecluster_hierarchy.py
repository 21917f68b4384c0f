"""The ``"auto"`` threshold's split step (:mod:`gpumine.wavecluster.hierarchy`)."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import pytest
from scipy import ndimage
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from gpumine import WaveCluster
from gpumine.backend import get_backend
from gpumine.datasets import make_shape_sets
from gpumine.wavecluster import engine, hierarchy, pipeline
from gpumine.wavecluster.labeling import label_scipy, label_union_find
from gpumine.wavecluster.levels import joint_tables


def _weigh(values, weights, bins):
    return np.bincount(values, weights=weights, minlength=bins)


def _split(coarse, base_points, minimum, label=label_scipy, connectivity=2):
    """split_persistent on a coarse grid counted in points (unit 1)."""
    components, n = label(coarse >= base_points - 0.5, connectivity)
    return components, hierarchy.split_persistent(
        coarse, components, n, base_points=base_points, unit=1.0, minimum=minimum,
        connectivity=connectivity)


def _bumps(peaks, widths=None, size=64, floor=1.0):
    """A 2-d grid (points per cell): Gaussian bumps of the given peaks and widths along the
    middle row, centres 20 cells apart, on a plateau of ``floor`` points that joins them."""
    widths = widths or [3.0] * len(peaks)
    yy, xx = np.mgrid[:size, :size]
    grid = np.zeros((size, size))
    for k, (peak, width) in enumerate(zip(peaks, widths, strict=True)):
        grid += peak * np.exp(-((xx - 12 - 20 * k) ** 2 + (yy - size / 2) ** 2)
                              / (2 * width ** 2))
    plateau = (np.abs(yy - size / 2) < 15) & (xx > 4) & (xx < 20 * len(peaks))
    return np.where(plateau, np.maximum(grid, floor), grid)


def test_levels_of_the_base_rule_and_of_the_split_step():
    from gpumine.wavecluster.engine import AUTO_THRESHOLD_LEVELS

    assert AUTO_THRESHOLD_LEVELS == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    levels = list(itertools.islice(hierarchy.threshold_levels(), 20))
    assert levels[:12] == list(AUTO_THRESHOLD_LEVELS)
    assert levels[-1] == 2 ** 10
    assert all(b > a for a, b in itertools.pairwise(levels))
    for base in AUTO_THRESHOLD_LEVELS:  # sqrt(2) steps, starting just above the base
        split = list(itertools.islice(hierarchy.split_levels(base), 9))
        assert base < split[0] <= base * 2 ** 0.5 + 1e-9
        np.testing.assert_allclose(np.diff(np.log2(split)), 0.5)
        assert split[8] == split[0] * 16  # powers of two are exact


def test_bumps_that_persist_are_split_and_every_base_cell_kept():
    """Two bumps of peak 40 on a plateau of 1.5 points: they separate at 2 points and stay
    significant far above 8, so the one base component becomes two clusters that
    share all of its cells, each cell going to the bump it is nearer along the plateau."""
    coarse = _bumps([40, 40], floor=1.5)
    components, (split, n) = _split(coarse, 1, minimum=20)
    assert components.max() == 1 and n == 2
    assert np.array_equal(split > 0, components > 0)  # no cell lost or added
    row = split[32]
    assert row[12] != row[32] and row[10] == row[12] and row[34] == row[32]
    assert set(np.unique(split[split > 0])) == {1, 2}


def test_a_bump_that_dies_out_soon_is_not_a_cluster():
    """A bump of peak 4 beside one of peak 40: it separates at 2.83 points but has nothing
    significant at four times that density, so the component stays whole -- the very
    labelling given (no copy made)."""
    coarse = _bumps([40, 4], floor=1.5)
    components, (split, n) = _split(coarse, 1, minimum=20)
    assert split is components and n == 1


@pytest.mark.parametrize(("width", "splits"), [(1.2, False), (3.0, True)])
def test_a_piece_far_lighter_than_its_sibling_is_a_bump_on_it(width, splits):
    """Two bumps of peak 40, both persisting; the second of width 1.2 holds about 9 % of the
    first's mass (below the minimum share): no split; of width 3, about 56 %: a split."""
    coarse = _bumps([40, 40], widths=[4.0, width], floor=1.5)
    components, (split, n) = _split(coarse, 1, minimum=5)
    assert components.max() == 1
    assert n == (2 if splits else 1)
    assert (split is components) != splits


def test_decide_on_a_hand_made_tree():
    """The rule on the tree alone: level 0 holds one component; level 1 two pieces, one of
    which has no descendant; at level 2 the other holds two pieces that reach level 6, four
    steps up: the root splits there, into them."""
    ids = [np.array([1])] + [np.array([1, 2])] * 6
    masses = [np.array([100.0]), np.array([50, 40.0]), np.array([30, 30.0]),
              np.array([20, 20.0]), np.array([15, 15.0]), np.array([10, 10.0]),
              np.array([5, 5.0])]
    # level 1: both pieces of the root; level 2: both inside piece 1 of level 1; then each
    # level's pieces continue the previous level's
    parents = [None, np.array([1, 1]), np.array([1, 1])] + [np.array([1, 2])] * 4
    leaves, splits = hierarchy._decide(ids, masses, parents)
    assert hierarchy.AUTO_SPLIT_PERSISTENCE == 4
    assert splits == [(0, 0)]
    assert leaves == [(2, 0), (2, 1)]
    short = ids[:6], masses[:6], parents[:6]
    leaves, splits = hierarchy._decide(*short)  # level 2 + 4 is not there: no split
    assert splits == [] and leaves == [(0, 0)]
    lopsided = [m.copy() for m in masses]
    lopsided[2] = np.array([30, 3.0])  # under a quarter of its sibling: a bump, not a piece
    assert hierarchy._decide(ids, lopsided, parents)[0] == [(0, 0)]


def _decide_reference(ids, masses, parents):
    """_decide's rule read literally: a component splits at the first level above it where
    at least two of its descendants there reach AUTO_SPLIT_PERSISTENCE levels higher and
    weigh at least AUTO_SPLIT_MIN_SHARE of the heaviest such; those then decide in turn."""
    def descendants(i, k, j):  # positions at level j below (level i, position k)
        front = {k}
        for t in range(i + 1, j + 1):
            front = {c for c, p in enumerate(parents[t]) if
                     list(ids[t - 1]).index(p) in front}
        return sorted(front)

    def reaches(j, c):  # the highest level a descendant of (j, c) is at
        return max([j] + [t for t in range(j + 1, len(ids)) if descendants(j, c, t)])

    leaves, splits, pending = [], [], [(0, k) for k in range(len(ids[0]))]
    while pending:
        i, k = pending.pop()
        for j in range(i + 1, len(ids) + 1):
            front = descendants(i, k, j) if j < len(ids) else []
            kept = [c for c in front if reaches(j, c) >= j + hierarchy.AUTO_SPLIT_PERSISTENCE]
            if len(kept) >= 2:
                heaviest = max(masses[j][c] for c in kept)
                kept = [c for c in kept
                        if masses[j][c] >= hierarchy.AUTO_SPLIT_MIN_SHARE * heaviest]
            if len(kept) >= 2:
                splits.append((i, k))
                pending.extend((j, c) for c in kept)
                break
            if not front:
                leaves.append((i, k))
                break
    return sorted(leaves), sorted(splits)


def test_decide_equals_the_rule_read_literally():
    """_decide (children lists, each component's highest level reached, a single
    descendant's walk without new lists) against the rule read literally on 400 random
    trees: levels of 1 to 5 components, parents drawn among the level below, masses over two
    orders of magnitude (bumps under a quarter of the heaviest), components without
    children (chains that stop early)."""
    rng = np.random.default_rng(7)
    splits_seen = 0
    for _ in range(400):
        ids = [np.arange(1, int(rng.integers(1, 4)) + 1)]
        masses = [rng.uniform(1, 10, ids[0].size)]
        parents = [None]
        depth = int(rng.integers(0, 14) if rng.random() < 0.3 else rng.integers(5, 14))
        for _ in range(depth):
            n = int(rng.choice([1, 2, 2, 3, 3, 5]))
            ids.append(np.sort(rng.choice(np.arange(1, 40), n, replace=False)))
            masses.append(rng.uniform(0.1, 10, n))
            parents.append(rng.choice(ids[-2], n))
        got = hierarchy._decide(ids, masses, parents)
        assert got == _decide_reference(ids, masses, parents)
        splits_seen += bool(got[1])
    assert splits_seen > 20  # the trees split often enough to test the rule


def test_grow_labels_follows_the_region_not_the_straight_line():
    """A U-shaped corridor with a seed at each tip: the bottom of the U is shared at its
    middle, and a cell next to the other seed in a straight line but far along the
    corridor goes to its own seed."""
    region = np.zeros((9, 9), bool)
    region[:, 0] = region[:, 8] = region[8, :] = True
    labels = np.zeros((9, 9), np.int64)
    labels[0, 0], labels[0, 8] = 1, 2
    grown = hierarchy.grow_labels(labels.copy(), region, 1)
    assert np.array_equal(grown > 0, region)
    assert (grown[:, 0] == 1).all() and (grown[:, 8] == 2).all()
    assert grown[8, 3] == 1 and grown[8, 5] == 2
    assert grown[8, 4] == 1  # equidistant: the lower label
    assert (hierarchy.grow_labels(labels.copy(), region, 2) > 0).sum() == region.sum()


@pytest.mark.parametrize("label", [label_scipy, label_union_find])
def test_spirals_are_found_and_blobs_in_noise_separated(label, monkeypatch):
    """The sets the base rule got wrong: three spiral arms meeting at the centre, and two of
    four 5-d blobs in 20 % noise whose tails join (ARI 0.56 and 0.74 with the split step
    switched off); both labelling strategies give the same result."""
    sets = make_shape_sets(random_state=0)
    scores = {}
    for name, arms in (("spirals", 3), ("blobs-noise20-d5", 4)):
        X, y = sets[name]
        model = WaveCluster(device="cpu").fit(X)
        assert model.n_clusters_ == arms
        scores[name] = adjusted_rand_score(y, model.labels_)
        monkeypatch.setattr(hierarchy, "AUTO_SPLIT_PERSISTENCE", 10 ** 6)
        merged = WaveCluster(device="cpu").fit(X)
        monkeypatch.undo()
        assert merged.n_clusters_ < arms
        # the pieces are grown back over their component: no point changes to or from noise
        np.testing.assert_array_equal(model.labels_ >= 0, merged.labels_ >= 0)
        assert scores[name] > adjusted_rand_score(y, merged.labels_) + 0.15
    assert scores["spirals"] > 0.9 and scores["blobs-noise20-d5"] > 0.9


@pytest.mark.parametrize("name", ["rings", "moons", "touching-arcs", "tori-3d"])
def test_clusters_of_even_density_are_left_whole(name, monkeypatch):
    """Rings, moons, arcs and tori fluctuate in density along their length: no split."""
    X, _ = make_shape_sets(random_state=1)[name]
    model = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "AUTO_SPLIT_PERSISTENCE", 10 ** 6)
    assert np.array_equal(model.labels_, WaveCluster(device="cpu").fit(X).labels_)


def test_weighted_fit_equals_repetition_with_the_split():
    """Weights count as points in the split step too (its levels are in points)."""
    X, _ = make_shape_sets(scale=0.5, random_state=0)["spirals"]
    rng = np.random.RandomState(0)
    counts = rng.randint(1, 3, len(X))
    weighted = WaveCluster(device="cpu", grid_size=(120, 120)).fit(X, sample_weight=counts)
    repeated = WaveCluster(device="cpu", grid_size=(120, 120)).fit(np.repeat(X, counts, axis=0))
    assert weighted.n_clusters_ == repeated.n_clusters_ >= 2
    assert np.array_equal(np.repeat(weighted.labels_, counts), repeated.labels_)


@pytest.mark.parametrize("name", ["spirals", "blobs-noise20-d5", "moons", "tori-3d"])
@pytest.mark.parametrize("seed", [0, 1])
def test_stacked_chunked_and_cropped_trees_agree(name, seed, monkeypatch, levels_tree):
    """The ways to build the tree -- every level in one stacked labelling (small grids, and
    the GPU's way), in stacks cut where the levels' bounding box halves (``CROP_CELLS`` 0;
    with ``SMALL_TREE`` 0, only the significant components read back), in stacks of two
    levels each (``STACK_CELLS`` 1: the pieces then labelled anew), level by level
    inside the boxes of the previous level's components (large CPU grids without Numba, or
    past ``TREE_CELLS``), or one component tree of every level (the CPU's with Numba) --
    give the same clusters, split or not."""
    X, _ = make_shape_sets(random_state=seed)[name]
    levels_tree(True)
    tree = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "TREE_CELLS", 0)  # every grid too large for the tree
    past_tree = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "TREE_CELLS", 2 ** 62)
    levels_tree(False)
    whole = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "CROP_CELLS", 0)  # a new stack where the box halves
    monkeypatch.setattr(hierarchy, "SMALL_TREE", 0)  # the significant components alone read
    boxed = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "STACK_CELLS", 1)  # two levels a stack, one shared
    chunked = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "HOST_TREE_WORK", 0)
    cropped = WaveCluster(device="cpu").fit(X)
    for other in (boxed, chunked, cropped, tree, past_tree):
        assert other.n_clusters_ == whole.n_clusters_
        assert other.threshold_ == whole.threshold_
        np.testing.assert_array_equal(other.labels_, whole.labels_)
        np.testing.assert_array_equal(other.grid_labels_, whole.grid_labels_)


@pytest.mark.parametrize("name", ["spirals", "tori-3d", "moons", "density-10x", "bridge",
                                  "touching-blobs"])
def test_one_stack_for_every_level_gives_the_same_clusters(name, monkeypatch, levels_tree):
    """The GPU's way -- the coarse grid's and the coarser levels' thresholds labelled in one
    stack and read back at once (``stack_levels``), every grid in the corner of a common
    plane -- gives the clusters of a stack per grid, also where the common planes would
    exceed ``STACK_CELLS`` (the finest grid alone and the coarser ones together, or a stack
    per grid) or hold only the significant components' numbers (``SMALL_TREE`` 0)."""
    if name == "touching-blobs":  # the coarser levels split them (test_wavecluster_levels)
        X, _ = make_blobs(1000, centers=4, cluster_std=1.0, center_box=(-6, 6),
                          random_state=2)
    else:
        X, _ = make_shape_sets(random_state=0)[name]
    calls = []
    shared = hierarchy._LevelStack.shared

    def counted(*args, **kwargs):
        calls.append(shared(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(hierarchy._LevelStack, "shared", counted)
    levels_tree(False)  # stacks, as without Numba
    apart = WaveCluster(device="cpu").fit(X)
    assert not calls  # the CPU's default: a stack per grid
    monkeypatch.setattr(engine, "SHARE_HOST_STACKS", True)
    fits = [WaveCluster(device="cpu").fit(X)]
    assert calls and calls[-1] is not None
    monkeypatch.setattr(hierarchy, "SMALL_TREE", 0)
    fits.append(WaveCluster(device="cpu").fit(X))
    jobs_seen = []

    def all_too_large(cls, jobs, **kwargs):  # every grid together too large, fewer not
        jobs_seen.append(len(jobs))
        return None if len(jobs_seen) == 1 else shared.__func__(cls, jobs, **kwargs)

    monkeypatch.setattr(hierarchy._LevelStack, "shared", classmethod(all_too_large))
    fits.append(WaveCluster(device="cpu").fit(X))
    assert jobs_seen == [jobs_seen[0], jobs_seen[0] - 1]  # then the coarser grids together
    monkeypatch.setattr(hierarchy._LevelStack, "shared", counted)
    monkeypatch.setattr(hierarchy, "STACK_CELLS", 1)
    fits.append(WaveCluster(device="cpu").fit(X))
    assert calls[-1] is None  # too large: a stack per grid
    for other in fits:
        assert other.n_clusters_ == apart.n_clusters_ >= 2
        assert other.threshold_ == apart.threshold_
        np.testing.assert_array_equal(other.labels_, apart.labels_)
        np.testing.assert_array_equal(other.grid_labels_, apart.grid_labels_)


def _numpy_hooks():
    """NumPy versions of the GPU's one-pass hooks (``Stages.summaries``, ``tree``,
    ``plane``, ``paint``, ``joint``, ``planes``), written from their contracts: the CPU runs
    the GPU's code paths with them."""

    def summaries(grids, weight):
        parts = [np.asarray([float(weight)])]
        for grid in grids:
            axes = range(grid.ndim)
            parts += [np.asarray([grid.sum()]), *(grid.max(axis=tuple(b for b in axes if b != a))
                                                  for a in axes)]
        return np.concatenate(parts)

    def tree(labels, n, weights):
        mass, up, tops = hierarchy._tree_on(
            labels, n, weights, np, lambda v, w, b: np.bincount(v, weights=w, minlength=b))
        return np.concatenate([tops, mass, up.astype(np.float64)])

    def corner(planes, box):
        return planes[(slice(None), *(slice(0, sl.stop - sl.start) for sl in box))]

    def plane(values, shape, box, start):
        out = np.zeros(shape, np.int64)
        out[box] = np.maximum(corner(values[None], box)[0] - start, 0)
        return out

    def paint(planes, table, shape, box):
        out = np.zeros(shape, np.int64)
        found = np.zeros(out[box].shape, np.int64)
        for values in corner(planes, box)[::-1]:  # the first plane with a nonzero entry wins
            found = np.where(table[values] != 0, table[values], found)
        out[box] = found
        return out

    joint = functools.partial(joint_tables, xp=np,
                              weigh=lambda v, w, b: np.bincount(v, weights=w, minlength=b))
    return {"summaries": summaries, "tree": tree, "plane": plane, "paint": paint,
            "joint": joint, "planes": functools.partial(hierarchy.stack_planes, xp=np)}


@pytest.mark.parametrize("name", ["spirals", "blobs-noise20-d5", "moons", "touching-blobs"])
def test_the_gpu_hooks_give_the_same_clusters(name, monkeypatch):
    """The GPU's path through the ``"auto"`` rule -- one stack for every grid, the grids'
    summaries, the trees, the levels, the split's painting and the coarser levels' tables
    each by one pass of a hook (here NumPy versions of the kernels' contracts; the tables of
    all levels read back at once) -- gives the CPU's clusters, splits included (the spirals
    and the 5-d blobs split; every leaf painted at once, then each split level grown; the
    coarser levels split the touching blobs)."""
    if name == "touching-blobs":
        X, _ = make_blobs(1000, centers=4, cluster_std=1.0, center_box=(-6, 6),
                          random_state=2)
    else:
        X, _ = make_shape_sets(random_state=0)[name]
    plain = WaveCluster(device="cpu").fit(X)
    painted = []
    hooks = _numpy_hooks()
    paint = hooks["paint"]

    def counted(*args):
        painted.append(args[2])
        return paint(*args)

    hooks["paint"] = counted
    tables, joint_tables = [], engine._joint_tables

    def read_together(*args):
        tables.append(joint_tables(*args))
        return tables[-1]

    monkeypatch.setattr(engine, "_joint_tables", read_together)
    monkeypatch.setattr(engine, "SHARE_HOST_STACKS", True)
    monkeypatch.setattr(pipeline, "_CPU", dataclasses.replace(pipeline._CPU, **hooks,
                                                              levels_tree=None))
    hooked = WaveCluster(device="cpu").fit(X)
    if name in ("spirals", "blobs-noise20-d5"):
        assert painted  # the split painted through the hook
    # the levels' tables read back together: three pairs of levels on the moons, two on
    # the touching blobs (whose coarser levels split them), one on the spirals
    assert len(tables) == 1 and len(tables[0]) == {"spirals": 1, "blobs-noise20-d5": 0,
                                                   "moons": 3, "touching-blobs": 2}[name]
    assert hooked.n_clusters_ == plain.n_clusters_ >= 2
    assert hooked.threshold_ == plain.threshold_
    np.testing.assert_array_equal(hooked.labels_, plain.labels_)
    np.testing.assert_array_equal(hooked.grid_labels_, plain.grid_labels_)


@pytest.mark.gpu
@pytest.mark.parametrize(("stack_cells", "crop_cells", "small_tree"), [
    (hierarchy.STACK_CELLS, hierarchy.CROP_CELLS, hierarchy.SMALL_TREE),
    (hierarchy.STACK_CELLS, 0, 0), (1, 0, hierarchy.SMALL_TREE)])
@pytest.mark.parametrize(("name", "label"), [
    ("spirals", "sliding-window"), ("spirals", "union-find-gpu"),  # sliding-window: d <= 4
    ("blobs-noise20-d5", "union-find-gpu"), ("blobs-noise20-d6", "union-find-gpu")])
def test_gpu_split_gives_the_cpu_labels(name, label, stack_cells, crop_cells, small_tree,
                                        monkeypatch):
    """Where the split step fires, the GPU (host and CuPy input) gives the CPU's labels: the
    same tree, the same pieces, the same growth -- with every level in one stack, in stacks
    cut where the levels' box halves (``CROP_CELLS`` 0, the significant components alone
    read back: ``SMALL_TREE`` 0), and in stacks of two levels (``STACK_CELLS`` 1: the
    pieces then labelled anew)."""
    from gpumine.backend import cupy_module

    monkeypatch.setattr(hierarchy, "STACK_CELLS", stack_cells)
    monkeypatch.setattr(hierarchy, "CROP_CELLS", crop_cells)
    monkeypatch.setattr(hierarchy, "SMALL_TREE", small_tree)
    cp = cupy_module()
    X, _ = make_shape_sets(random_state=1 if name.endswith("d6") else 0)[name]
    cpu = WaveCluster(device="cpu").fit(X)
    gpu = WaveCluster(device="gpu", label=label).fit(X)
    on_device = WaveCluster(device="gpu", label=label).fit(cp.asarray(X))
    assert cpu.n_clusters_ == gpu.n_clusters_ == on_device.n_clusters_ >= 3
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_array_equal(gpu.grid_labels_, cpu.grid_labels_)
    np.testing.assert_array_equal(cp.asnumpy(on_device.labels_), cpu.labels_)


@pytest.mark.gpu
@pytest.mark.parametrize("on_device", [False, True])
def test_gpu_grow_labels_equals_cpu(on_device, rng):
    """grow_labels on CuPy arrays, its steps on the host or in the device's one cooperative
    launch (``spread_labels``): the NumPy result -- on random regions and seeds in 3-d, on a
    2-d box larger than the launch's threads (a grid-stride loop), and along a corridor
    that takes thousands of steps (the step flags' turns)."""
    from gpumine.backend import cupy_module, get_backend
    from gpumine.wavecluster.gpu import spread_labels

    cp = cupy_module()
    spread = spread_labels if on_device else None
    cases = []
    for connectivity in (1, 2, 3):
        region = rng.uniform(size=(20, 17, 9)) < 0.7
        cases.append((region, 0.02, connectivity))
    cases.append((rng.uniform(size=(1500, 1400)) < 0.65, 1e-5, 2))
    corridor = np.zeros((41, 2001), dtype=bool)  # a serpentine: 21 rows joined at alternate ends
    corridor[::2] = True
    corridor[1::4, -1] = corridor[3::4, 0] = True
    cases.append((corridor, 0.0, 1))
    for region, share, connectivity in cases:
        labels = np.where(region & (rng.uniform(size=region.shape) < share),
                          rng.randint(1, 6, region.shape), 0).astype(np.int64)
        if not labels.any():
            labels[0, 0] = 3  # the corridor's one seed, at its start
        want = hierarchy.grow_labels(labels.copy(), region, connectivity)
        assert (want[region] > 0).mean() > 0.5  # it grew
        got = hierarchy.grow_labels(cp.asarray(labels), cp.asarray(region), connectivity,
                                    xp=cp, to_host=get_backend("gpu").to_host, spread=spread)
        np.testing.assert_array_equal(cp.asnumpy(got), want)


@pytest.mark.parametrize("connectivity", [1, 2, 3])
def test_compiled_growth_equals_the_numpy_steps(connectivity, rng):
    """The CPU's compiled growth (cpu_fast.spread, the CPU stages' ``spread`` with Numba)
    against grow_labels' NumPy steps: random regions and seeds in 3-d and 2-d, and a
    serpentine corridor of thousands of steps from one seed."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import cpu_fast, pipeline

    assert pipeline.stages_for(get_backend("cpu")).spread is cpu_fast.spread
    corridor = np.zeros((41, 501), dtype=bool)  # 21 rows joined at alternate ends
    corridor[::2] = True
    corridor[1::4, -1] = corridor[3::4, 0] = True
    for region, share in ((rng.uniform(size=(20, 17, 9)) < 0.7, 0.02),
                          (rng.uniform(size=(300, 280)) < 0.65, 0.001), (corridor, 0.0)):
        labels = np.where(region & (rng.uniform(size=region.shape) < share),
                          rng.randint(1, 6, region.shape), 0).astype(np.int64)
        if not labels.any():
            labels[(0,) * region.ndim] = 3  # the corridor's one seed, at its start
        want = hierarchy.grow_labels(labels.copy(), region, connectivity)
        assert (want[region] > 0).mean() > 0.5  # it grew
        got = hierarchy.grow_labels(labels.copy(), region, connectivity, spread=cpu_fast.spread)
        np.testing.assert_array_equal(got, want)


def test_compiled_tree_equals_the_numpy_tree(rng):
    """cpu_fast.stack_tree (the CPU stages' ``tree`` with Numba) against _tree_on's bincount,
    scatter and maximum: the same tops, parents and masses to the bit (both add in flat
    order), on a labelled stack of nested levels with weights broadcast from one plane and
    with a full array."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import cpu_fast
    from gpumine.wavecluster.labeling import label_scipy

    assert pipeline.stages_for(get_backend("cpu")).tree is cpu_fast.stack_tree
    grid = rng.gamma(1.0, size=(40, 33))
    padded = np.zeros((41, 33))
    padded[:40] = grid
    thresholds = np.array([0.2, 0.7, 1.5, 3.0, 50.0])  # the last level empty
    mask = padded[None] >= thresholds[:, None, None]
    labels, n = label_scipy(mask.reshape(-1, 33), 2)
    labels = labels.reshape(mask.shape)
    for weights in (np.broadcast_to(padded, labels.shape), rng.uniform(size=labels.shape)):
        mass, up, tops = hierarchy._tree_on(labels, n, weights, np, np.bincount)
        packed = cpu_fast.stack_tree(labels, n, weights)
        m = labels.shape[0]
        np.testing.assert_array_equal(packed[:m], tops)
        np.testing.assert_array_equal(packed[m + 1:m + n + 1], mass[1:])
        # parents: numbers of the planes after the first (the first's are not meaningful)
        later = np.unique(labels[1:][labels[1:] > 0])
        np.testing.assert_array_equal(packed[m + n + 1:][later], up[later])
    assert packed[m - 1] == 0  # the empty level's top


def _levels_reference(grid, thresholds, connectivity):
    """Each level labelled on its own with SciPy: (labels, n, masses by number, each
    number's number one level down)."""
    out = []
    for j, t in enumerate(thresholds):
        labels, n = label_scipy(grid.astype(np.float64) >= t, connectivity)
        mass = np.bincount(labels.ravel(), weights=grid.ravel().astype(np.float64),
                           minlength=n + 1)[1:]
        numbers, first = np.unique(labels.ravel(), return_index=True)
        first = first[numbers > 0]  # a cell of each component
        down = out[j - 1][0].ravel()[first] if j else np.zeros(n, np.int64)
        out.append((labels, n, mass, down))
    return out


@pytest.mark.parametrize("trial", range(40))
def test_component_tree_equals_labelling_every_level(trial, monkeypatch):
    """cpu_fast.levels_tree (the CPU's ``Stages.levels_tree``) against SciPy labelling each
    level on its own, on fresh random grids (d = 1..4, every connectivity, float32 and
    float64, smooth and speckled, thresholds between values and equal to cell values,
    levels above the peak): the same labelling of every level (numbers in raster order),
    the same count, masses to rounding, and each component's parent one level down. Every
    fifth trial indexes in int64 (the grids past 2^31 cells times levels)."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import cpu_fast

    if trial % 5 == 0:
        monkeypatch.setattr(cpu_fast, "_INDEX32_BELOW", 0)

    rng = np.random.default_rng(trial)
    d = int(rng.integers(1, 5))
    shape = tuple(int(s) for s in rng.integers(1, 40 if d <= 2 else 10, size=d))
    grid = rng.poisson(rng.uniform(0.2, 4.0), size=shape).astype(np.float64)
    if trial % 2:
        grid = ndimage.uniform_filter(grid, 3)
    if trial % 3 == 0:
        grid = grid.astype(np.float32)
    connectivity = int(rng.integers(1, d + 1))
    m = int(rng.integers(1, 12))
    values = np.unique(grid.astype(np.float64))
    thresholds = np.sort(rng.choice(values, m) if trial % 4 == 0
                         else rng.uniform(0.0, values[-1] + 1.0, m))
    tree = cpu_fast.levels_tree(grid, thresholds, connectivity)
    assert tree.parent.dtype == (np.int64 if trial % 5 == 0 else np.int32)
    ends = [*tree.ends.tolist(), 0]
    for j, (labels, n, mass, down) in enumerate(_levels_reference(grid, thresholds,
                                                                  connectivity)):
        got, count = tree.labels(j)
        assert count == n == tree.count(j)
        np.testing.assert_array_equal(got, labels)
        here = slice(ends[j + 1], ends[j])
        np.testing.assert_array_equal(tree.level[here], j)
        np.testing.assert_array_equal(tree.number[here], np.arange(1, n + 1))
        np.testing.assert_allclose(tree.mass[here], mass, rtol=1e-12, atol=1e-9)
        if j:
            np.testing.assert_array_equal(tree.number[tree.parent[here]], down)
        else:
            np.testing.assert_array_equal(tree.parent[here], -1)


def test_component_tree_with_more_components_than_cells():
    """A hundred apart cells in nine levels: 900 components, more than the padded grid's
    cells (levels_tree starts with room for a quarter of them): the node arrays grow, and
    every level is still right. Thresholds out of order are refused, no levels give an
    empty tree."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import cpu_fast

    grid = np.tile([10.0, 0.0], 100)
    thresholds = np.arange(1.0, 10.0)
    tree = cpu_fast.levels_tree(grid, thresholds, 1)
    assert tree.level.size == 900 > grid.size + 2
    for j, (labels, n, _, _) in enumerate(_levels_reference(grid, thresholds, 1)):
        np.testing.assert_array_equal(tree.labels(j)[0], labels)
        assert n == tree.count(j) == 100
    with pytest.raises(ValueError, match="ascending"):
        cpu_fast.levels_tree(grid, thresholds[::-1], 1)
    assert cpu_fast.levels_tree(grid, [], 1).level.size == 0


@pytest.mark.parametrize("trial", range(12))
def test_component_tree_significant_slabs(trial):
    """LevelsTree.significant (one compiled pass) against NumPy over the tree's arrays:
    per level up to the first holding no component of the minimum mass, the significant
    components' numbers, masses and parents' numbers; minima below every mass, above
    every mass (no level) and between."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import cpu_fast

    rng = np.random.default_rng(100 + trial)
    d = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(2, 30 if d <= 2 else 8, size=d))
    grid = ndimage.uniform_filter(rng.poisson(2.0, size=shape).astype(np.float64), 3)
    thresholds = np.sort(rng.uniform(0.0, grid.max() + 0.5, int(rng.integers(1, 10))))
    tree = cpu_fast.levels_tree(grid, thresholds, int(rng.integers(1, d + 1)))
    masses = np.sort(tree.mass) if tree.mass.size else np.zeros(1)
    minimum = [0.0, masses[-1] + 1.0, *rng.choice(masses, 2)][trial % 4]
    keep = tree.mass >= minimum
    held = np.zeros(thresholds.size + 1, dtype=bool)
    held[tree.level[keep]] = True
    top = int(np.argmin(held))
    got = tree.significant(minimum)
    assert len(got) == top
    for j, (numbers, mass, parents) in enumerate(got):
        at = np.flatnonzero(keep & (tree.level == j))
        np.testing.assert_array_equal(numbers, tree.number[at])
        np.testing.assert_array_equal(mass, tree.mass[at])
        np.testing.assert_array_equal(parents, tree.number[tree.parent[at]] if j else 0)
        assert numbers.dtype == parents.dtype == np.int64
    # painting a level's components through their nodes gives the level's labelling; a
    # component of the level above and the other components of its level, painted
    # together, give the level's labelling with that component's cells taken by the one
    # above (cells below the upper level keep 0 there)
    for j in range(thresholds.size):
        labels, n = tree.labels(j)
        if n == 0:
            continue
        value = np.zeros(tree.level.size, np.int64)
        value[tree.nodes(j, np.arange(1, n + 1))] = np.arange(1, n + 1)
        np.testing.assert_array_equal(tree.paint(value), labels)
        if j + 1 < thresholds.size and tree.count(j + 1):
            upper, _ = tree.labels(j + 1)
            below = tree.number[tree.parent[tree.nodes(j + 1, [1])]][0]
            value[tree.nodes(j, [below])] = 0
            value[tree.nodes(j + 1, [1])] = n + 1
            expected = np.where(labels == below, 0, labels)
            expected[upper == 1] = n + 1
            np.testing.assert_array_equal(tree.paint(value), expected)


@pytest.mark.parametrize("name", ["spirals", "blobs-noise20-d5", "moons"])
def test_tree_levels_give_a_stacks_tree(name, monkeypatch, levels_tree):
    """_TreeLevels (from the component tree) holds the tree _LevelStack builds from a stack
    of labelled levels -- the same significant numbers and parents at every level, masses
    to rounding, the same end -- the same labelling of every level and the same ancestors
    a level or two down, on each grid a fit looks at (the coarse grid and the coarser
    levels)."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import cpu_fast

    X, _ = make_shape_sets(random_state=0)[name]
    seen = []
    resolve = hierarchy.resolve_stacked

    def kept(coarse, projections, **kwargs):
        seen.append((coarse, projections, kwargs))
        return resolve(coarse, projections, **kwargs)

    monkeypatch.setattr(hierarchy, "resolve_stacked", kept)
    monkeypatch.setattr(engine, "resolve_stacked", kept)
    levels_tree(False)
    monkeypatch.setattr(hierarchy, "HOST_TREE_WORK", 2 ** 62)  # every grid stacked
    WaveCluster(device="cpu").fit(X)
    assert len(seen) >= 2
    for coarse, projections, kwargs in seen:
        levels, _ = hierarchy.plan_levels(projections, unit=kwargs["unit"],
                                          base_levels=kwargs["base_levels"])
        options = {key: kwargs[key] for key in ("unit", "minimum", "label", "connectivity",
                                                "xp")}
        stack = hierarchy._LevelStack(coarse, levels, projections, weigh=_weigh,
                                      to_host=np.asarray, **options)
        tree = hierarchy._TreeLevels(coarse, levels, levels_tree=cpu_fast.levels_tree,
                                     **options)
        assert len(tree.tree) == len(stack.tree) >= 1
        for (numbers, mass, parents), (want_numbers, want_mass, want_parents) in zip(
                tree.tree, stack.tree, strict=True):
            np.testing.assert_array_equal(numbers, want_numbers)
            np.testing.assert_array_equal(parents, want_parents)
            np.testing.assert_allclose(mass, want_mass, rtol=1e-12)
        for j in range(len(levels)):
            np.testing.assert_array_equal(tree.labelling(j)[0], stack.labelling(j)[0])
            assert tree.labelling(j)[1] == stack.labelling(j)[1]
        for j in range(1, len(tree.tree)):  # up the parent links, one and two levels
            for i in range(max(j - 2, 0), j):
                np.testing.assert_array_equal(tree.ancestors(tree.tree[j][0], j, i),
                                              stack.ancestors(stack.tree[j][0], j, i))


@pytest.mark.parametrize("connectivity", [1, 2, 3])
def test_grow_labels_equals_a_grey_erosion_reference(connectivity, rng):
    """Against scipy: each step, an unlabelled region cell takes the minimum label over its
    neighbourhood (grey erosion with the empty cells as +inf), until nothing changes."""
    from scipy import ndimage

    region = rng.uniform(size=(15, 12, 10)) < 0.65
    labels = np.where(region & (rng.uniform(size=region.shape) < 0.03),
                      rng.randint(1, 9, region.shape), 0).astype(np.int64)
    footprint = ndimage.generate_binary_structure(3, connectivity)
    want, empty = labels.copy(), 10 ** 6  # scipy's erosion overflows at int64's max
    while True:
        nearest = ndimage.grey_erosion(np.where(want > 0, want, empty), footprint=footprint,
                                       mode="constant", cval=empty)
        take = (want == 0) & region & (nearest < empty)
        if not take.any():
            break
        want[take] = nearest[take]
    got = hierarchy.grow_labels(labels.copy(), region, connectivity)
    np.testing.assert_array_equal(got, want)
    assert (got[~region] == labels[~region]).all()


def test_border_cells_join_the_cluster_they_touch_by_a_face():
    """add_border_cells above a base level of one point: an occupied cell sharing a face with
    a significant component's cell joins it (the lower number where two touch); a diagonal
    neighbour, a cell below half a point and a cell next to an insignificant component stay
    as they were. (At a base level of one point the specks join instead: the next tests.)"""
    from gpumine.wavecluster.engine import add_border_cells

    coarse = np.array([[5, 5, 1, 0, 1, 5, 5],
                       [0, 0, 0, 1, 0, 0, 0],
                       [0.4, 5, 1, 0, 0, 0, 1],
                       [0, 0, 0, 0, 0, 0, 2.0]])
    components = np.array([[1, 1, 0, 0, 0, 2, 2],
                           [0, 0, 0, 0, 0, 0, 0],
                           [0, 3, 0, 0, 0, 0, 0],
                           [0, 0, 0, 0, 0, 0, 4]])
    expected = np.array([[1, 1, 1, 0, 2, 2, 2],
                         [0, 0, 0, 0, 0, 0, 0],
                         [0, 3, 3, 0, 0, 0, 0],
                         [0, 0, 0, 0, 0, 0, 4]])
    kwargs = {"unit": 1.0, "minimum": 5.0, "connectivity": 2, "weigh": _weigh}
    got, n = add_border_cells(components.copy(), 4, coarse, base_points=2, **kwargs)
    assert n == 4
    np.testing.assert_array_equal(got, expected)  # (1, 3) is only diagonal; 4 is too light
    # the significant numbers given (the tree knows them) rather than weighed: the same
    got, _ = add_border_cells(components.copy(), 4, coarse, base_points=2,
                              numbers=np.array([1, 2, 3]), **kwargs)
    np.testing.assert_array_equal(got, expected)
    between = np.array([[5, 1, 5]])  # a cell between two clusters: the lower number
    got, _ = add_border_cells(np.array([[2, 0, 1]]), 2, between, base_points=3, **kwargs)
    np.testing.assert_array_equal(got, [[2, 1, 1]])


def test_border_cells_give_blob_outskirts_back_in_noise(monkeypatch):
    """3-d blobs in 20 % noise: the base level drops the blobs' outskirts with the noise;
    the border gives them back (a higher index, less noise, the same clusters), and it
    changes nothing where the base level is one point (moons)."""
    from gpumine.wavecluster import engine

    sets = make_shape_sets(random_state=2)
    X, y = sets["blobs-noise20-d3"]
    moons, _ = sets["moons"]
    with_border = WaveCluster(device="cpu").fit(X)
    moons_border = WaveCluster(device="cpu").fit(moons).labels_
    monkeypatch.setattr(engine, "AUTO_BORDER_CONNECTIVITY", 0)
    without = WaveCluster(device="cpu").fit(X)
    assert with_border.n_clusters_ == without.n_clusters_ == 4
    assert (with_border.labels_ < 0).mean() < (without.labels_ < 0).mean()
    assert adjusted_rand_score(y, with_border.labels_) > adjusted_rand_score(
        y, without.labels_) + 0.02
    np.testing.assert_array_equal(moons_border, WaveCluster(device="cpu").fit(moons).labels_)


def test_specks_join_the_nearest_cluster_within_two_steps():
    """add_border_cells at a base level of one point: a cell of an insignificant component
    within two steps of the labelling's neighbourhood from a significant one joins the
    nearest (the lower number among the nearest); farther specks, background cells and
    the clusters stay as they were."""
    from gpumine.wavecluster.engine import add_border_cells

    coarse = np.array([[5, 5, 0, 1, 0, 1, 0, 0, 5, 5],
                       [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                       [0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
                       [0.0, 0, 0, 0, 0, 0, 0, 0, 0, 1]])
    components = np.array([[1, 1, 0, 2, 0, 3, 0, 0, 4, 4],
                           [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                           [0, 0, 0, 0, 5, 0, 0, 0, 0, 0],
                           [0, 0, 0, 0, 0, 0, 0, 0, 0, 6]])
    kwargs = {"unit": 1.0, "minimum": 5.0, "weigh": _weigh, "base_points": 1}
    # 2 at (0, 3): two steps from 1's (0, 1). 3 at (0, 5): three steps from 1 and from 4.
    # 5 at (2, 4): two steps from 2's cell, a speck, not a cluster. 6 at (3, 9): three rows
    # below 4.
    expected = components.copy()
    expected[0, 3] = 1
    for connectivity in (1, 2):
        got, n = add_border_cells(components.copy(), 6, coarse, connectivity=connectivity,
                                  **kwargs)
        assert n == 6
        np.testing.assert_array_equal(got, expected)
        got, _ = add_border_cells(components.copy(), 6, coarse, connectivity=connectivity,
                                  numbers=np.array([1, 4]), **kwargs)  # given, not weighed
        np.testing.assert_array_equal(got, expected)
    # nearest first: a speck one step from 3 and two from 1 joins 3
    got, _ = add_border_cells(np.array([[1, 1, 0, 2, 3, 3]]), 3,
                              np.array([[5, 5, 0, 1, 5, 5.0]]), connectivity=1, **kwargs)
    np.testing.assert_array_equal(got, [[1, 1, 0, 3, 3, 3]])
    # equally near: the lower number
    got, _ = add_border_cells(np.array([[2, 2, 0, 3, 0, 1, 1]]), 3,
                              np.array([[5, 5, 0, 1, 0, 5, 5.0]]), connectivity=1, **kwargs)
    np.testing.assert_array_equal(got, [[2, 2, 0, 1, 0, 1, 1]])


def test_specks_give_cluster_outskirts_back_without_noise(monkeypatch):
    """A 3 x 3 grid of blobs of different spreads and no noise: at a base level of one point
    the outskirts of the wide blobs come out as specks (noise); joined to their blob, less
    is noise, the index rises and the clusters keep their points."""
    from gpumine.wavecluster import engine

    rng = np.random.default_rng(0)
    parts = [rng.normal([3 * i, 3 * j], 0.3 + 0.15 * ((i + j) % 3), (300, 2))
             for i in range(3) for j in range(3)]
    X, y = np.vstack(parts), np.repeat(np.arange(9), 300)
    with_specks = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(engine, "AUTO_SPECK_STEPS", 0)
    without = WaveCluster(device="cpu").fit(X)
    assert with_specks.n_clusters_ == without.n_clusters_ == 9
    assert (with_specks.labels_ < 0).mean() < 0.5 * (without.labels_ < 0).mean()
    assert adjusted_rand_score(y, with_specks.labels_) > adjusted_rand_score(
        y, without.labels_) + 0.01
    kept = without.labels_ >= 0
    assert adjusted_rand_score(without.labels_[kept], with_specks.labels_[kept]) == 1.0


@pytest.mark.parametrize("shape", [(40,), (23, 31), (9, 11, 13), (5, 6, 7, 8)])
def test_specks_on_the_host_equal_the_whole_grid_steps(shape, monkeypatch):
    """The host looks up only the cells near each speck (in blocks); the GPU takes minima
    over the whole grid. Random grids, every connectivity, blocks of a few cells, and the
    whole-grid fallback for many specks: the same labels."""
    import types

    from gpumine.wavecluster import engine

    rng = np.random.default_rng(len(shape))
    whole_grid = types.SimpleNamespace(where=np.where, minimum=np.minimum)  # not numpy
    changed = 0
    for trial in range(6):
        coarse = rng.choice([0.0, 1.0, 4.0], size=shape, p=[0.6, 0.3, 0.1])
        n = 12
        components = np.where(coarse > 0, rng.integers(1, n + 1, size=shape), 0)
        sizes = _weigh(components.ravel(), coarse.ravel(), n + 1)
        minimum = float(np.median(sizes[1:]))  # about half the components significant
        for connectivity in range(1, len(shape) + 1):
            kwargs = {"base_points": 1, "unit": 1.0, "minimum": minimum,
                      "connectivity": connectivity, "weigh": _weigh}
            monkeypatch.setattr(engine, "SPECK_BLOCK", 1 if trial % 2 else 1 << 20)
            host, _ = engine.add_border_cells(components, n, coarse, xp=np, **kwargs)
            grid, _ = engine.add_border_cells(components, n, coarse, xp=whole_grid, **kwargs)
            np.testing.assert_array_equal(host, grid)
            changed += int((host != components).sum())
    assert changed  # specks did join


@pytest.mark.parametrize(("shape", "connectivity"), [
    ((300,), 1), ((37, 41), 1), ((37, 41), 2), ((9, 11, 7), 3), ((5, 6, 4, 5), 2),
    ((4, 3, 5, 3, 4, 3), 2)])
@pytest.mark.parametrize("base_points", [1, 2])  # the specks (two rings), the border (one)
def test_compiled_nearest_joins_as_numpy(shape, connectivity, base_points, rng, border_case):
    """add_border_cells with the CPU's compiled join (cpu_fast.nearest, the CPU stages'
    ``nearest`` with Numba) gives NumPy's numbers (specks looked up near each speck, the
    border by minima over shifted views) on random labellings with clusters of every size
    (some below the significant mass), occupied and empty cells, at the grid's edges and
    corners too; the significant numbers given or weighed."""
    pytest.importorskip("numba")
    from gpumine.backend import get_backend
    from gpumine.wavecluster import cpu_fast, pipeline

    assert pipeline.stages_for(get_backend("cpu")).nearest is cpu_fast.nearest
    for _ in range(3):
        components, coarse, sizes = border_case(rng, shape)
        options = {"base_points": base_points, "unit": 1.0,  # about half the clusters light
                   "minimum": float(np.median(sizes)), "connectivity": connectivity,
                   "weigh": _weigh}
        expected, _ = engine.add_border_cells(components, 8, coarse, **options)
        got, _ = engine.add_border_cells(components, 8, coarse, **options,
                                         nearest=cpu_fast.nearest)
        known, _ = engine.add_border_cells(components, 8, coarse, **options,
                                           nearest=cpu_fast.nearest,
                                           numbers=np.flatnonzero(sizes >= options["minimum"]) + 1)
        assert not np.array_equal(expected, components)  # something joined
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(known, expected)


def test_first_boxes_are_the_profiles_boxes(rng):
    """Every grid's first-level box found at once (one row per axis, different lengths and
    thresholds) is the box :func:`hierarchy._profile_boxes` finds for that grid alone: the
    first and last index whose densest cell reaches the threshold, on each axis."""
    jobs = []
    for shape in [(30, 20), (15, 10), (8, 5), (4, 3)]:
        projections = [rng.uniform(0, 5, size=s) * (np.abs(np.arange(s) - s / 2) < s / 3)
                       for s in shape]  # empty ends: boxes inside the grids
        unit = rng.uniform(0.5, 2)
        levels = [rng.uniform(0.6, 2.5)]
        jobs.append((None, levels, projections, unit, None))
    got = hierarchy._first_boxes(jobs)
    want = [hierarchy._profile_boxes(projections, [(levels[0] - 0.5) * unit])[0]
            for _, levels, projections, unit, _ in jobs]
    assert got == want
    assert all(box[0] != slice(0, len(job[2][0])) for box, job in zip(got, jobs, strict=True))
