"""Centre initialisation strategies: ``init="random"``, ``"k-means++"`` and ``"k-means||"``.

Both draw their random numbers on the host from a :class:`numpy.random.RandomState`
(a few numbers per centre, never anything of size n), in the order scikit-learn
draws them. Semantics follow scikit-learn's ``KMeans``. On the GPU, k-means++ is
one cooperative kernel (:func:`gpumine.kmeans.gpu.kmeans_plusplus`) and the
random init runs NumPy's own weighted draw on the device; nothing of size n
comes to the host.

Contract: ``init(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp)``
returns a new (n_clusters, n_features) array of X's dtype on X's backend;
``x_squared_norms`` is None on the GPU backend (strategies that need it compute it).
"""

from __future__ import annotations

import numpy as np

from gpumine.exceptions import InvalidInputError
from gpumine.kmeans.reference import chunk_rows

#: Distances (float64) held at once while scoring k-means++ candidates: 64 MiB.
_GROUP_ELEMENTS = 1 << 23
#: Weights cast to float64 at once when summing potentials (8 MiB).
_WEIGHT_CHUNK = 1 << 20

__all__ = ["kmeans_parallel", "kmeans_plusplus", "random_init"]

#: k-means||: candidates drawn per round, in multiples of k, and rounds (Bahmani et al.'s
#: l = 2k and r = 5, as dask-ml's and cuML's defaults).
PARALLEL_OVERSAMPLING = 2.0
PARALLEL_ROUNDS = 5


def _to_host(xp, array):
    return array.get() if hasattr(array, "get") and xp is not np else np.asarray(array)


def choice_without_replacement(weights, size, random_state, xp=np):
    """``random_state.choice(n, size, replace=False, p=weights / weights.sum())`` on ``xp``.

    NumPy's own algorithm (draw, drop repeats, zero the found ones, draw again) run
    on the weights where they are, consuming the same random numbers in the same
    order, so on the CPU it equals ``RandomState.choice`` exactly and on the GPU it
    needs no host copy of the weights. Host syncs: the count of positive weights
    and one per round of draws (the number of distinct points found), a few in all.

    Raises
    ------
    InvalidInputError
        Fewer positive weights than ``size`` (NumPy's message; a ``ValueError``).
    """
    p = weights.astype(xp.float64)
    p /= p.sum()
    if int(xp.count_nonzero(p > 0)) < size:  # sync: one integer, once per init
        raise InvalidInputError("Fewer non-zero entries in p than size")
    found = xp.zeros(size, dtype=xp.int64)
    n_uniq = 0
    while n_uniq < size:
        x = xp.asarray(random_state.rand(size - n_uniq))
        if n_uniq > 0:
            p[found[:n_uniq]] = 0
        cdf = xp.cumsum(p)
        cdf /= cdf[-1]
        new = xp.searchsorted(cdf, x, side="right")
        _, unique_indices = xp.unique(new, return_index=True)
        unique_indices.sort()
        new = new[unique_indices]
        found[n_uniq:n_uniq + new.size] = new
        n_uniq += int(new.size)  # sync: one integer per round (a few rounds per init)
    return found


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
    seeds = choice_without_replacement(sample_weight, n_clusters, random_state, xp)
    return X[seeds].copy()


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
        (None on the GPU, which computes distances directly)
    random_state : numpy.random.RandomState
    xp : module
    n_local_trials : int, optional
        Candidates per centre; default ``2 + int(ln(n_clusters))``.

    Returns
    -------
    centers : array of shape (n_clusters, n_features)
    """
    if xp is not np:
        from gpumine.kmeans import gpu

        return gpu.kmeans_plusplus(X, n_clusters, sample_weight=sample_weight,
                                   random_state=random_state, n_local_trials=n_local_trials)
    n_samples = X.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    norms = x_squared_norms
    # Candidates are scored a group at a time in one reused buffer and the winner's
    # distances are computed again rather than kept, so memory stays two float64
    # vectors of n (on 10^7 points, 80 MB each) beyond X whatever n_local_trials is.
    group = max(1, min(n_local_trials, _GROUP_ELEMENTS // n_samples))
    scratch = xp.empty((group, n_samples), dtype=xp.float64)

    def squared_distances(rows, out):
        # ||y||^2 - 2 y.x + ||x||^2 in float64 over row blocks of X (never a float64
        # copy of all of X), clipped at 0 against cancellation; written into ``out``.
        Y = X[rows].astype(xp.float64)
        out = out[:len(rows)]
        starts, step = chunk_rows(n_samples, X.shape[1])
        for start in starts:
            block = X[start:start + step].astype(xp.float64)
            out[:, start:start + step] = Y @ block.T
        out *= -2.0
        out += norms[None, :]
        out += norms[rows][:, None].astype(xp.float64)
        return xp.maximum(out, 0.0, out=out)

    def potentials(distances):
        # sum_i w_i d_i per row, the weights cast to float64 a chunk at a time
        total = xp.zeros(distances.shape[0], dtype=xp.float64)
        for start in range(0, n_samples, _WEIGHT_CHUNK):
            stop = start + _WEIGHT_CHUNK
            total += distances[:, start:stop] @ sample_weight[start:stop].astype(xp.float64)
        return _to_host(xp, total)

    centers = xp.empty((n_clusters, X.shape[1]), dtype=X.dtype)
    # The first centre: RandomState.choice(n, p=w / sum(w)) without its three
    # float64 copies of the weights (the same draw: a uniform against the CDF).
    cdf = scratch[0]
    xp.cumsum(sample_weight, dtype=xp.float64, out=cdf)
    cdf /= cdf[-1]
    draw = xp.asarray([random_state.random_sample()])
    center_id = min(int(xp.searchsorted(cdf, draw, side="right")[0]), n_samples - 1)
    centers[0] = X[center_id]
    closest_dist_sq = xp.empty(n_samples, dtype=xp.float64)
    squared_distances(xp.asarray([center_id]), closest_dist_sq[None, :])
    current_pot = float(potentials(closest_dist_sq[None, :])[0])
    for c in range(1, n_clusters):
        rand_vals = random_state.uniform(size=n_local_trials) * current_pot
        cumulative = scratch[0]
        xp.multiply(sample_weight, closest_dist_sq, out=cumulative)
        xp.cumsum(cumulative, out=cumulative)
        candidate_ids = xp.minimum(xp.searchsorted(cumulative, xp.asarray(rand_vals)),
                                   n_samples - 1)
        best_pot = best_id = None
        for start in range(0, n_local_trials, group):
            ids = candidate_ids[start:start + group]
            distance = squared_distances(ids, scratch)
            xp.minimum(distance, closest_dist_sq[None, :], out=distance)
            pots = potentials(distance)
            trial = int(np.argmin(pots))
            if best_pot is None or pots[trial] < best_pot:  # the first minimum, as argmin
                best_pot, best_id = float(pots[trial]), int(ids[trial])
        current_pot = best_pot
        distance = squared_distances(xp.asarray([best_id]), scratch)
        xp.minimum(closest_dist_sq, distance[0], out=closest_dist_sq)
        centers[c] = X[best_id]
    return centers


def _closest(X, Y, xp):
    """Squared distance (float64, clipped at 0) of every row of X to its nearest row of Y,
    and that row's index; over row blocks of X, never an (n, m) array in full."""
    Y64 = Y.astype(xp.float64)
    y_norms = (Y64 ** 2).sum(axis=1)
    distances = xp.empty(X.shape[0], dtype=xp.float64)
    nearest = xp.empty(X.shape[0], dtype=xp.int64)
    starts, step = chunk_rows(X.shape[0], max(Y.shape[0], X.shape[1]))
    for start in starts:
        block = X[start:start + step].astype(xp.float64)
        products = block @ Y64.T
        products *= -2.0
        products += y_norms[None, :]
        nearest[start:start + step] = products.argmin(axis=1)
        best = products.min(axis=1) + (block ** 2).sum(axis=1)
        distances[start:start + step] = xp.maximum(best, 0.0)
    return distances, nearest


def kmeans_parallel(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp=np,
                    oversampling=PARALLEL_OVERSAMPLING, rounds=PARALLEL_ROUNDS):
    """k-means|| (Bahmani et al., VLDB 2012), the init dask-ml and cuML use on distributed data.

    One centre is drawn with probability proportional to ``sample_weight``. Each of
    ``rounds`` rounds then keeps every point independently with probability
    ``min(1, l * w * D^2 / phi)``: ``l = oversampling * n_clusters``, ``D^2`` its
    squared distance to the nearest candidate so far, ``phi`` the weighted sum of
    them. That is about ``l`` new candidates a round, so a few rounds replace k-means++'s
    k sequential passes over the data. Each candidate is weighted by the sample weight
    of the points nearest to it, and greedy k-means++ on the weighted candidates gives
    the ``n_clusters`` centres (Bahmani et al.'s step 8). Rounds continue past
    ``rounds`` while there are fewer candidates than clusters.

    The uniforms of a round come from a generator on X's backend seeded from
    ``random_state``, so nothing of size n is drawn on, or copied from, the host.
    Host syncs: phi and the number kept, once per round.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)   -- IN
    n_clusters : int
    sample_weight : array of shape (n_samples,)   -- IN
    x_squared_norms : ignored (distances are computed per block)
    random_state : numpy.random.RandomState
    xp : module
    oversampling : float, default=2.0
    rounds : int, default=5

    Returns
    -------
    centers : array of shape (n_clusters, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.RandomState(0)
    >>> X = np.vstack([rng.normal(c, 0.1, (200, 2)) for c in (0, 5, 10)])
    >>> centers = kmeans_parallel(X, 3, sample_weight=np.ones(len(X)), x_squared_norms=None,
    ...                           random_state=np.random.RandomState(1))
    >>> sorted(np.round(centers[:, 0]).astype(int).tolist())
    [0, 5, 10]
    """
    n_samples = X.shape[0]
    weight = sample_weight.astype(xp.float64)
    first = choice_without_replacement(sample_weight, 1, random_state, xp)
    candidates = [X[first]]
    distances, _ = _closest(X, candidates[0], xp)
    generator = xp.random.RandomState(int(random_state.randint(2**31 - 1)))
    count = 1
    for done in range(rounds + 50):
        if done >= rounds and count >= n_clusters:
            break
        potential = float(weight @ distances)  # sync: 8 bytes per round
        if potential <= 0:
            break
        chance = (oversampling * n_clusters / potential) * weight * distances
        kept = xp.flatnonzero(generator.random_sample(n_samples) < chance)
        if int(kept.size) == 0:  # sync: the count kept, once per round
            continue
        new = X[kept]
        candidates.append(new)
        count += int(kept.size)
        closer, _ = _closest(X, new, xp)
        xp.minimum(distances, closer, out=distances)
    candidates = xp.concatenate(candidates)
    if candidates.shape[0] < n_clusters:  # fewer distinct points than clusters: the greedy way
        return kmeans_plusplus(X, n_clusters, sample_weight=sample_weight,
                               x_squared_norms=x_squared_norms if xp is np else None,
                               random_state=random_state, xp=xp)
    _, nearest = _closest(X, candidates, xp)
    candidate_weight = xp.bincount(nearest, weights=weight,
                                   minlength=candidates.shape[0]).astype(X.dtype)
    norms = (candidates.astype(xp.float64) ** 2).sum(axis=1) if xp is np else None
    return kmeans_plusplus(candidates, n_clusters, sample_weight=candidate_weight,
                           x_squared_norms=norms, random_state=random_state, xp=xp)
