"""The NumPy reference strategies for k-means: ``assign="numpy"``, ``update="numpy"``.

They define what every GPU strategy is tested against. Both accumulate in
float64 whatever the data's dtype, and work on bounded chunks of rows, so memory
stays ``O(chunk * k)`` for any n.

Contracts (shared by all strategies of the kind, see :mod:`gpumine.kmeans.lloyd`):

* assign: ``assign(X, centers, labels)`` writes into ``labels`` (int32, n) the
  index of the closest centre of each row; ties go to the lowest index.
* update: ``update(X, labels, sample_weight, sums, weights, labels_old=None)``
  writes into ``sums`` (k, d) the per-cluster sums of ``sample_weight * x`` and
  into ``weights`` (k) the per-cluster sums of ``sample_weight`` (float64
  buffers); this one returns None (the engine compares the labels itself).

``X`` is a validated, finite float32/float64 array of shape (n_samples,
n_features), row- or column-major.
"""

from __future__ import annotations

import numpy as np

__all__ = ["assign_numpy", "chunk_rows", "update_numpy"]

#: Elements of the (rows x k) distance block computed at once (32 MiB in float64).
_BLOCK_ELEMENTS = 1 << 22
#: Rows per chunk of the update's bincounts (one chunk below 2**20 rows: a single pass).
_UPDATE_CHUNK_ROWS = 1 << 20


def chunk_rows(n_samples: int, width: int) -> tuple[range, int]:
    """Row chunks whose ``chunk * width`` block stays under 2**22 elements.

    Returns the chunk start indices and the chunk length.
    """
    step = max(1, min(n_samples, _BLOCK_ELEMENTS // max(1, width)))
    return range(0, n_samples, step), step


def assign_numpy(X, centers, labels):
    """Label each row of X with its closest centre (reference, CPU).

    Distances are ``||c||^2 - 2 x.c`` (``||x||^2`` does not change the argmin),
    computed in float64; for float64 input this is the formula scikit-learn uses.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)   -- IN
    centers : ndarray of shape (n_clusters, n_features)   -- IN
    labels : ndarray of shape (n_samples,), int32   -- OUT
    """
    centers64 = np.asarray(centers, dtype=np.float64)
    # -2 is a power of two: scaling the centres by it is exact, and saves a pass.
    centers_t = np.ascontiguousarray(-2.0 * centers64.T)
    centers_squared_norms = np.einsum("ij,ij->i", centers64, centers64)
    starts, step = chunk_rows(X.shape[0], centers.shape[0])
    for start in starts:
        block = np.asarray(X[start:start + step], dtype=np.float64)
        distances = block @ centers_t
        distances += centers_squared_norms
        labels[start:start + step] = np.argmin(distances, axis=1)


def update_numpy(X, labels, sample_weight, sums, weights, labels_old=None):
    """Weighted per-cluster sums and weights (reference, CPU).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)   -- IN
    labels : ndarray of shape (n_samples,), int32 in [0, k)   -- IN
    sample_weight : ndarray of shape (n_samples,)   -- IN
    sums : ndarray of shape (k, n_features)   -- OUT
    weights : ndarray of shape (k,)   -- OUT
    labels_old : ignored (the engine compares labels itself)
    """
    n_clusters, n_features = sums.shape
    sums[:] = 0.0
    weights[:] = 0.0
    # Row chunks keep the float64 temporaries at one chunk (8 MiB each), whatever n.
    step = _UPDATE_CHUNK_ROWS
    for start in range(0, X.shape[0], step):
        chunk_labels = labels[start:start + step]
        chunk_weight = np.asarray(sample_weight[start:start + step], dtype=np.float64)
        weights += np.bincount(chunk_labels, weights=chunk_weight, minlength=n_clusters)
        for feature in range(n_features):
            sums[:, feature] += np.bincount(
                chunk_labels, weights=X[start:start + step, feature] * chunk_weight,
                minlength=n_clusters)
