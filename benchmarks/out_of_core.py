"""A k-means fit of a data set larger than the GPU's memory, streamed from host memory.

Usage (repository root, on a machine with a CUDA GPU, CuPy and host memory for the data)::

    python benchmarks/out_of_core.py --out benchmarks/results --gib 82

Builds an in-memory ``pyarrow.dataset`` of ``--gib`` GiB of float32 rows (32 features:
1,024 Gaussian blobs, the noise of one block reused with a per-block roll so that the build
takes seconds, not minutes), checks that it is larger than the device's memory, and fits
``GPUKMeans(1024, max_iter=--iterations)`` on it: the dataset is streamed in chunks at
every pass (statistics, the init sample, each Lloyd iteration, the final labels), with
nothing of n rows on the device but the labels. Records the rows, bytes, the device's
memory, the wall time of the fit, the passes over the data and the bytes per second they
moved, with the device, versions and commit
(``out-of-core-<date>-<commit>.json``).
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.backend import get_backend
from gpumine.bench.record import context

FEATURES = 32
CLUSTERS = 1024
BLOCK_ROWS = 4 * 2**20


def build(gib: float, seed: int = 0):
    """The data set: blocks of BLOCK_ROWS rows, column-major, as one pyarrow dataset."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(FEATURES, CLUSTERS)).astype(np.float32)
    noise = rng.standard_normal((FEATURES, BLOCK_ROWS), dtype=np.float32)
    blocks = int(np.ceil(gib * 2**30 / (FEATURES * 4 * BLOCK_ROWS)))
    names = [f"x{j}" for j in range(FEATURES)]

    def block(b):
        labels = np.random.default_rng(seed + 1 + b).integers(0, CLUSTERS, BLOCK_ROWS)
        columns = centres[:, labels]
        columns += np.roll(noise, b * 7919, axis=1)
        return pa.RecordBatch.from_arrays([pa.array(c) for c in columns], names=names)

    with ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(block, range(blocks)))
    return ds.dataset(pa.Table.from_batches(batches))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--gib", type=float, default=82.0)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()

    from gpumine import GPUKMeans
    from gpumine.kmeans import chunked

    backend = get_backend("gpu")
    cp = backend.xp
    free, total = cp.cuda.runtime.memGetInfo()
    started = time.perf_counter()
    data = build(args.gib)
    rows = data.count_rows()
    nbytes = rows * FEATURES * 4
    record = {**context(backend), "rows": rows, "features": FEATURES, "clusters": CLUSTERS,
              "bytes": nbytes, "device_memory_bytes": total, "device_free_bytes": free,
              "larger_than_device": nbytes > total, "build_s": time.perf_counter() - started,
              "max_iter": args.iterations}
    print({k: record[k] for k in ("rows", "bytes", "device_memory_bytes", "build_s")},
          flush=True)

    passes = []
    real_step = chunked.chunk_step

    def counting_step(*a, **kw):  # the Lloyd passes: chunk_step is called once per chunk
        passes.append(time.perf_counter())
        return real_step(*a, **kw)

    chunked.chunk_step = counting_step
    model = GPUKMeans(CLUSTERS, max_iter=args.iterations, random_state=0, device="gpu")
    started = time.perf_counter()
    model.fit(data)
    cp.cuda.Device().synchronize()
    record["fit_s"] = time.perf_counter() - started
    chunked.chunk_step = real_step
    lloyd_passes = int(model.n_iter_)  # one chunk_step per chunk per iteration
    chunks_per_pass = len(passes) / lloyd_passes
    record.update({
        "n_iter": int(model.n_iter_), "inertia": float(model.inertia_),
        "labels_shape": list(model.labels_.shape),
        "labels_used": int(np.unique(model.labels_[:: max(1, rows // 10_000_000)]).size),
        "strategies": {k: str(v) for k, v in getattr(model, "strategies_", {}).items()},
        "lloyd_chunk_steps": len(passes), "lloyd_passes": lloyd_passes,
        # first to last chunk of the Lloyd passes: all of them but one chunk
        "lloyd_pass_s": ((passes[-1] - passes[0]) / (lloyd_passes - 1 / chunks_per_pass)
                         if len(passes) > 1 else None),
    })
    if record["lloyd_pass_s"]:
        record["lloyd_pass_bytes_per_s"] = nbytes / record["lloyd_pass_s"]
    print({k: v for k, v in record.items() if k not in ("versions",)}, flush=True)
    save(args.out, "out-of-core", record)


if __name__ == "__main__":
    main()
