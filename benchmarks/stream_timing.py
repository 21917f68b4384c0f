"""Streamed GPU fits against in-memory ones, from host data: what ``batch_rows`` costs.

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/stream_timing.py --out benchmarks/results

Measured in one process (``gpumine.bench.timing``, host clock: host data in, results out):

* k-means, 10M x 32 float32 (standard normal), k = 64, from fixed initial centres,
  ``tol = 0``: the time per Lloyd iteration ((T(10) - T(2)) / 8) in memory and streamed
  in chunks of ``--batch-rows`` rows, the bytes of X per streamed iteration over that
  time against the pinned host-to-device copy bandwidth measured beside it (the floor
  of a pass that reads X from host memory), and whether the streamed fit's labels and
  ``n_iter_`` equal the in-memory fit's (the count of differing labels, the largest
  centre difference; and the same between two in-memory fits, the run-to-run noise of
  the atomic update's summation order), and the same with ``update="sort"`` (float64 sums
  throughout);
* the same fit from a ``pyarrow`` dataset of X in host memory, its time per iteration and
  bytes per second against the pinned copy: as users run it (passes after the second copy
  the batches kept in page-locked memory, ``adapters.chunks.PinnedCache``), with that cache
  off (every pass read, staged and checked: the stream of data larger than host memory),
  and from 10 Parquet files of X in the page cache;
* WaveCluster on 16.7M 2-d points, grid 4096: ``fit`` in memory and streamed, and
  whether the labels are equal.

Writes ``stream-timing-<date>-<commit>.json`` with the device, versions and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.backend import get_backend
from gpumine.bench.record import commit
from gpumine.bench.timing import measure


def kmeans_section(backend, batch_rows: int) -> dict:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from gpumine.kmeans import GPUKMeans

    cp = backend.xp
    X = np.random.default_rng(0).standard_normal((10_000_000, 32), dtype=np.float32)
    init = X[np.random.RandomState(0).choice(len(X), 64, replace=False)]
    out = {"rows": X.shape[0], "features": X.shape[1], "clusters": 64, "bytes": X.nbytes,
           "batch_rows": batch_rows}

    def fit(iterations, data=X, **kw):
        return GPUKMeans(64, init=init, max_iter=iterations, tol=0, device="gpu",
                         **kw).fit(data)

    def per_iteration(**kw):
        """Fits of 2 and 10 iterations (host clock, median of 3): (seconds an iteration,
        the two measurements)."""
        two = measure(lambda: fit(2, **kw), backend, repeats=3, budget_seconds=None,
                      clock="host")
        ten = measure(lambda: fit(10, **kw), backend, repeats=3, budget_seconds=None,
                      clock="host")
        return (ten.seconds - two.seconds) / 8, two, ten

    for name, kw in (("in_memory", {}), ("streamed", {"batch_rows": batch_rows})):
        out[f"{name}_iteration_s"], two, ten = per_iteration(**kw)
        out[f"{name}_fit_2_iterations_s"] = two.seconds
        out[f"{name}_fit_10_iterations_s"] = ten.seconds
        out[f"{name}_fit_times_s"] = {"2": two.times, "10": ten.times}
    pinned = cp.cuda.alloc_pinned_memory(X.nbytes)
    staged = np.frombuffer(pinned, dtype=X.dtype, count=X.size).reshape(X.shape)
    staged[...] = X
    device = cp.empty(X.shape, X.dtype)
    copy = measure(lambda: device.set(staged), backend, repeats=5, budget_seconds=None)
    out["pinned_h2d_bytes_per_s"] = X.nbytes / copy.seconds
    out["streamed_bytes_per_s"] = X.nbytes / out["streamed_iteration_s"]
    out["streamed_over_pinned_h2d"] = out["streamed_bytes_per_s"] / out["pinned_h2d_bytes_per_s"]
    # "streamed" above: in-memory X with batch_rows is validated onto the device once and its
    # chunks are slices there. A pyarrow dataset is read from host memory at every pass:
    dataset = ds.dataset(pa.table({f"x{j}": X[:, j] for j in range(X.shape[1])}))
    out["dataset_iteration_s"], two, ten = per_iteration(batch_rows=batch_rows, data=dataset)
    out["dataset_fit_times_s"] = {"2": two.times, "10": ten.times}
    out["dataset_bytes_per_s"] = X.nbytes / out["dataset_iteration_s"]
    out["dataset_over_pinned_h2d"] = out["dataset_bytes_per_s"] / out["pinned_h2d_bytes_per_s"]
    # The same data as Parquet files (10 files, snappy, in the page cache: host memory), and
    # the in-memory table again with the pinned cache off (every pass read and staged).
    with tempfile.TemporaryDirectory() as folder:
        for part, start in enumerate(range(0, len(X), 1_000_000)):
            piece = X[start:start + 1_000_000]
            pq.write_table(pa.table({f"x{j}": piece[:, j] for j in range(X.shape[1])}),
                           f"{folder}/part-{part:02d}.parquet")
        files = ds.dataset(folder, format="parquet")
        out["parquet_iteration_s"], two, ten = per_iteration(batch_rows=batch_rows, data=files)
    out["parquet_fit_times_s"] = {"2": two.times, "10": ten.times}
    out["parquet_over_pinned_h2d"] = (X.nbytes / out["parquet_iteration_s"]
                                      / out["pinned_h2d_bytes_per_s"])
    from gpumine.adapters.chunks import CACHE_ENV_VAR

    os.environ[CACHE_ENV_VAR] = "0"  # no budget: the cache stays off
    try:
        out["uncached_dataset_iteration_s"], two, ten = per_iteration(
            batch_rows=batch_rows, data=dataset)
    finally:
        del os.environ[CACHE_ENV_VAR]
    out["uncached_dataset_fit_times_s"] = {"2": two.times, "10": ten.times}
    out["uncached_dataset_over_pinned_h2d"] = (X.nbytes / out["uncached_dataset_iteration_s"]
                                               / out["pinned_h2d_bytes_per_s"])

    memory, again = fit(10), fit(10)
    streamed = fit(10, batch_rows=batch_rows)
    out["labels_differing_streamed_vs_in_memory"] = int((memory.labels_ != streamed.labels_).sum())
    out["n_iter_in_memory"], out["n_iter_streamed"] = int(memory.n_iter_), int(streamed.n_iter_)
    out["centres_max_abs_diff_streamed_vs_in_memory"] = float(
        np.abs(memory.cluster_centers_ - streamed.cluster_centers_).max())
    out["labels_differing_in_memory_run_to_run"] = int((memory.labels_ != again.labels_).sum())
    out["centres_max_abs_diff_in_memory_run_to_run"] = float(
        np.abs(memory.cluster_centers_ - again.cluster_centers_).max())
    out["strategies"] = memory.strategies_
    # The same with an update that sums in float64 throughout ("sort": per-cluster segments,
    # fixed order): the atomic update's block partial sums are float32 for float32 data, so
    # its rounding depends on how the rows are split into blocks and chunks.
    memory = fit(10, update="sort")
    streamed = fit(10, batch_rows=batch_rows, update="sort")
    out["sort_update_labels_differing_streamed_vs_in_memory"] = int(
        (memory.labels_ != streamed.labels_).sum())
    out["sort_update_centres_max_abs_diff_streamed_vs_in_memory"] = float(
        np.abs(memory.cluster_centers_ - streamed.cluster_centers_).max())
    return out


def wavecluster_section(backend) -> dict:
    from gpumine.wavecluster import WaveCluster

    rng = np.random.default_rng(3)
    n = 4096 * 4096
    X = np.concatenate([
        rng.uniform(0, 1, size=(n - n // 4, 2)),
        rng.uniform(0.1, 0.9, size=(8, 2))[rng.integers(0, 8, n // 4)]
        + rng.normal(scale=0.02, size=(n // 4, 2))])
    out = {"points": n, "grid_size": 4096, "batch_rows": 1 << 22}
    for name, kw in (("in_memory", {}), ("streamed", {"batch_rows": 1 << 22})):
        out[f"{name}_fit_s"] = measure(
            lambda kw=kw: WaveCluster(grid_size=4096, device="gpu", **kw).fit(X), backend,
            repeats=3, budget_seconds=None, clock="host").seconds
    a = WaveCluster(grid_size=4096, device="gpu").fit(X)
    b = WaveCluster(grid_size=4096, device="gpu", batch_rows=1 << 22).fit(X)
    out["labels_equal"] = bool(np.array_equal(a.labels_, b.labels_))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--batch-rows", type=int, default=2_000_000)
    args = parser.parse_args()
    backend = get_backend("gpu")
    cp = backend.xp
    record = {
        "device": backend.device_name, "commit": commit(),
        "versions": {"cupy": cp.__version__, "numpy": np.__version__,
                     "python": platform.python_version(),
                     "cuda_runtime": cp.cuda.runtime.runtimeGetVersion()},
        "kmeans": kmeans_section(backend, args.batch_rows),
        "wavecluster": wavecluster_section(backend),
    }
    save(args.out, "stream-timing", record)
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
