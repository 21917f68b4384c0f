"""gpumine on Dask collections: k-means over ``dask.array`` and ``dask.dataframe`` partitions.

``pip install "gpumine[dask]"``. :class:`GPUKMeans` takes the in-memory estimator's
parameters and gives its fitted attributes; the partitions stay on their workers
(persisted once). Each iteration is one Dask computation, or with
``engine="collective"`` one long-lived task per worker runs the Lloyd loop, the workers
exchanging k x (d + 1) sums each iteration through an actor (:mod:`gpumine.dask.collective`).
WaveCluster on Dask collections is not built yet.
"""

from __future__ import annotations

from gpumine.dask.kmeans import GPUKMeans

__all__ = ["GPUKMeans"]
