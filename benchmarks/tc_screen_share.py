"""Where the screen stops paying: tc-exact's bound run with the screen always kept against
the split kernel alone, beside the share of rows the screen leaves (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_screen_share.py --out benchmarks/results [--tag ...]

A fit's :class:`~gpumine.kmeans.tensor_cores.ScreenedRun` keeps the one-product screen
first while it leaves at most ``SCREEN_SHARE`` of the rows (for the padded width): past
that, the split kernel on the rows it leaves plus the screen's own pass cost more than the
split kernel on every row. This measures both sides of that rule on data whose left share
spans it: for each shape and data set (``tc_clustered.py``'s: uniform, or ``blobs:C``) and
each set of centres (``init``, ``iter10``), a bound run with the screen always kept
(``SCREEN_SHARE`` 1 for the width) and one with none (``SCREEN_SHARE`` emptied), the device
time of one assignment of each (5 calls after a warm-up, in turns, three times), the share
of rows the screen left, and whether each one's labels equal ``tiled``'s on every row
(poisoned labels in). ``kept_over_alone`` below 1 says the screen paid at that share.
Writes ``tc-screen-share[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
from functools import partial

from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time
from tc_clustered import staged_cases
from tc_screen_ab import screen_left

KINDS = ("uniform", "blobs:4096", "blobs:1024", "blobs:256", "blobs:64", "blobs:16")
SHAPES = [(1_000_000, 128, 1024), (1_000_000, 64, 1024), (4_000_000, 32, 1024)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--centres", default="/tmp")
    parser.add_argument("--tag", default="")
    parser.add_argument("--kinds", nargs="*", default=list(KINDS))
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.record import context
    from gpumine.kmeans import tensor_cores as tc

    backend = get_backend("gpu")
    cp = backend.xp
    shares = dict(tc.SCREEN_SHARE)
    record = {**context(backend), "screen_share": {str(k): v for k, v in shares.items()},
              "rows": []}
    cases = [(n, d, k, kind) for n, d, k in SHAPES for kind in args.kinds]
    try:
        for n, d, k, kind, stage, X, centres, expected in staged_cases(cp, cases, args.centres):
            dp = tc._padded_width(d)
            row = {"n": n, "d": d, "k": k, "data": kind, "centres": stage}
            runs = {}
            for which, share in (("kept", {dp: 1.0}), ("alone", {})):
                tc.SCREEN_SHARE = share
                runs[which] = tc.assign_tc_exact.bind(X)
                row[f"calls_{which}"] = [screen_left(cp, runs[which], X, centres)
                                         for _ in range(2)]
            scratch = cp.zeros(n, dtype=cp.int32)
            for which in ("kept", "alone") * 3:
                tc.SCREEN_SHARE = {dp: 1.0} if which == "kept" else {}
                row.setdefault(f"assign_ms_{which}", []).append(
                    device_time(cp, partial(runs[which], X, centres, scratch), 5) * 1e3)
                labels = cp.full(n, -7, dtype=cp.int32)
                runs[which](X, centres, labels)
                equal = (labels == expected).all()
                row[f"labels_equal_tiled_{which}"] = bool(equal)  # sync: the check
            row["screen_left_share"] = row["calls_kept"][-1]["screen_left"] / n
            row["kept_over_alone"] = (min(row["assign_ms_kept"])
                                      / min(row["assign_ms_alone"]))
            print(row, flush=True)
            record["rows"].append(row)
    finally:
        tc.SCREEN_SHARE = shares
    save(args.out, "tc-screen-share" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
