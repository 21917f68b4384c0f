"""Synthetic data from the Mersenne Twister, as the seed papers generated theirs."""

from __future__ import annotations

import numbers
from collections.abc import Iterator

import numpy as np
from sklearn.utils import check_random_state

from gpumine.exceptions import InvalidParameterError

__all__ = ["DEFAULT_SEED", "iter_uniform", "make_shapes", "make_uniform"]

#: MT19937's reference default seed (Matsumoto & Nishimura's ``init_genrand(5489)``).
DEFAULT_SEED = 5489

# Rows are drawn in blocks of this many values so a large request never holds a
# float64 copy of the whole array; MT19937 draws sequentially, so blocks give the
# same numbers as a single call.
_BLOCK_VALUES = 1 << 22


def make_uniform(n_samples, n_features, random_state=None, dtype=np.float32):
    """Uniform [0, 1) data from the Mersenne Twister (MT19937).

    Seed papers 000 (Dhanasekaran & Rubin, §8) and 004 (Nelson & Palmieri, §6)
    benchmark on points drawn uniformly by the Mersenne Twister. This draws
    them with NumPy's MT19937 through ``RandomState(seed).random_sample``: the
    value of row ``i``, feature ``j`` is the ``(i * n_features + j)``-th double
    of the stream (53-bit resolution), then cast to ``dtype``. The result is
    reproducible bit for bit across platforms for a given integer seed.

    Parameters
    ----------
    n_samples : int
        Number of points, >= 1.
    n_features : int
        Number of dimensions, >= 1.
    random_state : int, numpy.random.RandomState or None, default=None
        Seed of the MT19937 stream (``RandomState(seed)``), or a RandomState to
        draw from; None uses NumPy's global RandomState.
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)

    Examples
    --------
    >>> from gpumine.datasets import make_uniform
    >>> X = make_uniform(4, 2, random_state=5489)
    >>> X.shape, X.dtype.name
    ((4, 2), 'float32')
    >>> bool((X >= 0).all() and (X < 1).all())
    True
    """
    out = np.empty((_check_shape(n_samples, n_features), n_features), dtype=_check_dtype(dtype))
    for start, block in iter_uniform(n_samples, n_features, random_state, dtype):
        out[start:start + len(block)] = block
    return out


def _check_shape(n_samples, n_features) -> int:
    for name, value in (("n_samples", n_samples), ("n_features", n_features)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
    return int(n_samples)


def _check_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise InvalidParameterError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


def iter_uniform(n_samples, n_features, random_state=None, dtype=np.float32,
                 block_rows=None) -> Iterator[tuple[int, np.ndarray]]:
    """:func:`make_uniform`'s rows in blocks: yields ``(first_row, block)``.

    The blocks concatenate to exactly ``make_uniform(n_samples, n_features,
    random_state, dtype)`` (the same MT19937 stream, drawn in order), in memory
    bounded by one block -- how ``gpumine datasets make-uniform`` writes files
    larger than memory.

    Parameters
    ----------
    n_samples, n_features, random_state, dtype :
        As for :func:`make_uniform`.
    block_rows : int, optional
        Rows per block; by default about 4 M values.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.datasets import iter_uniform, make_uniform
    >>> blocks = [b for _, b in iter_uniform(10, 3, 7, block_rows=4)]
    >>> [len(b) for b in blocks], np.array_equal(np.vstack(blocks), make_uniform(10, 3, 7))
    ([4, 4, 2], True)
    """
    n_samples = _check_shape(n_samples, n_features)
    dtype = _check_dtype(dtype)
    rng = check_random_state(random_state)
    rows_per_block = block_rows or max(1, _BLOCK_VALUES // n_features)
    if not isinstance(rows_per_block, numbers.Integral) or rows_per_block < 1:
        raise InvalidParameterError(f"block_rows must be an integer >= 1, got {block_rows!r}")
    for start in range(0, n_samples, rows_per_block):
        stop = min(n_samples, start + rows_per_block)
        yield start, rng.random_sample((stop - start, n_features)).astype(dtype, copy=False)


def make_shapes(n_samples=100_000, noise=0.05, random_state=None):
    """Four 2-D shapes in uniform noise: two interleaved moons, a ring and a blob.

    WaveCluster's kind of data (arbitrary shapes, noise), for demos and tests:
    k-means cuts the moons and the ring apart, a density method does not.

    Parameters
    ----------
    n_samples : int, default=100000
        Points in all, noise included (>= 100).
    noise : float, default=0.05
        Fraction of the points drawn uniformly over the bounding box.
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n_samples, 2), float64
    y : ndarray of shape (n_samples,), int64
        The shape of each point (0-3), -1 for noise.

    Examples
    --------
    >>> from gpumine.datasets import make_shapes
    >>> X, y = make_shapes(1000, random_state=0)
    >>> X.shape, sorted(set(y.tolist()))
    ((1000, 2), [-1, 0, 1, 2, 3])
    """
    if not isinstance(n_samples, numbers.Integral) or n_samples < 100:
        raise InvalidParameterError(f"n_samples must be an integer >= 100, got {n_samples!r}")
    if not 0 <= noise < 1:
        raise InvalidParameterError(f"noise must be in [0, 1), got {noise!r}")
    rng = check_random_state(random_state)
    n_noise = round(noise * n_samples)
    per_shape = np.full(4, (n_samples - n_noise) // 4)
    per_shape[: (n_samples - n_noise) % 4] += 1
    angle = [rng.uniform(0, np.pi, per_shape[0]), rng.uniform(0, np.pi, per_shape[1]),
             rng.uniform(0, 2 * np.pi, per_shape[2])]
    shapes = [
        np.column_stack([np.cos(angle[0]), np.sin(angle[0])]),               # upper moon
        np.column_stack([1 - np.cos(angle[1]), 0.5 - np.sin(angle[1])]),     # lower moon
        np.column_stack([4 + 1.2 * np.cos(angle[2]), 0.2 + 1.2 * np.sin(angle[2])]),  # ring
        rng.normal([4, 0.2], 0.25, (per_shape[3], 2)),                       # blob in the ring
    ]
    points = [shape + (rng.normal(0, 0.06, shape.shape) if i < 3 else 0)
              for i, shape in enumerate(shapes)]
    low, high = np.array([-1.5, -1.5]), np.array([5.5, 1.9])
    points.append(rng.uniform(low, high, (n_noise, 2)))
    X = np.vstack(points)
    y = np.concatenate([np.full(count, i) for i, count in enumerate(per_shape)]
                       + [np.full(n_noise, -1)]).astype(np.int64)
    order = rng.permutation(n_samples)
    return X[order], y[order]
