"""WaveCluster's GPU kernels against its CPU path (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from gpumine import WaveCluster, registry
from gpumine.datasets import read_arff_points
from gpumine.wavecluster import engine
from gpumine.wavecluster.wavelet import lowpass

pytestmark = pytest.mark.gpu

SHAPES = ["cluto-t4-8k", "cluto-t7-10k", "aggregation", "compound", "jain", "3-spiral", "atom",
          "chainlink", "hepta"]


@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
@pytest.mark.parametrize("shape", [(33,), (40, 17), (9, 8, 7), (6, 5, 6, 4)])
@pytest.mark.parametrize("levels", [1, 2])
def test_lowpass_gpu_equals_cpu(cp, wavelet, shape, levels, rng):
    from gpumine.wavecluster import gpu

    grid = rng.poisson(2.0, size=shape).astype(np.float64) * rng.uniform(0.5, 2, size=shape)
    np.testing.assert_array_equal(cp.asnumpy(gpu.lowpass(cp.asarray(grid), wavelet, levels)),
                                  lowpass(grid, wavelet, levels))


@pytest.mark.parametrize("grid_shape", [(16, 16), (300, 200), (8, 8, 8), (5, 6, 7, 8)])
def test_bounds_and_quantize_equal_cpu(cp, grid_shape, rng):
    from gpumine.wavecluster import gpu

    d = len(grid_shape)
    X = rng.normal(size=(20001, d))
    X_device = cp.ascontiguousarray(cp.asarray(X).T)
    bounds = gpu.bounds(X_device)
    np.testing.assert_array_equal(bounds, np.stack([X.min(0), X.max(0)]))
    weight = rng.randint(1, 4, len(X)).astype(np.float64)
    point_cell, hist = gpu.quantize_histogram(X_device, cp.asarray(weight), bounds, grid_shape)
    cells, _ = engine.quantize(X, bounds, grid_shape)
    np.testing.assert_array_equal(cp.asnumpy(point_cell),
                                  np.ravel_multi_index(tuple(cells.T), grid_shape))
    expected = np.bincount(np.ravel_multi_index(tuple(cells.T), grid_shape), weights=weight,
                           minlength=int(np.prod(grid_shape))).reshape(grid_shape)
    np.testing.assert_array_equal(cp.asnumpy(hist), expected)



@pytest.mark.parametrize("name", ["sliding-window", "union-find-gpu"])
def test_gpu_labelling_matches_scipy(cp, name, rng, snake):
    label = registry.load_strategy("wavecluster.label", name)
    masks = [snake(101), np.ones((64, 48), bool), np.zeros((9, 9), bool),
             rng.random_sample(500) < 0.6, rng.random_sample((6, 7, 5, 6)) < 0.4]
    masks += [rng.random_sample((128, 96)) < p for p in (0.2, 0.45, 0.59, 0.8)]
    masks += [rng.random_sample((20, 16, 12)) < p for p in (0.2, 0.3, 0.6)]
    for mask in masks:
        for connectivity in range(1, mask.ndim + 1):
            got, n_got = label(cp.asarray(mask), connectivity)
            expected, n_expected = ndimage.label(
                mask, structure=ndimage.generate_binary_structure(mask.ndim, connectivity))
            got = cp.asnumpy(got)
            assert n_got == n_expected, (mask.shape, connectivity)
            # numbered in raster order of the first cell, like scipy: equal arrays
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("label", ["sliding-window", "union-find-gpu"])
def test_gpu_fit_gives_the_cpu_labels(name, label, shared_datasets):
    X, _, _ = read_arff_points(shared_datasets / "shapes" / f"{name}.arff")
    cpu = WaveCluster(device="cpu").fit(X)
    gpu = WaveCluster(device="gpu", label=label).fit(X)
    assert gpu.device_ == "gpu"
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_array_equal(gpu.grid_labels_, cpu.grid_labels_)
    assert gpu.threshold_ == pytest.approx(cpu.threshold_, rel=1e-12)


def test_gpu_fit_weighted_4d_and_bior(rng):
    X = np.vstack([rng.normal(0, 0.2, (3000, 4)), rng.normal(3, 0.2, (3000, 4))])
    w = rng.randint(1, 3, len(X))
    for params in ({}, {"wavelet": "bior2.2"}, {"connectivity": 1, "grid_size": 12}):
        cpu = WaveCluster(device="cpu", **params).fit(X, sample_weight=w)
        gpu = WaveCluster(device="gpu", **params).fit(X, sample_weight=w)
        np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
        assert cpu.n_clusters_ == 2
