"""Synthetic data from the Mersenne Twister, as the seed papers generated theirs."""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["DEFAULT_SEED", "make_uniform"]

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
    for name, value in (("n_samples", n_samples), ("n_features", n_features)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    rng = check_random_state(random_state)
    out = np.empty((n_samples, n_features), dtype=dtype)
    rows_per_block = max(1, _BLOCK_VALUES // n_features)
    for start in range(0, n_samples, rows_per_block):
        stop = min(n_samples, start + rows_per_block)
        out[start:stop] = rng.random_sample((stop - start, n_features))
    return out
