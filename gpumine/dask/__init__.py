"""gpumine on Dask collections: k-means and WaveCluster over ``dask.array`` and
``dask.dataframe`` partitions.

``pip install "gpumine[dask]"``. :class:`GPUKMeans` takes the in-memory estimator's
parameters and gives its fitted attributes; the partitions stay on their workers
(persisted once). Each iteration is one Dask computation, or with
``engine="collective"`` one long-lived task per worker runs the Lloyd loop, the workers
exchanging k x (d + 1) sums each iteration through an actor (:mod:`gpumine.dask.collective`).
:class:`WaveCluster` adds the partitions' grids on the workers, labels the grid on the
driver and looks the points up lazily (:mod:`gpumine.dask.wavecluster`).
"""

from __future__ import annotations

from gpumine.dask.kmeans import GPUKMeans
from gpumine.dask.wavecluster import WaveCluster

__all__ = ["GPUKMeans", "WaveCluster"]
