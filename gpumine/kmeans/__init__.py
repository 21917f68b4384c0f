"""k-means: the ``GPUKMeans`` estimator, the Lloyd engine and its strategies."""

from gpumine.kmeans.estimator import GPUKMeans

__all__ = ["GPUKMeans"]
