"""``wavecluster-quality``: WaveCluster's defaults against DBSCAN and HDBSCAN, by Rand index.

Every labelled set is clustered by

* ``WaveCluster()`` with its defaults, on the run's device (the method under test);
* DBSCAN given the best of six ``eps`` values (fractions of the bounding-box
  diagonal, :data:`DBSCAN_EPS_FRACTIONS`): an oracle no user has, an upper bound of
  what tuning one parameter reaches;
* HDBSCAN with scikit-learn's defaults.

The sets: the clustering-benchmark ARFF files of ``<data home>/shapes`` when present
(``--data-home``, else ``GPUMINE_SHARED_DATASETS``) and the generated ones of
:func:`gpumine.datasets.make_shape_sets`, three draws of each (one, at a tenth of
the size, with ``--quick``).
Noise is a label of its own in the index. Each row records the index, the clusters
found against the true number, the share of points called noise against the true
share, and the fit's wall time (for WaveCluster also its time over that of the same fit
given the threshold ``"auto"`` chose, the cost of ``"auto"``); the summary gives each
method's mean and minimum index and the sets below 0.75, and the plot shows the index
of every set and method.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from gpumine.bench.record import Results
from gpumine.bench.timing import timed

__all__ = ["DBSCAN_EPS_FRACTIONS", "SEEDS", "labelled_sets", "report_quality",
           "wavecluster_quality"]

DBSCAN_EPS_FRACTIONS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.08)
#: A set scored below this by a method is listed in the summary.
POOR_ARI = 0.75
METHODS = ("WaveCluster defaults", "DBSCAN best eps", "HDBSCAN defaults")


#: Draws of the generated sets (``random_state`` of :func:`make_shape_sets`): a rule tuned
#: on one draw shows it on the others.
SEEDS = (0, 1, 2)


def labelled_sets(data_home=None, *, quick=False) -> dict:
    """The sets to score, by name: ``(X, y, source)``; ARFF shapes first when found.

    The generated sets are drawn with every seed of :data:`SEEDS` (one with
    ``quick``); a draw after the first is named ``<set>/seed<k>``.
    """
    from gpumine.datasets import make_shape_sets, read_arff_points

    sets = {}
    home = data_home or os.environ.get("GPUMINE_SHARED_DATASETS")
    shapes = Path(home) / "shapes" if home else None
    if not quick and shapes is not None and shapes.is_dir():
        for path in sorted(shapes.glob("*.arff")):
            X, y, _ = read_arff_points(path)
            sets[path.stem] = (X, y, "clustering-benchmark")
    for seed in SEEDS[:1] if quick else SEEDS:
        drawn = make_shape_sets(scale=0.1 if quick else 1.0, random_state=seed)
        for name, (X, y) in drawn.items():
            sets[name if seed == SEEDS[0] else f"{name}/seed{seed}"] = (X, y, "generated")
    return sets


def _describe(labels) -> tuple[int, float]:
    labels = np.asarray(labels)
    return len(set(labels[labels >= 0].tolist())), float((labels < 0).mean())


def _score(method, X, y, backend):
    """(labels, seconds, note) of one method on one set."""
    from sklearn.cluster import DBSCAN, HDBSCAN
    from sklearn.metrics import adjusted_rand_score

    if method == "WaveCluster defaults":
        return _score_wavecluster(X, backend)
    if method == "DBSCAN best eps":
        diagonal = float(np.linalg.norm(X.max(0) - X.min(0)))

        def best_eps():
            scored = [(adjusted_rand_score(y, found), fraction, found)
                      for fraction in DBSCAN_EPS_FRACTIONS
                      for found in [DBSCAN(eps=fraction * diagonal).fit_predict(X)]]
            return max(scored, key=lambda s: s[0])

        best, seconds = timed(best_eps)
        return best[2], seconds, f"eps = {best[1]} x diagonal"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # copy's default changes in 1.10
        labels, seconds = timed(lambda: HDBSCAN().fit_predict(X))
    return labels, seconds, ""


def _score_wavecluster(X, backend):
    """WaveCluster's defaults, and what ``"auto"`` costs: the time over a fit given the
    threshold it chose. A first, untimed fit keeps imports out of the first set's time."""
    from gpumine.wavecluster import WaveCluster

    WaveCluster(device=backend.name).fit(X)
    model, seconds = timed(lambda: WaveCluster(device=backend.name).fit(X), backend)
    labels, to_host = timed(lambda: backend.to_host(model.labels_), backend)
    seconds += to_host
    fixed = timed(lambda: WaveCluster(device=backend.name, threshold=model.threshold_).fit(X),
                  backend)[1]
    note = (f"grid {'x'.join(map(str, model.grid_shape_))}, threshold "
            f"{model.threshold_:.4g}; auto / fixed threshold time {seconds / fixed:.2f}")
    return labels, seconds, note


def wavecluster_quality(run) -> tuple[Results, dict]:
    """Score every method on every set (module docstring); resumes from the CSV."""
    from sklearn.metrics import adjusted_rand_score

    sets = labelled_sets(run.data_home, quick=run.quick)
    params = {"sets": list(sets), "methods": list(METHODS),
              "dbscan_eps_fractions": list(DBSCAN_EPS_FRACTIONS),
              "generated_scale": 0.1 if run.quick else 1.0,
              "generated_seeds": list(SEEDS[:1] if run.quick else SEEDS), "quick": run.quick}
    results = Results(run.out_dir, "wavecluster-quality", params, key=("set", "method"))
    for name, (X, y, source) in sets.items():
        true_clusters, true_noise = _describe(y)
        for method in METHODS:
            if results.has({"set": name, "method": method}):
                continue
            labels, seconds, note = _score(method, X, y, run.backend)
            clusters, noise = _describe(labels)
            results.add({"set": name, "source": source, "n": len(X), "d": X.shape[1],
                         "method": method, "ari": float(adjusted_rand_score(y, labels)),
                         "clusters": clusters, "true_clusters": true_clusters,
                         "noise_share": noise, "true_noise_share": true_noise,
                         "seconds": seconds, "note": note})
        run.log(f"wavecluster-quality {name}: " + ", ".join(
            f"{r['method']} {float(r['ari']):.3f}" for r in results.rows if r["set"] == name))
    return results, {}


def report_quality(results, measured) -> dict:
    """Per method: mean and minimum index, and the sets below :data:`POOR_ARI`; the plot."""
    summary = {}
    for method in METHODS:
        rows = [r for r in results.rows if r["method"] == method]
        if not rows:
            continue
        scores = {r["set"]: float(r["ari"]) for r in rows}
        summary[method] = {"mean_ari": float(np.mean(list(scores.values()))),
                           "min_ari": float(min(scores.values())),
                           "below_0.75": sorted(s for s, v in scores.items() if v < POOR_ARI)}
        ratios = [float(r["note"].rsplit(" ", 1)[1]) for r in rows
                  if "auto / fixed threshold time" in str(r["note"])]
        if ratios:
            summary[method]["auto_over_fixed_threshold_time_max"] = max(ratios)
    return {"methods": summary, "plots": [_plot(results)]}


def _plot(results) -> str:
    plt, path = results.figure("wavecluster-quality")
    sets = list(dict.fromkeys(r["set"] for r in results.rows))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.4 * len(sets)), 4.8))
    width = 0.8 / len(METHODS)
    for i, method in enumerate(METHODS):
        values = [next((float(r["ari"]) for r in results.rows
                        if r["set"] == name and r["method"] == method), np.nan) for name in sets]
        ax.bar(np.arange(len(sets)) + i * width, values, width, label=method)
    ax.set_xticks(np.arange(len(sets)) + 0.4 - width / 2, sets, rotation=35, ha="right",
                  fontsize=8)
    ax.set_ylabel("adjusted Rand index (noise a label of its own)")
    ax.axhline(POOR_ARI, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.05)
    ax.legend(fontsize=8, ncol=len(METHODS), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
