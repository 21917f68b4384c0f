"""``GPUKMeans`` on several GPUs of one process (``device=[0, 1]``) against one GPU.

The same data (``n`` x ``d`` float32 rows around ``--clusters`` centres drawn in
[-10, 10]^d, unit normal noise, drawn on GPU 0 by CuPy from one seed) and the same initial
centres (``k`` rows drawn with a seed) are fitted with ``tol=0`` and ``--iters`` iterations:

* ``device="gpu"``: the one-GPU loop (a CUDA graph per iteration where it takes one);
  per iteration, the difference between a fit of ``--iters`` + 2 and one of 2 iterations
  divided by ``--iters`` (fixed costs cancel);
* ``device=[0]``: the several-GPU loop with one rank (NCCL over one GPU), its median
  ``iteration_seconds_`` (the first iteration left out);
* ``device=[0, 1, ...]`` (``--gpus``): the same loop over the GPUs, likewise.

Then whole fits of ``--iters`` + 2 iterations from host NumPy, on one GPU and on the
several (what users call: the copy up and the validation included). The speed-up is one
GPU's per-iteration time (the faster of the two one-GPU measures) over
the several GPUs'. The fits are compared: labels equal, iterations, the centres' largest
difference over their largest coordinate. The floor: one iteration reads X once (``n d``
x 4 bytes) and does ``2 n d k`` flops; the record has both per GPU.

Usage (a machine with two or more GPUs)::

    python benchmarks/multi_gpu.py --out benchmarks/results [--n 100000000] [--gpus 2]

Writes ``multi-gpu-<date>-<commit>.json``.
"""

from __future__ import annotations

import time


def main() -> None:
    from fit_timing import save, scale_parser  # the script's folder is on sys.path

    parser = scale_parser(__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--clusters", type=int, default=64)
    args = parser.parse_args()
    import cupy as cp
    import numpy as np

    from gpumine import GPUKMeans
    from gpumine.bench.record import commit

    rs = cp.random.RandomState(0)
    centres = cp.asarray(np.random.default_rng(0).uniform(-10, 10, (args.clusters, args.d)),
                         dtype=cp.float32)
    X = rs.standard_normal((args.n, args.d), dtype=cp.float32)
    X += centres[rs.randint(0, args.clusters, args.n)]
    init = cp.asnumpy(X[cp.asarray(np.random.default_rng(1).choice(args.n, args.k,
                                                                    replace=False))])
    cp.cuda.Device().synchronize()

    def fit(device, iters):
        start = time.perf_counter()
        model = GPUKMeans(args.k, init=init, n_init=1, max_iter=iters, tol=0, device=device,
                          copy_x=False).fit(X)
        cp.cuda.Device().synchronize()
        return time.perf_counter() - start, model

    fit("gpu", 1)  # warm-up: kernels compiled
    short, _ = fit("gpu", 2)
    long, one = fit("gpu", args.iters + 2)
    rows = [{"device": "gpu", "fit_2_s": short, f"fit_{args.iters + 2}_s": long,
             "iteration_s": (long - short) / args.iters, "n_iter": one.n_iter_}]
    print(rows[-1], flush=True)
    models = {"gpu": one}
    for gpus in sorted({1, args.gpus}):
        ids = list(range(gpus))
        fit(ids, 1)  # warm-up: kernels compiled on every GPU, NCCL set up once
        seconds, model = fit(ids, args.iters + 2)
        rows.append({"device": ids, f"fit_{args.iters + 2}_s": seconds,
                     "iteration_s": float(np.median(model.iteration_seconds_[1:])),
                     "iteration_seconds": model.iteration_seconds_.tolist(),
                     "n_iter": model.n_iter_})
        print(rows[-1], flush=True)
        models[gpus] = model
    # what users call: whole fits from host NumPy too (the copy up and the validation in)
    X_host = cp.asnumpy(X)
    host_fits = {}
    for device in ("gpu", list(range(args.gpus))):
        start = time.perf_counter()
        GPUKMeans(args.k, init=init, n_init=1, max_iter=args.iters + 2, tol=0, device=device,
                  copy_x=False).fit(X_host)
        cp.cuda.Device().synchronize()
        host_fits[str(device)] = time.perf_counter() - start
    print({"host_data_fit_s": host_fits}, flush=True)
    del X_host
    one_gpu = min(rows[0]["iteration_s"], rows[1]["iteration_s"])
    several = models[args.gpus]
    ref = one.cluster_centers_.astype(np.float64)
    names = [cp.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(args.gpus)]
    record = {
        "commit": commit(), "devices": names, "n": args.n, "d": args.d, "k": args.k,
        "clusters": args.clusters, "dtype": "float32", "iters": args.iters,
        "versions": {"cupy": cp.__version__, "numpy": np.__version__,
                     "nccl": getattr(cp.cuda.nccl, "get_version", lambda: None)()},
        "rows": rows,
        "speedup": one_gpu / rows[-1]["iteration_s"],
        "speedup_over_one_rank": rows[1]["iteration_s"] / rows[-1]["iteration_s"],
        "floor_per_gpu": {"bytes": args.n * args.d * 4 / args.gpus,
                          "flops": 2 * args.n * args.d * args.k / args.gpus},
        "labels_equal": bool((cp.asnumpy(several.labels_) == cp.asnumpy(one.labels_)).all()),
        "same_n_iter": several.n_iter_ == one.n_iter_,
        "centres_max_difference_over_scale": float(
            np.abs(cp.asnumpy(several.cluster_centers_).astype(np.float64) - cp.asnumpy(ref)).max()
            / np.abs(cp.asnumpy(ref)).max()),
        "inertia": [one.inertia_, several.inertia_],
        f"host_data_fit_{args.iters + 2}_s": host_fits,
    }
    print({k: v for k, v in record.items() if k != "rows"}, flush=True)
    save(args.out, "multi-gpu", record)


if __name__ == "__main__":
    main()
