"""The compiled CPU strategies (assign/update="numba") against direct FP64 references."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans
from gpumine.kmeans.reference import update_numpy

pytest.importorskip("numba")
from gpumine.kmeans.cpu_fast import assign_numba, update_numba


def _direct_labels(X, C):
    """argmin of sum (x - c)^2 computed directly in float64, ties to the lowest index."""
    d2 = ((X.astype(np.float64)[:, None, :] - C.astype(np.float64)[None, :, :]) ** 2).sum(2)
    return d2.argmin(1)


CASES = [(1, 1, 1), (9, 1, 9), (1000, 3, 1), (1001, 8, 8), (517, 30, 64), (64, 200, 5)]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k"), CASES)
def test_assign_is_the_direct_fp64_argmin(n, d, k, dtype, order, rng):
    X = np.asarray(rng.normal(size=(n, d)) + 100.0, dtype=dtype, order=order)
    C = X[rng.choice(n, size=k, replace=False)] + rng.normal(scale=1e-3, size=(k, d))
    labels = np.full(n, -7, dtype=np.int32)  # poison
    assign_numba(X, C.astype(dtype), labels)
    np.testing.assert_array_equal(labels, _direct_labels(X, C.astype(dtype)))


def test_assign_on_exact_ties_takes_the_lowest_index():
    C = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 5.0], [0.0, 0.0]])
    X = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 2.5], [3.0, 0.0]])  # ties 0|1|3, 0|3
    labels = np.empty(4, dtype=np.int32)
    assign_numba(X, C, labels)
    np.testing.assert_array_equal(labels, [0, 0, 2, 1])
    np.testing.assert_array_equal(labels, _direct_labels(X, C))


def test_assign_on_near_ties_where_the_expanded_formula_fails(rng):
    """Points a few ulps off the bisector of two centres far from the origin: the direct
    formula decides them, the expanded one (the NumPy reference) cannot."""
    base = rng.normal(size=(1, 4)) + 1e6
    C = np.vstack([base, base + 1.0])
    t = 0.5 + rng.randint(-4, 5, size=(2000, 1)) * 2.0**-40
    X = C[0] * (1 - t) + C[1] * t
    labels = np.empty(2000, dtype=np.int32)
    assign_numba(X, C, labels)
    np.testing.assert_array_equal(labels, _direct_labels(X, C))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_update_matches_the_reference(dtype, rng):
    n, d, k = 5003, 7, 11
    X = rng.normal(size=(n, d)).astype(dtype)
    labels = rng.randint(0, k - 1, size=n).astype(np.int32)  # cluster k - 1 stays empty
    weight = rng.uniform(0.5, 2.0, size=n).astype(dtype)
    sums, weights = np.full((k, d), np.nan), np.full(k, np.nan)  # poison
    update_numba(X, labels, weight, sums, weights)
    expected_sums, expected_weights = np.empty((k, d)), np.empty(k)
    update_numpy(X, labels, weight, expected_sums, expected_weights)
    np.testing.assert_allclose(sums, expected_sums, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-12)
    assert weights[-1] == 0 and not sums[-1].any()


def test_fit_equals_the_reference_fit_on_separated_blobs(rng):
    centres = rng.uniform(-50, 50, size=(6, 5))
    X = (centres[rng.randint(0, 6, 20000)] + rng.normal(size=(20000, 5))).astype(np.float32)
    init = X[:6].copy()
    fits = [GPUKMeans(6, init=init, device="cpu", assign=name, update=name).fit(X)
            for name in ("numpy", "numba")]
    np.testing.assert_array_equal(fits[0].labels_, fits[1].labels_)
    assert fits[0].n_iter_ == fits[1].n_iter_
    np.testing.assert_allclose(fits[0].cluster_centers_, fits[1].cluster_centers_, rtol=1e-6)
