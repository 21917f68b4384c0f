"""assign="hamerly": Hamerly's bounds skip points, and the labels stay tiled's bit for bit.

The CPU test checks the bound's constants; the rest (marked ``gpu``) compare every call
and whole fits with ``assign="tiled"`` on near-ties, data far from the origin, empty
clusters and edge shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans, registry
from gpumine.exceptions import InvalidParameterError
from gpumine.kmeans.bounds import _bound


def test_bound_constants():
    kappa32, eta32 = _bound(8, np.float32)
    kappa64, eta64 = _bound(8, np.float64)
    assert 1e-7 < kappa32 < 1e-5 and kappa64 < 1e-14
    assert 0 < eta64 < eta32 < 1e-35


def test_listed_as_exact_with_its_limit():
    strategy = registry.get_strategy("kmeans.assign", "hamerly")
    assert "exact" in strategy.description and strategy.max_dims == 128


# -- GPU --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


@pytest.fixture(params=["registers", "tensor", "tensor-screen"])
def scan(request, monkeypatch):
    """The queued points' scan: the register loop (bounds_scan) or the tensor cores on every
    shape they take -- tc-exact's split kernel over the queue, then its re-check; or
    (tensor-screen, at 17 to 32 features) the screen first on every call after the first,
    whatever share of the queue it leaves, then the split kernel over what it left."""
    from gpumine.kmeans import bounds, tensor_cores

    tensor = request.param != "registers"
    monkeypatch.setattr(registry, "TC_SCAN_MIN_WORK", 0 if tensor else 1 << 62)
    monkeypatch.setattr(registry, "TC_SCAN_MIN_ROWS", 0 if tensor else 1 << 62)
    monkeypatch.setattr(bounds, "TC_SCAN_SCREEN", request.param == "tensor-screen")
    monkeypatch.setitem(tensor_cores.SCREEN_SHARE, 32, 1.0)  # the screen's plan: always
    return request.param


def _columns(cp, X):
    return cp.ascontiguousarray(cp.asarray(X).T).T


def _drawn(rng, n, d, k, offset, blobs, dtype):
    """n x d host rows: uniform in [-1, 1]^d, or (``blobs``) unit normals around k / 4 (at
    least 2) centres in [-5, 5]^d -- near-ties between a blob's centres -- shifted by
    ``offset``."""
    if blobs:
        middle = rng.uniform(-5, 5, size=(max(2, k // 4), d))
        host = middle[rng.randint(0, len(middle), n)] + rng.normal(size=(n, d)) + offset
    else:
        host = rng.uniform(-1, 1, size=(n, d)) + offset
    return host.astype(dtype)


def _tiled(cp, X, C):
    labels = cp.full(X.shape[0], -7, dtype=cp.int32)
    registry.load_strategy("kmeans.assign", "tiled")(X, C, labels)
    return cp.asnumpy(labels)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k", "offset"), [
    (1, 1, 1, 0.0), (300, 1, 2, 0.0), (5000, 2, 1, 0.0), (4099, 3, 64, 1e4),
    (20_000, 8, 200, 0.0), (17_695, 18, 128, -3e5), (6000, 32, 40, 0.0), (2000, 5, 2000, 0.0),
    (600_001, 2, 40, 0.0)])
def test_every_call_equals_tiled_as_centres_move(cp, scan, n, d, k, offset, dtype, rng):
    """A sequence of calls with centres moving by shrinking steps (as in a fit): each call's
    labels and changed count equal tiled's for the same centres; later calls scan fewer.
    600,001 points: the first call queues more points than the scan grid has threads (its
    blocks loop over the queue, the last chunk partly full)."""
    from gpumine.kmeans.bounds import BoundAssign

    X = _columns(cp, (rng.normal(size=(n, d)) + offset).astype(dtype))
    C = X[rng.choice(n, k, replace=n < k)].copy() if k <= n else cp.asarray(
        rng.normal(size=(k, d)) + offset, dtype=dtype)
    bound = BoundAssign(X)
    labels = cp.full(n, -1, dtype=cp.int32)
    scanned = []
    for step in range(8):
        C = C + cp.asarray(rng.normal(scale=0.3 * 0.3**step, size=C.shape), dtype=dtype)
        before = cp.asnumpy(labels)
        changed = cp.zeros(1, dtype=cp.uint64)
        bound(X, C, labels, changed=changed)
        expected = _tiled(cp, X, C)
        got = cp.asnumpy(labels)
        assert np.array_equal(got, expected), f"step {step}: {np.sum(got != expected)} differ"
        assert int(changed.get()[0]) == int(np.sum(before != expected))
        scanned.append(bound.scanned())
    assert scanned[0] == n  # the first call scans everything
    if n >= 1000 and k > 1:
        assert scanned[-1] < n // 2, scanned  # and late calls skip most points
    assert bound._tensor == (scan != "registers")


def _check_bounds(cp, bound, host, centers, labels):
    """Every row's upper bound is at least its float64 distance to its label's centre, its
    lower bound at most its distance to every other centre."""
    got = cp.asnumpy(labels)
    distances = _distances(host, cp.asnumpy(centers))
    rows = np.arange(len(got))
    upper, lower = cp.asnumpy(bound.upper), cp.asnumpy(bound.lower)
    assert np.all(upper >= distances[rows, got]), np.sum(upper < distances[rows, got])
    distances[rows, got] = np.inf
    assert np.all(lower <= distances.min(axis=1)), np.sum(lower > distances.min(axis=1))


def _checked_calls(cp, host, k, rng, count=False, calls=6):
    """A BoundAssign over ``host``'s rows called ``calls`` times with k centres (drawn from
    the rows) moving by shrinking steps, as in a fit; after each call every label is
    tiled's, every row's bounds hold (_check_bounds) and, with ``count``, the changed count
    is the labels that changed. Yields the BoundAssign after each call."""
    from gpumine.kmeans.bounds import BoundAssign

    n, dtype = host.shape[0], host.dtype
    X = _columns(cp, host)
    C = X[rng.choice(n, k, replace=False)].copy()
    bound = BoundAssign(X)
    labels = cp.full(n, -1, dtype=cp.int32)
    for step in range(calls):
        C = C + cp.asarray(rng.normal(scale=0.1 * 0.3**step, size=C.shape), dtype=dtype)
        changed = cp.zeros(1, dtype=cp.uint64) if count else None
        before = cp.asnumpy(labels)
        bound(X, C, labels, changed=changed)
        expected = _tiled(cp, X, C)
        assert np.array_equal(cp.asnumpy(labels), expected), step
        if count:
            assert int(changed.get()[0]) == int(np.sum(before != expected)), step
        _check_bounds(cp, bound, host, C, labels)
        yield bound


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k", "offset", "blobs"), [
    (20_000, 24, 300, 0.0, False), (30_001, 32, 64, 1e4, True), (9000, 3, 700, -3e5, False),
    (5000, 17, 1, 0.0, False)])
def test_bounds_hold_after_every_call(cp, scan, n, d, k, offset, blobs, dtype, rng):
    """After every call -- the first's full scan, then calls that skip, tighten and scan --
    each row's bounds hold against float64 distances to the call's centres, the labels are
    tiled's; on blobs (near-ties between a blob's centres) many rows go to the tensor-core
    scan's re-check, and keep the bounds the filter wrote for them."""
    host = _drawn(rng, n, d, k, offset, blobs, dtype)
    plans = []
    for bound in _checked_calls(cp, host, k, rng):
        if bound._screen_plan is not None:
            plans.append(int(bound._screen_plan.get()[0]))
    assert bound._tensor == (scan != "registers")
    # the screen's plan over the queue: on from the second call (share forced to 1) at 17
    # to 32 features, where the screen takes them
    assert plans == ([1] * 6 if scan == "tensor-screen" and d > 16 else []), plans


def _lattice_near_ties(rng, offset, dtype):
    """Centres on an integer lattice (4 features, 64 centres, plus `offset`) and 20,000
    points halfway between two of them, nudged by a few ulps: (centres float64, points)."""
    d, k = 4, 64
    C = rng.randint(0, 4, size=(k, d)).astype(np.float64) + offset
    a, b = rng.randint(0, k, size=(2, 20000))
    t = 0.5 + rng.randint(-3, 4, size=(20000, 1)) * np.finfo(dtype).eps
    return C, (C[a] * t + C[b] * (1 - t)).astype(dtype)


def _ulp_moved(cp, centers, rng, offset):
    """The centres moved by -2..2 ulps of their magnitude (at least 1) each."""
    dtype = centers.dtype
    return centers + cp.asarray(rng.randint(-2, 3, size=centers.shape)
                                * np.finfo(dtype).eps * max(1.0, abs(offset)), dtype=dtype)


def _follow_ulp_moves(cp, bound, X, centers, labels, rng, offset, moves):
    """``moves`` calls of ``bound`` after moves of a few ulps (_ulp_moved), then one with the
    centres unmoved: each call's labels equal assign="tiled"'s."""
    for step in range(moves + 1):
        if step < moves:
            centers = _ulp_moved(cp, centers, rng, offset)
        bound(X, centers, labels)
        assert np.array_equal(cp.asnumpy(labels), _tiled(cp, X, centers)), step


@pytest.mark.gpu
@pytest.mark.parametrize("screen", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k", "offset", "blobs"), [
    (20_000, 33, 300, 0.0, False), (9001, 64, 64, 1e4, True), (12_000, 100, 200, 0.0, False),
    (6000, 128, 40, -3e5, True)])
def test_wide_data_scanned_on_tensor_cores(cp, monkeypatch, screen, n, d, k, offset, blobs,
                                           dtype, rng):
    """Past 32 features the queue always goes to the tensor cores (the register loop holds
    32): every call's labels equal tiled's and every row's bounds hold, with the split
    kernel alone or the screen forced on every call after the first (64 and 128 padded
    features: the screen's widths)."""
    from gpumine.kmeans import bounds, tensor_cores

    monkeypatch.setattr(bounds, "TC_SCAN_SCREEN", screen)
    monkeypatch.setitem(tensor_cores.SCREEN_SHARE, 64, 1.0)
    monkeypatch.setitem(tensor_cores.SCREEN_SHARE, 128, 1.0)
    host = _drawn(rng, n, d, k, offset, blobs, dtype)
    scanned = []
    for bound in _checked_calls(cp, host, k, rng, count=True):
        scanned.append(bound.scanned())
    assert bound._tensor
    assert (bound._screen_plan is not None) == screen
    assert scanned[0] == n and scanned[-1] < n, scanned


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("d", "k", "blobs"), [(32, 64, False), (100, 200, False),
                                               (64, 64, True)])
def test_first_full_scan_takes_its_plan_from_a_sample(cp, monkeypatch, d, k, blobs, dtype, rng):
    """From four samples' rows a tensor-core bounds run's first call, which queues every
    row, runs the split kernel on a sample of them first, whose count sets that call's plan
    (the screen first where it leaves few: on uniform data); that call alone. Every call's
    labels are tiled's, its changed count the labels that changed (the sample's rows, decided
    twice, counted once) and every row's bounds hold (the sample's, written again)."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(registry, "TC_SCAN_MIN_WORK", 0)
    monkeypatch.setattr(registry, "TC_SCAN_MIN_ROWS", 0)
    passes, original = [], tensor_cores._sample_pass

    def counted(n, *args):
        passes.append(n)
        return original(n, *args)

    monkeypatch.setattr(tensor_cores, "_sample_pass", counted)
    m = tensor_cores.SCREEN_SAMPLE_ROWS
    n = 4 * m + 1001
    host = _drawn(rng, n, d, k, 0.0, blobs, dtype)
    for call, bound in enumerate(_checked_calls(cp, host, k, rng, count=True, calls=4)):
        assert bound._tensor and bound._screen_plan is not None
        assert passes == [n], call
        if call == 0:  # the rows of the sample the screen would leave (its third word)
            left = int(bound._scratch.empty("sample", m + 2, cp.int64)[m:].view(cp.int32)[2])
            share = tensor_cores.SCREEN_SHARE[tensor_cores._padded_width(d)]
            assert 0 <= left <= m and (blobs or left <= share * m), left  # uniform: few
            # the call's pass over all n rows, under the sample's plan, counts the rows the
            # screen leaves (plan 1: counters[3]) or would leave (plan 2: counters[4]): the
            # sample's share of them is the whole call's, to sampling error
            counters = bound._scratch.empty("counters", 5, cp.uint32).get()
            whole = int(counters[3] if left <= share * m else counters[4])
            assert abs(left / m - whole / n) <= 0.02, (left, m, whole, n)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offset", [0.0, 1e4, -3e6])
def test_near_ties_far_from_the_origin(cp, scan, offset, dtype, rng):
    """Points on cell faces of a centre lattice, nudged by a few ulps: the bounds must not
    skip a point whose computed distances are within rounding of each other."""
    from gpumine.kmeans.bounds import BoundAssign

    C, host = _lattice_near_ties(rng, offset, dtype)
    X = _columns(cp, host)
    bound = BoundAssign(X)
    labels = cp.full(X.shape[0], -1, dtype=cp.int32)
    centers = cp.asarray(C, dtype=dtype)
    _follow_ulp_moves(cp, bound, X, centers, labels, rng, offset, moves=3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k"), [(30_000, 2, 100), (20_000, 24, 50), (700, 3, 300),
                                          (20_000, 48, 64)])
def test_fit_equals_fit_with_tiled(cp, scan, n, d, k, dtype, rng):
    # update="sort" is bit-reproducible, so the whole fits must match exactly; k = 300 of 700
    # points makes empty clusters (relocation, then a full scan after reset)
    centres = rng.normal(scale=5.0, size=(max(2, k // 3), d))
    X = cp.asarray((centres[rng.randint(0, len(centres), n)]
                    + rng.normal(size=(n, d))).astype(dtype))
    fits = [GPUKMeans(k, assign=name, update="sort", init="random", n_init=2, random_state=4,
                      max_iter=60, tol=0.0, device="gpu").fit(X) for name in ("tiled", "hamerly")]
    np.testing.assert_array_equal(cp.asnumpy(fits[0].labels_), cp.asnumpy(fits[1].labels_))
    assert fits[0].n_iter_ == fits[1].n_iter_
    np.testing.assert_array_equal(cp.asnumpy(fits[0].cluster_centers_),
                                  cp.asnumpy(fits[1].cluster_centers_))
    assert fits[1].inertia_ == fits[0].inertia_


@pytest.mark.gpu
@pytest.mark.parametrize("tensor_cores", [True, False])
def test_auto_runs_wide_hamerly_only_with_tensor_cores(cp, monkeypatch, tensor_cores, rng):
    """A fit's auto past 32 features from 2^19 rows and k = 1024 runs hamerly on the tensor
    cores, and on a device without them (compute capability below 8.0, mocked) tc-exact --
    whose fallback is tiled's kernel -- where hamerly would raise. Either fit equals the fit
    with tiled bit for bit (update="sort": reproducible). The fit centres the rows, so the
    labels are compared with a whole fit's, not with tiled over the raw rows: at 2^19 rows
    some near-tie falls the other way after centring (seen on the H200)."""
    from gpumine.kmeans import tensor_cores as tc

    monkeypatch.setitem(tc._MMA_80, cp.cuda.runtime.getDevice(), tensor_cores)
    n, d, k = registry.HAMERLY_MIN_SAMPLES, 48, registry.TC_SCAN_WIDE_MIN_CLUSTERS
    X = _columns(cp, rng.uniform(-1, 1, size=(n, d)).astype(np.float32))
    fits = [GPUKMeans(k, assign=name, update="sort", init=X[:k].copy(), max_iter=2, tol=0,
                      device="gpu").fit(X) for name in ("auto", "tiled")]
    assert fits[0].strategies_["assign"] == ("hamerly" if tensor_cores else "tc-exact")
    np.testing.assert_array_equal(cp.asnumpy(fits[0].labels_), cp.asnumpy(fits[1].labels_))
    np.testing.assert_array_equal(cp.asnumpy(fits[0].cluster_centers_),
                                  cp.asnumpy(fits[1].cluster_centers_))


@pytest.mark.gpu
def test_wide_data_is_refused_and_predict_runs_unbound(cp, rng):
    from gpumine.exceptions import IncompatibleStrategy
    from gpumine.kmeans.bounds import BoundAssign

    with pytest.raises(IncompatibleStrategy, match="at most 128 features"):
        BoundAssign(_columns(cp, rng.normal(size=(10, 129))))
    X = cp.asarray(rng.normal(size=(5000, 6)).astype(np.float32))
    model = GPUKMeans(9, assign="hamerly", random_state=0, device="gpu").fit(X)
    np.testing.assert_array_equal(cp.asnumpy(model.predict(X)), cp.asnumpy(model.labels_))


# -- atomic-fixed following the moved rows -----------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("listed", ["scan", "compared"])
@pytest.mark.parametrize(("n", "d", "k", "weighted"), [
    (40_000, 4, 100, False), (30_001, 7, 33, True), (5000, 1, 3, True), (9000, 32, 500, False)])
def test_tracked_fixed_sums_equal_a_recomputation_every_call(cp, scan, n, d, k, weighted,
                                                             listed, rng):
    """Each call's float64 sums and weights from the moved rows alone -- listed by hamerly's
    scan, or found by comparing labels -- equal update="atomic-fixed" recomputing them from
    every row, bit for bit; late calls take the moves path (few rows moved), the first
    recomputes, and so does the call after reset() of labels moved by hand."""
    from gpumine.kmeans.bounds import BoundAssign

    X = _columns(cp, (rng.normal(size=(n, d)) * 3 + 50).astype(np.float32))
    weight = cp.asarray(rng.uniform(0.1, 4, n) if weighted else np.ones(n), dtype=cp.float32)
    fixed = registry.load_strategy("kmeans.update", "atomic-fixed").bind(X, weight)
    bound = BoundAssign(X)
    tracked = fixed.follow(bound if listed == "scan" else
                           registry.load_strategy("kmeans.assign", "tiled"))
    labels = cp.full(n, -1, dtype=cp.int32)
    C = X[rng.choice(n, k, replace=False)].copy()
    sums = [cp.full((k, d), np.nan), cp.full((k, d), np.nan)]
    weights = [cp.full(k, np.nan), cp.full(k, np.nan)]
    moves_path = []
    for step in range(10):
        C = C + cp.asarray(rng.normal(scale=0.5 * 0.5**step, size=C.shape), dtype=cp.float32)
        if step == 6:  # labels moved outside the assignment, as a relocation does
            labels[: n // 3] = (labels[: n // 3] + 1) % k
            bound.reset()
            tracked.reset()
        bound(X, C, labels)
        tracked(X, labels, weight, sums[0], weights[0])
        fixed(X, labels, weight, sums[1], weights[1])
        moved = int(tracked.moves.count.get()[0])
        moves_path.append(step not in (0, 6) and moved <= tracked.moves.capacity)
        np.testing.assert_array_equal(cp.asnumpy(sums[0]), cp.asnumpy(sums[1]), f"{step}")
        np.testing.assert_array_equal(cp.asnumpy(weights[0]), cp.asnumpy(weights[1]), f"{step}")
    assert sum(moves_path) >= 4, moves_path


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "d", "k"), [(60_000, 2, 100), (20_000, 16, 50), (700, 3, 300)])
def test_fit_with_tracked_fixed_sums_equals_fit_recomputing_them(cp, scan, n, d, k, rng):
    """Float32 fits of hamerly + atomic-fixed (the sums following the scan's moves) and of
    tiled + atomic-fixed (following the compared labels) equal tiled + atomic-fixed with
    the sums recomputed every iteration bit for bit: labels, centres, n_iter, inertia; with
    sample weights, two runs, and (k = 300 of 700 points) empty clusters."""
    from gpumine.kmeans import gpu

    centres = rng.normal(scale=5.0, size=(max(2, k // 3), d))
    X = cp.asarray((centres[rng.randint(0, len(centres), n)]
                    + rng.normal(size=(n, d))).astype(np.float32))
    weight = cp.asarray(rng.uniform(0.5, 2.0, n), dtype=cp.float32)

    def fit(name):
        return GPUKMeans(k, assign=name, update="atomic-fixed", init="random", n_init=2,
                         random_state=4, max_iter=80, tol=0.0, device="gpu").fit(
                             X, sample_weight=weight)

    follow = gpu._BoundFixed.follow
    try:
        gpu._BoundFixed.follow = lambda self, assign: self  # recomputed every iteration
        fits = [fit("tiled")]
    finally:
        gpu._BoundFixed.follow = follow
    fits += [fit("tiled"), fit("hamerly")]
    for other in fits[1:]:
        np.testing.assert_array_equal(cp.asnumpy(fits[0].labels_), cp.asnumpy(other.labels_))
        assert fits[0].n_iter_ == other.n_iter_
        np.testing.assert_array_equal(cp.asnumpy(fits[0].cluster_centers_),
                                      cp.asnumpy(other.cluster_centers_))
        assert other.inertia_ == fits[0].inertia_


def _distances(X, C):
    """Every row's float64 distance to every centre (direct differences, no expansion)."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    squared = np.zeros((X.shape[0], C.shape[0]))
    for j in range(X.shape[1]):
        squared += (X[:, j, None] - C[None, :, j]) ** 2
    return np.sqrt(squared)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k", "offset", "screened"), [
    (1, 1, 1, 0.0, False), (3001, 1, 7, 0.0, False), (4099, 3, 64, 1e4, False),
    (5000, 2, 1, 0.0, False), (20_000, 8, 200, -3e5, False), (6000, 32, 40, 0.0, False),
    (500, 5, 500, 0.0, False), (70_001, 24, 64, 0.0, True)])
def test_tc_exact_seeds_bounds_that_hold(cp, n, d, k, offset, screened, dtype, rng):
    """ScreenedRun.seed: tc-exact's call gives tiled's labels and, for every row, an upper
    bound on its float64 distance to its centre and a lower bound on its distance to every
    other centre (poisoned first: every row written); most rows get finite bounds, and the
    bounds call that goes on from them equals tiled's without a full scan. `screened`: rows
    in k tight blobs around the centres, so the run's plan puts the screen first (its
    decided rows' bounds carry the screen's term); the others uniform, centres drawn from
    the rows."""
    from gpumine.kmeans.bounds import BoundAssign
    from gpumine.kmeans.tensor_cores import assign_tc_exact

    if screened:  # the screen (from 17 features) decides nearly every row: the plan takes it
        middle = rng.uniform(-1, 1, size=(k, d))
        host = (middle[rng.randint(0, k, n)] + rng.normal(scale=0.01, size=(n, d))
                + offset).astype(dtype)
    else:
        host = (rng.uniform(-1, 1, size=(n, d)) + offset).astype(dtype)
    X = _columns(cp, host)
    C = (cp.asarray(middle + offset, dtype=dtype) if screened  # a centre a blob
         else X[rng.choice(n, k, replace=False)].copy())
    run, bound = assign_tc_exact.bind(X), BoundAssign(X)
    labels = cp.full(n, -1, dtype=cp.int32)
    if screened:
        for _ in range(3):  # the plan: the split kernel counts, then the screen goes first
            run(X, C, labels)
            cp.cuda.Device().synchronize()
        assert int(run.plan.get()[0]) == 1
    bound.upper.fill(-1.0)
    bound.lower.fill(np.float32(3e38))
    run.seed(bound, C, labels)
    got = cp.asnumpy(labels)
    assert np.array_equal(got, _tiled(cp, X, C))
    upper, lower = cp.asnumpy(bound.upper), cp.asnumpy(bound.lower)
    distances = _distances(host, cp.asnumpy(C))
    rows = np.arange(n)
    assert np.all(upper >= distances[rows, got])
    if k > 1:
        distances[rows, got] = np.inf
        assert np.all(lower <= distances.min(axis=1))
        assert np.mean(np.isfinite(upper) & (lower > 0)) > 0.5  # most rows seeded
    moved = C + cp.asarray(rng.normal(scale=1e-3, size=C.shape), dtype=dtype)
    bound(X, moved, labels)
    assert np.array_equal(cp.asnumpy(labels), _tiled(cp, X, moved))
    if n >= 1000 and k > 1:
        assert bound.scanned() < n // 2  # went on from the seed: no full scan


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_seeded_bounds_on_near_ties(cp, scan, offset, dtype, rng):
    """Points on cell faces of a centre lattice, nudged by a few ulps: the seed's bounds
    hold (float64 distances) and the bounds calls after it give tiled's labels."""
    from gpumine.kmeans.bounds import BoundAssign
    from gpumine.kmeans.tensor_cores import assign_tc_exact

    C, host = _lattice_near_ties(rng, offset, dtype)
    X = _columns(cp, host)
    centers = cp.asarray(C, dtype=dtype)
    run, bound = assign_tc_exact.bind(X), BoundAssign(X)
    labels = cp.full(X.shape[0], -1, dtype=cp.int32)
    run.seed(bound, centers, labels)
    got = cp.asnumpy(labels)
    assert np.array_equal(got, _tiled(cp, X, centers))
    distances = _distances(host, cp.asnumpy(centers))
    rows = np.arange(len(got))
    assert np.all(cp.asnumpy(bound.upper) >= distances[rows, got])
    distances[rows, got] = np.inf
    assert np.all(cp.asnumpy(bound.lower) <= distances.min(axis=1))
    _follow_ulp_moves(cp, bound, X, centers, labels, rng, offset, moves=2)


@pytest.mark.gpu
def test_seeding_another_array_is_refused(cp, rng):
    from gpumine.kmeans.bounds import BoundAssign
    from gpumine.kmeans.tensor_cores import assign_tc_exact

    X = _columns(cp, rng.normal(size=(100, 3)).astype(np.float32))
    Y = _columns(cp, rng.normal(size=(100, 3)).astype(np.float32))
    labels = cp.zeros(100, dtype=cp.int32)
    with pytest.raises(InvalidParameterError, match="another array"):
        assign_tc_exact.bind(X).seed(BoundAssign(Y), X[:4].copy(), labels)
    assert not labels.any()  # untouched
