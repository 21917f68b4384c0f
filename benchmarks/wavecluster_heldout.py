"""WaveCluster's defaults on shapes the ``"auto"`` rule was not developed on.

Usage (repository root)::

    python benchmarks/wavecluster_heldout.py --out benchmarks/results

``gpumine bench run wavecluster-quality`` scores the sets the rule was built and measured on;
a rule tuned to them would show it here. Eleven other shapes, three draws each (seeds 0, 1,
2; 1,500 to 18,000 points, d = 2, 3 and 5), written in the style of scikit-learn's
clustering examples: anisotropic and unequal-variance blobs, circles, moons, eight 3-d
Gaussians in 10 % noise, a face (outline, eyes, mouth) in 5 % noise, a 3 x 3 grid of blobs
of different sizes and spreads, three parallel lines in noise, 5-d blobs of 100 to 2,000
points, three sine "worms" in noise, and six 2-d blobs of three spreads in 20 % noise.
(A swiss roll cut into four bands by its position along the roll was dropped while this
battery was written: the bands are not clusters -- no method scored above 0.22 on it.)

``--arff DIR`` scores the labelled ARFF files of DIR instead (up to ``--max-points`` points
and ``--max-features`` features each; e.g. the artificial collection of
github.com/deric/clustering-benchmark).

Every set is scored (adjusted Rand index, noise a label of its own) for ``WaveCluster()``,
for ``WaveCluster()`` with each of the ``"auto"`` rule's optional steps switched off
(``--without``, module constants of :mod:`gpumine.wavecluster.engine` set to 0), for
HDBSCAN's defaults and for DBSCAN given the best of the quality benchmark's six ``eps``
(an oracle). Writes ``wavecluster-heldout-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import platform
import warnings

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.bench.quality import DBSCAN_EPS_FRACTIONS
from gpumine.bench.record import commit

SEEDS = (0, 1, 2)
#: ``--without`` switches, each a module constant of gpumine.wavecluster.engine set to 0.
STEPS = ("AUTO_COARSER_LEVELS", "AUTO_SPECK_STEPS", "AUTO_BORDER_CONNECTIVITY",
         "AUTO_COARSER_SPLIT")


def _noise(rng, X, share):
    """Uniform points over X's box widened by a tenth, ``share`` of len(X) of them."""
    lo, hi = X.min(0), X.max(0)
    pad = 0.1 * (hi - lo)
    return rng.uniform(lo - pad, hi + pad, (int(share * len(X)), X.shape[1]))


def _labelled(parts, noise=None):
    X = np.vstack(parts + ([noise] if noise is not None else []))
    y = np.concatenate([np.full(len(p), i) for i, p in enumerate(parts)]
                       + ([np.full(len(noise), -1)] if noise is not None else []))
    return X.astype(np.float64), y


def heldout_sets(seed: int) -> dict:
    """The battery's sets of one draw, by name: ``(X, y)``, -1 for noise."""
    from sklearn import datasets

    rng = np.random.RandomState(100 + seed)
    out = {}
    X, y = datasets.make_blobs(1500, random_state=170 + seed)
    out["aniso"] = (X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y)
    out["varied"] = datasets.make_blobs(1500, cluster_std=[1.0, 2.5, 0.5],
                                        random_state=170 + seed)
    out["circles"] = datasets.make_circles(1500, factor=0.5, noise=0.05, random_state=seed)
    out["moons"] = datasets.make_moons(1500, noise=0.05, random_state=seed)
    parts = [rng.normal(c, 0.6, (600, 3)) for c in rng.uniform(0, 20, (8, 3))]
    out["gauss3d-noise"] = _labelled(parts, _noise(rng, np.vstack(parts), 0.1))
    t = rng.uniform(0, 2 * np.pi, 1500)
    face = np.c_[3 * np.cos(t), 3 * np.sin(t)] + rng.normal(0, 0.1, (1500, 2))
    eyes = [rng.normal([-1, 1], 0.25, (300, 2)), rng.normal([1, 1], 0.25, (300, 2))]
    u = rng.uniform(np.pi * 1.15, np.pi * 1.85, 800)
    mouth = np.c_[1.8 * np.cos(u), 1.8 * np.sin(u) + 0.3] + rng.normal(0, 0.08, (800, 2))
    out["face-noise"] = _labelled([face, *eyes, mouth], _noise(rng, face, 0.05))
    out["grid9"] = _labelled([rng.normal([i * 3, j * 3], 0.3 + 0.15 * ((i + j) % 3),
                                         (200 + 150 * ((i * 3 + j) % 4), 2))
                              for i in range(3) for j in range(3)])
    parts = [np.c_[rng.uniform(0, 10, 2000), rng.normal(k, 0.12, 2000)] for k in range(3)]
    out["lines-noise"] = _labelled(parts, _noise(rng, np.vstack(parts), 0.1))
    centres = rng.uniform(0, 12, (4, 5))
    out["blobs5d-sizes"] = _labelled([rng.normal(c, 0.7, (m, 5))
                                      for c, m in zip(centres, (100, 400, 2000, 2000),
                                                      strict=True)])
    parts = []
    for k in range(3):
        x = rng.uniform(0, 4 * np.pi, 2500)
        parts.append(np.c_[x, np.sin(x) + 1.4 * k] + rng.normal(0, 0.1, (2500, 2)))
    out["worms-noise"] = _labelled(parts, _noise(rng, np.vstack(parts), 0.05))
    parts = [rng.normal(c, s, (3000, 2))
             for c, s in zip(rng.uniform(0, 30, (6, 2)), (0.4, 0.4, 0.9, 0.9, 2.0, 2.0),
                             strict=True)]
    out["density6-noise"] = _labelled(parts, _noise(rng, np.vstack(parts), 0.2))
    return {name: (np.asarray(X, dtype=np.float64), np.asarray(y)) for name, (X, y)
            in out.items()}


def _arff_sets(folder, max_points, max_features):
    """``(name, (X, y))`` of every labelled ARFF file in ``folder`` within the size limits,
    by name; files whose labels cannot be read as one per row are skipped, and said."""
    from pathlib import Path

    from gpumine.datasets import read_arff_points

    for path in sorted(Path(folder).glob("*.arff")):
        X, y, _ = read_arff_points(path)
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != len(X):
            print(f"skipped {path.name}: no label per row")
            continue
        if len(X) <= max_points and X.shape[1] <= max_features:
            yield path.stem, (np.asarray(X, dtype=np.float64), y)


def _scores(X, y, without) -> dict:
    from sklearn.cluster import DBSCAN, HDBSCAN
    from sklearn.metrics import adjusted_rand_score

    from gpumine.wavecluster import WaveCluster, engine

    scores = {"WaveCluster defaults": adjusted_rand_score(y, WaveCluster().fit(X).labels_)}
    for step in without:
        kept = getattr(engine, step)
        setattr(engine, step, 0)
        try:
            scores[f"WaveCluster without {step}"] = adjusted_rand_score(
                y, WaveCluster().fit(X).labels_)
        finally:
            setattr(engine, step, kept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # HDBSCAN's copy default changes
        scores["HDBSCAN defaults"] = adjusted_rand_score(y, HDBSCAN().fit_predict(X))
    diagonal = float(np.linalg.norm(X.max(0) - X.min(0)))
    scores["DBSCAN best eps"] = max(
        adjusted_rand_score(y, DBSCAN(eps=fraction * diagonal).fit_predict(X))
        for fraction in DBSCAN_EPS_FRACTIONS)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--without", default=",".join(STEPS),
                        help="comma-separated engine constants to score switched off")
    parser.add_argument("--arff", default=None, help="a folder of labelled ARFF files")
    parser.add_argument("--max-points", type=int, default=20_000)
    parser.add_argument("--max-features", type=int, default=3)
    args = parser.parse_args()
    without = [s for s in args.without.split(",") if s]
    if args.arff:
        sets = dict(_arff_sets(args.arff, args.max_points, args.max_features))
    else:
        sets = {f"{name}/seed{seed}": data for seed in SEEDS
                for name, data in heldout_sets(seed).items()}
    rows = []
    for name, (X, y) in sets.items():
        scores = _scores(X, y, without)
        rows.append({"set": name, "n": len(X), "d": X.shape[1], "ari": scores})
        print(name, {k: round(v, 3) for k, v in scores.items()})
    methods = list(rows[0]["ari"])
    summary = {m: {"mean": float(np.mean([r["ari"][m] for r in rows])),
                   "min": float(np.min([r["ari"][m] for r in rows]))} for m in methods}
    for m, s in summary.items():
        print(f"{m:45s} mean {s['mean']:.4f}  min {s['min']:.3f}")
    import sklearn

    record = {"device": f"cpu ({platform.processor() or platform.machine()})",
              "commit": commit(), "versions": {"numpy": np.__version__,
                                              "scikit-learn": sklearn.__version__,
                                              "python": platform.python_version()},
              "sets": args.arff or "generated (heldout_sets)", "summary": summary,
              "rows": rows}
    save(args.out, "wavecluster-heldout", record)


if __name__ == "__main__":
    main()
