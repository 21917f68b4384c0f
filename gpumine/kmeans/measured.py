"""``assign="auto"`` that measures: on a large GPU fit, the exact assignments race.

Which exact assignment is fastest depends on the data, not only on its shape. On the H100
at 10M x 32, k = 1024 (record ``assign-race-probe-h100-2026-11-26-a31fcff.json``, five
Lloyd iterations in): on unclustered data a ``tc-exact`` assignment takes 15 ms and a
``tiled`` one 26 ms; in 64 blobs (16 centres a blob: many near-ties) ``tc-exact``
re-checks 16 % of the rows and takes 36 ms, while a whole ``hamerly`` iteration takes 23
ms; in 1024 blobs ``hamerly``'s bounds skip most points (9 ms an iteration against
``tc-exact``'s 24). The shape-based choice (a measured table or the fixed rule,
:func:`gpumine.registry.resolve_kmeans_pair`) cannot see this, so on a large fit
``"auto"`` measures: the candidates without state run in turn for :data:`TRIAL_CALLS`
iterations each at the start of the first Lloyd run, each timed by CUDA events around its
call, and the fastest (:data:`COMPARED_CALLS`) assigns the next iterations (and the later
runs of ``n_init``); where no candidate has state (``tiled``, ``tc-exact``: wide data),
``tc-exact`` makes the first iterations, timed on X, and ``tiled`` races on a sample of the
rows beside its third, its time scaled to every row (:data:`SAMPLE_STRIDE`).
``hamerly``, whose bounds are state, gets faster as the centres settle, so it first races
after :data:`RERACE_FIRST` iterations of the others' winner and, when it loses, once more
after 16 (:data:`MAX_BOUNDED_RACES` races in all): in the first iterations the centres move
most and its bounds skip little -- its call after the full scan that fills them took 21-33
ms against ``tc-exact``'s 7.5-8.6 on uniform data, 64 and 1024 blobs alike (10M x 32, k =
1024; record ``auto-race-first-h100-2026-11-27-be0b3a3.json``), a race it lost at a cost of
38-48 ms a fit. At 1024 blobs it wins its first race and is twice as fast as ``tc-exact``
over 50 iterations (record ``fit-vs-flash-2026-11-26-1df75f5``). A race flatters
``hamerly``: its compared call comes right after the full scan that fills its bounds, when
they are at their tightest; as they loosen it scans more points. So when it wins, its calls
stay timed, and once :data:`WATCH_CALLS` of them average more than the best stateless
candidate's race time, that one takes the labels back for the rest of the run (no cost: it
keeps no state). On 64 blobs at 10M x 32, k = 1024 ``hamerly`` won its third race at 6.1 ms
against ``tc-exact``'s 8.4 and then averaged 13.5 ms a call (record
``auto-race-watch-h100-2026-11-27-e17b805.json``).

On the fit's own rows a lost race cost ``hamerly``'s full scan and its compared call
(about 37 ms at 10M x 32, k = 1024, five ``tc-exact`` iterations), and the race keeps the
fit's iterations out of CUDA graphs. So where the sample keeps :data:`SAMPLE_MIN_ROWS` rows
(:data:`BOUNDED_SAMPLE`) ``hamerly`` races on every :data:`SAMPLE_STRIDE`-th row instead --
bound to a copy of them, labels of its own -- beside the winner's iterations, and the
winner's calls on the same rows and centres are timed against it. A race it loses costs its
scan and call on an eighth of the rows. A race it wins hands it the labels through the
winner's next call: ``tc-exact``'s (:meth:`ScreenedRun.seed
<gpumine.kmeans.tensor_cores.ScreenedRun.seed>`) also writes every row's Hamerly bounds
from its top-2 scores and their error bound, so ``hamerly`` goes on without a full scan of
X (``tiled``, which has no such call, leaves it one). 20- and 100-iteration auto fits on
the H200 at 10M x 32, k = 1024 against the race on X, in turns in one process (record
``race-seed-final-h200-00bed84.json``): uniform 179 -> 161 and 672 -> 638 ms (``tc-exact``
alone 144 and 615), 64 blobs 204 -> 193 and 879 -> 855, 1024 blobs (``hamerly`` wins) 129
-> 124 and 279 -> 273; without the seed a won race cost more than on X (145 and 292 ms
against 132 and 283, ``race-seed-ab-h200-b49a694.json``).
Once no race is left -- a stateless winner and ``hamerly``'s races spent -- the race is
settled and :attr:`_Race.graph_safe`: the fit loop captures the winner's iterations into a
CUDA graph from then on. Before that, between two races, the winner's plain calls are
replays of one captured iteration too (:meth:`_Race.graph_calls`, :meth:`_Race.replayed`):
20-iteration fits 159 -> 154 ms on uniform data at 10M x 32, k = 1024, 1-3 % on the
record's other rows (``race-stretch-graphs-ab-h200-1731cb9.json``).

A candidate whose calls cannot win is not raced: ``tiled``'s time follows from the shape
alone (no pruning), and no call of it can beat ``2 n d k`` instructions at the device's
peak issue rate (:func:`~gpumine.kmeans.gpu.tiled_floor_seconds`). Where another
candidate already measured faster than that floor on the fit's rows, ``tiled``'s calls are
left out. On the H200 at 1M x 128, k = 1024 its floor is 7.8 ms against ``tc-exact``'s
2.0-ms calls in the race, and a 20-iteration fit took 49.3 ms instead of 53.7 (record
``race-floor-ab-2026-11-28-7f1d742.json``).

Every candidate is exact -- their labels are those of ``tiled``, bit for bit -- so the race
changes the time of a fit, never its result. The events are read after the iteration's
status readback has passed them: no host sync is added. ``hamerly`` keeps bounds from call
to call; when it takes over from another candidate without a seed, its ``reset()`` makes its
first call scan every point, which is why each candidate's first call is not the one
compared (that call also compiles its kernels).

Examples
--------
>>> from gpumine.kmeans.measured import race_candidates
>>> race_candidates("tc-exact", n_samples=10_000_000, n_features=32, n_clusters=1024,
...                 max_iter=300)
['tc-exact', 'hamerly']
>>> race_candidates("tiled", n_samples=100_000, n_features=8, n_clusters=16, max_iter=300)
[]
"""

from __future__ import annotations

__all__ = ["BOUNDED_SAMPLE", "COMPARED_CALLS", "MAX_BOUNDED_RACES", "RACE_MIN_ITER",
           "RACE_MIN_WORK", "RERACE_FIRST", "SAMPLE_MIN_ROWS", "SAMPLE_STRIDE", "TRIAL_CALLS",
           "WATCH_CALLS", "MeasuredAssign", "race_candidates"]

#: A fit races its assignments from this much work an assignment on (n x d x k): about a
#: millisecond of ``tiled`` on the H100, where the race's few slower calls are noise.
RACE_MIN_WORK = 10**10
#: ... and when it may run at least this many iterations.
RACE_MIN_ITER = 10
#: Calls each candidate makes in a race; all but the first are compared.
TRIAL_CALLS = 2
#: A candidate's race time is the fastest of its last this many compared calls (the race's,
#: and for the winner those that led up to it): one call's time can carry another load's
#: hiccup -- a ``tc-exact`` call of 10.7 ms among its 7.5s once made ``hamerly`` win a race
#: it lost over the next calls (record ``auto-race-first-h100-2026-11-27-be0b3a3.json``).
COMPARED_CALLS = 3
#: A winner with bounds is timed over this many calls at a time after its race; slower on
#: average than the best stateless candidate's time on X (its race time, or after a race
#: on the sample its recent calls' best), it hands the labels back.
WATCH_CALLS = 4
#: The winner's calls before a candidate with bounds races (first, or again after it lost);
#: doubled after each race.
RERACE_FIRST = 8
#: Races a candidate with bounds runs at most (the module docstring): then the race is
#: settled, and the fit's iterations may run as CUDA graphs.
MAX_BOUNDED_RACES = 2
#: Candidates without state whose time follows from the shape (``tiled``) race on every
#: SAMPLE_STRIDE-th row (a copy), their times times SAMPLE_STRIDE, while the others
#: (``tc-exact``) assign and are timed on X, where the sample keeps SAMPLE_MIN_ROWS rows.
#: ``tc-exact`` on the sample carried its launches' fixed cost: 0.35 ms on every 8th row
#: of 600k x 48, k = 512 against ``tiled``'s 0.30 there, so ``tiled`` won and the fit took
#: 3.4x ``tc-exact``'s (0.53 ms an iteration on all rows; H200, record
#: ``race-floor-ab-2026-11-28-f14cbb6.json``). Every candidate had raced on the sample
#: because racing ``tiled`` on whole iterations cost a 50-iteration fit at 1M x 128, k = 1024 a
#: sixth of its time on the H100 (0.195-0.205 s, now 0.168-0.170; tc-exact alone 0.16-0.18),
#: and on 64 blobs it picked ``tiled`` from the first iterations where ``tc-exact`` is faster
#: over the fit (0.975 s, then 0.80-0.82; record fit-race-sample-ab-h100-2026-11-27-b26e3e4).
SAMPLE_STRIDE = 8
SAMPLE_MIN_ROWS = 1 << 16
#: A candidate with bounds races on every SAMPLE_STRIDE-th row too (a copy, bound apart,
#: labels of its own), beside the winner's iterations, where the sample keeps
#: SAMPLE_MIN_ROWS rows: its race then costs its full scan and compared call on an eighth
#: of the rows (and the winner's calls on them) instead of on every row -- the whole cost
#: of a race it loses. Winning, it takes the labels through the assigning candidate's next
#: call, which seeds its bounds where it can (``tc-exact``; else a full scan of X), and its
#: calls on X are watched against that candidate's calls on X (:data:`WATCH_CALLS`).
BOUNDED_SAMPLE = True


def race_candidates(pick: str, *, n_samples: int, n_features: int, n_clusters: int,
                    max_iter: int) -> list[str]:
    """The exact GPU assignments ``"auto"`` races for this fit (``pick``: what the shape
    alone chose), or ``[]`` for a fit too small or short to gain from a race.

    ``tc-exact`` and, for d <= 32, ``hamerly`` (``tiled``'s loop with bounds that skip
    points, never much slower than ``tiled``); for wider data, ``tiled`` and ``tc-exact``.
    ``hamerly`` runs last, so that when it wins it goes on with its bounds. No race where
    the pick is ``hamerly`` scanning its queue on the tensor cores
    (:func:`gpumine.kmeans.bounds.tensor_scan`; where ``"auto"`` picks it,
    :func:`gpumine.registry._tensor_bounds` says what was measured): its slowest call,
    every point queued, costs ``tc-exact``'s and the filter's pass, and its late calls skip
    most points.
    """
    from gpumine.kmeans.bounds import REGISTER_FEATURES, tensor_scan

    if (n_samples * n_features * n_clusters < RACE_MIN_WORK or max_iter < RACE_MIN_ITER
            or pick not in ("tiled", "tc-exact", "hamerly")):
        return []
    if pick == "hamerly" and tensor_scan(n_samples, n_features, n_clusters):
        return []  # its queue scanned by tc-exact's kernels: picked as measured
    if n_features <= REGISTER_FEATURES:
        return ["tc-exact", "hamerly"]
    return [pick, "tiled" if pick == "tc-exact" else "tc-exact"]


class MeasuredAssign:
    """The racing assignment (module docstring): pass it as a fit's ``assign``.

    Parameters
    ----------
    names : list of str
        The candidates, in race order (:func:`race_candidates`).

    Attributes
    ----------
    chosen : str or None
        The winner, once a race has ended.
    used : str or None
        What assigned last: the winner, or the candidate of a race the fit ended in.
    seconds : dict
        Each candidate's race time: the fastest of its last :data:`COMPARED_CALLS` compared
        calls, in seconds (device time).
    races : int
        Races run (the first, then one after each period of the winner's calls).
    stride : int
        1, or candidates without state raced on every ``stride``-th row
        (:data:`SAMPLE_STRIDE`): those in ``on_sample``, whose time follows from the shape.
    on_sample : list of str
        The candidates raced on the sample, their times scaled to every row.
    bounded_stride : int
        1, or a candidate with bounds raced on every ``bounded_stride``-th row
        (:data:`BOUNDED_SAMPLE`).
    floored : dict
        The candidates not raced, each with its floor in seconds: no call of it could
        beat a time another candidate had already measured (``tiled``'s
        :func:`~gpumine.kmeans.gpu.tiled_floor_seconds`).
    """

    counts_changes = True
    graph_safe = False  # the race's calls differ from iteration to iteration

    def __init__(self, names):
        from gpumine import registry

        self.names = list(names)
        self._strategies = {name: registry.load_strategy("kmeans.assign", name)
                            for name in self.names}
        self.chosen = self.used = None
        self.seconds: dict = {}
        self.races = 0
        self.stride = self.bounded_stride = 1
        self.on_sample: list = []  # the candidates raced on every stride-th row, by name
        self.bounded: list = []  # the candidates with bounds (state), by name
        self.handed_back = None  # the winner with bounds that handed the labels back
        self.floored: dict = {}  # candidates not raced: their floor (seconds) beat already

    def __call__(self, X, centers, labels, changed=None):
        """Unbound (no run's state): the winner, or the first candidate."""
        self.used = self.chosen or self.names[0]
        self._strategies[self.used](X, centers, labels, changed)

    def bind(self, X):
        """One Lloyd run's assignment over X: the race in the first run, then the winner."""
        if self.chosen is not None:
            strategy = self._strategies[self.chosen]
            return strategy.bind(X) if hasattr(strategy, "bind") else strategy
        return _Race(self, X)

    def reason(self, fallback: str) -> str:
        """Why the fit used what it used (``strategy_reasons_``)."""
        if self.chosen is None:
            return (f"{fallback}; the race of {', '.join(self.names)} did not end (the fit "
                    f"ran fewer than {TRIAL_CALLS * len(self.names)} iterations)")
        times = ", ".join(f"{name} {1e3 * seconds:.3g} ms"
                          for name, seconds in sorted(self.seconds.items(), key=lambda i: i[1]))
        times += "".join(f"; {name} not raced (no call of it can take less than "
                         f"{1e3 * seconds:.3g} ms on this fit's rows)"
                         for name, seconds in self.floored.items())
        if self.handed_back is not None:
            return (f"measured on this fit's data, {self.races} race(s) (an assignment, each "
                    f"candidate's best recent call): {times}; {self.handed_back} won one, then "
                    f"averaged the time above over {WATCH_CALLS} calls and handed the labels "
                    f"back")
        if self.stride > 1:
            sampled = [name for name in self.on_sample if name in self.seconds]
            how = "".join(f"{name} on every {self.stride}th row, its time times {self.stride}; "
                          for name in sampled)
            return (f"measured on this fit's data, 1 race ({how}an assignment, each "
                    f"candidate's best recent call): {times}")
        if self.bounded_stride > 1 and self.races > 1:
            return (f"measured on this fit's data, {self.races} race(s), "
                    f"{' and '.join(self.bounded)}'s on every {self.bounded_stride}th row "
                    f"(an assignment, each candidate's best recent call; the last race's): "
                    f"{times}")
        return (f"measured on this fit's data, {self.races} race(s) (an assignment, each "
                f"candidate's best recent call): {times}")


class _Race:
    """:class:`MeasuredAssign` bound to the first run: the race of the candidates without
    state (on every ``stride``-th row, beside the first iteration, where no candidate has
    state), the winner, and a candidate with bounds raced after :data:`RERACE_FIRST` of the
    winner's calls, then, while it loses, after twice as many, at most
    :data:`MAX_BOUNDED_RACES` times (:meth:`_choose`)."""

    counts_changes = True
    #: The fit loop may capture this assignment once :attr:`graph_safe` turns true.
    graph_safe_later = True

    @property
    def graph_safe(self) -> bool:
        """Settled (no race to come, no winner watched) on a winner that can be captured:
        each call is then the winner's call alone."""
        if self.queue is not None or self.watch is not None or self.winner is None:
            return False
        return bool(getattr(self.entries[self.winner][1], "graph_safe", False))  # sync: none

    def __init__(self, owner, X):
        self.owner, self.X = owner, X
        self.entries = []
        for name in owner.names:
            strategy = owner._strategies[name]
            self.entries.append((name, strategy.bind(X) if hasattr(strategy, "bind")
                                 else strategy))
        # the calls to come, each a candidate's index; empty: time to choose. A candidate
        # with bounds sits out the first race (module docstring): it races after the
        # winner's first RERACE_FIRST calls, as a loser would
        self.bounded = [i for i, (_, fn) in enumerate(self.entries) if hasattr(fn, "reset")]
        first = ([i for i in range(len(self.entries)) if i not in self.bounded]
                 or self.bounded)
        self.queue = [i for i in first for _ in range(TRIAL_CALLS)]
        self.current, self.timed, self.winner = None, {}, None
        self.period, self.races, self.bounded_races = RERACE_FIRST, 1, 0
        # a winner with bounds, watched: (the best stateless candidate, its race time), and
        # the winner's timed calls since the last look; `fresh`: its next call scans all
        self.watch, self.calls, self.fresh = None, [], False
        # no candidate with state, and rows enough: the race runs on a sample of the rows
        stateless = not self.bounded
        self.stride = (SAMPLE_STRIDE if stateless and X.shape[0] // SAMPLE_STRIDE
                       >= SAMPLE_MIN_ROWS else 1)
        owner.stride = self.stride
        # ... then the candidates whose time follows from the shape (a floor: tiled) run on
        # the sample, their times scaled to every row, while the first of the others (the
        # assigner) makes the fit's iterations, timed on X (_race_sample)
        self.on_sample = []
        if self.stride > 1:
            shaped = [i for i in first if self._floor(i) is not None]
            assigner = next((i for i in first if i not in shaped), first[0])
            self.on_sample = [i for i in first if i != assigner]
            self.queue = [assigner] * TRIAL_CALLS
        owner.on_sample = [self.entries[i][0] for i in self.on_sample]
        # a candidate with bounds races on a sample too (_race_bounded_sample), rows enough
        self.bounded_stride = (SAMPLE_STRIDE if BOUNDED_SAMPLE and self.bounded
                               and X.shape[0] // SAMPLE_STRIDE >= SAMPLE_MIN_ROWS else 1)
        owner.bounded_stride = self.bounded_stride
        owner.bounded = [self.entries[i][0] for i in self.bounded]
        # this race's calls on the sample (index: timed pairs), and the sample: its rows,
        # the candidate with bounds bound to them, its labels and the winner's scratch labels
        self.sampled, self._sample = {}, None
        # (the stateless candidate assigning, the winner with bounds): the next call seeds
        self.seeding = None

    def _switch(self, index: int) -> None:
        """Hand the labels to candidate ``index``: one with bounds scans every point first
        (another candidate moved the labels since its last call)."""
        if index != self.current:
            fn = self.entries[index][1]
            if hasattr(fn, "reset"):
                fn.reset()
            self.current = index
        self.owner.used = self.entries[index][0]

    def __call__(self, X, centers, labels, changed=None):
        from gpumine.backend import cupy_module

        if X is not self.X:  # another array than the run's: no race, no state
            self.owner(X, centers, labels, changed)
            return
        if self.queue and cupy_module().cuda.get_current_stream().is_capturing():
            # the fit loop captures the winner's plain call (graph_calls): no queue, no events
            self.entries[self.winner][1](X, centers, labels, changed)
            return
        if self.queue is None:  # decided: the winner, timed while it has bounds to lose
            if self.watch is None:
                self.entries[self.winner][1](X, centers, labels, changed)
            else:
                self._watched(X, centers, labels, changed)
            return
        if self.queue:
            self._drop_floored(X.shape[0], centers.shape[0])
        if not self.queue and self.on_sample:
            # the assigner timed on X: the others' race on the sample, then its next
            # iteration over X, timed too; the events are read at the next call, once the
            # iteration's readback has passed them
            self._race_sample(X, centers)
            self.queue = [self.current]
        if not self.queue:
            self._choose()
        if self.seeding is not None:  # a candidate with bounds won on the sample
            self._seed(centers, labels, changed)
            return
        queued = bool(self.queue)
        index = self.queue.pop(0) if queued else self.winner
        if queued and index in self.bounded and self.bounded_stride > 1:
            # its race on the sample, beside the winner's iteration over X
            self._race_bounded_sample(index, centers)
            index = self.winner
        fn = self.entries[index][1]
        scan = index != self.current and index in self.bounded
        self._switch(index)
        stream = cupy_module().cuda.get_current_stream()
        start = stream.record()
        fn(X, centers, labels, changed)
        if scan or index not in self.timed:
            # not compared: a candidate with bounds scans every point at the start of its
            # turn (its older calls had other bounds), and a first call compiles kernels
            self.timed[index] = []
        else:
            self.timed[index] = [*self.timed[index][1 - COMPARED_CALLS:],
                                 (start, stream.record())]

    def _race_sample(self, X, centers) -> None:
        """The :attr:`on_sample` candidates' :data:`TRIAL_CALLS` calls on every
        ``stride``-th row of X (a column-major copy) into scratch labels, each timed by CUDA
        events, the fit's labels and counts not touched; their race times are scaled by the
        stride (:meth:`_choose`): their time follows from the shape, in proportion to the
        rows, where the assigner's calls on a few rows would carry its launches' fixed cost
        (600k x 48, k = 512 on the H200: ``tc-exact`` 0.35 ms on every 8th row, 0.53 ms an
        iteration on all of them; ``tiled`` 0.30 on the sample). A candidate whose floor on
        every row is already beaten is left out (:meth:`_floored`)."""
        from gpumine.backend import cupy_module

        cp = cupy_module()
        sample = cp.ascontiguousarray(X[::self.stride].T).T
        scratch = cp.zeros(sample.shape[0], dtype=cp.int32)
        stream = cp.cuda.get_current_stream()
        for index in self.on_sample:
            if self._floored(index, X.shape[0], centers.shape[0]):
                continue
            fn, pairs = self.entries[index][1], []
            for call in range(TRIAL_CALLS):
                start = stream.record()
                fn(sample, centers, scratch)
                if call:  # the first compiles kernels: not compared
                    pairs.append((start, stream.record()))
            self.timed[index] = pairs[-COMPARED_CALLS:]
        self.on_sample = []

    def _floor(self, index: int):
        """Candidate ``index``'s ``floor_seconds(n, d, k)``, or None (its time is not the
        shape's alone)."""
        return getattr(self.owner._strategies[self.entries[index][0]], "floor_seconds", None)

    def _floored(self, index: int, rows: int, k: int) -> bool:
        """Whether candidate ``index`` cannot win: its floor (``floor_seconds``, a lower
        bound on any call's time from its shape alone: ``tiled``'s) on ``rows`` rows is at
        least another candidate's race time so far (``self.timed``). Such a candidate is
        not raced (``owner.floored`` keeps its floor for the reason). Reads the timed
        calls' events, which the readback of the iteration that made them has passed."""
        floor = self._floor(index)
        if floor is None or index in self.timed:
            return False
        times = self._race_times({i: p for i, p in self.timed.items() if i != index})
        seconds = floor(rows, self.X.shape[1], k)
        if not times or seconds < min(times.values()):
            return False
        self.owner.floored[self.entries[index][0]] = seconds
        return True

    def _drop_floored(self, rows: int, k: int) -> None:
        """Off the queue, every call of a candidate that cannot win (:meth:`_floored`)
        before its turn comes (the race on X: the earlier candidates' calls are timed by
        then, their events passed by the readbacks)."""
        while self.queue and self._floored(self.queue[0], rows, k):
            dropped = self.queue[0]
            self.queue = [i for i in self.queue if i != dropped]

    def graph_calls(self) -> int:
        """How many of the next calls are the winner's plain call -- between two races, not
        watched, nothing to seed, the winner assigning and ``graph_safe`` -- so the fit loop
        may replay a captured one for them (:func:`gpumine.kmeans.lloyd._lloyd_device`)
        instead of running them eagerly: 0 where the next call races, seeds or is watched
        (and once settled, where :attr:`graph_safe` takes over)."""
        if (not self.queue or self.winner is None or self.seeding is not None
                or self.watch is not None or self.current != self.winner
                or not getattr(self.entries[self.winner][1], "graph_safe", False)):
            return 0
        calls = 0
        for index in self.queue:
            if index != self.winner:
                break
            calls += 1
        return calls

    def replayed(self) -> None:
        """One of :meth:`graph_calls`' calls ran as a graph replay: off the queue, untimed."""
        self.queue.pop(0)

    def _seed(self, centers, labels, changed) -> None:
        """The assigning candidate's call that also fills the winner's bounds
        (:meth:`ScreenedRun.seed <gpumine.kmeans.tensor_cores.ScreenedRun.seed>`), so the
        winner with bounds goes on from the next call without a full scan of X."""
        source, target = self.seeding
        self.seeding = None
        self.entries[source][1].seed(self.entries[target][1], centers, labels, changed)
        self.current = target
        self.owner.used = self.entries[target][0]

    def _race_bounded_sample(self, index: int, centers) -> None:
        """One call of candidate ``index`` (with bounds) in its race on every
        :attr:`bounded_stride`-th row: bound to a column-major copy of them, with labels of
        its own, so the fit's labels and counts are not touched and no full scan of X is
        paid for a race it loses. Its first call of a race scans every row of the sample
        (not compared: it fills the bounds); each later one is timed by CUDA events, and so
        is the winner's call on the same rows and centres (into scratch labels: the winner
        has no state), so both race times come from the same rows."""
        from gpumine.backend import cupy_module

        cp = cupy_module()
        if self._sample is None:
            rows = cp.ascontiguousarray(self.X[::self.bounded_stride].T).T
            fn = self.owner._strategies[self.entries[index][0]].bind(rows)
            self._sample = (rows, fn, cp.zeros(rows.shape[0], dtype=cp.int32),
                            cp.zeros(rows.shape[0], dtype=cp.int32))
        rows, fn, labels, scratch = self._sample
        winner = self.entries[self.winner][1]
        stream = cp.cuda.get_current_stream()
        if index not in self.sampled:  # the race's first call: bounds from a full scan
            fn.reset()
            fn(rows, centers, labels)
            winner(rows, centers, scratch)  # its first call on these rows: not compared
            self.sampled[index], self.sampled[self.winner] = [], []
            return
        for who, call, into in ((index, fn, labels), (self.winner, winner, scratch)):
            start = stream.record()
            call(rows, centers, into)
            self.sampled[who] = [*self.sampled[who][1 - COMPARED_CALLS:],
                                 (start, stream.record())]

    def _watched(self, X, centers, labels, changed) -> None:
        """The winner with bounds, each call timed; every :data:`WATCH_CALLS` calls their mean
        against the best stateless candidate's time on X (:data:`WATCH_CALLS`), which takes
        over when faster. The call after a reset (a full scan) is not counted."""
        from gpumine.backend import cupy_module

        cp = cupy_module()
        if len(self.calls) >= WATCH_CALLS:
            self.calls[-1][1].synchronize()  # sync: none in practice -- the readbacks passed it
            mean = sum(cp.cuda.get_elapsed_time(start, end)
                       for start, end in self.calls) / len(self.calls) / 1e3
            self.calls = []
            other, seconds = self.watch
            if mean > seconds:
                name = self.entries[self.winner][0]
                self.owner.seconds = {name: mean, self.entries[other][0]: seconds}
                self.owner.handed_back, self.owner.chosen = name, self.entries[other][0]
                self.winner, self.watch = other, None
                self._switch(other)
                self.entries[other][1](X, centers, labels, changed)
                return
        stream = cp.cuda.get_current_stream()
        start = stream.record()
        self.entries[self.winner][1](X, centers, labels, changed)
        if self.fresh:
            self.fresh = False
        else:
            self.calls.append((start, stream.record()))

    def _choose(self) -> None:
        """The fastest race time wins (:data:`COMPARED_CALLS`). A candidate with bounds
        (hamerly) that lost, or that sat out the first race, races after the winner's next
        calls: its bounds skip more points as the centres settle, while the others cost
        about the same from iteration to iteration. A winner with bounds keeps the labels
        for good (racing the others again would cost it a full scan)."""
        sampled, self.sampled = self.sampled, {}
        times = self._race_times(sampled or self.timed)
        if not sampled:  # the candidates raced on the stateless sample count stride times
            times = {i: t * (self.stride if self.entries[i][0] in self.owner.on_sample else 1)
                     for i, t in times.items()}
        seconds = {self.entries[i][0]: t for i, t in times.items()}
        raced = list(times)
        winner = min(raced, key=lambda i: times[i])
        if self.winner is not None:
            self.races += 1
        if any(i in self.bounded for i in raced):
            self.bounded_races += 1
        self.winner = winner
        self.owner.seconds, self.owner.chosen = seconds, self.entries[winner][0]
        self.owner.races = self.races
        spent = self.bounded_races >= MAX_BOUNDED_RACES
        again = [] if winner in self.bounded or spent else self.bounded
        if not again:
            self.queue, self._sample = None, None
            if winner in self.bounded and sampled:
                # won on the sample: it takes the labels from the next call, which the
                # candidate assigning now makes with bounds for it where it can (seed)
                if hasattr(self.entries[self.current][1], "seed"):
                    self.seeding = (self.current, winner)
                else:  # else its first call is a full scan of X, not watched
                    self._switch(winner)
                    self.fresh = True
                # watched against the stateless candidates' calls on X, not the sample's
                times = self._race_times({i: p for i, p in self.timed.items()
                                          if i not in self.bounded})
            stateless = [i for i in times if i not in self.bounded]
            if winner in self.bounded and stateless:
                best = min(stateless, key=lambda i: times[i])
                self.watch = (best, times[best])
            return
        self.queue = [winner] * self.period + [i for i in again for _ in range(TRIAL_CALLS)]
        self.period *= 2

    @staticmethod
    def _race_times(timed: dict) -> dict:
        """Each candidate's race time (seconds): the fastest of its timed calls."""
        from gpumine.backend import cupy_module

        cp = cupy_module()
        times = {}
        for index, pairs in timed.items():
            if pairs:
                pairs[-1][1].synchronize()  # sync: none in practice (readbacks passed it)
                times[index] = min(cp.cuda.get_elapsed_time(start, end)
                                   for start, end in pairs) / 1e3
        return times

    def reset(self) -> None:
        """Labels moved outside the assignment (a relocation): every candidate with bounds
        scans every point at its next call (a watched winner's is not counted)."""
        for _, fn in self.entries:
            if hasattr(fn, "reset"):
                fn.reset()
        self.fresh = True
