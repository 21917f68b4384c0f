"""Measured strategy tables: what ``assign="auto"`` / ``update="auto"`` pick on a device.

``gpumine bench calibrate`` (:mod:`gpumine.bench.calibrate`) times whole k-means fits
(10 Lloyd iterations from fixed centres, what users call) for every pair of exact
assignment and update strategies over a grid of (n, d, k, dtype) on one device, and
writes a table: ``<cache>/tuning/<device>.json``, where ``<cache>`` is
``GPUMINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpumine``, else ``~/.cache/gpumine``.
Tables measured by the developers ship with the package (``gpumine/tuning_tables/``, by
device name); the user's own table takes precedence.

:func:`choose` reads the table of a device and, of the pairs consistent with what the
user fixed, takes the fastest at the problem's size: each pair's time interpolated
between the measured cells around the problem, linearly in log time against log n, log d
and log k (a power law between neighbouring cells; the cells of the problem's dtype; past
the grid's ends, the edge cells), so the choice changes where the pairs' times cross, not
halfway between cells. Until 2026-11-28 the nearest cell (in log n, d, k) decided alone:
it sent 50,000 x 32 x 2048 to the 20,000-row cell's ``tiled``, where ``tc-exact``, which
wins from 200,000 rows, fitted in 9.1 against 16.9 ms on the H200
(``fit-vs-flash-steady-h200-2026-11-28-d85d9cb.json``). A table that is not a full grid (a
``--quick`` calibration's two cells, a user's own) is read at its nearest cell, and so is
a GPU problem where ``hamerly``'s bounds pay (:func:`gpumine.registry.resolve_kmeans_pair`):
the table's 10-iteration fits do not see its later iterations, and interpolating there
would move 97 of 1,080 such shapes (n 0.6M-8M, d 2-32, k 8-2048, both shipped tables and
dtypes) from ``hamerly`` to ``tc-exact`` (and 17 back) without a long fit to say which is
faster. Where the fixed rule's pair measured within :data:`MARGIN` (5 %) of the fastest,
it is kept: the table departs from the rule only where the cells tell the pairs apart.
Without a table, or with a problem outside the measured range by more than a factor of 4
in n, d or k, ``auto`` keeps its fixed rule (:func:`gpumine.registry.resolve_strategy`).

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

import bisect
import functools
import itertools
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


_AXES = ("n", "d", "k")


def _size(value) -> float:
    """A cell's or a problem's size along an axis, as a positive number (0 and 1 alike)."""
    return max(float(value), 1.0)


def _grid(cells) -> tuple[dict, list] | None:
    """``({(n, d, k): cell}, [ns, ds, ks])`` where the cells are every combination of their
    axes' values once (``gpumine bench calibrate``'s grid), else None."""
    index = {}
    for cell in cells:
        key = tuple(_size(cell[axis]) for axis in _AXES)
        if key in index:
            return None
        index[key] = cell
    axes = [sorted({key[a] for key in index}) for a in range(len(_AXES))]
    if not index or len(index) != math.prod(len(values) for values in axes):
        return None
    return index, axes


def _bracket(values, v) -> list | None:
    """The grid values around ``v`` on one axis and their weights, linear in log size
    (one value at weight 1 on a grid value or past the grid's ends), or None farther than
    :data:`_MAX_EXTRAPOLATION` outside the grid."""
    if v > values[-1] * _MAX_EXTRAPOLATION or v * _MAX_EXTRAPOLATION < values[0]:
        return None
    if v <= values[0] or v >= values[-1]:
        return [(values[0] if v <= values[0] else values[-1], 1.0)]
    i = bisect.bisect_right(values, v) - 1
    if values[i] == v:
        return [(v, 1.0)]
    w = math.log(v / values[i]) / math.log(values[i + 1] / values[i])
    return [(values[i], 1.0 - w), (values[i + 1], w)]


def _corners(cells, point, nearest: bool = False) -> list | None:
    """``[(cell, weight)]``: the measured cells a problem's times come from (module
    docstring), or None where none is near enough; ``nearest``: the nearest cell alone."""
    try:
        grid = None if nearest else _grid(cells)
    except (KeyError, TypeError, ValueError):
        grid = None
    if grid is not None:
        index, axes = grid
        brackets = [_bracket(values, v) for values, v in zip(axes, point, strict=True)]
        if None in brackets:
            return None
        return [(index[tuple(value for value, _ in combo)], math.prod(w for _, w in combo))
                for combo in itertools.product(*brackets)]
    best, best_distance = None, math.inf  # not a full grid: the nearest cell
    for cell in cells:
        try:
            ratios = [math.log(v / _size(cell[axis]))
                      for axis, v in zip(_AXES, point, strict=True)]
        except (KeyError, TypeError, ValueError):
            continue
        if max(abs(r) for r in ratios) > math.log(_MAX_EXTRAPOLATION):
            continue
        distance = sum(r * r for r in ratios)
        if distance < best_distance:
            best, best_distance = cell, distance
    return None if best is None else [(best, 1.0)]


def _where(corners, dtype) -> str:
    """The cells as a reason says them: ``n=20000, d=32, k=1024`` for one, ranges between."""
    spans = []
    for axis in _AXES:
        values = sorted({corner[axis] for corner, _ in corners})
        spans.append(f"{axis}={values[0]}" if len(values) == 1
                     else f"{axis}={values[0]}..{values[-1]}")
    return ("at " if len(corners) == 1 else "between ") + ", ".join(spans) + f", {dtype}"


def choose(table: dict, *, n: int, d: int, k: int, dtype: str, assign: str | None = None,
           update: str | None = None, allowed=None,
           prefer: tuple[str, str] | None = None,
           nearest: bool = False) -> tuple[tuple[str, str], str] | None:
    """``((assign, update), reason)``: the fastest measured pair for this problem, or None.

    Each pair's time is interpolated between the measured cells around the problem (the
    module docstring; the nearest cell where the table is no full grid, or with
    ``nearest``).
    ``assign`` / ``update``: a name the user fixed (only pairs with it count); None: free.
    ``allowed(assign, update)``: whether a pair may run this problem (None: all may).
    ``prefer``: the fixed rule's pair, kept where its time is within :data:`MARGIN` of the
    fastest. None is returned when no cell is near enough (see the module) or no measured
    pair fits.
    """
    cells = [c for c in table.get("cells", []) if isinstance(c, dict) and c.get("dtype") == dtype]
    corners = _corners(cells, [_size(v) for v in (n, d, k)], nearest)
    if corners is None:
        return None
    times = {}
    for pair in corners[0][0].get("seconds", {}):
        if not (_pair_allowed(pair, assign, update)
                and (allowed is None or allowed(*pair.partition("/")[::2]))):
            continue
        measured = [cell.get("seconds", {}).get(pair) for cell, _ in corners]
        if all(isinstance(t, (int, float)) and t > 0 for t in measured):
            times[pair] = math.exp(sum(w * math.log(t)
                                       for (_, w), t in zip(corners, measured, strict=True)))
    if not times:
        return None
    pair = min(times, key=times.get)
    where = (f"measured on {table.get('device', 'this device')}: {{}} of {len(times)} pairs "
             + _where(corners, dtype))
    reason = where.format("fastest")
    kept = None if prefer is None else "/".join(prefer)
    if kept is not None and kept != pair and times.get(kept, math.inf) <= MARGIN * times[pair]:
        pair = kept
        reason = where.format(f"the fixed rule's pair, within {MARGIN - 1:.0%} of the fastest")
    a, _, u = pair.partition("/")
    return (a, u), reason
