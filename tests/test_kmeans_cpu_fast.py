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
def test_assign_on_a_lattice_of_ties_and_near_ties(dtype, rng):
    """Integer points and centres on a small lattice: many exact ties (lowest index wins)
    and, after a nudge of a few ulps, near-ties the GEMM alone would get wrong."""
    X = rng.randint(-3, 4, size=(5000, 3)).astype(dtype)
    X[::2] += (rng.randint(-2, 3, size=(2500, 3)) * np.finfo(dtype).eps).astype(dtype)
    C = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 1], [-1, 0, 1], [2, 2, 2]],
                 dtype=dtype)
    labels = np.full(5000, -7, dtype=np.int32)
    assign_numba(X, C, labels)
    np.testing.assert_array_equal(labels, _direct_labels(X, C))


@pytest.mark.parametrize("offset", [0.0, 1e4, 1e6])
def test_assign_float32_far_from_the_origin(offset, rng):
    """float32 data far from the origin: the shift to the centres' mean keeps the GEMM's
    bound small, and rows near a bisector still come out as the direct formula's."""
    n, d, k = 256 * 9 + 5, 6, 17  # several blocks per thread, a partial last block
    X = (rng.normal(size=(n, d)) + offset).astype(np.float32)
    C = X[rng.choice(n, size=k, replace=False)].astype(np.float64)
    t = rng.uniform(0.4999, 0.5001, size=(200, 1))
    X[:200] = (C[0] * (1 - t) + C[1] * t).astype(np.float32)  # near the 0|1 bisector
    labels = np.full(n, -7, dtype=np.int32)
    assign_numba(X, C, labels)
    np.testing.assert_array_equal(labels, _direct_labels(X, C))


def test_the_margin_recheck_is_what_makes_near_ties_exact(monkeypatch, rng):
    """With a negative margin bound the GEMM's float32 ranking decides every row (even
    its exact ties) and near-ties come out wrong: the re-check is doing the work."""
    from gpumine.kmeans import cpu_fast

    # the far third centre moves the shift's origin away from the near-tied pair
    C = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1000.0, 1000.0, 1000.0]])
    t = 0.5 + rng.randint(-40, 41, size=(20000, 1)) * 2.0**-20
    X = (C[0] * (1 - t) + C[1] * t).astype(np.float32)
    expected = _direct_labels(X, C)
    labels = np.empty(20000, dtype=np.int32)
    monkeypatch.setattr(cpu_fast, "margin_slack", lambda *args: np.array([0.0, -1.0, 0.0]))
    assign_numba(X, C, labels)
    assert (labels != expected).any()
    monkeypatch.undo()
    assign_numba(X, C, labels)
    np.testing.assert_array_equal(labels, expected)


def test_the_host_loop_holds_blas_to_one_thread():
    """The assignment asks the Lloyd loop to hold BLAS to one thread for the whole run."""
    from threadpoolctl import threadpool_info

    from gpumine.kmeans import lloyd

    seen = []
    with lloyd.loop_context(assign_numba):
        seen = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert seen and set(seen) == {1}


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


def test_update_counts_the_labels_that_changed(rng):
    X = rng.normal(size=(3001, 2))
    labels = rng.randint(0, 5, size=3001).astype(np.int32)
    labels_old = labels.copy()
    moved = rng.choice(3001, size=123, replace=False)
    labels_old[moved] = (labels[moved] + 1) % 5
    sums, weights = np.empty((5, 2)), np.empty(5)
    assert update_numba(X, labels, np.ones(3001), sums, weights, labels_old=labels_old) == 123
    assert update_numba(X, labels, np.ones(3001), sums, weights) is None


def test_fit_equals_the_reference_fit_on_separated_blobs(rng):
    centres = rng.uniform(-50, 50, size=(6, 5))
    X = (centres[rng.randint(0, 6, 20000)] + rng.normal(size=(20000, 5))).astype(np.float32)
    init = X[:6].copy()
    fits = [GPUKMeans(6, init=init, device="cpu", assign=name, update=name).fit(X)
            for name in ("numpy", "numba")]
    np.testing.assert_array_equal(fits[0].labels_, fits[1].labels_)
    assert fits[0].n_iter_ == fits[1].n_iter_
    np.testing.assert_allclose(fits[0].cluster_centers_, fits[1].cluster_centers_, rtol=1e-6)
