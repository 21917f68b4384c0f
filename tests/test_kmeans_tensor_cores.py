"""assign="tc-exact": split-FP16 tensor-core scores, the rounding bound, and the direct re-check.

The CPU tests check the bound of :mod:`gpumine.kmeans.tensor_cores` against an emulation
of the fused kernel's arithmetic (per-row power-of-two scaling, FP16 splits, FP32
accumulation) on adversarial data; the GPU tests (marked ``gpu``) check that the labels
equal ``assign="tiled"``'s bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans, registry
from gpumine.kmeans.tensor_cores import error_bound


def _scale_exponent(top: np.ndarray) -> np.ndarray:
    """The kernel's ``half_scale``: s with every |v| <= top scaled below 2**13."""
    _, e = np.frexp(top)
    return np.where((top > 0) & np.isfinite(top), 13 - e, 13)


def _split(values: np.ndarray, exponent) -> tuple[np.ndarray, np.ndarray]:
    """Scaled FP16 hi and lo parts (as float32) of float32 values: hi = fp16(v),
    lo = fp16(v - hi), rounding to nearest even."""
    scaled = np.ldexp(values.astype(np.float32), exponent).astype(np.float32)
    hi = scaled.astype(np.float16).astype(np.float32)
    return hi, (scaled - hi).astype(np.float16).astype(np.float32)


def _cut(values: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """``values`` cut toward zero to multiples of ``2**(exponent - 23)``: 24 bits below a
    number of that binary exponent."""
    step = np.ldexp(1.0, exponent - 23)
    return np.trunc(values / step) * step


def _block_sum(acc: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """The accumulation model of :mod:`gpumine.kmeans.tensor_cores` for one block: the
    accumulator and the block's products (exact, float64, last axis) aligned to the largest
    and cut to 24 bits, their sum cut to 24 bits once more."""
    parts = np.concatenate([acc[..., None], terms], axis=-1)
    largest = np.abs(parts).max(axis=-1)
    exponent = np.frexp(largest)[1] - 1  # 2**exponent <= largest
    total = _cut(parts, exponent[..., None]).sum(axis=-1)  # exact: a few 25-bit numbers
    return np.where(total == 0, 0.0, _cut(total, np.frexp(np.abs(total))[1] - 1))


def _emulated_scores(X, C, accumulate="nearest", held=False):
    """||c||^2 - 2 x.c as the fused kernel computes it: rows scaled by their own power of two
    and centres by one from the largest norm, FP16 splits, FP32 accumulation an instruction
    (16 features) of lo.hi, one of hi.lo, then hi.hi in the same accumulator (up to 64
    features), or past 64 of lo.hi + hi.lo in one accumulator and hi.hi an instruction at a
    time from zero, each added in float32 (``held``: in one accumulator, as the one-product
    kernel's hi.hi), the two added at the end, unscaled exactly, the score by one rounding
    from float64. ``accumulate``: how an
    instruction's four blocks of four products join the accumulator: ``"nearest"``, each
    product added in float32 (round to nearest); ``"blocks"``, the tensor core as the bound
    models it (the block and the accumulator cut to 24 bits). Rows the kernel would not
    scale (factor outside float32) are NaN."""
    X, C = X.astype(np.float32), C.astype(np.float32)
    row_exp = _scale_exponent(np.abs(X).max(axis=1))[:, None]
    cmax = np.sqrt((C.astype(np.float64) ** 2).sum(1)).max()
    c_exp = _scale_exponent(np.nextafter(np.float32(cmax), np.float32(np.inf)))
    Xh, Xl = _split(X, row_exp)
    Ch, Cl = _split(C, c_exp)
    d = X.shape[1]

    def add(acc, terms):  # products of FP16 numbers are exact in float64 (and float32)
        if accumulate == "blocks":
            return _block_sum(acc, terms)
        for t in range(terms.shape[-1]):
            acc = (acc + terms[..., t]).astype(np.float32).astype(np.float64)
        return acc

    def chain(acc, pairs, steps=None):
        for j0 in steps or range(0, d, 16):  # an instruction per pair of operands, 4 blocks each
            for a, b in pairs:
                for f in range(j0, min(j0 + 16, d), 4):
                    stop = min(f + 4, d)
                    acc = add(acc, a[:, None, f:stop].astype(np.float64)
                              * b[None, :, f:stop].astype(np.float64))
        return acc

    def float32(values):
        return values.astype(np.float32).astype(np.float64)

    zero = np.zeros((X.shape[0], C.shape[0]))
    small = chain(zero, ((Xl, Ch), (Xh, Cl)))
    if held or d <= 64:
        G = chain(small if d <= 64 else zero, ((Xh, Ch),))
    else:  # flushed: each instruction's large products from zero, added in float32
        G = zero
        for j0 in range(0, d, 16):
            G = float32(G + chain(zero, ((Xh, Ch),), [j0]))
    G = (G + small if d > 64 else G).astype(np.float32)
    factor = 1 - row_exp - c_exp
    G64 = np.ldexp(G.astype(np.float64), factor - 1)
    norms = (C.astype(np.float64) ** 2).sum(1).astype(np.float32)
    scores = (norms[None, :].astype(np.float64) - 2.0 * G64).astype(np.float32)
    return np.where((factor >= -120) & (factor <= 120), scores, np.nan)


CASES = [  # (n, d, k, scale, offset): d up to the fused kernel's 128
    (200, 1, 5, 1.0, 0.0), (200, 7, 9, 1.0, 1e3), (100, 128, 16, 1e-3, 0.0),
    (50, 100, 8, 1.0, 1e6), (100, 16, 8, 1e-30, 0.0), (100, 33, 20, 1e12, -5e12),
    (100, 64, 30, 1e-6, 1e-3), (100, 24, 12, 1e15, 0.0),
]


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("accumulate", ["nearest", "blocks"])
@pytest.mark.parametrize(("n", "d", "k", "scale", "offset"), CASES)
def test_score_bound_holds_on_emulated_half_splits(n, d, k, scale, offset, accumulate, held,
                                                   rng):
    """The split kernel's bound (``"half"``: its large products flushed an instruction at a
    time past 64 features) on its emulated arithmetic, and the one-product kernel's
    (``"half-held"``) on one accumulator over every feature."""
    X = (rng.normal(size=(n, d)) * scale + offset).astype(np.float32)
    C = (rng.normal(size=(k, d)) * scale + offset).astype(np.float32)
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    exact = (C64**2).sum(1)[None, :] - 2.0 * X64 @ C64.T
    got = _emulated_scores(X, C, accumulate, held).astype(np.float64)
    scaled = np.isfinite(got).all(axis=1)  # the kernel never decides the others
    # rows near float32's underflow are the ones whose unscaling factor leaves its range
    assert scaled.all() if scale >= 1e-20 else not scaled.any()
    X64, exact, got = X64[scaled], exact[scaled], got[scaled]
    kappa_g, _, absolute, _, _ = error_bound(d, np.float32, "half-held" if held else "half")
    x_norm = np.sqrt((X64**2).sum(1))[:, None]
    cmax = np.sqrt((C64**2).sum(1)).max()
    e = kappa_g * (2 * x_norm * cmax + cmax**2) + absolute * (1 + x_norm + cmax)
    assert np.all(np.abs(got - exact) <= e)
    # and the bound is not vacuous: within 2**16 of the error seen where the error is real
    # (the accumulation model is a worst case, the emulation rounds to nearest; on data
    # near float32's underflow the absolute floor dominates, by design)
    real = np.abs(got - exact) > 0
    if real.any() and scale >= 1e-3:
        assert np.median((e / np.maximum(np.abs(got - exact), 1e-300))[real]) < 2.0**16


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("d", [16, 48, 64, 100, 128])
def test_score_bound_holds_where_truncation_cuts_every_product(d, held):
    """The bound against the block model on its worst case: one large product, every other
    one just under the accumulator's last bit (all of them cut), and half the rows with
    the large feature last (the small products first). Flushed (the split kernel past 64
    features), only the large product's instruction cuts: the others' products sum apart
    from it, and their sum joins it by a float32 addition."""
    n, k = 8, 4
    under = np.float32((1 - 2.0**-11) * 2.0**-11)  # hi parts whose products fall under 2**-23
    X = np.full((n, d), under, dtype=np.float32)
    C = np.full((k, d), np.float32(2.0**-12), dtype=np.float32)
    X[:, 0], C[:, 0] = 1.0, 1.0
    X[n // 2:, 0], X[n // 2:, -1] = under, 1.0
    C[:, -1] = 1.0
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    exact = (C64**2).sum(1)[None, :] - 2.0 * X64 @ C64.T
    got = _emulated_scores(X, C, "blocks", held).astype(np.float64)
    kappa_g, _, absolute, _, _ = error_bound(d, np.float32, "half-held" if held else "half")
    x_norm = np.sqrt((X64**2).sum(1))[:, None]
    cmax = np.sqrt((C64**2).sum(1)).max()
    e = kappa_g * (2 * x_norm * cmax + cmax**2) + absolute * (1 + x_norm + cmax)
    error = np.abs(got - exact)
    assert np.all(error <= e)
    cut = d if held or d <= 64 else 16  # the products that share the large one's accumulator
    assert error.max() > 2.0**-23 * (cut - 2)  # they were cut: the case is a real one


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("d", "offset"), [(1, 0.0), (8, 1e3), (100, 1.0), (1000, 50.0)])
def test_direct_distance_bound_holds(d, offset, dtype, rng):
    x = (rng.normal(size=d) + offset).astype(dtype)
    c = (rng.normal(size=(64, d)) + offset).astype(dtype)
    acc = np.zeros(64, dtype=dtype)
    for j in range(d):  # one rounding for the difference, one fused multiply-add per term
        diff = (x[j] - c[:, j]).astype(dtype)
        acc = (acc.astype(np.float64) + diff.astype(np.float64) ** 2).astype(dtype)
    exact = ((x.astype(np.float64)[None, :] - c.astype(np.float64)) ** 2).sum(1)
    kappa_d = error_bound(d, dtype)[1]
    assert np.all(np.abs(acc.astype(np.float64) - exact) <= kappa_d * exact + 1e-300)


def test_bound_grows_with_d_and_is_smaller_for_float64():
    b32 = [error_bound(d, np.float32) for d in (1, 128, 4096)]
    assert b32[0][0] < b32[1][0] < b32[2][0]
    assert error_bound(4096, np.float32, "sgemm")[0] < b32[2][0]
    assert error_bound(128, np.float64)[1] < 1e-12 < b32[1][1]


def test_strategies_are_listed_with_exactness_said():
    strategies = {s.name: s for s in registry.list_strategies("kmeans.assign", backend="gpu")}
    assert "exact" in strategies["tc-exact"].description
    assert strategies["tc-fast"].description.startswith("NOT exact")


@pytest.mark.parametrize("bits", [4, 8, 12])
def test_a_key_moves_its_score_within_the_screens_term(bits, rng):
    """The premise of the screen's keys (module docstring, "The screen"): replacing a float
    score's low ``bits`` bits by a number, then flushing a subnormal result to zero as the
    kernels do, moves the score by less than ``2**(bits - 23) |s| + 2**-126``, on scores of
    every magnitude and sign, zeros, subnormals and the largest floats; and a key whose
    exponent is not zero still holds its number."""
    mask = (1 << bits) - 1
    scores = np.concatenate([
        rng.uniform(-1, 1, 20000) * np.exp2(rng.uniform(-140, 127, 20000)),
        [0.0, -0.0, 1e-45, -1e-45, 1.17e-38, -1.17e-38, np.finfo(np.float32).max, 1.0, -1.0],
    ]).astype(np.float32)
    q = rng.randint(0, mask + 1, size=scores.size).astype(np.uint32)
    keys = ((scores.view(np.uint32) & ~np.uint32(mask)) | q).view(np.float32)
    normal = (keys.view(np.uint32) & 0x7F800000) != 0
    flushed = np.where(normal, keys, np.float32(0.0)).astype(np.float64)
    moved = np.abs(flushed - scores.astype(np.float64))
    assert np.all(moved < np.abs(scores.astype(np.float64)) * 2.0 ** (bits - 23) + 2.0 ** -126)
    assert np.array_equal(keys.view(np.uint32)[normal] & mask, q[normal])
    assert not normal.all() and normal.any()  # both kinds were tried


# -- GPU --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


def _columns(cp, X):
    return cp.ascontiguousarray(cp.asarray(X).T).T


def _labels(cp, name, X, C, previous=None):
    """Labels and changed count of assign strategy ``name`` from poisoned or given labels."""
    n = X.shape[0]
    labels = cp.full(n, -7, dtype=cp.int32) if previous is None else cp.asarray(previous)
    changed = cp.zeros(1, dtype=cp.uint64)
    registry.load_strategy("kmeans.assign", name)(_columns(cp, X), cp.asarray(C), labels,
                                                  changed=changed)
    return cp.asnumpy(labels), int(changed.get()[0])


def _assert_same_as_tiled(cp, X, C, previous=None):
    expected, expected_changed = _labels(cp, "tiled", X, C, previous)
    got, got_changed = _labels(cp, "tc-exact", X, C, previous)
    assert np.array_equal(got, expected), f"{np.sum(got != expected)} labels differ"
    assert got_changed == expected_changed


@pytest.mark.gpu
def test_device_accumulation_stays_within_the_bounds_model(cp):
    """The bound's premise on this GPU: chains of the fused kernel's mma (16, 32, 128
    products) never move a result by more than the model allows (its units of 2**-23 of the
    magnitudes), on random inputs and on the model's worst case, where the alignment cuts
    every product after a large one (and some error shows, or the probe probed nothing)."""
    from gpumine.kmeans.accumulation import probe
    from gpumine.kmeans.tensor_cores import has_mma

    if not has_mma(cp):
        pytest.skip("no FP16 mma before compute capability 8.0: tc-exact runs tiled's kernel")
    for chain, found in probe(problems=512).items():
        for family, error in found["families"].items():
            assert error["max"] <= found["allowance"], (chain, family, error)
        assert found["families"]["large_then_tiny_c0"]["max"] > 0, chain


SHAPES = [  # (n, d, k): d past every fused width and on the cuBLAS path; k around the tile
    (1, 1, 1), (129, 1, 2), (1000, 3, 63), (1000, 8, 64), (1000, 9, 65), (4099, 17, 100),
    (3000, 32, 1), (2000, 33, 256), (2000, 64, 2000), (1500, 100, 130), (1000, 128, 77),
    (700, 129, 64), (500, 300, 40), (300, 1000, 33), (64, 4096, 20),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k"), SHAPES)
def test_tc_exact_equals_tiled_bit_for_bit(cp, n, d, k, dtype, rng):
    X = rng.normal(size=(n, d)).astype(dtype)
    C = rng.normal(size=(k, d)).astype(dtype)
    _assert_same_as_tiled(cp, X, C)
    previous = rng.randint(0, k, size=n).astype(np.int32)
    _assert_same_as_tiled(cp, X, C, previous)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [3, 16, 32, 64, 128])
@pytest.mark.parametrize("n", [1000, 4099])
def test_float_rows_copied_by_four_bytes_where_not_aligned(cp, n, d, rng):
    """Float rows reach shared memory 16 bytes a copy only where every column of the (d, n)
    buffer is 16-byte aligned; a buffer starting one float into its allocation (n a multiple
    of 4), and n = 4099, take the 4-byte copies. Labels as tiled's either way."""
    from gpumine.kmeans.gpu import column_buffer

    X = (rng.normal(size=(n, d)) + 50.0).astype(np.float32)
    C = (rng.normal(size=(37, d)) + 50.0).astype(np.float32)
    flat = cp.empty(d * n + 1, dtype=cp.float32)
    buffer = flat[1:].reshape(d, n)
    buffer[...] = cp.asarray(X.T)
    assert buffer.data.ptr % 16 != 0
    assert column_buffer(buffer.T).data.ptr == buffer.data.ptr  # the kernel reads this view
    labels = {}
    for name in ("tiled", "tc-exact"):
        labels[name] = cp.full(n, -7, dtype=cp.int32)
        registry.load_strategy("kmeans.assign", name)(buffer.T, cp.asarray(C), labels[name])
    expected, got = cp.asnumpy(labels["tiled"]), cp.asnumpy(labels["tc-exact"])
    assert (expected >= 0).all()
    assert np.array_equal(got, expected), f"{np.sum(got != expected)} labels differ"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offset", [0.0, 1e4, -3e6])
@pytest.mark.parametrize("d", [2, 16, 130])
def test_tc_exact_on_near_ties_far_from_the_origin(cp, d, offset, dtype, rng):
    """A lattice of exact and near ties (points on cell faces of a centre lattice, nudged by
    a few ulps) shifted far from the origin: where FP16 splits cannot decide, the re-check
    must."""
    k = 64
    C = (rng.randint(0, 4, size=(k, d)).astype(np.float64) + offset)
    a, b = rng.randint(0, k, size=(2, 5000))
    t = 0.5 + rng.randint(-3, 4, size=(5000, 1)) * np.finfo(dtype).eps
    X = (C[a] * t + C[b] * (1 - t)).astype(dtype)
    _assert_same_as_tiled(cp, X, C.astype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [8, 32, 64, 128])
def test_labels_do_not_depend_on_the_previous_labels(cp, d, dtype, rng):
    """Whatever the previous labels -- tiled's own, each row's second-nearest centre, out of
    range (-1, k + 3, 2^31 - 1), random -- on blobs and on near-ties far from the origin, the
    labels and the changed count are tiled's (a pruning from the previous labels was tried
    against this test; record tc-prune-probe-h100-2026-11-27-57fb8e9.txt)."""
    k = 200
    C = rng.normal(scale=3.0, size=(k, d)) + 1e3
    blobs = C[rng.randint(0, k, size=6000)] + rng.normal(size=(6000, d))
    a, b = rng.randint(0, k, size=(2, 2000))
    t = 0.5 + rng.randint(-3, 4, size=(2000, 1)) * np.finfo(dtype).eps
    X = np.vstack([blobs, C[a] * t + C[b] * (1 - t)]).astype(dtype)
    C = C.astype(dtype)
    exact, _ = _labels(cp, "tiled", X, C)
    X64, C64 = X.astype(np.float64) - 1e3, C.astype(np.float64) - 1e3
    scores = (C64**2).sum(1)[None, :] - 2.0 * X64 @ C64.T
    second = np.argsort(scores, axis=1)[:, 1].astype(np.int32)
    n = X.shape[0]
    for previous in (exact, second, np.full(n, -1, np.int32), np.full(n, k + 3, np.int32),
                     np.full(n, 2**31 - 1, np.int32), rng.randint(0, k, size=n).astype(np.int32)):
        _assert_same_as_tiled(cp, X, C, previous)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("d", "k"), [(16, 300), (40, 1000), (130, 97)])
def test_re_check_past_its_compact_rows_and_over_centre_ranges(cp, d, k, dtype, rng,
                                                             monkeypatch):
    """The re-check's compact rows cut to one block: the first 256 queued rows go through
    the centre ranges and their merge (ranges of whole tiles, the last one short), the rest
    through the scattered rows -- tiled's labels and changed count either way, on near-ties
    (exact ties among them: the lowest index, across ranges too)."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "_RECHECK_SPLIT_ROWS", 256)
    C = rng.randint(0, 3, size=(k, d)).astype(np.float64) + 50.0
    C[k - 1] = C[0]  # a duplicate centre: ties between the first and the last range
    a, b = rng.randint(0, k, size=(2, 6000))
    t = 0.5 + rng.randint(-2, 3, size=(6000, 1)) * np.finfo(dtype).eps
    X = (C[a] * t + C[b] * (1 - t)).astype(dtype)
    X[:50] = C[0]  # on the duplicated centre: label 0, not k - 1
    assert tensor_cores.queued_rows(_columns(cp, X), cp.asarray(C.astype(dtype))) > 1000
    _assert_same_as_tiled(cp, X, C.astype(dtype))
    previous = rng.randint(0, k, size=6000).astype(np.int32)
    _assert_same_as_tiled(cp, X, C.astype(dtype), previous)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_with_nan_inf_or_huge_values_as_tiled(cp, dtype, rng):
    """Rows the scores cannot decide because a value is NaN, infinite or past float32's
    range go to the re-check, which gives tiled's label (0 where no distance is below the
    largest finite one). tc-fast queues its non-finite rows to the same re-check."""
    X = rng.normal(size=(3000, 20)).astype(dtype)
    C = rng.normal(size=(50, 20)).astype(dtype)
    X[5, 3] = np.nan
    X[6] = np.inf
    X[7, 0] = -np.inf
    X[8] *= dtype(1e30)  # squared: past float32's range
    X[9] = np.finfo(np.float32).max / 2
    _assert_same_as_tiled(cp, X, C)
    got, _ = _labels(cp, "tc-fast", X, C)
    expected, _ = _labels(cp, "tiled", X, C)
    assert np.array_equal(got[5:8], expected[5:8])


@pytest.mark.gpu
def test_float64_centres_on_float32_data_as_tiled(cp, rng):
    """The Dask loop passes float64 centres to float32 partitions: both assignments round
    them to the data's dtype first, so tc-exact still gives tiled's labels."""
    X = (rng.normal(size=(5000, 24)) + 100.0).astype(np.float32)
    C = X[rng.choice(5000, 300, replace=False)].astype(np.float64) + rng.normal(scale=1e-6,
                                                                                 size=(300, 24))
    _assert_same_as_tiled(cp, X, C)


@pytest.mark.gpu
def test_re_check_is_what_makes_it_exact(cp, rng):
    """On near-ties far from the origin unsplit FP16 (tc-fast) gets labels wrong; tc-exact
    does not, and it queued rows to get there."""
    from gpumine.kmeans.tensor_cores import queued_rows

    d, k = 16, 128
    C = rng.normal(size=(k, d)) + 1e3
    a, b = rng.randint(0, k, size=(2, 20000))
    X = (0.5 * (C[a] + C[b]) + rng.normal(scale=1e-4, size=(20000, d))).astype(np.float32)
    C = C.astype(np.float32)
    expected, _ = _labels(cp, "tiled", X, C)
    fast, _ = _labels(cp, "tc-fast", X, C)
    exact, _ = _labels(cp, "tc-exact", X, C)
    assert np.sum(fast != expected) > 0
    assert np.array_equal(exact, expected)
    assert 0 < queued_rows(_columns(cp, X), cp.asarray(C)) <= 20000


@pytest.mark.gpu
def test_well_separated_data_needs_few_re_checks(cp, rng):
    from gpumine.kmeans.tensor_cores import queued_rows

    C = rng.normal(scale=10.0, size=(256, 32)).astype(np.float32)
    X = (C[rng.randint(0, 256, size=100_000)] + rng.normal(size=(100_000, 32))).astype(np.float32)
    assert queued_rows(_columns(cp, X), cp.asarray(C)) < 1000


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fit_with_tc_exact_equals_fit_with_tiled(cp, dtype, rng):
    # update="sort" is bit-reproducible (atomics add in a varying order), so the centres
    # must match exactly when the labels do at every iteration
    _assert_tc_exact_fit_equals_tiled(cp, cp.asarray(rng.normal(size=(20000, 24)).astype(dtype)),
                                      max_iter=30)


def _assert_tc_exact_fit_equals_tiled(cp, X, max_iter):
    """Fits of X by tiled and tc-exact (update="sort": a fixed order of additions) from the
    same random init: the same labels, n_iter_ and centres, bit for bit."""
    fits = [GPUKMeans(50, assign=name, update="sort", init="random", n_init=1, random_state=3,
                      max_iter=max_iter, tol=0.0, device="gpu").fit(X)
            for name in ("tiled", "tc-exact")]
    assert np.array_equal(cp.asnumpy(fits[0].labels_), cp.asnumpy(fits[1].labels_))
    assert fits[0].n_iter_ == fits[1].n_iter_
    np.testing.assert_array_equal(cp.asnumpy(fits[0].cluster_centers_),
                                  cp.asnumpy(fits[1].cluster_centers_))


@pytest.mark.parametrize(("n", "d", "k", "scale", "offset"), CASES)
def test_screen_margin_covers_the_dropped_lo_parts(n, d, k, scale, offset, rng):
    """The screen's term (module docstring, "The screen"): the hi parts' product is within
    rho_x cmax + (|x| + rho_x) rho_c of x.c, rho the residual norms as the kernels sum them
    (scaled values, unscaled by the power of two, rho_c rounded up to float32) -- and that
    term is the residuals', far below the elementwise worst case 2**-10 |x| cmax."""
    X = (rng.normal(size=(n, d)) * scale + offset).astype(np.float32)
    C = (rng.normal(size=(k, d)) * scale + offset).astype(np.float32)
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    row_exp = _scale_exponent(np.abs(X).max(axis=1))[:, None]
    cmax = np.float32(np.sqrt((C64**2).sum(1)).max())
    c_exp = _scale_exponent(np.nextafter(cmax, np.float32(np.inf)))
    Xh, _ = _split(X, row_exp)
    Ch, _ = _split(C, c_exp)
    x_rest = np.ldexp(X, row_exp).astype(np.float32) - Xh  # exact in float32
    c_rest = np.ldexp(C, c_exp).astype(np.float32) - Ch
    rho_x = np.ldexp(np.sqrt((x_rest.astype(np.float64) ** 2).sum(1)), -row_exp[:, 0])
    rho_c = np.float32(np.ldexp(np.sqrt((c_rest.astype(np.float64) ** 2).sum(1)).max(), -c_exp))
    rho_c = float(np.nextafter(rho_c, np.float32(np.inf)))  # the kernel's rounding up
    xh = np.ldexp(Xh.astype(np.float64), -row_exp)
    ch = np.ldexp(Ch.astype(np.float64), -c_exp)
    x_norm = np.sqrt((X64**2).sum(1))
    term = (rho_x * float(cmax) + (x_norm + rho_x) * rho_c)[:, None] * (1 + 2.0**-20)
    error = np.abs(xh @ ch.T - X64 @ C64.T)
    float64_sums = 4 * d * 2.0**-53 * (x_norm[:, None] * float(cmax))  # this test's own sums
    assert np.all(error <= term + float64_sums)
    assert np.all(term <= 2.0**-10 * 1.01 * x_norm[:, None] * float(cmax))
    if d >= 16 and offset == 0:  # spread values: the residuals' norms, not their worst case
        assert np.median(term[:, 0] / (x_norm * float(cmax))) < 2.0**-11


def _screened(cp, X, C, run=None, previous=None):
    """One call of a bound tc-exact run (``run``, or a new one over X): the plan it found,
    its labels from poisoned or given ones, the changed count, and the run."""
    from gpumine.kmeans.tensor_cores import assign_tc_exact

    Xc = _columns(cp, X) if run is None else run.X
    run = assign_tc_exact.bind(Xc) if run is None else run
    labels = cp.full(X.shape[0], -7, dtype=cp.int32) if previous is None else cp.asarray(previous)
    changed = cp.zeros(1, dtype=cp.uint64)
    plan = int(run.plan.get()[0])  # sync: the test's readback
    run(Xc, cp.asarray(C), labels, changed=changed)
    return plan, cp.asnumpy(labels), int(changed.get()[0]), run


def _assert_screened_as_tiled(cp, X, C, calls=2, previous=None, run=None):
    """Calls of one bound run, each with tiled's labels and changed count; their plans."""
    expected, expected_changed = _labels(cp, "tiled", X, C, previous)
    plans = []
    for _ in range(calls):
        plan, got, changed, run = _screened(cp, X, C, run, previous)
        assert np.array_equal(got, expected), f"{np.sum(got != expected)} labels differ"
        assert changed == expected_changed
        plans.append(plan)
    return plans, run


@pytest.fixture
def screen_always(monkeypatch):
    """The screen kept whatever it leaves, from one row on."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "SCREEN_SHARE", {32: 1.0, 64: 1.0, 128: 1.0})
    monkeypatch.setattr(tensor_cores, "SCREEN_MIN_ROWS", 1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [32, 64, 128])
def test_screened_run_takes_the_screen_on_unclustered_data(cp, d, dtype, rng):
    """On uniform data (the issue's kind) a bound run's first call takes the split kernel,
    counts what the screen would leave, and the next calls take the screen: tiled's labels
    every time, from poisoned and from given labels."""
    from gpumine.kmeans.tensor_cores import SCREEN_MIN_ROWS

    n, k = SCREEN_MIN_ROWS + 4099, 256
    X = rng.uniform(size=(n, d)).astype(dtype)
    C = X[:k].copy()
    plans, run = _assert_screened_as_tiled(cp, X, C, calls=3)
    assert plans == [0, 1, 1]
    previous = rng.randint(0, k, size=n).astype(np.int32)
    plans, _ = _assert_screened_as_tiled(cp, X, C, calls=1, previous=previous, run=run)
    assert plans == [1]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offset", [0.0, 1e4, -3e6])
@pytest.mark.parametrize("d", [20, 64, 128])
def test_screen_on_near_ties_far_from_the_origin(cp, d, offset, dtype, rng, screen_always):
    """The screen's margin on the lattice of exact and near ties far from the origin, the
    screen kept whatever it leaves: rows it cannot decide go on to the split kernel (read
    through their indices, n not a multiple of the block) and the re-check."""
    k, n = 64, 5003
    C = rng.randint(0, 4, size=(k, d)).astype(np.float64) + offset
    a, b = rng.randint(0, k, size=(2, n))
    t = 0.5 + rng.randint(-3, 4, size=(n, 1)) * np.finfo(dtype).eps
    X = (C[a] * t + C[b] * (1 - t)).astype(dtype)
    X[:100] = rng.normal(size=(100, d)) * 3 + offset  # rows the screen decides
    plans, _ = _assert_screened_as_tiled(cp, X, C.astype(dtype), calls=3)
    assert plans == [0, 1, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_screen_with_nan_inf_or_huge_rows(cp, dtype, rng, screen_always):
    X = rng.normal(size=(3000, 40)).astype(dtype)
    C = rng.normal(size=(50, 40)).astype(dtype)
    X[5, 3] = np.nan
    X[6] = np.inf
    X[7, 0] = -np.inf
    X[8] *= dtype(1e30)
    X[9] = np.finfo(np.float32).max / 2
    plans, _ = _assert_screened_as_tiled(cp, X, C, calls=2)
    assert plans == [0, 1]


@pytest.mark.gpu
def test_plan_leaves_the_screen_where_it_leaves_too_many_rows(cp, rng, monkeypatch):
    """Centres in pairs a hair apart leave nearly every row to the split kernel and the
    re-check: a run that took the screen on random centres goes back to the split kernel
    alone, and to the screen again when the centres spread."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "SCREEN_MIN_ROWS", 1)
    n, d, k = 6000, 64, 64
    X = rng.uniform(size=(n, d)).astype(np.float32)
    spread = X[:k].copy()
    pairs = np.repeat(spread[: k // 2], 2, axis=0)
    pairs[1::2] += np.float32(1e-6)
    plans, run = _assert_screened_as_tiled(cp, X, spread, calls=2)
    assert plans == [0, 1]
    plans, run = _assert_screened_as_tiled(cp, X, pairs, calls=2, run=run)
    assert plans == [1, 0]
    plans, _ = _assert_screened_as_tiled(cp, X, spread, calls=2, run=run)
    assert plans == [0, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [32, 64, 128])
def test_first_call_takes_its_plan_from_a_sample(cp, d, dtype, rng, monkeypatch):
    """A run's first call over at least four samples' rows runs the split kernel on a
    sample first: on uniform data its plan is the screen's in that same call (the screen
    queues rows, the split kernel counts none), on centres in pairs a hair apart the split
    kernel's alone (it counts, the screen queues none). Labels and changed count are
    tiled's either way, from poisoned labels, from random ones, and from tiled's own with
    only the sampled rows wrong (each of their changes counted once)."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "SCREEN_MIN_ROWS", 1)
    monkeypatch.setattr(tensor_cores, "SCREEN_SAMPLE_ROWS", 1024)
    n, k = 5003, 64
    X = rng.uniform(size=(n, d)).astype(dtype)
    spread = X[:k].copy()
    pairs = np.repeat(spread[: k // 2], 2, axis=0)
    pairs[1::2] += dtype(1e-6) if dtype == np.float32 else 1e-12
    sampled = tensor_cores.sample_rows(n, 1024)
    assert len(np.unique(sampled)) == 1024 and sampled.min() == 0 and sampled.max() < n
    tiled_spread, _ = _labels(cp, "tiled", X, spread)
    wrong = tiled_spread.copy()
    wrong[sampled] = (wrong[sampled] + 1) % k
    for C, screened in ((spread, True), (pairs, False)):
        for previous in (None, rng.randint(0, k, size=n).astype(np.int32), wrong):
            if previous is wrong and C is pairs:
                continue
            plans, run = _assert_screened_as_tiled(cp, X, C, calls=1, previous=previous)
            assert plans == [0]  # before the call: no plan yet
            # [.., rows the screen queued, rows the split kernel counted over every row]
            counters = run.scratch._arrays["counters"].get()  # sync: the test's readback
            assert (counters[3] > 0, counters[4] > 0) == (screened, not screened)
            assert int(run.plan.get()[0]) == (1 if screened else 0)  # sync: the test's
    _, _, changed, _ = _screened(cp, X, spread, previous=wrong)
    assert changed == len(sampled)
    monkeypatch.setattr(tensor_cores, "SCREEN_SAMPLE_ROWS", n // 4 + 1)  # too few rows
    _, run = _assert_screened_as_tiled(cp, X, spread, calls=1)
    counters = run.scratch._arrays["counters"].get()  # sync: the test's readback
    assert counters[3] == 0 and counters[4] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("d", [32, 128])
def test_split_kernel_takes_the_screens_rows_tile_after_tile(cp, d, rng, screen_always,
                                                             monkeypatch):
    """After the screen the split kernel's grid is a wave of its blocks, each taking tiles of
    128 rows one after another: with centres in pairs a hair apart the screen leaves nearly
    every row, several tiles a block, and the labels and changed count are tiled's."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "INDIRECT_WAVES", 1)
    waves = []  # the split kernel's resident blocks, as the call asked them

    def resident_blocks(*args):
        waves.append(real_resident_blocks(*args))
        return waves[-1]

    real_resident_blocks = tensor_cores.resident_blocks
    monkeypatch.setattr(tensor_cores, "resident_blocks", resident_blocks)
    n, k = 150_000 + 77, 64
    X = rng.uniform(size=(n, d)).astype(np.float32)
    pairs = np.repeat(X[: k // 2], 2, axis=0)
    pairs[1::2] += np.float32(1e-6)
    plans, run = _assert_screened_as_tiled(cp, X, pairs, calls=3)
    assert plans == [0, 1, 1]
    counters = run.scratch.empty("counters", 5, cp.uint32)
    left = int(counters[3].get())  # sync: the check (the screen left most rows)
    # more rows than one wave of the split kernel's tiles: some blocks took several
    assert waves and left > max(waves) * 128 and left > n // 2
    previous = rng.randint(0, k, size=n).astype(np.int32)
    plans, _ = _assert_screened_as_tiled(cp, X, pairs, calls=1, previous=previous, run=run)
    assert plans == [1]


@pytest.mark.gpu
@pytest.mark.parametrize("share", [0.0, 1 / 16, 1.0])
@pytest.mark.parametrize("d", [64, 100])
def test_screen_copies_the_rows_it_leaves(cp, d, share, rng, screen_always, monkeypatch):
    """The screen copies the first rows it leaves (up to SCREEN_COPY_SHARE of n, whole
    tiles; float data from 64 padded features, where the kernels compile the copy) into a
    column-major buffer the split kernel stages them from; the rest it reads from X.
    Centres in pairs a hair apart leave nearly every row: with none copied, some, or all,
    the copy holds exactly those rows (poisoned first) and the labels and changed counts
    are tiled's."""
    from gpumine.kmeans import tensor_cores

    assert set(tensor_cores.SCREEN_COPY_SHARE) <= {64, 128}  # the widths the kernels copy
    monkeypatch.setattr(tensor_cores, "SCREEN_COPY_SHARE", {64: share, 128: share})
    n, k = 70_000 + 77, 64
    X = rng.uniform(size=(n, d)).astype(np.float32)
    pairs = np.repeat(X[: k // 2], 2, axis=0)
    pairs[1::2] += np.float32(1e-6)
    plans, run = _assert_screened_as_tiled(cp, X, pairs, calls=2)
    assert plans == [0, 1]
    cap = min(-(-int(n * share) // 128), -(-n // 128)) * 128
    copy = run.scratch.empty("screen_copy", (d, cap), cp.float32)
    copy.fill(np.nan)  # (no copy where cap is 0: this one is the test's own)
    previous = rng.randint(0, k, size=n).astype(np.int32)
    plans, _ = _assert_screened_as_tiled(cp, X, pairs, calls=1, previous=previous, run=run)
    assert plans == [1]
    left = int(run.scratch.empty("counters", 5, cp.uint32)[3].get())  # sync: the check
    rows = cp.asnumpy(run.scratch.empty("rows", n, cp.int64)[:left])
    assert left > n // 2 and np.array_equal(np.sort(rows), np.unique(rows))
    copied = min(left, cap)
    assert (copied < left) == (share < 1)
    got = cp.asnumpy(copy)
    assert np.array_equal(got[:, :copied], X[rows[:copied]].T)
    assert np.isnan(got[:, copied:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("d", [32, 128])
def test_screen_leaves_rows_whose_keys_lost_their_centre(cp, d, rng, screen_always):
    """The one-product kernel's keys carry the centre's number in a score's low bits, which
    the kernels' flush of subnormals drops where a score is zero: rows x = c_j / 2 of
    centres +-2 e_i (their mean, the shift, is zero) score exactly 0 against c_j and 4 or 8
    against the others, a wide margin with the number lost. Such rows go to the split
    kernel and the re-check: the screen's labels, and tc-fast's there, are tiled's."""
    k = 64
    C = np.zeros((k, d), np.float32)
    C[np.arange(k), np.arange(k) // 2] = np.where(np.arange(k) % 2 == 0, 2.0, -2.0)
    X = np.concatenate([rng.uniform(-1, 1, size=(4000, d)).astype(np.float32),
                        np.repeat(C / 2, 3, axis=0)])
    plans, _ = _assert_screened_as_tiled(cp, X, C, calls=2)
    assert plans == [0, 1]
    expected, _ = _labels(cp, "tiled", X, C)
    assert np.array_equal(expected[-3 * k:], np.repeat(np.arange(k), 3))
    fast, _ = _labels(cp, "tc-fast", X, C)
    assert np.array_equal(fast[-3 * k:], expected[-3 * k:])


@pytest.mark.gpu
@pytest.mark.parametrize("d", [3, 16, 32, 40])
@pytest.mark.parametrize("k", [1, 64, 65, 192, 300, 1000])
def test_screen_over_whole_and_half_centre_tiles(cp, d, k, rng, screen_always):
    """Up to 32 features the one-product kernel takes its centres 128 at a time, the last
    tile half full where the padded count is an odd multiple of 64 (k = 1, 64, 192, 300;
    d = 40 takes tiles of 64): the screen's labels, on rows with ties and near-ties among
    them, are tiled's; tc-fast's FP16 labels are centres whose distance is within FP16's
    error of the nearest, 2^-8 (2 |x| cmax + cmax^2) about the centres' mean (a centre
    read from the wrong slot of a tile is far off), and mostly tiled's."""
    C = rng.uniform(size=(k, d)).astype(np.float32)
    X = rng.uniform(size=(5003, d)).astype(np.float32)
    a, b = rng.randint(0, k, size=(2, 500))
    X[:500] = 0.5 * (C[a] + C[b])
    _assert_screened_as_tiled(cp, X, C, calls=2)
    expected, _ = _labels(cp, "tiled", X, C)
    fast, _ = _labels(cp, "tc-fast", X, C)
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    D = ((X64[:, None, :] - C64[None]) ** 2).sum(axis=2)
    mean = C64.mean(axis=0)
    cmax = np.sqrt(((C64 - mean) ** 2).sum(axis=1)).max()
    x_norm = np.sqrt(((X64 - mean) ** 2).sum(axis=1))
    excess = D[np.arange(len(X)), fast] - D.min(axis=1)
    assert (excess <= 2.0**-8 * (2 * x_norm * cmax + cmax**2)).all()
    assert np.mean(fast == expected) > 0.5


@pytest.mark.gpu
@pytest.mark.parametrize("k", [16384, 16385])
def test_screen_on_both_sides_of_the_keys_limit(cp, k, rng, screen_always):
    """Up to KEY_CENTRES padded centres the one-product kernel keys its top-2 in 12 bits, past
    it the plain top-2: tiled's labels either side (the screen, and the split kernel where
    the plan keeps it), and tc-fast agrees with them almost everywhere."""
    from gpumine.kmeans.tensor_cores import KEY_CENTRES

    assert KEY_CENTRES == 16384
    X = rng.uniform(size=(k + 3000, 32)).astype(np.float32)
    _assert_screened_as_tiled(cp, X, X[:k].copy(), calls=2)
    expected, _ = _labels(cp, "tiled", X, X[:k])
    fast, _ = _labels(cp, "tc-fast", X, X[:k])
    assert np.mean(fast == expected) > 0.99


@pytest.mark.gpu
def test_screen_launched_beside_the_split_kernel_when_the_plan_is_in_flight(cp, rng,
                                                                          monkeypatch):
    """Where the host has not seen the plan's copy land, both passes are launched and the
    device's plan picks: the same labels, and the plan moves as before."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "SCREEN_MIN_ROWS", 1)
    monkeypatch.setattr(tensor_cores.ScreenedRun, "known_plan", lambda self: None)
    X = rng.uniform(size=(5000, 128)).astype(np.float32)
    plans, _ = _assert_screened_as_tiled(cp, X, X[:300].copy(), calls=3)
    assert plans == [0, 1, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fit_with_the_screen_equals_fit_with_tiled(cp, dtype, rng, screen_always):
    """A fit binds tc-exact (the screen from its second iteration here): tiled's labels and
    centres at every iteration (update="sort" adds in a fixed order)."""
    _assert_tc_exact_fit_equals_tiled(cp, cp.asarray(rng.uniform(size=(20000, 48)).astype(dtype)),
                                      max_iter=20)


def _replays_as_tiled(cp, stream, graph, X, C, centres, labels, changed):
    """Replay a captured run with centres C in its buffers (poisoned labels, zero count):
    tiled's labels and changed count."""
    expected, expected_changed = _labels(cp, "tiled", X, C)
    with stream:
        centres[...] = cp.asarray(C)
        labels.fill(-7)
        changed.fill(0)
        graph.launch(stream)
    stream.synchronize()
    assert np.array_equal(cp.asnumpy(labels), expected)
    assert int(changed.get()[0]) == expected_changed


@pytest.mark.gpu
@pytest.mark.parametrize("d", [24, 128])
def test_screened_run_replays_from_a_cuda_graph(cp, d, rng, screen_always):
    """After its first call a run only launches kernels: a call captured into a CUDA graph
    and replayed with other centres and labels in the same buffers gives tiled's labels and
    changed count, the screen and the split kernel both in the graph (the device's plan
    picks), and nothing is allocated during the capture."""
    from gpumine.kmeans.tensor_cores import assign_tc_exact

    n, k = 6000, 80
    X = rng.uniform(size=(n, d)).astype(np.float32)
    Xc = _columns(cp, X)
    run = assign_tc_exact.bind(Xc)
    assert run.graph_safe
    centres = cp.asarray(X[:k])
    labels = cp.full(n, -7, dtype=cp.int32)
    changed = cp.zeros(1, dtype=cp.uint64)
    run(Xc, centres, labels, changed=changed)  # the first call: buffers made, plan 0 -> 1
    cp.cuda.Device().synchronize()  # the plan's copy landed: the capture takes both passes
    assert run.known_plan() == 1
    buffers = {name: array.data.ptr for name, array in run.scratch._arrays.items()}
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        run(Xc, centres, labels, changed=changed)
        graph = stream.end_capture()
    assert {name: array.data.ptr for name, array in run.scratch._arrays.items()} == buffers
    for seed in range(3):
        C = X[np.random.RandomState(seed).choice(n, k, replace=False)]
        C[: k // 2] += np.float32(1e-3)
        _replays_as_tiled(cp, stream, graph, X, C, centres, labels, changed)
    assert int(run.plan.get()[0]) == 1  # the graph's replays kept the screen


@pytest.mark.gpu
def test_graph_captured_under_the_split_plan_takes_every_row(cp, rng, monkeypatch):
    """A capture made where the plan was the split kernel alone (centres in pairs a hair
    apart) holds that kernel over every row and no screen: replayed with spread centres,
    which turn the device's plan to the screen, it still gives tiled's labels."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "SCREEN_MIN_ROWS", 1)
    n, d, k = 6000, 64, 64
    X = rng.uniform(size=(n, d)).astype(np.float32)
    pairs = np.repeat(X[: k // 2], 2, axis=0)
    pairs[1::2] += np.float32(1e-6)
    Xc = _columns(cp, X)
    run = tensor_cores.assign_tc_exact.bind(Xc)
    centres = cp.asarray(pairs)
    labels = cp.full(n, -7, dtype=cp.int32)
    changed = cp.zeros(1, dtype=cp.uint64)
    run(Xc, centres, labels, changed=changed)
    cp.cuda.Device().synchronize()
    assert run.known_plan() == 0
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        run(Xc, centres, labels, changed=changed)
        graph = stream.end_capture()
    spread = X[rng.choice(n, k, replace=False)]
    for _ in range(3):
        _replays_as_tiled(cp, stream, graph, X, spread, centres, labels, changed)
    assert int(run.plan.get()[0]) == 1  # the device's plan turned; the graph held its course


@pytest.mark.gpu
def test_screened_run_with_the_cublas_path_is_not_graph_safe(cp, rng):
    from gpumine.kmeans.tensor_cores import assign_tc_exact

    X = _columns(cp, rng.normal(size=(300, 130)).astype(np.float32))
    assert not assign_tc_exact.bind(X).graph_safe


@pytest.mark.gpu
@pytest.mark.parametrize("screen", ["always", "as planned"])
def test_converged_fit_through_graphs_assigns_as_tiled(cp, rng, screen, monkeypatch):
    """A tc-exact fit with a graph-safe update runs its iterations as CUDA graph launches
    (the run is graph-safe up to 128 features); converged with tol=0 (no label changed), its
    labels are tiled's assignment to its own centres."""
    from gpumine.kmeans import gpu, tensor_cores

    assert gpu.graphs_enabled()
    monkeypatch.setattr(tensor_cores, "SCREEN_MIN_ROWS", 1)
    if screen == "always":
        monkeypatch.setattr(tensor_cores, "SCREEN_SHARE", {32: 1.0, 64: 1.0, 128: 1.0})
    X = rng.uniform(size=(30000, 48)).astype(np.float32)
    fit = GPUKMeans(20, assign="tc-exact", update="atomic-f64", init="random", n_init=1,
                    random_state=0, max_iter=500, tol=0.0, device="gpu").fit(cp.asarray(X))
    assert fit.n_iter_ < 500
    expected, _ = _labels(cp, "tiled", X, cp.asnumpy(fit.cluster_centers_).astype(np.float32))
    assert np.array_equal(cp.asnumpy(fit.labels_), expected)


def _blobs(rng, n, d, blobs, per_blob, spread, offset, dtype):
    """Rows around `blobs` far-apart centres, `per_blob` k-means centres in each (drawn from
    the rows, some duplicated, some rows on midpoints: ties and near-ties inside blobs)."""
    middle = rng.uniform(-10, 10, size=(blobs, d)) + offset
    X = middle[rng.randint(0, blobs, size=n)] + rng.normal(scale=spread, size=(n, d))
    C = X[rng.choice(n, blobs * per_blob, replace=False)].copy()
    C[1] = C[0]  # a duplicate: the lower index wins
    a, b = rng.randint(0, len(C), size=(2, n // 10))
    X[: n // 10] = 0.5 * (C[a] + C[b])
    return X.astype(dtype), C.astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("lattice", [False, True])
@pytest.mark.parametrize("k", [1, 7, 129, 256, 300, 1024, 4096])
def test_select_gap_rows_keeps_each_centres_nearest_gaps(cp, k, lattice, rng):
    """centre_gaps' rows are lower bounds of the distances between centres; select_gap_rows
    keeps each row's min(k, 256) smallest, ascending, ties by index, as the first entries of
    a stable argsort -- on random centres with a duplicate and on a small lattice, where
    many gaps tie at the selection's threshold."""
    from gpumine.kernels import BLOCK, get_kernel, launch

    C = (rng.randint(0, 3, size=(k, 40)) if lattice else rng.normal(size=(k, 40)))
    C = C.astype(np.float32)
    C[k // 2] = C[0]
    centers = cp.asarray(C)
    queued = cp.ones(1, dtype=cp.uint32)
    gaps = cp.full((k, k), np.nan, dtype=cp.float32)
    tiles = -(-k // 64)
    launch(get_kernel("kmeans_assign_tc.cu", "centre_gaps", np.float32), (tiles, tiles), 256,
           (centers, np.int32(k), np.int32(40), queued, np.uint32(0), gaps))
    unsorted = cp.asnumpy(gaps)
    exact = np.sqrt(((C[:, None, :].astype(np.float64) - C[None]) ** 2).sum(axis=2))
    assert (unsorted <= exact).all() and (unsorted >= 0.999 * exact).all()
    width = min(k, BLOCK)
    nearest = cp.full((k, width), np.nan, dtype=cp.float32)
    order = cp.full((k, width), -1, dtype=cp.int32)
    launch(get_kernel("kmeans_assign_tc.cu", "select_gap_rows"), k, BLOCK,
           (gaps, np.int32(k), np.int32(width), queued, np.uint32(0), nearest, order))
    expected = np.argsort(unsorted, axis=1, kind="stable")[:, :width]
    assert np.array_equal(cp.asnumpy(order), expected)
    assert np.array_equal(cp.asnumpy(nearest), np.take_along_axis(unsorted, expected, axis=1))


@pytest.mark.gpu
@pytest.mark.parametrize("per_blob", [12, 24])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("d", "offset"), [(2, 0.0), (33, 1e3), (128, 0.0), (300, -50.0)])
def test_pruned_re_check_from_any_first_centre(cp, d, offset, dtype, per_blob, rng,
                                               monkeypatch):
    """recheck_pruned on every row, half of them queued with a random first centre (mostly
    of another blob), half with their label: the rows it decides get tiled's labels and
    changed count, the ones it passes on (more than 128 candidates) are left untouched --
    the triangle-inequality pruning is right whatever centre it starts from, on ties,
    near-ties and data far from the origin; with k = 192 (each centre's list holds every
    centre) and 384 (its 256 nearest: a row reaching past them goes on), and with 4, 2 and 1
    rows a warp loads together (rows of 8 to 2400 bytes)."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "_PRUNE_MIN_ROWS", 0)
    X, C = _blobs(rng, 3000, d, 16, per_blob, 1.0, offset, dtype)
    n, k = X.shape[0], C.shape[0]
    expected, _ = _labels(cp, "tiled", X, C)
    previous = rng.randint(0, k, size=n).astype(np.int32)
    previous[:5] = -7  # poisoned
    labels = cp.asarray(previous)
    changed = cp.zeros(1, dtype=cp.uint64)
    queue = cp.arange(n, dtype=cp.int64)[::-1].copy()
    first = cp.asarray(np.where(rng.rand(n) < 0.5, expected[::-1],
                                rng.randint(0, k, size=n)).astype(np.int32))
    size = cp.asarray(np.array([n], dtype=np.uint32))
    rest_size, rest = tensor_cores._recheck_pruned(cp.asarray(X.T.copy()), cp.asarray(C), size,
                                                   queue, first, labels, changed)
    passed = cp.asnumpy(rest[: int(rest_size.get()[0])])
    got = cp.asnumpy(labels)
    decided = np.ones(n, dtype=bool)
    decided[passed] = False
    assert len(np.unique(passed)) == len(passed)
    assert n // 4 < decided.sum() < n  # pruned from their own blob's centre, passed on from others
    assert np.array_equal(got[decided], expected[decided])
    assert np.array_equal(got[~decided], previous[~decided])
    assert int(changed.get()[0]) == int(np.sum(expected[decided] != previous[decided]))


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "scale"), [(np.float32, 1e18), (np.float64, 1e153)])
def test_pruned_re_check_where_centre_gaps_overflow(cp, dtype, scale, rng, monkeypatch):
    """Blobs so far apart that the squared distances between their centres overflow the
    dtype (float64: centres near 1e154): centre_gaps stores a finite lower bound (a float),
    the rows it decides get tiled's labels and the ones it passes on are left untouched. In
    float32 pruning still decides most rows; in float64 the rows' distances (near 1e153) are
    beyond any float gap, so nothing is pruned and most rows go on (192 candidates)."""
    from gpumine.kmeans import tensor_cores

    monkeypatch.setattr(tensor_cores, "_PRUNE_MIN_ROWS", 0)
    X, C = _blobs(rng, 3000, 33, 16, 12, 0.1, 0.0, np.float64)
    X, C = (X * scale).astype(dtype), (C * scale).astype(dtype)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.sum((C[:, None, :] - C[None, :, :]) ** 2, axis=2)).all()
    n = X.shape[0]
    expected, _ = _labels(cp, "tiled", X, C)
    previous = np.full(n, -7, dtype=np.int32)
    labels = cp.asarray(previous)
    changed = cp.zeros(1, dtype=cp.uint64)
    size = cp.asarray(np.array([n], dtype=np.uint32))
    rest_size, rest = tensor_cores._recheck_pruned(
        cp.asarray(X.T.copy()), cp.asarray(C), size, cp.arange(n, dtype=cp.int64),
        cp.asarray(expected), labels, changed)
    passed = cp.asnumpy(rest[: int(rest_size.get()[0])])
    got = cp.asnumpy(labels)
    decided = np.ones(n, dtype=bool)
    decided[passed] = False
    assert decided.sum() > (n // 2 if dtype == np.float32 else 0)
    assert np.array_equal(got[decided], expected[decided])
    assert np.array_equal(got[~decided], previous[~decided])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("d", "k_per_blob"), [(24, 16), (40, 4), (64, 16), (128, 16)])
def test_tc_exact_on_clustered_data_prunes_its_re_check(cp, d, k_per_blob, dtype, rng,
                                                       monkeypatch):
    """Blobs far from the shift, many centres in each: the bound queues many rows (it scales
    with the norms, the margins with the blobs' spread) and the pruned re-check decides most
    of them from their blob's centres; the labels stay tiled's, bit for bit."""
    from gpumine.kmeans import tensor_cores

    passed_on = []
    full = tensor_cores._recheck

    def counting(XT, centers, queue_size, queue, labels, changed, scratch=None):
        passed_on.append(int(queue_size.get()[0]))  # sync: the test's count
        full(XT, centers, queue_size, queue, labels, changed, scratch)

    monkeypatch.setattr(tensor_cores, "_recheck", counting)
    monkeypatch.setattr(tensor_cores, "_PRUNE_MIN_ROWS", 100)
    monkeypatch.setattr(tensor_cores, "_PRUNE_MID_ROWS", 100)  # d = 24 pruned too
    X, C = _blobs(rng, 20000, d, 16, k_per_blob, 1.0, 0.0, dtype)
    queued = tensor_cores.queued_rows(_columns(cp, X), cp.asarray(C))
    assert queued > 200
    assert passed_on[-1] < queued / 4
    _assert_same_as_tiled(cp, X, C)
    _assert_same_as_tiled(cp, X, C, rng.randint(0, len(C), size=len(X)).astype(np.int32))


@pytest.mark.parametrize(("n", "d", "k", "itemsize", "expected"), [
    (1 << 20, 33, 1024, 4, True), (1 << 20, 32, 1024, 4, False), (1 << 21, 17, 1024, 4, True),
    (1 << 21, 16, 1024, 4, False), ((1 << 14) - 1, 128, 1024, 4, False),
    (1 << 20, 128, 4096, 8, True), (1 << 20, 128, 4097, 4, False),
    (1 << 20, 512, 64, 8, True), (1 << 20, 513, 64, 8, False), (1 << 20, 1025, 64, 4, False)])
def test_which_fits_prune_their_re_check(n, d, k, itemsize, expected):
    """The pruned re-check's one gate: features (fewer with many rows), rows, centres (their
    k x k gaps) and row bytes (a warp's row in shared memory)."""
    from gpumine.kmeans import tensor_cores

    assert tensor_cores._prunes(n, d, k, itemsize) is expected


@pytest.mark.gpu
def test_tc_exact_skips_the_pruned_re_check_for_fewer_rows_than_its_minimum(cp, rng,
                                                                           monkeypatch):
    """Fewer rows than _PRUNE_MIN_ROWS can never queue enough: the pruned re-check (its
    gaps, selection and kernel) is not launched at all, the full re-check takes the queue,
    and the labels are tiled's; from that many rows on it is. From 17 to 32 features it
    waits for _PRUNE_MID_ROWS rows."""
    from gpumine.kmeans import tensor_cores

    calls = []
    pruned = tensor_cores._recheck_pruned

    def counting(*args):
        calls.append(1)
        return pruned(*args)

    monkeypatch.setattr(tensor_cores, "_recheck_pruned", counting)
    X, C = _blobs(rng, 5000, 64, 16, 16, 1.0, 0.0, np.float32)
    monkeypatch.setattr(tensor_cores, "_PRUNE_MIN_ROWS", 5001)
    _assert_same_as_tiled(cp, X, C)
    assert calls == []
    monkeypatch.setattr(tensor_cores, "_PRUNE_MIN_ROWS", 5000)
    _assert_same_as_tiled(cp, X, C)
    assert calls == [1]
    # 17 to 32 features: only from _PRUNE_MID_ROWS rows
    X, C = _blobs(rng, 5000, 24, 16, 16, 1.0, 0.0, np.float32)
    monkeypatch.setattr(tensor_cores, "_PRUNE_MID_ROWS", 5001)
    _assert_same_as_tiled(cp, X, C)
    assert calls == [1]
    monkeypatch.setattr(tensor_cores, "_PRUNE_MID_ROWS", 5000)
    _assert_same_as_tiled(cp, X, C)
    assert calls == [1, 1]


@pytest.mark.gpu
def test_pruned_re_check_passes_a_short_queue_on_whole(cp, rng, monkeypatch):
    """Fewer queued rows than _PRUNE_MIN_ROWS: no gaps, every row passed on in queue order,
    no label written, nothing counted."""
    from gpumine.kmeans import tensor_cores

    X, C = _blobs(rng, 3000, 64, 16, 12, 1.0, 0.0, np.float32)
    n = X.shape[0]
    monkeypatch.setattr(tensor_cores, "_PRUNE_MIN_ROWS", n + 1)
    labels = cp.full(n, -7, dtype=cp.int32)
    changed = cp.zeros(1, dtype=cp.uint64)
    queue = cp.asarray(rng.permutation(n).astype(np.int64))
    size = cp.asarray(np.array([n], dtype=np.uint32))
    rest_size, rest = tensor_cores._recheck_pruned(cp.asarray(X.T.copy()), cp.asarray(C), size,
                                                   queue, cp.zeros(n, dtype=cp.int32), labels,
                                                   changed)
    assert int(rest_size.get()[0]) == n
    assert np.array_equal(cp.asnumpy(rest[:n]), cp.asnumpy(queue))
    assert (cp.asnumpy(labels) == -7).all()
    assert int(changed.get()[0]) == 0
