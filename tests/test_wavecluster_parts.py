"""WaveCluster parts: wavelets against PyWavelets, labelling against scipy.ndimage.label."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from gpumine import registry
from gpumine.wavecluster.labeling import label_scipy, label_union_find
from gpumine.wavecluster.wavelet import coarse_cells, coarse_shape, lowpass


@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
@pytest.mark.parametrize("shape", [(17,), (16, 9), (7, 8, 5), (6, 5, 4, 3)])
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_lowpass_equals_pywavelets(wavelet, shape, levels, rng):
    import pywt  # the dev extra installs PyWavelets: the reference, not a dependency

    grid = rng.poisson(3.0, size=shape).astype(np.float64)
    expected = grid
    for _ in range(levels):
        expected = pywt.dwtn(expected, wavelet, mode="zero")["a" * grid.ndim]
    got = lowpass(grid, wavelet, levels)
    assert got.shape == expected.shape == coarse_shape(shape, wavelet, levels)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(1,), (2,), (7,), (8, 5), (5, 8, 3)])
def test_haar_level_equals_the_filter_loop_bit_for_bit(shape, rng):
    """Two equal taps (haar) skip the padded copy: the same products summed in the same
    order as the general filter loop, so the same bits, odd lengths included."""
    from gpumine.wavecluster.wavelet import HAAR, _lowpass_axis

    grid = rng.gamma(0.5, size=shape) * (rng.random_sample(shape) < 0.7)
    tap_a, tap_b = HAAR.dec_lo
    for axis in range(len(shape)):
        out_len = (shape[axis] + 1) // 2
        padded = np.pad(grid, [(1, 1) if a == axis else (0, 0) for a in range(len(shape))])

        def taken(start, padded=padded, axis=axis, out_len=out_len):
            index = [slice(None)] * len(shape)
            index[axis] = slice(start, start + 2 * out_len - 1, 2)
            return padded[tuple(index)]

        expected = tap_a * taken(2) + tap_b * taken(1)  # the loop's j = 0 term, then j = 1
        got = _lowpass_axis(grid, HAAR.dec_lo, axis, np)
        assert got.shape == expected.shape
        assert np.array_equal(got.view(np.int64), expected.view(np.int64))


@pytest.mark.parametrize("trial", range(12))
def test_compiled_lowpass_equals_numpy_bit_for_bit(trial):
    """cpu_fast.lowpass (the CPU stages' ``lowpass`` with Numba) against wavelet.lowpass on
    fresh random grids: d = 1..6, odd and even lengths from 1, 1..3
    levels, negative values and zeros (the odd end's 0.0 + tap * x keeps +0.0 where x is
    -0.0), tiny and huge magnitudes: the same shape and bits. Another wavelet takes
    NumPy's way; the CPU stages use the compiled one."""
    pytest.importorskip("numba")
    from gpumine.backend import get_backend
    from gpumine.wavecluster import cpu_fast, pipeline

    rng = np.random.default_rng(trial)
    d = trial % 6 + 1
    shape = tuple(int(s) for s in rng.integers(1, 14 if d <= 3 else 6, size=d))
    grid = rng.gamma(0.5, size=shape) * (rng.random(shape) < 0.7)
    grid *= rng.choice([1.0, 1e-300, 1e300, -3.0])
    levels = int(rng.integers(1, 4))
    got = cpu_fast.lowpass(grid, "haar", levels)
    expected = lowpass(grid, "haar", levels)
    assert got.shape == expected.shape == coarse_shape(shape, "haar", levels)
    assert np.array_equal(got.view(np.int64), expected.view(np.int64))
    np.testing.assert_array_equal(cpu_fast.lowpass(grid, "bior2.2", 2),
                                  lowpass(grid, "bior2.2", 2))
    assert pipeline.stages_for(get_backend("cpu")).lowpass is cpu_fast.lowpass


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 5])
def test_compiled_histogram_equals_the_numpy_steps(d, dtype, rng):
    """cpu_fast.histogram (the CPU stages' ``histogram`` with Numba) against quantize,
    ravel_multi_index and bincount: the same cells, inside mask and grid to the bit, with
    points outside the bounds and on them, weighted and not, rows and columns in memory."""
    pytest.importorskip("numba")
    from gpumine.backend import get_backend
    from gpumine.wavecluster import cpu_fast, pipeline

    assert pipeline.stages_for(get_backend("cpu")).histogram is cpu_fast.histogram
    X = rng.normal(size=(3000, d)).astype(dtype)
    bounds = np.quantile(X.astype(np.float64), [0.05, 0.95], axis=0)
    X[:5], X[5:10] = bounds[0], bounds[1]
    bounds = np.stack([X[0], X[5]]).astype(np.float64)  # exactly on the first and last cells
    shape = (7, 5, 4, 6, 3)[:d]
    for weight, layout in ((None, X), (rng.uniform(0.1, 3.0, size=3000).astype(dtype),
                                       np.asfortranarray(X))):  # a fit's columns: F order
        (cells, inside), grid, total = cpu_fast.histogram(layout, weight, bounds, shape)
        (want_cells, want_inside), want_grid, _ = pipeline._cpu_histogram(X, weight, bounds,
                                                                          shape)
        assert 0 < inside.sum() < len(X) and inside[:10].all()
        assert np.array_equal(cells, want_cells) and np.array_equal(inside, want_inside)
        assert grid.shape == shape and total is None
        assert np.array_equal(grid.view(np.int64), want_grid.view(np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 4), (5000, 2), (777, 6)])
def test_compiled_bounds_equal_numpy_min_and_max(shape, dtype, rng):
    """cpu_fast.bounds (a CPU fit's data bounds with Numba) equals NumPy's min and max over
    rows, for rows and columns in memory; a fit's bounds_ are those of its data."""
    pytest.importorskip("numba")
    from gpumine.wavecluster import WaveCluster, cpu_fast

    X = (rng.normal(size=shape) * 10.0 ** rng.randint(-3, 4, size=shape[1])).astype(dtype)
    want = np.stack([X.min(axis=0), X.max(axis=0)])
    for layout in (X, np.asfortranarray(X)):
        got = cpu_fast.bounds(layout)
        assert got.dtype == X.dtype and np.array_equal(got, want)
    if shape[0] >= 100:
        fitted = WaveCluster(device="cpu", threshold=1.0).fit(X)
        np.testing.assert_array_equal(fitted.bounds_, want.astype(np.float64))


@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
@pytest.mark.parametrize("levels", [1, 2])
def test_cell_to_coarse_cell_alignment(wavelet, levels):
    """A lone point's mass peaks in the coarse cell the alignment rule names."""
    shape = (32, 32)
    for cell in [(0, 0), (5, 17), (31, 31), (10, 3), (1, 2), (9, 30)]:
        grid = np.zeros(shape)
        grid[cell] = 1.0
        coarse = lowpass(grid, wavelet, levels)
        mapped = tuple(coarse_cells(np.array([cell]), wavelet, levels, shape)[0])
        assert coarse[mapped] == coarse.max(), (cell, mapped)


def _same_partition(a, b, mask):
    assert ((a > 0) == mask).all() and ((b > 0) == mask).all()
    pairs = set(zip(a[mask].tolist(), b[mask].tolist(), strict=True))
    return len(pairs) == len(set(a[mask].tolist())) == len(set(b[mask].tolist()))



LABELS = [s.name for s in registry.list_strategies("wavecluster.label", backend="cpu")]
MASKS = {
    "snake": None,  # the `snake` fixture
    "all-foreground": lambda rng: np.ones((20, 30), dtype=bool),
    "empty": lambda rng: np.zeros((9, 9), dtype=bool),
    "1d": lambda rng: rng.random_sample(200) < 0.6,
    **{f"2d-{p}": (lambda rng, p=p: rng.random_sample((64, 48)) < p)
       for p in (0.2, 0.45, 0.6, 0.8)},
    **{f"3d-{p}": (lambda rng, p=p: rng.random_sample((16, 12, 10)) < p) for p in (0.2, 0.3, 0.6)},
    "4d": lambda rng: rng.random_sample((6, 7, 5, 6)) < 0.4,
}


@pytest.mark.parametrize("name", LABELS)
@pytest.mark.parametrize("mask_name", sorted(MASKS))
def test_labelling_matches_scipy(name, mask_name, rng, snake):
    mask = snake(63) if mask_name == "snake" else MASKS[mask_name](rng)
    label = registry.load_strategy("wavecluster.label", name)
    for connectivity in range(1, mask.ndim + 1):
        got, n_got = label(mask, connectivity)
        expected, n_expected = ndimage.label(
            mask, structure=ndimage.generate_binary_structure(mask.ndim, connectivity))
        assert n_got == n_expected, (connectivity, n_got, n_expected)
        assert _same_partition(got, expected, mask)


def test_snake_is_one_component(snake):
    for label in (label_union_find, label_scipy):
        _, n = label(snake(63), 1)
        assert n == 1


def test_narrow_label_types_hold_every_label():
    from gpumine.wavecluster.gpu import _narrow_labels

    for n_clusters in (0, 1, 128, 129, 32768, 32769, 2**31 + 1):
        dtype = _narrow_labels(n_clusters)
        assert np.iinfo(dtype).min <= -1 and np.iinfo(dtype).max >= n_clusters - 1
        if dtype is not np.int8:  # and the next narrower type would not
            narrower = {np.int16: np.int8, np.int32: np.int16, np.int64: np.int32}[dtype]
            assert np.iinfo(narrower).max < n_clusters - 1
