"""The built-in strategy catalogue: metadata only, implementations are imported on use.

Each entry is a :class:`~gpumine.registry.Strategy`. Only strategies that are
implemented are listed; the GPU kernels of the seed papers are added here as
they land.
"""

from __future__ import annotations

from gpumine.registry import Strategy

__all__ = ["BUILTIN_STRATEGIES"]

_KMEANS = "gpumine.kmeans"

BUILTIN_STRATEGIES = (
    Strategy(
        kind="kmeans.init", name="k-means++", backend="any",
        target=f"{_KMEANS}.init:kmeans_plusplus", paper="002 (Arthur & Vassilvitskii 2007)",
        description="greedy k-means++: 2+floor(ln k) local trials per centre, "
                    "sample_weight aware (scikit-learn semantics)",
    ),
    Strategy(
        kind="kmeans.init", name="random", backend="any",
        target=f"{_KMEANS}.init:random_init",
        description="k distinct points drawn with probability proportional to sample_weight",
    ),
    Strategy(
        kind="kmeans.assign", name="numpy", backend="cpu",
        target=f"{_KMEANS}.reference:assign_numpy",
        description="reference: chunked ||c||^2 - 2 x.c argmin with FP64 accumulation",
    ),
    Strategy(
        kind="kmeans.update", name="numpy", backend="cpu",
        target=f"{_KMEANS}.reference:update_numpy",
        description="reference: weighted per-cluster sums by bincount with FP64 accumulation",
    ),
)
