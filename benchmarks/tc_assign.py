"""Per-Lloyd-iteration time of the exact tensor-core assignment against the peers (issue 13).

Usage (repository root, on a machine with a CUDA GPU, CuPy and PyTorch; flash-kmeans when
importable)::

    python benchmarks/tc_assign.py --out benchmarks/results [--quick] \
        [--updates atomic,atomic-fixed] [--only 1000000x128x1024,...]

For each shape of issue 13 (uniform data, MT19937 seed 5489, the first k points as
centres), in one process: the time of one Lloyd iteration (assign + the update + averaging)
with ``assign`` = tiled / tc-exact / tc-fast / gemm and each update of ``--updates`` (the
first one's times under the assignment's name, the others' as ``assign+update``), the
assignment alone
for each, PyTorch's GEMM + argmin + index_add iteration and flash-kmeans' (TF32) one
iteration from the same centres; for every labelling the share equal to an FP64
assignment and to the exact FP32 one (``tiled``); the rows tc-exact re-checked; ``"auto"``'s
shape-only pick (the measured table) and its time, and the best exact one's, over the best
peer's; and the
floors: ``2 n d k`` flops at the issue's exact-FP32 (51.2 TFLOP/s) and TF32 (412 TFLOP/s)
rates, and reading X once at the device's measured copy bandwidth.

Writes ``tc-assign-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import math
from functools import partial

from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time

SHAPES = [(1_000_000, 4, 400), (4_000_000, 8, 200), (4_000_000, 2, 100), (50_000, 32, 2048),
          (1_000_000, 128, 1024), (10_000_000, 32, 1024)]
QUICK = [(200_000, 4, 400), (50_000, 32, 2048), (200_000, 128, 1024)]
ASSIGNS = ("tiled", "tc-exact", "tc-fast", "gemm")
FP32_RATE, TF32_RATE = 51.2e12, 412e12


def copy_bandwidth(cp) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write counted)."""
    a = cp.empty(1 << 28, dtype=cp.float32)
    b = cp.empty_like(a)
    seconds = device_time(cp, lambda: b.__setitem__(Ellipsis, a), 5)
    return 2 * a.nbytes / seconds


def measure(cp, n, d, k, bandwidth, updates=("atomic",)) -> dict:
    import torch

    from gpumine import registry
    from gpumine.backend import get_backend
    from gpumine.bench.peers import fp64_labels, gpumine_step, peer_steps
    from gpumine.datasets import make_uniform
    from gpumine.kmeans.tensor_cores import queued_rows

    backend = get_backend("gpu")
    host = make_uniform(n, d, random_state=5489)
    X = cp.ascontiguousarray(cp.asarray(host).T).T
    centers = X[:k].copy()
    reference = fp64_labels(cp, X, centers)
    row = {"n": n, "d": d, "k": k, "updates": list(updates),
           "floor_fp32_s": 2 * n * d * k / FP32_RATE, "floor_tf32_s": 2 * n * d * k / TF32_RATE,
           "floor_read_x_s": X.nbytes / bandwidth, "iteration_s": {}, "assign_s": {},
           "labels_equal_fp64": {}, "labels_equal_exact_fp32": {}}
    exact = None
    for name in ASSIGNS:
        assign = registry.load_strategy("kmeans.assign", name)
        # bound to X as a fit binds it (tc-exact's run: the screen where it pays)
        assign = assign.bind(X) if hasattr(assign, "bind") else assign
        repeats = 3 if n * k >= 10**9 else 10
        for position, update_name in enumerate(updates):
            update = registry.load_strategy("kmeans.update", update_name)
            step, labels = gpumine_step(backend, X, centers, assign, update)
            key = name if position == 0 else f"{name}+{update_name}"
            row["iteration_s"][key] = device_time(cp, step, repeats)
            if position == 0:
                first_step, first_labels = step, labels
        step, labels = first_step, first_labels
        scratch = cp.zeros(n, dtype=cp.int32)
        row["assign_s"][name] = device_time(cp, partial(assign, X, centers, scratch), repeats)
        step()
        if name == "tiled":
            exact = labels.copy()
        row["labels_equal_fp64"][name] = float((labels == reference).mean())
        row["labels_equal_exact_fp32"][name] = float((labels == exact).mean())
        print(name, n, d, k, row["iteration_s"][name], row["assign_s"][name], flush=True)
    row["tc_exact_rows_rechecked"] = queued_rows(X, centers)
    steps, skipped = peer_steps(host, cp.asnumpy(centers), "cuda")
    row["peers_skipped"] = skipped
    for name, step in steps.items():
        if name == "fastkmeans":
            continue
        if name == "torch" and n * k > 2**32:  # its n x k distance matrix would not fit
            row["peers_skipped"]["torch"] = f"n x k distances take {4 * n * k / 2**30:.0f} GiB"
            continue
        row["iteration_s"][name] = device_time(cp, step, 3 if n * k >= 10**9 else 10)
        labels = cp.asarray(step.labels.to(dtype=torch.int32))
        row["labels_equal_fp64"][name] = float((labels == reference).mean())
        row["labels_equal_exact_fp32"][name] = float((labels == exact).mean())
        print(name, n, d, k, row["iteration_s"][name], flush=True)
        del steps[name].labels
    peers = [row["iteration_s"][p] for p in ("torch", "flash-kmeans") if p in row["iteration_s"]]
    if peers:
        row["tc_exact_over_best_peer"] = row["iteration_s"]["tc-exact"] / min(peers)
        # "auto"'s shape-only pick (the measured table; a large fit races on its data)
        default, _, _ = registry.resolve_kmeans_pair(
            "auto", "atomic", "gpu", n_samples=n, n_features=d, n_clusters=k,
            dtype=X.dtype.name, device_name=backend.device_name)
        row["default"] = default.name
        row["default_over_best_peer"] = (row["iteration_s"].get(default.name, math.nan)
                                         / min(peers))
        exact_names = [key for key in row["iteration_s"]
                       if key.partition("+")[0] in ("tiled", "tc-exact")]
        best = min(exact_names, key=row["iteration_s"].get)
        row["best_exact"] = best
        row["best_exact_over_best_peer"] = row["iteration_s"][best] / min(peers)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--updates", default="atomic",
                        help="comma-separated update strategies, the first the main one")
    parser.add_argument("--only", default="",
                        help="comma-separated shapes NxDxK of the list to run (default: all)")
    args = parser.parse_args()
    updates = tuple(args.updates.split(","))
    only = {tuple(int(v) for v in shape.split("x")) for shape in args.only.split(",") if shape}
    from gpumine.backend import get_backend
    from gpumine.bench.peers import peer_versions
    from gpumine.bench.record import context

    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), **peer_versions()}
    bandwidth = copy_bandwidth(cp)
    record["copy_bandwidth_bytes_per_s"] = bandwidth
    record["shapes"] = []
    for n, d, k in QUICK if args.quick else SHAPES:
        if only and (n, d, k) not in only:
            continue
        record["shapes"].append(measure(cp, n, d, k, bandwidth, updates))
        cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "tc-assign", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
