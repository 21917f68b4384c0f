"""``assign="auto"`` that races the exact assignments on a large GPU fit
(:mod:`gpumine.kmeans.measured`): who races, and that the race never changes a result."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans
from gpumine.kmeans import measured
from gpumine.kmeans.measured import TRIAL_CALLS, race_candidates


@pytest.mark.parametrize("pick, n, d, k, max_iter, expected", [
    ("tc-exact", 10_000_000, 32, 1024, 300, ["tc-exact", "hamerly"]),
    ("tiled", 10_000_000, 8, 1024, 300, ["tc-exact", "hamerly"]),
    ("hamerly", 4_000_000, 16, 256, 300, ["tc-exact", "hamerly"]),  # the table's pick
    ("tc-exact", 1_000_000, 128, 1024, 300, ["tc-exact", "tiled"]),
    ("tiled", 1_000_000, 128, 1024, 300, ["tiled", "tc-exact"]),
    ("tc-exact", 10_000_000, 32, 1024, 9, []),  # too short to gain
    ("tiled", 1_000_000, 4, 400, 300, []),  # too small: under a millisecond an assignment
    ("gemm", 10_000_000, 32, 1024, 300, []),  # not an exact pick: nothing to race
    # hamerly scanning its queue on the tensor cores (d * k >= 8192): no race
    ("hamerly", 10_000_000, 32, 1024, 300, []), ("hamerly", 4_000_000, 16, 512, 300, []),
])
def test_who_races(pick, n, d, k, max_iter, expected):
    assert race_candidates(pick, n_samples=n, n_features=d, n_clusters=k,
                           max_iter=max_iter) == expected


def test_the_reason_names_the_measured_times():
    race = measured.MeasuredAssign.__new__(measured.MeasuredAssign)
    race.names, race.chosen, race.seconds = ["tc-exact", "hamerly"], "hamerly", {
        "tc-exact": 0.036, "hamerly": 0.0091}
    race.races, race.stride, race.handed_back = 3, 1, None
    race.bounded_stride, race.bounded, race.floored = 1, ["hamerly"], {}
    assert race.reason("the fixed rule") == (
        "measured on this fit's data, 3 race(s) (an assignment, each candidate's best "
        "recent call): hamerly 9.1 ms, tc-exact 36 ms")
    race.bounded_stride = 8
    assert race.reason("the fixed rule") == (
        "measured on this fit's data, 3 race(s), hamerly's on every 8th row (an assignment, "
        "each candidate's best recent call; the last race's): hamerly 9.1 ms, tc-exact 36 ms")
    race.bounded_stride = 1
    race.chosen, race.handed_back, race.seconds["hamerly"] = "tc-exact", "hamerly", 0.05
    assert race.reason("the fixed rule") == (
        "measured on this fit's data, 3 race(s) (an assignment, each candidate's best "
        "recent call): tc-exact 36 ms, hamerly 50 ms; hamerly won one, then averaged the time "
        f"above over {measured.WATCH_CALLS} calls and handed the labels back")
    race.chosen, race.handed_back, race.seconds["hamerly"] = "hamerly", None, 0.0091
    race.stride, race.on_sample = 8, ["hamerly"]
    assert race.reason("the fixed rule") == (
        "measured on this fit's data, 1 race (hamerly on every 8th row, its time times 8; an "
        "assignment, each candidate's best recent call): hamerly 9.1 ms, tc-exact 36 ms")
    race.floored = {"tiled": 0.0078}
    assert race.reason("the fixed rule").endswith(
        "hamerly 9.1 ms, tc-exact 36 ms; tiled not raced (no call of it can take less than "
        "7.8 ms on this fit's rows)")
    race.chosen = None
    assert "did not end" in race.reason("the fixed rule")


class _Stateless:
    """A stand-in for tc-exact's strategy (no GPU): bound, it is graph-safe and may seed."""

    def __init__(self, seeds):
        self.seeds = seeds

    def bind(self, X):
        run = type("Run", (), {"graph_safe": True})()
        if self.seeds:
            run.seed = lambda *args: None
        return run


class _Bounded:
    """A stand-in for hamerly's strategy: bound, it has state (reset) and counts resets."""

    def bind(self, X):
        return type("Bounds", (), {"resets": 0, "reset": lambda self: setattr(
            self, "resets", self.resets + 1)})()


def _race(seeds=True, rows=1_000_000):
    owner = measured.MeasuredAssign.__new__(measured.MeasuredAssign)
    owner.names = ["tc-exact", "hamerly"]
    owner._strategies = {"tc-exact": _Stateless(seeds), "hamerly": _Bounded()}
    owner.used = owner.chosen = None
    return measured._Race(owner, np.empty((rows, 8), dtype=np.float32))


def test_graph_calls_count_the_winners_plain_calls_before_the_next_race():
    race = _race()
    assert race.graph_calls() == 0  # the first race: timed calls
    race.winner = race.current = 0
    race.queue = [0, 0, 0, 1, 1]
    assert race.graph_calls() == 3
    race.replayed()
    assert race.graph_calls() == 2 and race.queue == [0, 0, 1, 1]
    for state, value in (("watch", (0, 1.0)), ("seeding", (0, 1)), ("current", 1)):
        saved = getattr(race, state)
        setattr(race, state, value)
        assert race.graph_calls() == 0, state
        setattr(race, state, saved)
    race.entries[0][1].graph_safe = False
    assert race.graph_calls() == 0


@pytest.mark.parametrize("seeds", [True, False])
def test_a_sample_race_won_by_hamerly_seeds_it_or_makes_it_scan(monkeypatch, seeds):
    """hamerly (index 1) wins on the sample: tc-exact's next call seeds its bounds where it
    can (no reset), else it takes over now with a full scan (reset, the call not watched);
    either way it is watched against tc-exact's time on X, not the sample's."""
    race = _race(seeds)
    assert race.bounded_stride == measured.SAMPLE_STRIDE and race.bounded == [1]
    race.winner = race.current = 0
    race.queue, race.sampled = [], {1: ["pair"], 0: ["pair"]}
    race.timed = {0: ["pair"]}
    times = {True: {1: 0.001, 0: 0.002}, False: {0: 0.016}}  # the sample's, then X's
    monkeypatch.setattr(measured._Race, "_race_times",
                        staticmethod(lambda timed: times[1 in timed]))
    race._choose()
    assert race.winner == 1 and race.queue is None and race.watch == (0, 0.016)
    bounds = race.entries[1][1]
    if seeds:
        assert race.seeding == (0, 1) and race.current == 0 and bounds.resets == 0
    else:
        assert race.seeding is None and race.current == 1 and bounds.resets == 1
        assert race.fresh
    assert race.owner.seconds == {"hamerly": 0.001, "tc-exact": 0.002}


def test_a_sample_race_lost_by_hamerly_queues_the_next_one(monkeypatch):
    race = _race()
    race.winner = race.current = 0
    race.queue, race.sampled = [], {1: ["pair"], 0: ["pair"]}
    monkeypatch.setattr(measured._Race, "_race_times",
                        staticmethod(lambda timed: {1: 0.003, 0: 0.002}))
    race._choose()
    first = measured.RERACE_FIRST
    assert race.winner == 0 and race.seeding is None and race.bounded_races == 1
    assert race.queue == [0] * first + [1] * TRIAL_CALLS and race.period == 2 * first
    assert race.graph_calls() == first  # the winner's calls before hamerly's next race


def test_a_small_fit_races_hamerly_on_every_row():
    race = _race(rows=measured.SAMPLE_STRIDE * measured.SAMPLE_MIN_ROWS - 1)
    assert race.bounded_stride == 1


class _Floored:
    """A stand-in for tiled's strategy: no state, a floor from the shape (seconds)."""

    def __init__(self, floor):
        self.floor, self.asked = floor, []

    def floor_seconds(self, n, d, k):
        self.asked.append((n, d, k))
        return self.floor


def _wide_race(floor, rows=100_000, names=("tc-exact", "tiled")):
    owner = measured.MeasuredAssign.__new__(measured.MeasuredAssign)
    owner.names = list(names)
    owner._strategies = {"tc-exact": _Stateless(True), "tiled": _Floored(floor)}
    owner.used = owner.chosen = None
    owner.floored = {}
    return measured._Race(owner, np.empty((rows, 40), dtype=np.float32))


@pytest.mark.parametrize("floor, dropped", [(0.002, True), (0.003, True), (0.0019, False)])
def test_a_candidate_whose_floor_is_beaten_already_is_not_raced(monkeypatch, floor, dropped):
    """tiled (index 1) races after tc-exact, which measured 2 ms: at a floor of 2 ms or
    more no call of tiled can win, so its calls leave the queue and the owner keeps its
    floor for the reason; below, it races. The floor is asked for the race's rows and the
    fit's features and centres."""
    race = _wide_race(floor)
    assert race.stride == 1 and race.queue == [0] * TRIAL_CALLS + [1] * TRIAL_CALLS
    race.queue = race.queue[TRIAL_CALLS:]
    race.timed = {0: ["pair"]}
    monkeypatch.setattr(measured._Race, "_race_times",
                        staticmethod(lambda timed: {i: 0.002 for i in timed}))
    race._drop_floored(rows=100_000, k=1024)
    assert race.owner._strategies["tiled"].asked == [(100_000, 40, 1024)]
    assert race.queue == ([] if dropped else [1] * TRIAL_CALLS)
    assert race.owner.floored == ({"tiled": floor} if dropped else {})


@pytest.mark.parametrize("names", [["tc-exact", "tiled"], ["tiled", "tc-exact"]])
def test_a_sample_race_times_tc_exact_on_x_and_tiled_on_the_sample(monkeypatch, names):
    """With rows enough, the candidate without a floor (tc-exact) makes the fit's calls and
    is timed on X, whatever the order; tiled races on every 8th row and its time counts
    eight times: 0.3 ms on the sample against tc-exact's 2 ms on X loses (2.4 ms)."""
    race = _wide_race(1e-9, rows=1_000_000, names=names)
    tc, tiled = names.index("tc-exact"), names.index("tiled")
    assert race.stride == measured.SAMPLE_STRIDE
    assert race.queue == [tc] * TRIAL_CALLS and race.on_sample == [tiled]
    assert race.owner.on_sample == ["tiled"]
    race.timed = {tc: ["pair"], tiled: ["pair"]}
    race.queue, race.on_sample = [], []
    monkeypatch.setattr(measured._Race, "_race_times", staticmethod(
        lambda timed: {tc: 0.002, tiled: 0.0003}))
    race._choose()
    assert race.winner == tc and race.queue is None
    assert race.owner.seconds == {"tc-exact": 0.002, "tiled": pytest.approx(0.0024)}


def test_no_floor_is_compared_before_a_time_or_for_a_timed_candidate(monkeypatch):
    """Nothing timed yet (the race's first candidate), a candidate without a floor, or one
    already timed: never dropped."""
    race = _wide_race(1.0)
    monkeypatch.setattr(measured._Race, "_race_times",
                        staticmethod(lambda timed: {i: 0.002 for i in timed}))
    assert not race._floored(1, 100_000, 1024)  # no time yet
    race.timed = {0: ["pair"]}
    assert not race._floored(0, 100_000, 1024)  # tc-exact has no floor
    race.timed[1] = []
    assert not race._floored(1, 100_000, 1024)  # raced already
    assert race.owner.floored == {}


def _auto_and_tiled(X, *, far=False, update="sort", max_iter=40):
    """The same fit with assign="auto" and with "tiled": 48 clusters from X's first rows
    (with ``far``, the sixth moved 1e4 away: empty at the first assignment, relocated while
    the candidates race)."""
    import cupy as cp

    init = cp.asnumpy(X[:48]).copy()
    if far:
        init[5] += 1e4
    return tuple(GPUKMeans(48, init=init, assign=assign, update=update, max_iter=max_iter,
                           tol=0, device="gpu").fit(X) for assign in ("auto", "tiled"))


def _assert_same_fit(raced, tiled, centres=True) -> None:
    """The labels (and ``centres``: the centres) bit for bit."""
    import cupy as cp

    np.testing.assert_array_equal(cp.asnumpy(raced.labels_), cp.asnumpy(tiled.labels_))
    if centres:
        np.testing.assert_array_equal(cp.asnumpy(raced.cluster_centers_),
                                      cp.asnumpy(tiled.cluster_centers_))


def _spy_switch(monkeypatch) -> list:
    """The names of the candidates the race hands the labels to (_switch), in order."""
    used = []
    switch = measured._Race._switch

    def spy(race, index):
        used.append(race.entries[index][0])
        switch(race, index)

    monkeypatch.setattr(measured._Race, "_switch", spy)
    return used


def _blobs(n, d, centres, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    middle = rng.uniform(-10, 10, size=(centres, d))
    return (middle[rng.integers(0, centres, n)] + rng.normal(size=(n, d)) + 300.0).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("winner", [0, 1, None])  # tc-exact, hamerly (the last to run), measured
@pytest.mark.parametrize("d", [8, 40])
def test_the_race_gives_the_tiled_fit(monkeypatch, winner, d):
    """Whichever candidate wins -- one that hands its labels to hamerly's bounds, hamerly
    itself, or the measured one, raced again after 1 and 2 of the winner's calls --
    the fit equals assign="tiled"'s: labels, n_iter_ and the
    centres bit for bit (the deterministic sort update), with an empty cluster relocated
    during the race (an initial centre far from the data) and two runs of n_init. Wide
    data's candidates (no state) race on every 8th row: the fit's labels untouched."""
    import cupy as cp

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)  # race on a test-sized fit
    monkeypatch.setattr(measured, "RERACE_FIRST", 1)  # the measured winner: early races
    monkeypatch.setattr(measured, "SAMPLE_MIN_ROWS", 1000)  # the sampled race at d = 40
    if winner is not None:
        def choose(race):
            race.winner = winner
            race.owner.chosen = race.entries[winner][0]
            race.owner.seconds = {name: 0.0 for name, _ in race.entries}

        monkeypatch.setattr(measured._Race, "_choose", choose)
    X = cp.asarray(_blobs(30_011, d, 24, seed=d))
    raced, tiled = _auto_and_tiled(X, far=True)
    names = race_candidates("tiled", n_samples=1, n_features=d, n_clusters=1, max_iter=300)
    assert raced.strategies_["assign"] in names
    assert "on this fit's data" in raced.strategy_reasons_["assign"]
    assert ("on every 8th row, its time times 8" in raced.strategy_reasons_["assign"]) == (
        d > 32)
    assert raced.n_iter_ == tiled.n_iter_ > 2 * TRIAL_CALLS
    _assert_same_fit(raced, tiled)
    seeded = [GPUKMeans(48, n_init=2, random_state=3, assign=assign, update="sort",
                        max_iter=40, device="gpu").fit(X) for assign in ("auto", "tiled")]
    np.testing.assert_array_equal(cp.asnumpy(seeded[0].cluster_centers_),
                                  cp.asnumpy(seeded[1].cluster_centers_))


@pytest.mark.gpu
def test_a_candidate_with_bounds_sits_out_the_first_race(monkeypatch):
    """hamerly first races after RERACE_FIRST of the winner's calls (its bounds skip little
    while the centres move most): with RERACE_FIRST beyond the fit's iterations it never
    assigns, the first race is tc-exact's alone, and the fit equals assign="tiled"'s."""
    import cupy as cp

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)
    monkeypatch.setattr(measured, "RERACE_FIRST", 1000)
    used = _spy_switch(monkeypatch)
    X = cp.asarray(_blobs(30_011, 8, 24, seed=4))
    raced, tiled = _auto_and_tiled(X, max_iter=20)
    assert raced.n_iter_ == tiled.n_iter_ == 20
    assert set(used) == {"tc-exact"} and len(used) >= 20
    assert raced.strategies_["assign"] == "tc-exact"
    assert "hamerly" not in raced.strategy_reasons_["assign"]
    _assert_same_fit(raced, tiled, centres=False)


@pytest.mark.gpu
def test_a_winner_with_bounds_that_slows_down_hands_the_labels_back(monkeypatch):
    """hamerly wins the race (forced) against a tc-exact time of 0 s: after WATCH_CALLS
    timed calls it is slower on average, so tc-exact assigns the rest of the run, the
    reason says so, and the fit still equals assign="tiled"'s, bit for bit (with an empty
    cluster relocated on the way)."""
    import cupy as cp

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)

    def choose(race):
        race.winner = 1  # hamerly, the last to run
        race.owner.chosen = race.entries[1][0]
        race.owner.seconds = {name: 0.0 for name, _ in race.entries}
        race.queue, race.watch = None, (0, 0.0)

    monkeypatch.setattr(measured._Race, "_choose", choose)
    # uniform rows: Lloyd's iterations go on to max_iter (labels keep moving)
    X = cp.asarray(np.random.default_rng(5).uniform(size=(30_011, 8)).astype(np.float32))
    raced, tiled = _auto_and_tiled(X, far=True)
    assert raced.strategies_["assign"] == "tc-exact"
    assert "hamerly won one" in raced.strategy_reasons_["assign"]
    assert raced.n_iter_ == tiled.n_iter_ > 2 * TRIAL_CALLS + measured.WATCH_CALLS
    _assert_same_fit(raced, tiled)


@pytest.mark.gpu
def test_a_large_fit_races_without_being_asked():
    """At the threshold's size (2M x 8, k = 640) "auto" races, says so, and gives the labels
    of assign="tiled"; a fit of 9 iterations does not race."""
    import cupy as cp

    X = cp.asarray(_blobs(2_000_000, 8, 640, seed=1))
    init = cp.asnumpy(X[:640])
    auto = GPUKMeans(640, init=init, update="sort", max_iter=12, tol=0, device="gpu").fit(X)
    tiled = GPUKMeans(640, init=init, assign="tiled", update="sort", max_iter=12, tol=0,
                      device="gpu").fit(X)
    assert auto.strategies_["assign"] in ("tc-exact", "hamerly")
    assert "on this fit's data" in auto.strategy_reasons_["assign"]
    np.testing.assert_array_equal(cp.asnumpy(auto.labels_), cp.asnumpy(tiled.labels_))
    short = GPUKMeans(640, init=init, update="sort", max_iter=9, tol=0, device="gpu").fit(X)
    assert "on this fit's data" not in short.strategy_reasons_["assign"]


@pytest.mark.gpu
def test_a_settled_race_runs_the_rest_of_the_fit_as_cuda_graphs(monkeypatch):
    """Wide data: tiled and tc-exact (no state) race on a sample beside the first iteration;
    the race is then settled (graph_safe) and, with a graph-safe update, the loop captures
    the winner's iteration and replays it -- the race object is called for only a few of the
    40 iterations -- and the fit still equals assign="tiled"'s bit for bit (atomic-fixed's
    integer sums: the same in any order)."""
    import cupy as cp

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)
    monkeypatch.setattr(measured, "SAMPLE_MIN_ROWS", 1000)
    calls = []
    race_call = measured._Race.__call__

    def spy(race, *args, **kwargs):
        calls.append(race.graph_safe)
        race_call(race, *args, **kwargs)

    monkeypatch.setattr(measured._Race, "__call__", spy)
    rng = np.random.default_rng(7)
    X = cp.asarray(rng.uniform(size=(30_011, 40)).astype(np.float32))
    raced, tiled = _auto_and_tiled(X, update="atomic-fixed")
    assert "every 8th row" in raced.strategy_reasons_["assign"]
    assert raced.n_iter_ == tiled.n_iter_ == 40
    # tc-exact's two calls, the sample's race beside its third, the choice at the fourth:
    # settled from the fifth, then graph launches
    assert 1 <= len(calls) <= 6 and calls[-1]
    _assert_same_fit(raced, tiled)


@pytest.mark.gpu
def test_a_candidate_with_bounds_races_at_most_max_bounded_races_times(monkeypatch):
    """hamerly races again after 1, 2, 4, ... of the winner's calls (RERACE_FIRST = 1), but
    no more than MAX_BOUNDED_RACES times in a 40-iteration fit; the fit equals tiled's."""
    import cupy as cp

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)
    monkeypatch.setattr(measured, "RERACE_FIRST", 1)
    races = []
    choose = measured._Race._choose

    def spy(race):
        choose(race)
        races.append((race.bounded_races, race.queue is None))

    monkeypatch.setattr(measured._Race, "_choose", spy)
    rng = np.random.default_rng(8)
    X = cp.asarray(rng.uniform(size=(30_011, 8)).astype(np.float32))
    raced, tiled = _auto_and_tiled(X)
    assert races and max(b for b, _ in races) <= measured.MAX_BOUNDED_RACES
    assert races[-1][1]  # settled: no race to come
    _assert_same_fit(raced, tiled, centres=False)


@pytest.mark.gpu
@pytest.mark.parametrize("hamerly_seconds", [0.0, float("inf")])
def test_a_candidate_with_bounds_races_on_a_sample(monkeypatch, hamerly_seconds):
    """With rows enough, hamerly races on every 8th row (its own bounds and labels): made
    to lose (inf) it never assigns the fit's labels, and it raced MAX_BOUNDED_RACES times;
    made to win (0 s) it takes the labels from the next call on, which tc-exact makes with
    bounds for it (ScreenedRun.seed: no full scan of X), and is watched against tc-exact's
    calls on X. Either way the fit equals assign="tiled"'s, bit for bit, with an empty
    cluster relocated on the way."""
    import cupy as cp

    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)
    monkeypatch.setattr(measured, "RERACE_FIRST", 1)
    monkeypatch.setattr(measured, "SAMPLE_MIN_ROWS", 1000)
    race_times = measured._Race._race_times
    sampled = []

    def times(timed):
        out = race_times(timed)
        if 1 in out and 0 in out:  # only the sample's race times both (hamerly is 1)
            sampled.append(dict(out))
            out[1] = hamerly_seconds
        return out

    monkeypatch.setattr(measured._Race, "_race_times", staticmethod(times))
    used = _spy_switch(monkeypatch)
    seeds = []
    seed = tensor_cores.ScreenedRun.seed

    def seed_spy(run, bounded, *args, **kwargs):
        seeds.append(type(bounded).__name__)
        seed(run, bounded, *args, **kwargs)

    monkeypatch.setattr(tensor_cores.ScreenedRun, "seed", seed_spy)
    X = cp.asarray(np.random.default_rng(9).uniform(size=(30_011, 8)).astype(np.float32))
    raced, tiled = _auto_and_tiled(X, far=True)
    reason = raced.strategy_reasons_["assign"]
    assert sampled and all(t > 0 for out in sampled for t in out.values())  # timed calls
    if hamerly_seconds:
        assert set(used) == {"tc-exact"} and not seeds
        assert len(sampled) == measured.MAX_BOUNDED_RACES
        assert raced.strategies_["assign"] == "tc-exact"
        assert "hamerly's on every 8th row" in reason
    else:
        assert len(sampled) == 1 and seeds == ["BoundAssign"] and "hamerly" not in used
        assert "hamerly's on every 8th row" in reason or "hamerly won one" in reason
    assert raced.n_iter_ == tiled.n_iter_ == 40
    _assert_same_fit(raced, tiled)


@pytest.mark.gpu
@pytest.mark.parametrize("sampled", [True, False])
def test_the_winners_calls_between_races_run_as_cuda_graphs(monkeypatch, sampled):
    """Between two races the winner's plain calls (graph_calls) are replays of one captured
    iteration: the race is told each (replayed) and takes the first stretch's seven of them
    (RERACE_FIRST = 8, less the eager call it captures after) before hamerly's race, on the
    sample or on X; the fit still equals assign="tiled"'s bit for bit (atomic-fixed's
    integer sums), with an empty cluster relocated on the way."""
    import cupy as cp

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)
    if sampled:
        monkeypatch.setattr(measured, "SAMPLE_MIN_ROWS", 1000)
    replays, queues = [], []
    replayed = measured._Race.replayed

    def spy(race):
        queues.append(list(race.queue))
        replays.append(race.graph_calls())
        replayed(race)

    monkeypatch.setattr(measured._Race, "replayed", spy)
    X = cp.asarray(np.random.default_rng(10).uniform(size=(30_011, 8)).astype(np.float32))
    raced, tiled = _auto_and_tiled(X, far=True, update="atomic-fixed")
    assert len(replays) >= measured.RERACE_FIRST - 1
    assert replays[:7] == [7, 6, 5, 4, 3, 2, 1]  # the first stretch, down to its last call
    assert all(queue[0] == 0 for queue in queues)  # tc-exact's calls only, never a race's
    assert raced.n_iter_ == tiled.n_iter_ == 40
    _assert_same_fit(raced, tiled)


@pytest.mark.gpu
@pytest.mark.parametrize("n, d, k", [(1 << 20, 8, 256), (262_147, 64, 512), (131_101, 129, 300)])
def test_tiled_floor_is_below_every_call(n, d, k):
    """tiled_floor_seconds is a lower bound: below the fastest of five timed calls of
    assign_tiled (registers kernel at d = 8, the shared-memory tiles past 32 features), and
    within 40x of it (a floor of the right order, not zero)."""
    import cupy as cp

    from gpumine.kmeans.gpu import assign_tiled, column_buffer, tiled_floor_seconds

    rng = np.random.default_rng(n)
    X = cp.asarray(rng.uniform(size=(n, d)).astype(np.float32))
    X = cp.ascontiguousarray(X.T).T
    assert column_buffer(X) is not None
    centers = X[:k].copy()
    labels = cp.zeros(n, dtype=cp.int32)
    assign_tiled(X, centers, labels)  # compiles
    stream = cp.cuda.get_current_stream()
    times = []
    for _ in range(5):
        start = stream.record()
        assign_tiled(X, centers, labels)
        end = stream.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    floor = tiled_floor_seconds(n, d, k)
    assert 0 < floor < min(times) < 40 * floor


@pytest.mark.gpu
@pytest.mark.parametrize("floor", [1.0, 0.0])
def test_a_wide_race_leaves_out_tiled_when_its_floor_is_beaten(monkeypatch, floor):
    """Wide data: tc-exact assigns (timed on every row) while tiled races on every 8th
    row: with tiled's floor above any call (1 s) it is not raced -- the reason says so,
    tc-exact assigns -- and with a floor of 0 it races; either way the fit equals
    assign="tiled"'s bit for bit."""
    import cupy as cp

    from gpumine.kmeans import gpu

    monkeypatch.setattr(measured, "RACE_MIN_WORK", 0)
    monkeypatch.setattr(measured, "SAMPLE_MIN_ROWS", 1000)
    monkeypatch.setattr(gpu.assign_tiled, "floor_seconds", lambda n, d, k: floor)
    X = cp.asarray(np.random.default_rng(11).uniform(size=(30_011, 40)).astype(np.float32))
    raced, tiled = _auto_and_tiled(X, update="atomic-fixed", max_iter=30)
    reason = raced.strategy_reasons_["assign"]
    assert "1 race (" in reason
    assert ("tiled not raced" in reason) == bool(floor)
    assert ("tiled on every 8th row, its time times 8" in reason) == (not floor)
    if floor:
        assert raced.strategies_["assign"] == "tc-exact" and "tiled " not in reason.split(";")[0]
    else:
        assert "tiled " in reason
    assert raced.n_iter_ == tiled.n_iter_ == 30
    _assert_same_fit(raced, tiled)
