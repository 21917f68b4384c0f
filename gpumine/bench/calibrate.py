"""``gpumine bench calibrate``: measure which strategies ``"auto"`` should pick on this device.

For every cell of a grid of (n, d, k, dtype) and every pair of the assignment and
update strategies ``"auto"`` may pick (:data:`gpumine.registry.AUTO_CANDIDATES`: exact
assignments only), the time of what users call: ``GPUKMeans(k, init=C, max_iter=10,
tol=0, assign=a, update=u).fit(X)`` from data already on the backend (the median of
three fits after a warm-up; on the GPU small fits then run as the fused loop where the
pair allows it, so the table sees that too). The table (:mod:`gpumine.tuning`) is
written to the user's cache, where ``"auto"`` finds it by device name.

Examples
--------
>>> import os, tempfile
>>> from gpumine.backend import get_backend
>>> from gpumine.bench.calibrate import calibrate
>>> os.environ["GPUMINE_CACHE_DIR"] = tempfile.mkdtemp()
>>> table = calibrate(get_backend("cpu"), grid=[(2000, 2, 4, "float64")])
>>> cell = table["cells"][0]
>>> "numpy/numpy" in cell["seconds"], all(t > 0 for t in cell["seconds"].values())
(True, True)
>>> del os.environ["GPUMINE_CACHE_DIR"]
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable

import numpy as np

from gpumine import registry, tuning
from gpumine.bench.record import context
from gpumine.bench.timing import measure

__all__ = ["GRID", "QUICK_GRID", "calibrate", "write_table"]

#: The measured grid: rows, features, clusters; float32 (what GPU users fit) and float64.
GRID = [(n, d, k, dtype) for dtype in ("float32", "float64")
        for n in (20_000, 200_000, 2_000_000) for d in (2, 8, 32, 128) for k in (16, 128, 1024)
        if k < n]
#: A grid of seconds on a CPU (tests, and a first look).
QUICK_GRID = [(2_000, 2, 4, "float64"), (5_000, 8, 16, "float64")]
#: Lloyd iterations per timed fit.
ITERATIONS = 10


def _pairs(backend) -> list[tuple[str, str]]:
    assigns = registry.AUTO_CANDIDATES[("kmeans.assign", backend.name)]
    updates = registry.AUTO_CANDIDATES[("kmeans.update", backend.name)]
    available = {s.name for s in registry.list_strategies(backend=backend.name)}
    return [(a, u) for a, u in itertools.product(assigns, updates)
            if a in available and u in available]


def calibrate(backend, grid: Iterable[tuple[int, int, int, str]] | None = None, *,
              log: Callable[[str], None] | None = None, write: bool = True) -> dict:
    """Time every allowed pair on every cell of ``grid`` (default :data:`GRID`) on ``backend``.

    Returns the table (and writes it to :func:`gpumine.tuning.table_path` of the device
    unless ``write`` is False). A pair that cannot run a cell (a strategy's feature
    limit, memory) is left out of that cell.
    """
    from gpumine.exceptions import GpumineError
    from gpumine.kmeans import GPUKMeans

    xp = backend.xp
    pairs = _pairs(backend)
    cells = []
    for n, d, k, dtype in GRID if grid is None else grid:
        rng = np.random.default_rng(n + 7 * d + 13 * k)
        host = rng.standard_normal((n, d)).astype(dtype)
        X = backend.to_device_columns(host)
        init = host[rng.choice(n, k, replace=False)]
        seconds = {}
        for a, u in pairs:
            strategy = registry.get_strategy("kmeans.update", u)
            if strategy.max_dims is not None and d > strategy.max_dims:
                continue
            if not registry.applies_to_dtype("kmeans.update", u, dtype):
                continue  # it would run as another update: measured under that one's name
            model = GPUKMeans(k, init=init, max_iter=ITERATIONS, tol=0.0, assign=a, update=u,
                              device=backend.name)
            try:
                seconds[f"{a}/{u}"] = measure(lambda model=model, X=X: model.fit(X), backend,
                                              repeats=3, budget_seconds=None,
                                              clock="host").seconds
            except (GpumineError, MemoryError) as exc:
                if log:
                    log(f"  {a}/{u} skipped: {exc}")
        cells.append({"n": n, "d": d, "k": k, "dtype": dtype, "seconds": seconds})
        if log and seconds:
            best = min(seconds, key=seconds.get)
            log(f"n={n} d={d} k={k} {dtype}: {best} "
                f"({1e3 * seconds[best]:.3f} ms per {ITERATIONS}-iteration fit)")
        X = model = None  # the next cell's data goes where this one's was
        if backend.is_gpu:
            xp.get_default_memory_pool().free_all_blocks()
    table = {"device": backend.device_name, "iterations": ITERATIONS,
             "measured_on": context(backend), "cells": cells}
    if write:
        write_table(table, tuning.table_path(backend.device_name))
    return table


def write_table(table: dict, path) -> None:
    """Write ``table`` to ``path`` (folders made), whole or not at all."""
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    partial.replace(path)
