"""The per-iteration overhead of gpumine.dask.GPUKMeans, per engine: the share of an
iteration's wall time not spent in the busiest worker's own work (scheduling, transfers, the
driver for ``engine="graph"``; the exchange through the actor for ``"collective"``), and the
fit's wall time.

Usage: ``python benchmarks/dask_overhead.py --out benchmarks/results [--device gpu]`` (any
machine; a two-worker ``distributed.LocalCluster``, its workers computing on ``--device``:
both on the one GPU with ``gpu``). Writes ``dask-overhead-<date>-<commit>[-gpu].json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    args = parser.parse_args()
    import dask
    import dask.array as da
    import distributed
    import numpy as np

    from gpumine.dask import GPUKMeans

    commit = os.environ.get("GPUMINE_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        rng = np.random.default_rng(0)
        for n, d, k in [(200_000, 8, 8), (2_000_000, 8, 8), (2_000_000, 32, 64)]:
            X = da.from_array(rng.normal(size=(n, d)), chunks=(n // 4, d)).persist()
            init = GPUKMeans(k, random_state=0, max_iter=1).fit(X).cluster_centers_
            for engine in ("graph", "collective"):
                GPUKMeans(k, init=init, max_iter=2, tol=0, engine=engine,
                          device=args.device).fit(X)  # warm-up: compilation, pools
                start = time.perf_counter()
                model = GPUKMeans(k, init=init, max_iter=20, tol=0, engine=engine,
                                  device=args.device).fit(X)
                rows.append({"n": n, "d": d, "k": k, "partitions": 4, "engine": engine,
                             "device": args.device,
                             "n_iter": model.n_iter_, "fit_seconds": time.perf_counter() - start,
                             "iteration_overhead_share": model.iteration_overhead_})
                print(rows[-1], flush=True)
    record = {"date": datetime.date.today().isoformat(), "commit": commit,
              "host": platform.node(), "cpu_count": os.cpu_count(),
              "python": platform.python_version(), "dask": dask.__version__,
              "distributed": distributed.__version__, "numpy": np.__version__,
              "workers": "2 processes x 1 thread", "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "-gpu" if args.device == "gpu" else ""
    path = out / f"dask-overhead-{record['date']}-{commit}{suffix}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
