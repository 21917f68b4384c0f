"""Centre initialisation strategies: ``init="random"`` and ``init="k-means++"``.

Both are written against the backend's array namespace ``xp`` and draw their
random numbers on the host from a :class:`numpy.random.RandomState` (a few
numbers per centre), so a given ``random_state`` picks the same centres on every
backend. Semantics follow scikit-learn's ``KMeans``.

Contract: ``init(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp)``
returns a new (n_clusters, n_features) array of X's dtype on X's backend.
"""

from __future__ import annotations

import numpy as np

from gpumine.kmeans.reference import chunk_rows

__all__ = ["kmeans_plusplus", "random_init"]


def _to_host(xp, array):
    return array.get() if hasattr(array, "get") and xp is not np else np.asarray(array)


def random_init(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp=np):
    """Pick ``n_clusters`` distinct rows of X, with probability proportional to weight.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)   -- IN
    n_clusters : int
    sample_weight : array of shape (n_samples,)   -- IN, non-negative, positive sum
    x_squared_norms : array of shape (n_samples,)   -- IN, unused
    random_state : numpy.random.RandomState
    xp : module

    Returns
    -------
    centers : array of shape (n_clusters, n_features)
    """
    weight = _to_host(xp, sample_weight).astype(np.float64)
    seeds = random_state.choice(X.shape[0], size=n_clusters, replace=False, p=weight / weight.sum())
    return X[xp.asarray(seeds)].copy()


def kmeans_plusplus(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp=np,
                    n_local_trials=None):
    """Greedy k-means++ (Arthur & Vassilvitskii 2007; seed paper 002 §3).

    The first centre is drawn with probability proportional to ``sample_weight``;
    each next one is the best of ``2 + floor(ln k)`` candidates drawn with
    probability proportional to ``sample_weight * D(x)^2``, the one that lowers
    the weighted potential most.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)   -- IN
    n_clusters : int
    sample_weight : array of shape (n_samples,)   -- IN
    x_squared_norms : array of shape (n_samples,)   -- IN, row norms of X squared
    random_state : numpy.random.RandomState
    xp : module
    n_local_trials : int, optional
        Candidates per centre; default ``2 + int(ln(n_clusters))``.

    Returns
    -------
    centers : array of shape (n_clusters, n_features)
    """
    n_samples = X.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    weight = xp.asarray(sample_weight, dtype=xp.float64)
    norms = xp.asarray(x_squared_norms, dtype=xp.float64)
    weight_host = _to_host(xp, weight)

    def squared_distances(rows):
        # ||y||^2 - 2 y.x + ||x||^2 in float64 over row blocks of X (never a float64
        # copy of all of X), clipped at 0 against cancellation.
        Y = X[rows].astype(xp.float64)
        out = xp.empty((Y.shape[0], n_samples), dtype=xp.float64)
        starts, step = chunk_rows(n_samples, X.shape[1])
        for start in starts:
            block = X[start:start + step].astype(xp.float64)
            out[:, start:start + step] = Y @ block.T
        out *= -2.0
        out += norms[None, :]
        out += norms[rows][:, None]
        return xp.maximum(out, 0.0, out=out)

    centers = xp.empty((n_clusters, X.shape[1]), dtype=X.dtype)
    center_id = int(random_state.choice(n_samples, p=weight_host / weight_host.sum()))
    centers[0] = X[center_id]
    closest_dist_sq = squared_distances(xp.asarray([center_id]))[0]
    current_pot = float(closest_dist_sq @ weight)
    for c in range(1, n_clusters):
        rand_vals = random_state.uniform(size=n_local_trials) * current_pot
        cumulative = xp.cumsum(weight * closest_dist_sq)
        candidate_ids = xp.minimum(xp.searchsorted(cumulative, xp.asarray(rand_vals)),
                                   n_samples - 1)
        distance_to_candidates = xp.minimum(closest_dist_sq, squared_distances(candidate_ids))
        candidates_pot = _to_host(xp, distance_to_candidates @ weight)
        best = int(np.argmin(candidates_pot))
        current_pot = float(candidates_pot[best])
        closest_dist_sq = distance_to_candidates[best]
        centers[c] = X[int(candidate_ids[best])]
    return centers
