"""Measured strategy tables: what ``assign="auto"`` / ``update="auto"`` pick on a device.

``gpumine bench calibrate`` (:mod:`gpumine.bench.calibrate`) times whole k-means fits
(10 Lloyd iterations from fixed centres, what users call) for every pair of exact
assignment and update strategies over a grid of (n, d, k, dtype) on one device, and
writes a table: ``<cache>/tuning/<device>.json``, where ``<cache>`` is
``GPUMINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpumine``, else ``~/.cache/gpumine``.
Tables measured by the developers ship with the package (``gpumine/tuning_tables/``, by
device name); the user's own table takes precedence.

:func:`choose` reads the table of a device: the measured cell nearest to the problem
(distance in log n, log d and log k, among the cells of the problem's dtype)
and, of its pairs consistent with what the user fixed, the fastest. This nearest-cell
rule is the interpolation: the fastest pair changes where the work per point (d k) or
the rows (n) cross a threshold, and the cell nearest in log space lies on the same
side of it whenever the grid brackets the problem. Where the fixed rule's pair measured
within :data:`MARGIN` (5 %) of the fastest, it is kept: the table departs from the rule only
where the cell tells the pairs apart. Without a table, or with a problem
outside the measured range by more than a factor of 4 in n, d or k, ``auto`` keeps its
fixed rule (:func:`gpumine.registry.resolve_strategy`).

Examples
--------
>>> from gpumine.tuning import choose
>>> table = {"device": "demo", "cells": [
...     {"n": 10000, "d": 8, "k": 16, "dtype": "float32",
...      "seconds": {"tiled/atomic": 0.002, "tiled/sort": 0.004}}]}
>>> choose(table, n=12000, d=8, k=20, dtype="float32")
(('tiled', 'atomic'), 'measured on demo: fastest of 2 pairs at n=10000, d=8, k=16, float32')
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from pathlib import Path

__all__ = ["MARGIN", "cache_dir", "choose", "device_slug", "load_table", "shipped_dir",
           "table_path"]

#: How far outside the measured grid (a factor in n, d or k) a table is still used.
_MAX_EXTRAPOLATION = 4.0
#: A measured pair replaces the fixed rule's pair only when faster by more than this factor:
#: closer than that, the cell's fits do not tell the pairs apart (the H100 table of 90aa895
#: put ``tc-exact`` 1 % ahead of ``tiled`` at 2M x 2 x 1024, and the nearest-cell rule then
#: sent 1M x 4 x 400 to ``tc-exact``, 0.55 against ``tiled``'s 0.42 ms an iteration in
#: ``tc-assign-h100-2026-11-27-98c00b1.json``).
MARGIN = 1.05


def cache_dir() -> Path:
    """The user's gpumine cache directory (``GPUMINE_CACHE_DIR`` overrides)."""
    if os.environ.get("GPUMINE_CACHE_DIR"):
        return Path(os.environ["GPUMINE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpumine"


def shipped_dir() -> Path:
    """Where the package's own tables are (package data)."""
    return Path(__file__).with_name("tuning_tables")


def device_slug(device_name: str) -> str:
    """A file name for a device: ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "device"


def table_path(device_name: str) -> Path:
    """The user's table of ``device_name`` (where ``gpumine bench calibrate`` writes)."""
    return cache_dir() / "tuning" / f"{device_slug(device_name)}.json"


@functools.cache
def _read(path: str, mtime: float) -> dict | None:
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # an unreadable table is no table: auto keeps its fixed rule
    return table if isinstance(table, dict) and isinstance(table.get("cells"), list) else None


@functools.cache
def _candidates(device_name: str, *environment: str | None) -> tuple[str, str]:
    """The user's and the shipped table paths of a device (per environment: a fit asks
    each time, and building the paths cost more than the lookups)."""
    return (str(table_path(device_name)),
            str(shipped_dir() / f"{device_slug(device_name)}.json"))


def load_table(device_name: str) -> dict | None:
    """The table of ``device_name``: the user's, else the shipped one, else None."""
    for path in _candidates(device_name, *(os.environ.get(name) for name in
                                           ("GPUMINE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"))):
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        table = _read(path, mtime)
        if table is not None:
            return table
    return None


def _pair_allowed(pair: str, assign: str | None, update: str | None) -> bool:
    a, _, u = pair.partition("/")
    return (assign is None or a == assign) and (update is None or u == update)


def choose(table: dict, *, n: int, d: int, k: int, dtype: str, assign: str | None = None,
           update: str | None = None, allowed=None,
           prefer: tuple[str, str] | None = None) -> tuple[tuple[str, str], str] | None:
    """``((assign, update), reason)``: the fastest measured pair for this problem, or None.

    ``assign`` / ``update``: a name the user fixed (only pairs with it count); None: free.
    ``allowed(assign, update)``: whether a pair may run this problem (None: all may).
    ``prefer``: the fixed rule's pair, kept where the cell measured it within :data:`MARGIN`
    of the fastest. None is returned when no cell is near enough (see the module) or no
    measured pair fits.
    """
    cells = [c for c in table.get("cells", []) if isinstance(c, dict) and c.get("dtype") == dtype]
    best, best_distance = None, math.inf
    for cell in cells:
        try:
            ratios = [math.log(max(v, 1) / max(cell[key], 1))
                      for key, v in (("n", n), ("d", d), ("k", k))]
        except (KeyError, TypeError, ValueError):
            continue
        if max(abs(r) for r in ratios) > math.log(_MAX_EXTRAPOLATION):
            continue
        distance = sum(r * r for r in ratios)
        if distance < best_distance:
            best, best_distance = cell, distance
    if best is None:
        return None
    times = {pair: seconds for pair, seconds in best.get("seconds", {}).items()
             if isinstance(seconds, (int, float)) and _pair_allowed(pair, assign, update)
             and (allowed is None or allowed(*pair.partition("/")[::2]))}
    if not times:
        return None
    pair = min(times, key=times.get)
    where = (f"measured on {table.get('device', 'this device')}: {{}} of {len(times)} pairs "
             f"at n={best['n']}, d={best['d']}, k={best['k']}, {best.get('dtype')}")
    reason = where.format("fastest")
    kept = None if prefer is None else "/".join(prefer)
    if kept is not None and kept != pair and times.get(kept, math.inf) <= MARGIN * times[pair]:
        pair = kept
        reason = where.format(f"the fixed rule's pair, within {MARGIN - 1:.0%} of the fastest")
    a, _, u = pair.partition("/")
    return (a, u), reason
