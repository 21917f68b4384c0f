"""The device's component tree of a grid's levels (``gpumine.wavecluster.gpu_tree``) against
level-by-level SciPy labellings, and the ``"auto"`` fits that take their levels from it
(marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import WaveCluster
from gpumine.datasets import make_shape_sets
from gpumine.exceptions import InvalidParameterError
from gpumine.wavecluster import hierarchy
from gpumine.wavecluster.labeling import label_scipy

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


def _reference(grid, thresholds, connectivity):
    """Each level's SciPy labelling, its components' masses and their parents' numbers."""
    levels = []
    for j, t in enumerate(thresholds):
        labels, n = label_scipy(grid >= t, connectivity)
        mass = np.bincount(labels.ravel(), weights=grid.ravel(), minlength=n + 1)[1:]
        first = np.array([np.flatnonzero(labels.ravel() == c)[0] for c in range(1, n + 1)],
                         dtype=np.int64)
        parents = (levels[j - 1][0].ravel()[first] if j else np.zeros(n, dtype=np.int64))
        levels.append((labels, n, mass, parents))
    return levels


def _grid(rng, shape, kind):
    if kind == "poisson":  # many small components and ties at the thresholds' values
        return rng.poisson(1.5, size=shape).astype(np.float64)
    if kind == "smooth":  # a few large components that split higher up
        grid = rng.uniform(0, 1, size=shape)
        for axis in range(len(shape)):
            grid = (grid + np.roll(grid, 1, axis) + np.roll(grid, -1, axis)) / 3
        return grid * 10
    return np.full(shape, 2.0)  # one component at every level it reaches


@pytest.mark.parametrize(("shape", "kind"), [
    ((1000,), "poisson"), ((37, 41), "poisson"), ((64, 80), "smooth"), ((9, 10, 11), "smooth"),
    ((7, 6, 5, 6), "poisson"), ((6, 5, 4, 6, 5), "smooth"), ((3, 4, 3, 2, 3, 4), "poisson"),
    ((16, 16), "flat"), ((1, 1), "flat")])
@pytest.mark.parametrize("connectivity", [1, "full"])
def test_levels_tree_equals_each_level_labelled(cp, rng, shape, kind, connectivity):
    """Every level's labelling, component count, masses and parents (and a painting through
    random node values) equal those of each level labelled on its own, on grids with many
    specks and ties at the thresholds (Poisson counts), with components that split up the
    levels (smooth), one component, and levels that hold nothing (the top one)."""
    from gpumine.wavecluster.gpu_tree import levels_tree

    grid = _grid(rng, shape, kind)
    connectivity = len(shape) if connectivity == "full" else 1
    thresholds = [0.5, 1.0, 2.0, 3.0, 4.5, 7.0, 1e9]  # some equal to Poisson counts
    tree = levels_tree(cp.asarray(grid), thresholds, connectivity)
    reference = _reference(grid, thresholds, connectivity)
    assert tree.ends.size == len(thresholds)
    value = np.zeros(tree.level.size, dtype=np.int64)
    painted = np.zeros(grid.shape, dtype=np.int64)
    for j, (labels, n, mass, parents) in enumerate(reference):
        found, count = tree.labels(j)
        assert count == n == tree.count(j)
        np.testing.assert_array_equal(cp.asnumpy(found), labels)
        nodes = tree.nodes(j, np.arange(1, n + 1))
        np.testing.assert_array_equal(tree.level[nodes], np.full(n, j))
        np.testing.assert_array_equal(tree.number[nodes], np.arange(1, n + 1))
        np.testing.assert_allclose(tree.mass[nodes], mass, rtol=1e-12)
        up = tree.parent[nodes]
        if j:
            np.testing.assert_array_equal(tree.level[up], np.full(n, j - 1))
            np.testing.assert_array_equal(tree.number[up], parents)
        else:
            np.testing.assert_array_equal(up, np.full(n, -1))
        # a random value on some nodes: the highest level's nonzero value wins
        chosen = rng.randint(0, 4, size=n) * rng.randint(0, 2, size=n)
        value[nodes] = chosen
        level_value = np.concatenate([[0], chosen])[labels]
        painted = np.where(level_value != 0, level_value, painted)
    np.testing.assert_array_equal(cp.asnumpy(tree.paint(value)), painted)
    # the tree's significant components: the masses from a minimum on, up to the first
    # level holding none
    minimum = float(np.median(tree.mass)) if tree.mass.size else 1.0
    slabs = tree.significant(minimum)
    for j, (numbers, masses, parents) in enumerate(slabs):
        labels, n, mass, up = reference[j]
        keep = np.flatnonzero(mass >= minimum * (1 + 1e-12))
        assert set(keep + 1) <= set(numbers.tolist())
        np.testing.assert_allclose(masses, mass[numbers - 1], rtol=1e-12)
        np.testing.assert_array_equal(parents, up[numbers - 1] if j else 0)
    assert len(slabs) == len(reference) or not any(
        reference[len(slabs)][2] >= minimum * (1 + 1e-12))


def test_levels_tree_refuses_bad_thresholds(cp):
    from gpumine.wavecluster.gpu_tree import levels_tree

    with pytest.raises(InvalidParameterError, match="ascending"):
        levels_tree(cp.zeros((4, 4)), [2.0, 1.0], 1)
    with pytest.raises(InvalidParameterError, match="dimensions"):
        levels_tree(cp.zeros((1,) * 9), [1.0], 1)


@pytest.mark.parametrize("name", ["spirals", "blobs-noise20-d5", "moons"])
def test_auto_fits_from_the_tree_equal_the_stacks(cp, name, monkeypatch):
    """Where a grid's levels share no stack (``STACK_CELLS`` 1), the ``"auto"`` rule takes
    them from the device's tree: the clusters of the stacks (``TREE_CELLS`` 0: every grid too
    large for the tree) and of the CPU, host and device data."""
    from gpumine.wavecluster import gpu_tree

    X, _ = make_shape_sets(random_state=0)[name]
    cpu = WaveCluster(device="cpu").fit(X)
    monkeypatch.setattr(hierarchy, "STACK_CELLS", 1)
    calls = []
    built = gpu_tree.levels_tree

    def counted(*args):
        calls.append(built(*args))
        return calls[-1]

    monkeypatch.setattr(gpu_tree, "levels_tree", counted)
    tree = WaveCluster(device="gpu").fit(X)
    on_device = WaveCluster(device="gpu").fit(cp.asarray(X))
    assert calls  # the levels came from the tree
    monkeypatch.setattr(hierarchy, "TREE_CELLS", 0)
    stacks = WaveCluster(device="gpu").fit(X)
    assert tree.threshold_ == stacks.threshold_  # the device's unit, summed on the device
    for fit in (tree, stacks):
        assert fit.n_clusters_ == cpu.n_clusters_ >= 2
        assert fit.threshold_ == pytest.approx(cpu.threshold_, rel=1e-12)
        np.testing.assert_array_equal(fit.labels_, cpu.labels_)
        np.testing.assert_array_equal(fit.grid_labels_, cpu.grid_labels_)
    np.testing.assert_array_equal(cp.asnumpy(on_device.labels_), cpu.labels_)
