"""gpumine.dask.GPUKMeans on one GPU and on two: the per-iteration speed-up of the collective
engine, one Dask worker per GPU (each started with its own ``CUDA_VISIBLE_DEVICES``).

The same data (``n`` x ``d`` float32 normals drawn by ``dask.array`` from one seed, in the
same eight partitions on both clusters -- its random numbers depend on the chunks -- persisted
on the workers, which have no memory limit: with Dask's default, a share of the machine's
memory by threads, the one worker holding all 100M rows died in a first attempt, its logs
unread) and the same initial centres (its first ``k`` rows) on a one-worker and a two-worker
cluster, the collective loop's sums exchanged through NCCL and through the Dask actor
(``--exchange``; each timed on both clusters). Per iteration, two measures: the median of
the fit's own ``iteration_seconds_`` (each iteration's wall time on the first worker's
task, the first iteration -- the
partitions' copy to the GPU -- left out; the speed-up is taken from this one), and, as
before, the difference between a fit of ``--iters`` + 2 and one of 2 iterations (``tol=0``)
divided by ``--iters`` (the fixed costs cancel, but two fits of 14-34 s differ by more than
the iterations: records at 4ed587c and d4ec46d). The two clusters' fits of ``--iters`` + 2
iterations are compared: iterations, labels, the centres' largest difference over their
largest coordinate, and the inertia; and the exchanges' centres, which should be bit-equal.

Usage (a machine with two GPUs, dask and distributed installed)::

    python benchmarks/dask_two_gpus.py --out benchmarks/results [--n 100000000] [--clusters 64] \
        [--exchange nccl,actor]

Writes ``dask-two-gpus-<date>-<commit>.json``.
"""

from __future__ import annotations

import time


def _cluster(distributed, gpus: int, threads: int):
    workers = {f"gpu{i}": {"cls": distributed.Nanny,
                           "options": {"nthreads": threads, "memory_limit": 0,
                                       "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
               for i in range(gpus)}
    return distributed.SpecCluster(
        workers=workers,
        scheduler={"cls": distributed.Scheduler, "options": {"dashboard_address": None}})


def _timed_fit(GPUKMeans, X, init, iters, update="auto", exchange="auto"):
    start = time.perf_counter()
    model = GPUKMeans(len(init), init=init, max_iter=iters, tol=0, engine="collective",
                      device="gpu", update=update, exchange=exchange).fit(X)
    return time.perf_counter() - start, model


def _data(da, np, args, chunk):
    """``n`` x ``d`` float32 rows from one seed: unit normals, or with ``--clusters`` the same
    normals around that many centres drawn in [-10, 10]^d (each row's centre drawn too), so
    that two fits from the same centres can be compared (on unclustered normals the
    trajectories drift apart: records at 4ed587c and d4ec46d)."""
    state = da.random.RandomState(0)
    noise = state.standard_normal((args.n, args.d), chunks=(chunk, args.d)).astype(np.float32)
    if not args.clusters:
        return noise
    centres = np.random.default_rng(0).uniform(-10, 10, (args.clusters, args.d))
    centres = centres.astype(np.float32)
    which = state.randint(0, args.clusters, size=args.n, chunks=chunk)
    return noise + which.map_blocks(lambda block: centres[block], new_axis=1,
                                    chunks=(which.chunks[0], (args.d,)), dtype=np.float32)


def main() -> None:
    from fit_timing import save, scale_parser  # the script's folder is on sys.path

    parser = scale_parser(__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--clusters", type=int, default=0,
                        help="rows around this many centres (0: unclustered normals)")
    parser.add_argument("--update", default="auto",
                        help="kmeans.update strategy (sort: the same sums run to run)")
    parser.add_argument("--exchange", default="nccl,actor",
                        help="the collective loop's exchanges to time, comma-separated")
    args = parser.parse_args()
    import dask
    import dask.array as da
    import distributed
    import numpy as np

    from gpumine.bench.record import commit
    from gpumine.dask import GPUKMeans

    rows, models, labels = [], {}, {}
    exchanges = args.exchange.split(",")
    for gpus in (1, 2):
        with _cluster(distributed, gpus, args.threads) as cluster, \
                distributed.Client(cluster) as client:
            # the same partitions on both clusters: dask.array's random numbers depend on the
            # chunks (records up to 4046a39 compared fits of different data)
            chunk = -(-args.n // 8)
            X = _data(da, np, args, chunk).persist()
            distributed.wait(X)
            init = X[:args.k].compute().astype(np.float64)
            _timed_fit(GPUKMeans, X, init, 1, args.update)  # warm-up: kernels compiled
            devices = client.run(lambda: __import__("cupy").cuda.runtime.getDeviceProperties(
                0)["name"].decode())
            for exchange in exchanges:
                short, _ = _timed_fit(GPUKMeans, X, init, 2, args.update, exchange)
                long, model = _timed_fit(GPUKMeans, X, init, args.iters + 2, args.update,
                                         exchange)
                rows.append({"gpus": gpus, "exchange": model.exchange_,
                             "workers": sorted(devices.values()),
                             "partitions": X.numblocks[0], "fit_2_s": short,
                             f"fit_{args.iters + 2}_s": long,
                             "iteration_s": float(np.median(model.iteration_seconds_[1:])),
                             "iteration_seconds": model.iteration_seconds_.tolist(),
                             "iteration_s_by_difference": (long - short) / args.iters,
                             "n_iter": model.n_iter_,
                             "iteration_overhead_share": model.iteration_overhead_})
                models[gpus, exchange] = model
                # on this cluster's data
                labels[gpus, exchange] = np.asarray(model.labels_.compute())
                print(rows[-1], flush=True)
            del X
    record = {"commit": commit(), "n": args.n, "d": args.d, "k": args.k,
              "clusters": args.clusters, "update": args.update,
              "dtype": "float32", "iters": args.iters, "threads_per_worker": args.threads,
              "versions": {"dask": dask.__version__, "distributed": distributed.__version__,
                           "numpy": np.__version__},
              "rows": rows, "by_exchange": {}}
    iteration = {(row["gpus"], row["exchange"]): row["iteration_s"] for row in rows}
    for exchange in exchanges:
        one, two = (models[g, exchange].cluster_centers_.astype(np.float64) for g in (1, 2))
        record["by_exchange"][exchange] = {
            "speedup_two_over_one": iteration[1, exchange] / iteration[2, exchange],
            "same_n_iter": models[1, exchange].n_iter_ == models[2, exchange].n_iter_,
            # against the centres' largest coordinate (an element's own magnitude can be ~0)
            "centres_max_difference_over_scale": float(np.abs(one - two).max()
                                                       / np.abs(one).max()),
            "labels_equal": bool(np.array_equal(labels[1, exchange], labels[2, exchange])),
            "inertia": [models[1, exchange].inertia_, models[2, exchange].inertia_]}
    if len(exchanges) > 1:  # the same sums whatever the exchange
        record["centres_bit_equal_across_exchanges"] = {
            gpus: all(np.array_equal(models[gpus, e].cluster_centers_,
                                     models[gpus, exchanges[0]].cluster_centers_)
                      for e in exchanges) for gpus in (1, 2)}
    print({k: v for k, v in record.items() if k != "rows"}, flush=True)
    save(args.out, "dask-two-gpus", record)


if __name__ == "__main__":
    main()
