"""gpumine on Dask collections: k-means over ``dask.array`` and ``dask.dataframe`` partitions.

``pip install "gpumine[dask]"``. :class:`GPUKMeans` takes the in-memory estimator's
parameters and gives its fitted attributes; the partitions stay on their workers
(persisted once), and what comes to the driver is small: k x (d + 1) sums and a
labels fingerprint per partition each iteration, and k-means||'s candidates.
WaveCluster on Dask collections is not built yet.
"""

from __future__ import annotations

from gpumine.dask.kmeans import GPUKMeans

__all__ = ["GPUKMeans"]
