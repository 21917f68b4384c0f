"""What the experiments share: the run, strategy choices, user-level fits, summaries and plots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpumine import registry
from gpumine.bench.timing import measure, summation


@dataclass
class Run:
    """What an experiment needs: the backend, where to write, quick or full, the Corel home."""

    backend: object
    out_dir: Path
    quick: bool = False
    data_home: Path | None = None
    log: Callable[[str], None] = print
    #: A single update call slower than this is not repeated at larger sizes of a sweep.
    slow_seconds: float = 5.0


def strategies_of(backend, kind="kmeans.update"):
    return [s for s in registry.list_strategies(kind, backend=backend.name)]


def reference_of(rows, preferred=("gm-ct", "numpy")) -> str:
    """The reference strategy of a speed-up: the first of ``preferred`` that was measured."""
    measured = {r["strategy"] for r in rows}
    return next((name for name in preferred if name in measured), preferred[-1])


def default_of(kind, backend):
    return registry.load_strategy(kind, registry.resolve_strategy(kind, "auto", backend.name).name)


def device_data(run, host):
    return run.backend.to_device_columns(np.ascontiguousarray(host))


def labels_of(run, X, centers):
    xp = run.backend.xp
    labels = xp.empty(X.shape[0], dtype=xp.int32)
    default_of("kmeans.assign", run.backend)(X, centers, labels)
    return labels


def update_phase(run, strategy, X, labels, k):
    """The timed unit of seed 004: summation (the strategy) + normalization."""
    from gpumine.kmeans.lloyd import average_centers

    step, sums, weights = summation(run.backend.xp, strategy.load(), X, labels, k)

    def phase():
        step()
        return average_centers(sums, weights, X.dtype, run.backend.xp)

    return phase


#: Rows of an experiment's CSV that hold user-level ``fit`` times beside its stage times.
FIT_FROM_DEVICE = "fit from device data"


FIT_FROM_HOST = "fit from host data"


USER_LEVEL = (FIT_FROM_DEVICE, FIT_FROM_HOST)


USER_FIT_ITERATIONS = 10


def user_level_fits(backend, host, centers_host, *, estimator=None) -> dict:
    """What a user waits for: ``fit`` from device data and from host data, seconds.

    ``estimator()`` builds the estimator (default: ``GPUKMeans`` from ``centers_host``,
    ten forced iterations, on ``backend``); each figure is the median of three fits
    after a warm-up. On the CPU both figures are the same call.
    """
    if estimator is None:
        estimator = forced_fit_factory(backend, centers_host, USER_FIT_ITERATIONS)
    device = (backend.xp.ascontiguousarray(backend.xp.asarray(host))
              if backend.is_gpu else host)
    out = {}
    for label, data in ((FIT_FROM_DEVICE, device), (FIT_FROM_HOST, host)):
        out[label] = measure(lambda data=data: estimator().fit(data), backend,
                             repeats=3).seconds
    return out


def missing_user_fits(run, results, cell, host, centers_host):
    """The user-level fit rows of ``cell`` not yet recorded: (label, seconds) pairs."""
    if all(results.has({**cell, "strategy": label}) for label in USER_LEVEL):
        return []
    return list(user_level_fits(run.backend, host, centers_host).items())


def speedups_of(rows, group_keys, reference):
    """Add ``speedup_vs_reference`` (reference seconds / seconds) within each group."""
    by_group = {}
    for row in rows:
        if row["strategy"] == reference and row["seconds"] not in ("", None):
            by_group[tuple(row[k] for k in group_keys)] = float(row["seconds"])
    out = []
    for row in rows:
        base = by_group.get(tuple(row[k] for k in group_keys))
        seconds = row["seconds"]
        speedup = (base / float(seconds) if base and seconds not in ("", None)
                   and row["strategy"] not in USER_LEVEL else None)
        out.append({**row, "speedup_vs_reference": speedup})
    return out


def plot_lines(results, name, rows, *, panel, x, y, series, title, ylabel, logy=True):
    plt, path = results.figure(name)
    panels = sorted({r[panel] for r in rows}, key=str)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, value in zip(axes[0], panels, strict=True):
        for i, label in enumerate(sorted({r[series] for r in rows})):
            points = sorted((float(r[x]), float(r[y])) for r in rows
                            if r[panel] == value and r[series] == label
                            and r[y] not in ("", None))
            if points:  # ten colours, then the next ten dashed with squares, ...
                ax.plot(*zip(*points, strict=True), color=f"C{i % 10}",
                        linestyle=("-", "--", ":")[i // 10 % 3],
                        marker=("o", "s", "^")[i // 10 % 3], markersize=3, label=label)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}, {panel} = {value}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path.name


def summary_of(rows, group_keys, plots, reference) -> dict:
    """Per group: each strategy's median speed-up over ``reference``, and the plots."""
    summary = {"reference": reference, "plots": plots, "groups": {}}
    for group in sorted({tuple(r[k] for k in group_keys) for r in rows}, key=str):
        members = [r for r in rows if tuple(r[k] for k in group_keys) == group
                   and r["seconds"] not in ("", None)]
        medians = {}
        for name in sorted({r["strategy"] for r in members}):
            values = [r["speedup_vs_reference"] for r in members
                      if r["strategy"] == name and r["speedup_vs_reference"] is not None]
            if values:
                medians[name] = float(np.median(values))
        fits = {label: float(np.median([float(r["seconds"]) for r in members
                                         if r["strategy"] == label]))
                for label in USER_LEVEL if any(r["strategy"] == label for r in members)}
        summary["groups"]["/".join(map(str, group))] = {"median_speedup_vs_reference": medians,
                                                        "median_user_level_fit_seconds": fits}
    return summary


def forced_fit_factory(backend, centers_host, iterations):
    """A ``GPUKMeans`` factory from ``centers_host`` with ``tol = 0``: ``iterations``
    Lloyd iterations, fewer only if no label changes (strict convergence)."""
    from gpumine.kmeans import GPUKMeans

    return lambda: GPUKMeans(len(centers_host), init=centers_host, max_iter=iterations,
                             tol=0.0, device=backend.name)
