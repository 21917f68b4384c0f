"""Generated labelled shape sets: what density clustering must get right, with known answers.

:func:`make_shape_sets` draws the sets that ``gpumine bench run wavecluster-quality``
scores WaveCluster, DBSCAN and HDBSCAN on, beside the clustering-benchmark ARFF files:
rings, moons, spirals, blobs of 10x different density, blobs joined by a thin bridge,
touching arcs, interlocked 3-d tori, and Gaussian blobs in a 20 % uniform-noise
background for d = 2..6. Noise points are labelled -1 (:data:`NOISE_LABEL`); bridge
points count as noise.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils import check_random_state

from gpumine.datasets.arff import NOISE_LABEL
from gpumine.exceptions import InvalidParameterError

__all__ = ["SHAPE_SETS", "make_shape_sets"]

#: Names of the generated sets, in the order :func:`make_shape_sets` returns them.
SHAPE_SETS = ("rings", "moons", "spirals", "density-10x", "bridge", "touching-arcs",
              "tori-3d", *(f"blobs-noise20-d{d}" for d in range(2, 7)))


def _background(rng, points, fraction, pad=0.05):
    """Uniform points over the padded bounding box of ``points``: ``fraction`` of the total."""
    low, high = points.min(0), points.max(0)
    span = high - low
    count = round(fraction / (1 - fraction) * len(points))
    return rng.uniform(low - pad * span, high + pad * span, (count, points.shape[1]))


def _labelled(rng, clusters, noise):
    X = np.vstack([*clusters, noise])
    y = np.concatenate([np.full(len(c), i) for i, c in enumerate(clusters)]
                       + [np.full(len(noise), NOISE_LABEL)]).astype(np.int64)
    order = rng.permutation(len(X))
    return X[order], y[order]


def _separated_centres(rng, count, d, low, high, gap):
    while True:
        centres = rng.uniform(low, high, (count, d))
        if min(np.linalg.norm(a - b) for i, a in enumerate(centres)
               for b in centres[i + 1:]) >= gap:
            return centres


def _torus(rng, n, radius, tube, shift, vertical):
    u, v = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, 2 * np.pi, n)
    points = np.column_stack([(radius + tube * np.cos(v)) * np.cos(u),
                              (radius + tube * np.cos(v)) * np.sin(u), tube * np.sin(v)])
    return (points[:, [0, 2, 1]] if vertical else points) + shift


def make_shape_sets(scale=1.0, random_state=0) -> dict:
    """The generated labelled sets, by name (see the module docstring and :data:`SHAPE_SETS`).

    Parameters
    ----------
    scale : float, default=1.0
        Multiplies every count of points (1.0: 4,000-15,000 points a set).
    random_state : int, RandomState instance or None

    Returns
    -------
    dict of str to (X, y)
        ``X`` float64 (n, d), ``y`` int64 labels, -1 for noise.

    Examples
    --------
    >>> from gpumine.datasets import make_shape_sets
    >>> sets = make_shape_sets(scale=0.1, random_state=0)
    >>> X, y = sets["moons"]
    >>> X.shape[1], sorted(set(y.tolist()))
    (2, [-1, 0, 1])
    >>> sets["blobs-noise20-d5"][0].shape[1]
    5
    """
    if not isinstance(scale, numbers.Real) or not 0.01 <= scale <= 100:
        raise InvalidParameterError(f"scale must be a number in [0.01, 100], got {scale!r}")
    rng = check_random_state(random_state)

    def n(count):
        return max(20, round(count * scale))

    sets = {}
    a, b = rng.uniform(0, 2 * np.pi, n(3000)), rng.uniform(0, 2 * np.pi, n(1500))
    rings = [2.0 * np.column_stack([np.cos(a), np.sin(a)]) + rng.normal(0, 0.08, (len(a), 2)),
             0.8 * np.column_stack([np.cos(b), np.sin(b)]) + rng.normal(0, 0.08, (len(b), 2))]
    sets["rings"] = _labelled(rng, rings, _background(rng, np.vstack(rings), 0.1))
    t, u = rng.uniform(0, np.pi, n(2500)), rng.uniform(0, np.pi, n(2500))
    moons = [np.column_stack([np.cos(t), np.sin(t)]) + rng.normal(0, 0.07, (len(t), 2)),
             np.column_stack([1 - np.cos(u), 0.5 - np.sin(u)]) + rng.normal(0, 0.07, (len(u), 2))]
    sets["moons"] = _labelled(rng, moons, _background(rng, np.vstack(moons), 0.1))
    spirals = []
    for arm in range(3):
        s = rng.uniform(0.5, 3 * np.pi, n(2000))
        angle = s + arm * 2 * np.pi / 3
        spirals.append(np.column_stack([s * np.cos(angle), s * np.sin(angle)])
                       + rng.normal(0, 0.15, (len(s), 2)))
    sets["spirals"] = _labelled(rng, spirals, _background(rng, np.vstack(spirals), 0.05))
    dense = [rng.normal([0, 0], 0.3, (n(3000), 2)), rng.normal([4, 0], 0.95, (n(3000), 2)),
             rng.normal([0, 4], 0.3, (n(1000), 2))]  # densities 10 : 1 : 3.3
    sets["density-10x"] = _labelled(rng, dense, _background(rng, np.vstack(dense), 0.1))
    pair = [rng.normal([0, 0], 0.5, (n(3000), 2)), rng.normal([4, 0], 0.5, (n(3000), 2))]
    bridge = np.column_stack([rng.uniform(0, 4, n(150)), rng.normal(0, 0.03, n(150))])
    sets["bridge"] = _labelled(rng, pair, np.vstack([bridge, _background(rng, np.vstack(pair),
                                                                         0.05)]))
    arcs = []
    for arc in range(3):
        theta = rng.uniform(0, np.pi, n(2000))
        arcs.append(np.column_stack([1.5 * np.cos(theta) + 2.2 * arc,
                                     1.5 * np.sin(theta) * (-1) ** arc])
                    + rng.normal(0, 0.12, (len(theta), 2)))
    sets["touching-arcs"] = _labelled(rng, arcs, _background(rng, np.vstack(arcs), 0.05))
    tori = [_torus(rng, n(4000), 2.0, 0.3, 0.0, False),
            _torus(rng, n(4000), 2.0, 0.3, np.array([2.0, 0.0, 0.0]), True)]
    sets["tori-3d"] = _labelled(rng, tori, _background(rng, np.vstack(tori), 0.05))
    for d in range(2, 7):
        centres = _separated_centres(rng, 4, d, 0.0, 10.0, gap=4.0)
        blobs = [rng.normal(c, 0.5, (n(2500), d)) for c in centres]
        noise = rng.uniform(centres.min(0) - 2, centres.max(0) + 2, (n(2500), d))
        sets[f"blobs-noise20-d{d}"] = _labelled(rng, blobs, noise)
    return sets
