"""How many rows three screens of tc-exact's would decide, simulated in NumPy (issue 13).

Usage (repository root; no GPU needed)::

    python benchmarks/tc_two_product_study.py --out benchmarks/results [--n 20000]

The fused kernel scores a row x against centre c as ``|c|^2 - 2 x.c`` from FP16 parts of
the shifted, scaled values (``x = x_hi + x_lo``, ``c = c_hi + c_lo``, each part FP16 of what
is left) and decides a row where the margin between its two best scores exceeds what every
error can move it (the docstring of ``gpumine.kmeans.tensor_cores``; ``top2_decides`` in
``kernels/kmeans_assign_tc.cu``). The rows it does not decide go on to a slower pass. Three
ways to score, each with what it drops:

* ``one``: the screen as built, ``x_hi.c_hi`` alone: every score may be off by
  ``2 (rho_x cmax + (|x| + rho_x) rho_c)`` (rho: the norm of a row's or the largest
  centre's lo part), on the scale of the data's spread about the centres' mean;
* ``two``: a screen not built, ``x_hi.(c_hi + c_lo)``: a margin ``s_j - s_b`` may be off by
  ``2 x_lo.(c_j - c_b)``, at most ``2 rho_x (sqrt(D_j) + sqrt(D_b))`` with D a distance
  bounded from its score, which grows more slowly than ``s_j`` (so checking the second
  best decides for every centre): on the scale of the distances, local on clustered data;
* ``split``: the split kernel, all three products: no dropped term.

Each adds the kernels' other errors (``error_bound``'s kappa_g, kappa_d, the absolute term
and the shift's kappa_s; ``one`` its keys' move too). Scores here are exact sums of the
parts' products (float64), so the kernels' own rounding is only in those constants; what
the simulation checks is the dropped terms: every row a rule decides must have the exact
FP64 label (the direct sum of squares, ties to the lowest index), and the record counts the
rows that do not (must be 0). Data as ``fit_vs_flash.py`` makes it (uniform MT19937, or 64
blobs) with ``--fit-rows`` rows; centres its first k rows, and those after ten Lloyd
iterations over all of them (exact labels, FP64 means: about a thousand rows a centre's
neighbourhood at 1M rows in the kernels' records, so centres fitted on few rows would sit
less close to their neighbours); the rules are read on ``--n`` rows drawn from them.
Writes ``tc-two-product-study-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data

from gpumine.kmeans.tensor_cores import error_bound


def _key_bits(k: int) -> int:
    """The one-product kernel's key bits (``key_bits`` in kernels/kmeans_assign_tc.cu): enough
    for q < k_pad / 4, k_pad the centres padded to a multiple of 64.

    >>> _key_bits(1024), _key_bits(300), _key_bits(1)
    (8, 7, 4)
    """
    k_pad = -(-k // 64) * 64
    return max(k_pad // 4 - 1, 1).bit_length()


def _fp16_parts(values, scale):
    """FP16 hi and lo of ``values * 2^scale`` (per row), back in float64 and unscaled."""
    scaled = values * np.exp2(scale)
    hi = scaled.astype(np.float16).astype(np.float64)
    lo = (scaled - hi).astype(np.float16).astype(np.float64)
    factor = np.exp2(-scale)
    return hi * factor, lo * factor


def _scale(top):
    """half_scale's exponent: 2^s top in [2^12, 2^13) (0 for a zero top)."""
    safe = np.where(top > 0, top, 1.0)
    return np.where(top > 0, 12 - np.floor(np.log2(safe)), 0.0)


def _exact_labels(X, C):
    D = (X * X).sum(axis=1)[:, None] - 2 * X @ C.T + (C * C).sum(axis=1)[None]
    # the expanded form only to find the candidates; the direct sum decides near-ties
    two = np.argpartition(D, 3, axis=1)[:, :4]
    direct = ((X[:, None, :] - C[two]) ** 2).sum(axis=2)
    order = np.lexsort((two, direct), axis=1)[:, 0]
    return two[np.arange(len(X)), order]


def _lloyd(X, C, iterations):
    for _ in range(iterations):
        labels = _exact_labels(X, C)
        sums = np.zeros_like(C)
        np.add.at(sums, labels, X)
        counts = np.bincount(labels, minlength=len(C))[:, None]
        C = np.where(counts > 0, sums / np.maximum(counts, 1), C)
    return C


def study(X32, C32, d):
    """Rows decided and wrongly decided by each rule."""
    X, C = X32.astype(np.float64), C32.astype(np.float64)
    exact = _exact_labels(X, C)
    shift = C.mean(axis=0)
    Xs = (X - shift).astype(np.float32).astype(np.float64)
    Cs = (C - shift).astype(np.float32).astype(np.float64)
    x_norm = np.sqrt((Xs * Xs).sum(axis=1))
    c_norms = np.sqrt((Cs * Cs).sum(axis=1))
    cmax = c_norms.max()
    x_hi, x_lo = _fp16_parts(Xs, _scale(np.abs(Xs).max(axis=1))[:, None])
    c_hi, c_lo = _fp16_parts(Cs, _scale(cmax))
    c_rest = Cs - c_hi - c_lo  # what c_lo's own rounding leaves
    rho_x = np.sqrt((x_lo * x_lo).sum(axis=1))
    rho_c = np.sqrt(((Cs - c_hi) ** 2).sum(axis=1)).max()
    rest_c = np.sqrt((c_rest * c_rest).sum(axis=1)).max()
    kappa_g, kappa_d, absolute, _, kappa_s = error_bound(d, np.float32)
    e_g = (kappa_g * (2 * x_norm * cmax + cmax**2) + absolute * (1 + x_norm + cmax)
           + kappa_s * (x_norm + cmax) ** 2)
    norms = (Cs * Cs).sum(axis=1)[None]
    scores = {"one": norms - 2 * x_hi @ c_hi.T,
              "two": norms - 2 * x_hi @ (c_hi + c_lo).T,
              "split": norms - 2 * (x_hi @ (c_hi + c_lo).T + x_lo @ c_hi.T)}
    out = {}
    for rule, s in scores.items():
        top = np.argsort(s, axis=1, kind="stable")[:, :2]
        best = s[np.arange(len(X)), top[:, 0]]
        second = s[np.arange(len(X)), top[:, 1]]
        if rule == "one":
            moved = 2 * (rho_x * cmax + (x_norm + rho_x) * rho_c)
            S = cmax**2 + 2 * x_norm * cmax + e_g + moved
            extra = moved + np.ldexp(S, _key_bits(len(C)) - 23) + np.ldexp(S, -22)
        elif rule == "two":
            # per score: the dropped 2 x_lo.c_j (for D's bound) and c_lo's rounding
            per_score = 2 * rho_x * cmax + e_g + 2 * (x_norm + rho_x) * rest_c
            upper_b = np.sqrt(np.maximum(x_norm**2 + best + per_score, 0))
            upper_2 = np.sqrt(np.maximum(x_norm**2 + second + per_score, 0))
            # the margin's dropped part, as a per-score term (top2_decides doubles it)
            extra = rho_x * (upper_b + upper_2) + 2 * (x_norm + rho_x) * rest_c
            extra = np.where(upper_2 >= rho_x, extra, np.inf)  # where the check is monotone
        else:
            extra = 2 * (x_norm + rho_x) * rest_c  # c_lo's own rounding on x_lo.c_hi's side
        e = e_g + extra
        distances = np.abs(2 * x_norm**2 + best + second) + 2 * e
        decided = (second - best) > 2 * e + kappa_d * distances
        wrong = decided & (top[:, 0] != exact)
        out[rule] = {"decided": round(float(decided.mean()), 6), "wrong": int(wrong.sum())}
    return out


def main() -> int:
    from gpumine.backend import get_backend
    from gpumine.bench.record import context

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--fit-rows", type=int, default=200_000)
    args = parser.parse_args()
    record = {**context(get_backend("cpu")), "script": "benchmarks/tc_two_product_study.py",
              "n": args.n, "k": args.k, "fit_rows": args.fit_rows, "rows": []}
    for d in (32, 128):
        for data in ("uniform", "blobs:64"):
            X = _data(args.fit_rows, d, data)
            first = X[: args.k].copy()
            read = X[np.random.default_rng(1).choice(len(X), min(args.n, len(X)),
                                                     replace=False)]
            for centres, C in (("first rows", first),
                               ("ten iterations", _lloyd(X.astype(np.float64),
                                                         first.astype(np.float64), 10)
                                .astype(np.float32))):
                row = {"d": d, "data": data, "centres": centres, **study(read, C, d)}
                print(row, flush=True)
                record["rows"].append(row)
    save(args.out, "tc-two-product-study", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
