"""init="k-means||" (Bahmani et al.): quality against k-means++, reproducibility, edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans
from gpumine.kmeans.init import kmeans_parallel


def _blobs(seed, n=20_000, d=4, k=8):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, size=(k, d))
    sizes = rng.multinomial(n, rng.dirichlet(np.ones(k) * 2))  # uneven clusters
    X = np.concatenate([c + rng.normal(scale=rng.uniform(0.5, 2.0), size=(m, d))
                        for c, m in zip(centres, sizes, strict=True)])
    return X[rng.permutation(len(X))]


@pytest.mark.parametrize("data_seed", [11, 12])
def test_inertia_within_2_percent_of_kmeans_plusplus(data_seed):
    """Median inertia of ten fitted runs, on blobs neither init was tuned on."""
    X = _blobs(data_seed)

    def median_inertia(init):
        return np.median([GPUKMeans(8, init=init, n_init=1, device="cpu", random_state=seed)
                          .fit(X).inertia_ for seed in range(10)])

    assert median_inertia("k-means||") <= 1.02 * median_inertia("k-means++")


def test_reproducible_weighted_and_edge_cases():
    X = _blobs(13, n=3000)
    w = np.random.default_rng(0).uniform(0, 2, len(X))
    w[:100] = 0  # never a centre
    args = dict(sample_weight=w, x_squared_norms=None)
    first = kmeans_parallel(X, 8, random_state=np.random.RandomState(5), **args)
    again = kmeans_parallel(X, 8, random_state=np.random.RandomState(5), **args)
    np.testing.assert_array_equal(first, again)
    assert first.shape == (8, 4) and first.dtype == X.dtype
    rows = {tuple(row) for row in X[:100]}
    assert not any(tuple(c) in rows for c in first)
    # k = n, d = 1, all points equal: still n_clusters centres, each a point of X
    tiny = np.arange(6.0)[:, None]
    centres = kmeans_parallel(tiny, 6, sample_weight=np.ones(6), x_squared_norms=None,
                              random_state=np.random.RandomState(0))
    assert sorted(centres.ravel().tolist()) == tiny.ravel().tolist()
    same = np.ones((50, 3))
    centres = kmeans_parallel(same, 2, sample_weight=np.ones(50),
                              x_squared_norms=(same ** 2).sum(1),
                              random_state=np.random.RandomState(0))
    assert centres.shape == (2, 3) and (centres == 1).all()
    model = GPUKMeans(3, init="k-means||", device="cpu", random_state=0).fit(
        X.astype(np.float32))
    assert model.strategies_["init"] == "k-means||"
    assert model.cluster_centers_.dtype == np.float32
