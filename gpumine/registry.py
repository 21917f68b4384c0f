"""The strategy registry: every pluggable step of gpumine, built-in or third-party.

A :class:`Strategy` is metadata -- ``kind``, ``name``, ``backend``, the seed
``paper`` it comes from, a one-line ``description`` -- plus ``target``, the
``"module:attribute"`` of its implementation, imported only when the strategy
is chosen: a callable for every kind but ``wavecluster.wavelet``, whose
implementation is a :class:`gpumine.wavecluster.wavelet.Wavelet` (its low-pass
filter and cell alignment). The kinds are :data:`KINDS`.

Built-in strategies are listed in :mod:`gpumine.catalogue`. Third parties add
theirs through the entry-point group ``gpumine.strategies``; each entry point
names an object that is (or a callable that returns) a :class:`Strategy`, a
mapping with the same fields, or an iterable of those::

    # pyproject.toml of a plugin
    [project.entry-points."gpumine.strategies"]
    myplugin = "myplugin.meta:strategies"

    # myplugin/meta.py -- imports nothing heavy
    def strategies():
        return [{"kind": "kmeans.update", "name": "my-update", "backend": "gpu",
                 "target": "myplugin.kernels:update", "description": "..."}]

Plugins are discovered once, on first use. A plugin whose metadata fails to load,
is malformed, or clashes with an existing name is recorded as broken with its
name and the error; the other strategies are unaffected, and asking for a name
that is not there mentions the broken plugins. A plugin whose implementation
fails to import raises :class:`~gpumine.exceptions.StrategyLoadError` naming the
plugin, only when that strategy is chosen.

Examples
--------
>>> from gpumine.registry import get_strategy, list_strategies
>>> [s.name for s in list_strategies("kmeans.init")]
['k-means++', 'k-means||', 'random']
>>> get_strategy("kmeans.update", "numpy").backend
'cpu'
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from importlib import metadata

from gpumine.exceptions import (
    IncompatibleStrategy,
    InvalidParameterError,
    StrategyLoadError,
    UnknownStrategy,
)

__all__ = [
    "BACKENDS",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "BrokenPlugin",
    "Strategy",
    "broken_plugins",
    "get_strategy",
    "list_strategies",
    "load_strategy",
    "refresh",
    "register",
    "resolve_strategy",
]

KINDS = (
    "kmeans.init",
    "kmeans.assign",
    "kmeans.update",
    "wavecluster.wavelet",
    "wavecluster.label",
)
#: Where a strategy runs. ``"any"``: written against the backend's ``xp``, so both.
BACKENDS = ("cpu", "gpu", "any")
ENTRY_POINT_GROUP = "gpumine.strategies"
BUILTIN_ORIGIN = "gpumine"


@dataclass(frozen=True)
class Strategy:
    """Metadata of one strategy; the implementation is imported by :meth:`load`.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    name : str
        The public name users pass, e.g. ``assign="tiled"``.
    backend : {"cpu", "gpu", "any"}
        Where it runs.
    target : str
        ``"package.module:attribute"`` of the implementation.
    description : str
        One line on how it works.
    paper : str or None
        Seed paper and section it implements, e.g. ``"004 §5.1"``.
    origin : str
        ``"gpumine"`` for built-ins, else the plugin's distribution and entry point.
    max_dims : int or None
        The most dimensions (features, grid axes) it handles; None: any. Estimators
        check it before any work.
    """

    kind: str
    name: str
    backend: str
    target: str
    description: str = ""
    paper: str | None = None
    origin: str = BUILTIN_ORIGIN
    max_dims: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidParameterError(f"strategy kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.name, str) or not self.name or self.name == "auto":
            raise InvalidParameterError(
                f"strategy name must be a non-empty string other than 'auto', "
                f"got {self.name!r}")
        if self.backend not in BACKENDS:
            raise InvalidParameterError(
                f"strategy backend must be one of {BACKENDS}, got {self.backend!r}")
        module, _, attribute = self.target.partition(":")
        if not module or not attribute:
            raise InvalidParameterError(
                f"strategy target must be 'module:attribute', got {self.target!r}")

    def runs_on(self, backend_name: str) -> bool:
        """True if the strategy can run on the backend called ``backend_name``."""
        return self.backend in ("any", backend_name)

    def load(self) -> Callable:
        """Import and return the implementation."""
        module_name, _, attribute = self.target.partition(":")
        try:
            obj = importlib.import_module(module_name)
            for part in attribute.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            raise StrategyLoadError(
                f"strategy {self.kind}/{self.name!r} from {self.origin} failed to load "
                f"{self.target!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return obj


@dataclass(frozen=True)
class BrokenPlugin:
    """A ``gpumine.strategies`` entry point that could not be registered."""

    entry_point: str
    distribution: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.entry_point!r} ({self.distribution}): {self.error}"


class _Registry:
    """Built-ins plus lazily discovered plugins; thread-safe discovery."""

    def __init__(self):
        self._lock = threading.RLock()
        self._builtin: dict[tuple[str, str], Strategy] = {}
        self._plugins: dict[tuple[str, str], Strategy] | None = None
        self._broken: list[BrokenPlugin] = []
        self._builtins_loaded = False

    # -- population -------------------------------------------------------
    def _ensure(self) -> None:
        with self._lock:
            if not self._builtins_loaded:
                from gpumine.catalogue import BUILTIN_STRATEGIES

                for strategy in BUILTIN_STRATEGIES:
                    self._add(self._builtin, strategy)
                self._builtins_loaded = True
            if self._plugins is None:
                self._plugins, self._broken = self._discover()

    def _add(self, table, strategy: Strategy) -> None:
        key = (strategy.kind, strategy.name)
        if key in self._builtin or key in table:
            raise InvalidParameterError(
                f"strategy {strategy.kind}/{strategy.name!r} is already registered")
        table[key] = strategy

    def _discover(self):
        plugins: dict[tuple[str, str], Strategy] = {}
        broken: list[BrokenPlugin] = []
        for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = entry_point.dist.name if entry_point.dist is not None else "unknown"
            origin = f"{dist} (entry point {entry_point.name!r})"
            try:
                specs = _as_strategies(entry_point.load(), origin)
                found: dict[tuple[str, str], Strategy] = {}
                for spec in specs:
                    if (spec.kind, spec.name) in plugins:
                        raise InvalidParameterError(
                            f"{spec.kind}/{spec.name!r} is already registered "
                            f"by {plugins[(spec.kind, spec.name)].origin}")
                    self._add(found, spec)
            except Exception as exc:
                broken.append(BrokenPlugin(entry_point.name, dist, f"{type(exc).__name__}: {exc}"))
                continue
            plugins.update(found)
        return plugins, broken

    # -- queries ----------------------------------------------------------
    def all(self) -> dict[tuple[str, str], Strategy]:
        self._ensure()
        return {**self._builtin, **self._plugins}

    def broken(self) -> list[BrokenPlugin]:
        self._ensure()
        return list(self._broken)

    def register(self, strategy: Strategy) -> None:
        self._ensure()
        with self._lock:
            self._add(self._plugins, strategy)

    def refresh(self) -> None:
        with self._lock:
            self._plugins = None
            self._broken = []


def _as_strategies(obj, origin: str) -> list[Strategy]:
    """Turn what a plugin's entry point returned into a list of Strategy."""
    if callable(obj) and not isinstance(obj, Strategy):
        obj = obj()
    if isinstance(obj, (Strategy, Mapping)):
        obj = [obj]
    if not isinstance(obj, Iterable) or isinstance(obj, (str, bytes)):
        raise StrategyLoadError(
            f"expected Strategy metadata or an iterable, got {type(obj).__name__}")
    names = {f.name for f in fields(Strategy)}
    out = []
    for item in obj:
        if isinstance(item, Strategy):
            item = {f: getattr(item, f) for f in names}
        if not isinstance(item, Mapping):
            raise StrategyLoadError(
                f"strategy metadata must be a mapping, got {type(item).__name__}")
        unknown = set(item) - names
        if unknown:
            raise StrategyLoadError(f"unknown strategy metadata fields {sorted(unknown)}")
        out.append(Strategy(**{**item, "origin": origin}))
    if not out:
        raise InvalidParameterError("the entry point returned no strategies")
    return out


_REGISTRY = _Registry()


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidParameterError(f"unknown strategy kind {kind!r}; kinds are {', '.join(KINDS)}")


def list_strategies(kind: str | None = None, backend: str | None = None) -> list[Strategy]:
    """Return registered strategies, sorted by kind then name.

    Parameters
    ----------
    kind : str, optional
        Only this kind (one of :data:`KINDS`).
    backend : {"cpu", "gpu"}, optional
        Only strategies that run on this backend.

    Examples
    --------
    >>> [s.name for s in list_strategies("kmeans.assign", backend="cpu")]
    ['numba', 'numpy']
    """
    if kind is not None:
        _check_kind(kind)
    found = [
        s for s in _REGISTRY.all().values()
        if (kind is None or s.kind == kind) and (backend is None or s.runs_on(backend))
    ]
    return sorted(found, key=lambda s: (KINDS.index(s.kind), s.name))


def broken_plugins() -> list[BrokenPlugin]:
    """Plugins of the ``gpumine.strategies`` group that failed to register, with why."""
    return _REGISTRY.broken()


def get_strategy(kind: str, name: str) -> Strategy:
    """Return the metadata of strategy ``name`` of ``kind``.

    Raises
    ------
    UnknownStrategy
        No such name; the message lists the names of that kind and any broken plugins.
    """
    _check_kind(kind)
    strategies = _REGISTRY.all()
    try:
        return strategies[(kind, name)]
    except (KeyError, TypeError):
        pass
    known = sorted(n for (k, n) in strategies if k == kind)
    message = f"unknown {kind} strategy {name!r}; known: {', '.join(known) or 'none'}"
    broken = _REGISTRY.broken()
    if broken:
        message += "; plugins that failed to load: " + "; ".join(str(b) for b in broken)
    raise UnknownStrategy(message)


def load_strategy(kind: str, name: str) -> Callable:
    """Return the implementation of strategy ``name`` of ``kind`` (imported now)."""
    return get_strategy(kind, name).load()


# The fixed defaults behind "auto", per (kind, backend name), where no measured table
# (gpumine.tuning, written by `gpumine bench calibrate`) applies: resolve_kmeans_pair.
#
# On the GPU: the tiled assignment (points in registers, centroids in shared memory,
# exact in the data's precision), or tc-exact on wide problems (_wide_problem), and the
# privatized-atomic update (shared-memory atomics when k(d+1) doubles fit a block, else
# global atomics; `gather` is opt-in: measured slower on 7 of 8 small shapes,
# benchmarks/results/update-small-2026-11-23-f94c03d.json).
_AUTO_DEFAULTS = {
    ("kmeans.assign", "cpu"): "numpy",
    ("kmeans.update", "cpu"): "numpy",
    ("kmeans.assign", "gpu"): "tiled",
    ("kmeans.update", "gpu"): "atomic",
    ("wavecluster.label", "cpu"): "scipy",
    ("wavecluster.label", "gpu"): "union-find-gpu",
}


#: ``"auto"`` picks ``tc-exact`` over ``tiled`` from these sizes on: measured on the H100
#: (benchmarks/results/tc-assign-2026-11-23-*.json) it is 1.6x to 2.2x faster per Lloyd
#: iteration on 1M x 128, k = 1024 and 10M x 32, k = 1024, but slower on 50k x 32,
#: k = 2048 (too few rows for its re-check) and at d <= 8. Both give the same labels, so
#: the choice is speed only.
TC_MIN_SAMPLES, TC_MIN_FEATURES, TC_MIN_WORK = 500_000, 32, 32768


#: ``"auto"`` runs ``tiled``'s GPU picks as ``hamerly`` (the same labels) from this many rows
#: on, for d <= 32: measured on the H100 (benchmarks/results/hamerly-ab-2026-11-24-*.json),
#: whole default fits 4M x 8, k = 200 in 138 against 179 ms, 1M x 4, k = 400 in 61 against
#: 89, 4M x 2, k = 100 in 28 against 34; slower on 50k x 32, k = 2048 (+3 %) and at the
#: Corel size, where the fused loop runs.
HAMERLY_MIN_SAMPLES = 1 << 19


#: Where ``hamerly``, or ``tc-exact`` from :data:`HAMERLY_MIN_SAMPLES` rows, assigns float32
#: data, ``"auto"``'s ``atomic`` update runs as ``atomic-fixed``, whose sums then follow the
#: rows each iteration moves instead of being recomputed (bit for bit the same:
#: ``gpumine.kmeans.gpu._TrackedFixed``). Steady iterations on the H200, one process,
#: uniform data, median of 5 (benchmarks/results/tracked-fixed-ab2-h200-3adbf81.json):
#: hamerly at 1M x 4, k = 400 0.091 ms, against 0.123 recomputing atomic-fixed's sums and
#: 0.147 with atomic (a13dbd4); tc-exact at 1M x 128, k = 1024 1.69 against 1.98 / 2.01 ms,
#: at 10M x 32, k = 1024 5.91 against 6.33 / 6.57 ms. Below 2^19 rows tc-exact keeps
#: ``atomic`` (50k x 32, k = 2048: 20-iteration fits 6.1 against 5.8 ms, the fixed-point
#: partials twice as wide in shared memory and few iterations to follow).
FOLLOWING_UPDATE = "atomic-fixed"


def _bounds_pay(n_samples: int | None, n_features: int | None) -> bool:
    return (None not in (n_samples, n_features) and n_samples >= HAMERLY_MIN_SAMPLES
            and n_features <= 32)


#: ``assign="hamerly"`` scans its queued points on the tensor cores (``tc-exact``'s kernels
#: over the queue: :class:`gpumine.kmeans.bounds.BoundAssign`) where d <= 32 and d * k is at
#: least this, from :data:`TC_SCAN_MIN_ROWS` rows (and compute capability 8.0); else by its
#: register loop. Measured on the H200 (``hamerly-scan-ab-*-h200.json``): the register loop
#: faster at 4M x 8, k = 200 and 1M x 4, k = 400, the tensor cores from 4M x 16, k = 512 on,
#: 1M x 8, k = 1024 mixed.
TC_SCAN_MIN_WORK = 8192
#: ... from this many rows.
TC_SCAN_MIN_ROWS = 1 << 16


def hamerly_tensor_scan(n_samples: int, n_features: int, n_clusters: int) -> bool:
    """Whether ``hamerly`` bound to n x d points with k centres scans its queued points on
    the tensor cores (:data:`TC_SCAN_MIN_WORK`, :data:`TC_SCAN_MIN_ROWS`; the device's
    compute capability is the caller's to check).

    Examples
    --------
    >>> hamerly_tensor_scan(10_000_000, 32, 1024), hamerly_tensor_scan(4_000_000, 8, 200)
    (True, False)
    """
    return (n_features <= 32 and n_features * n_clusters >= TC_SCAN_MIN_WORK
            and n_samples >= TC_SCAN_MIN_ROWS)


#: ``hamerly`` takes up to this many features (``bounds.MAX_FEATURES``; past 32 its queue is
#: always scanned on the tensor cores). Here, not imported: this module is the bottom layer.
HAMERLY_MAX_FEATURES = 128
#: ... and past 32 features ``"auto"`` runs it from this many centres (measured: k = 1024
#: faster at d = 64 and 128, k = 256 slower at d = 128 on uniform data).
TC_SCAN_WIDE_MIN_CLUSTERS = 1024


def _tensor_bounds(n_samples: int | None, n_features: int | None,
                   n_clusters: int | None) -> bool:
    """Where bounds pay and ``hamerly`` scans its queued points on the tensor cores
    (:func:`hamerly_tensor_scan`; past 32 features, up to :data:`HAMERLY_MAX_FEATURES`, it
    always does): a fit's ``"auto"`` takes it without a race (:func:`resolve_kmeans_pair`,
    where the fit binds it).

    Measured on the H200 against ``tc-exact`` (records ``hamerly-scan-ab-*-h200.json``,
    uniform data and 64 blobs, first k rows as centres): at d <= 32 (1M-10M rows, d 8-32,
    k 512-1024) faster over 20- and 100-iteration fits on every shape; at 1M x 64 and
    1M x 128, k = 1024, 13-35 % faster a steady iteration (the bounds skip most rows late in
    a fit), its first iterations slower (most rows queued: the filter's pass on top of
    tc-exact's kernels), so that 20-iteration fits on uniform data took 8 % (d = 64) and
    18 % (d = 128) longer and 100-iteration fits 3-25 % less. Fits run to ``tol`` mostly
    take more than 20 iterations at these sizes. With fewer centres the bounds skip less of
    a smaller scan: at 1M x 128, k = 256 a steady iteration took 27 % longer than
    ``tc-exact``'s on uniform data (14 % less on 64 blobs; fit-vs-flash-*-beae3cd.json),
    hence :data:`TC_SCAN_WIDE_MIN_CLUSTERS`.
    """
    if None in (n_samples, n_features, n_clusters) or n_samples < HAMERLY_MIN_SAMPLES:
        return False
    if n_features > 32:
        return n_features <= HAMERLY_MAX_FEATURES and n_clusters >= TC_SCAN_WIDE_MIN_CLUSTERS
    return hamerly_tensor_scan(n_samples, n_features, n_clusters)


@functools.cache
def _numba_installed() -> bool:
    """Whether the compiled CPU strategies can run (``gpumine[fast]``); asked once."""
    return importlib.util.find_spec("numba") is not None


#: ``tuning.choose``'s answers per table and problem: a small fit asks once per fit, and the
#: search over the cells cost ~0.1 ms of a 1.5 ms fit (Corel size).
_CHOICES: dict = {}


def _wide_problem(n_samples: int | None, n_features: int | None,
                  n_clusters: int | None) -> bool:
    return (None not in (n_samples, n_features, n_clusters)
            and n_samples >= TC_MIN_SAMPLES and n_features >= TC_MIN_FEATURES
            and n_features * n_clusters >= TC_MIN_WORK)


def resolve_strategy(kind: str, name: str, backend: str, *, n_samples: int | None = None,
                     n_features: int | None = None, n_clusters: int | None = None) -> Strategy:
    """Resolve ``name`` (possibly ``"auto"``) of ``kind`` for a backend.

    ``"auto"`` takes the fixed default of :data:`_AUTO_DEFAULTS` for the backend, except
    the GPU assignment of a large wide problem (``n_samples >= TC_MIN_SAMPLES``,
    ``n_features >= TC_MIN_FEATURES`` and ``n_features * n_clusters >= TC_MIN_WORK``),
    which takes ``tc-exact`` (same labels as ``tiled``, faster there), the GPU assignment
    of other problems of at least ``HAMERLY_MIN_SAMPLES`` rows and d <= 32, which takes
    ``hamerly`` (the same labels again, faster over a whole fit), and the CPU
    assignment and update, which take the compiled ``numba`` strategies when Numba is
    installed.

    Raises
    ------
    UnknownStrategy
        ``name`` is not registered, or ``"auto"`` has no default for ``backend``.
    IncompatibleStrategy
        The strategy exists but does not run on ``backend``.
    """
    _check_kind(kind)
    if name == "auto":
        default = _AUTO_DEFAULTS.get((kind, backend))
        if (kind, backend) == ("kmeans.assign", "gpu") and _wide_problem(
                n_samples, n_features, n_clusters):
            default = "tc-exact"
        elif (kind, backend) == ("kmeans.assign", "gpu") and _bounds_pay(n_samples,
                                                                         n_features):
            default = "hamerly"
        if (kind in ("kmeans.assign", "kmeans.update") and backend == "cpu"
                and _numba_installed()):
            default = "numba"
        if default is None:
            raise UnknownStrategy(f"no {kind} strategy is available on the {backend} backend")
        name = default
    strategy = get_strategy(kind, name)
    if not strategy.runs_on(backend):
        others = [s.name for s in list_strategies(kind, backend=backend)]
        raise IncompatibleStrategy(
            f"{kind} strategy {name!r} runs on the {strategy.backend} backend, but this "
            f"estimator runs on {backend}; strategies for {backend}: {', '.join(others) or 'none'}"
        )
    return strategy


#: What a measured table (:mod:`gpumine.tuning`) may pick for ``"auto"``, per (kind,
#: backend): exact assignments only (``gemm`` and ``tc-fast`` are not exact on near-ties),
#: and the updates that need no per-fit copy of X.
AUTO_CANDIDATES = {
    ("kmeans.assign", "gpu"): ("tiled", "tc-exact"),
    ("kmeans.update", "gpu"): ("atomic", "atomic-fixed", "gather", "sort"),
    ("kmeans.assign", "cpu"): ("numpy", "numba"),
    ("kmeans.update", "cpu"): ("numpy", "numba"),
}


#: Candidates that run as another strategy outside these dtypes (``atomic-fixed``: its fixed
#: point only for float32 data; float64 data runs ``atomic``): not measured, nor picked, there.
DTYPE_LIMITS = {("kmeans.update", "atomic-fixed"): ("float32",)}


def applies_to_dtype(kind: str, name: str, dtype: str) -> bool:
    """Whether ``name`` of ``kind`` runs as itself on ``dtype`` data (:data:`DTYPE_LIMITS`).

    Examples
    --------
    >>> applies_to_dtype("kmeans.update", "atomic-fixed", "float64")
    False
    >>> applies_to_dtype("kmeans.update", "atomic", "float64")
    True
    """
    return str(dtype) in DTYPE_LIMITS.get((kind, name), (str(dtype),))


def resolve_kmeans_pair(assign: str, update: str, backend: str, *, n_samples: int,
                        n_features: int, n_clusters: int, dtype: str,
                        device_name: str | None = None, binds: bool = True,
                        tensor_cores: bool = True
                        ) -> tuple[Strategy, Strategy, dict[str, str]]:
    """The k-means assignment and update for a fit, and why each was chosen.

    Names other than ``"auto"`` are resolved as :func:`resolve_strategy` does. For
    ``"auto"``, a table measured on this device (``gpumine bench calibrate``; see
    :mod:`gpumine.tuning`) gives the fastest pair of :data:`AUTO_CANDIDATES` at the
    nearest measured problem, consistent with a name the user fixed and with each
    strategy's feature limit -- unless the fixed rule's pair measured within
    :data:`gpumine.tuning.MARGIN` of it there; without a usable table the fixed rule of
    :func:`resolve_strategy` applies. Where the fit binds its strategies and ``hamerly``
    would scan its queue on the tensor cores (:func:`_tensor_bounds`), an ``"auto"``
    assignment that came out ``tiled`` or ``tc-exact`` runs as ``hamerly`` -- past 32
    features only where ``tensor_cores`` says the device has them (compute capability 8.0;
    without them ``hamerly`` has no scan past 32 features, and ``tc-exact`` runs ``tiled``'s
    kernel). Where ``hamerly`` (or ``tc-exact`` on large problems)
    assigns float32 data of a fit whose strategies bind to its X (``binds``: an in-memory
    fit; not Dask's stateless partition calls, where an unbound ``atomic-fixed`` computes
    its quanta every call), an ``"auto"`` update that came out ``atomic`` runs as
    :data:`FOLLOWING_UPDATE`. Returns
    ``(assign, update, reasons)``, ``reasons`` mapping ``"assign"`` and ``"update"`` to a
    sentence.
    """
    from gpumine import tuning

    sizes = dict(n_samples=n_samples, n_features=n_features, n_clusters=n_clusters)
    names = {"assign": assign, "update": update}
    reasons = {key: "given" for key, name in names.items() if name != "auto"}
    table = tuning.load_table(device_name) if device_name and len(reasons) < 2 else None
    if table is not None:
        def allowed(a, u):
            picks = {"assign": a, "update": u}
            for key, name in picks.items():
                kind = f"kmeans.{key}"
                if names[key] == "auto" and (
                        name not in AUTO_CANDIDATES.get((kind, backend), ())
                        or not applies_to_dtype(kind, name, dtype)):
                    return False
                strategy = _REGISTRY.all().get((kind, name))
                if name == "numba" and not _numba_installed():  # measured where it was
                    return False
                if strategy is None or not strategy.runs_on(backend) or (
                        strategy.max_dims is not None and n_features > strategy.max_dims):
                    return False
            return True

        key = (id(table), backend, n_samples, n_features, n_clusters, dtype, assign, update,
               len(_REGISTRY.all()), _numba_installed())
        cached = _CHOICES.get(key)
        if cached is not None and cached[0] is table:  # the table object keeps its id
            choice = cached[1]
        else:
            # the fixed rule's pair, as the table names it (its 'tiled' runs as 'hamerly')
            fixed = tuple(resolve_strategy(f"kmeans.{key}", names[key], backend, **sizes).name
                          for key in ("assign", "update"))
            choice = tuning.choose(table, n=n_samples, d=n_features, k=n_clusters, dtype=dtype,
                                   assign=None if assign == "auto" else assign,
                                   update=None if update == "auto" else update,
                                   allowed=allowed,
                                   prefer=("tiled" if fixed[0] == "hamerly" else fixed[0],
                                           fixed[1]),
                                   # where bounds pay, the nearest cell (gpumine.tuning)
                                   nearest=backend == "gpu" and _bounds_pay(n_samples,
                                                                            n_features))
            if len(_CHOICES) > 1024:
                _CHOICES.clear()
            _CHOICES[key] = (table, choice)
        if choice is not None:
            (names["assign"], names["update"]), why = choice
            reasons = {key: reasons.get(key, why) for key in names}
            if (assign == "auto" and names["assign"] == "tiled" and backend == "gpu"
                    and _bounds_pay(n_samples, n_features)):
                # The table times 10 iterations from one init, before bounds pay; hamerly
                # gives tiled's labels and is faster over whole fits of this size.
                names["assign"] = "hamerly"
                reasons["assign"] = (f"{why}: 'tiled', run as 'hamerly' (the same labels; "
                                     f"faster over whole fits from {HAMERLY_MIN_SAMPLES} "
                                     "rows)")
    why_fixed = ("no measured table for this device" if table is None
                 else "no measured cell near this problem")
    for key in ("assign", "update"):
        if key not in reasons:
            reasons[key] = f"the fixed rule for the {backend} backend ({why_fixed})"
    chosen = resolve_strategy("kmeans.assign", names["assign"], backend, **sizes)
    if (binds and assign == "auto" and backend == "gpu" and chosen.name in ("tiled", "tc-exact")
            # past 32: measured over tc-exact, and only on the tensor cores
            and (n_features <= 32 or (chosen.name == "tc-exact" and tensor_cores))
            and _tensor_bounds(n_samples, n_features, n_clusters)):
        # hamerly's bounds, its queue scanned by tc-exact's kernels: the same labels, faster
        # over whole fits (_tensor_bounds says how much). Only where the fit binds it: called
        # unbound (predict, Dask's partitions) hamerly is tiled.
        reasons["assign"] = (f"{reasons['assign']}: '{chosen.name}', run as 'hamerly' "
                             "scanning on the tensor cores (the same labels; faster over "
                             "whole fits of this size)")
        chosen = resolve_strategy("kmeans.assign", "hamerly", backend, **sizes)
    updater = resolve_strategy("kmeans.update", names["update"], backend, **sizes)
    follows = chosen.name == "hamerly" or (
        chosen.name == "tc-exact" and n_samples is not None
        and n_samples >= HAMERLY_MIN_SAMPLES)
    if (binds and update == "auto" and follows and updater.name == "atomic"
            and applies_to_dtype("kmeans.update", FOLLOWING_UPDATE, dtype)):
        # A fit's later iterations move few rows: atomic-fixed's sums follow them
        # (FOLLOWING_UPDATE), where atomic re-reads X every iteration; a table's
        # 10-iteration fits weigh atomic-fixed's one pass over X a fit instead.
        updater = resolve_strategy("kmeans.update", FOLLOWING_UPDATE, backend, **sizes)
        reasons["update"] = (f"{reasons['update']}: 'atomic', run as 'atomic-fixed' where "
                             f"'{chosen.name}' assigns float32 data (its sums follow the "
                             "moved rows)")
    return chosen, updater, reasons


def register(strategy: Strategy) -> None:
    """Register a strategy at run time (for code that is not an installed plugin).

    Raises ``ValueError`` if ``(kind, name)`` is taken.
    """
    _REGISTRY.register(strategy)


def refresh() -> None:
    """Forget discovered plugins and run-time registrations; plugins are found again on next use."""
    _REGISTRY.refresh()
