"""WaveCluster stages and fits per backend (checked against the CPU path)."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import WaveCluster, registry
from gpumine.backend import get_backend
from gpumine.bench.timing import SUITE_SCALE as SCALE
from gpumine.datasets import make_shapes
from gpumine.wavecluster import engine, pipeline, wavelet

N = 50_000 * SCALE
GRID = (512, 512)


@pytest.fixture(scope="module")
def points():
    return make_shapes(N, random_state=5489)[0]


@pytest.fixture(scope="module")
def mask(points):
    stages = pipeline.stages_for(get_backend("cpu"))
    _, grid, _ = stages.histogram(points, None, np.stack([points.min(0), points.max(0)]), GRID)
    coarse = stages.lowpass(grid, "haar", 1)
    return coarse >= 0.1 * engine.mean_occupied_density(coarse)  # the benchmark's fixed rule


def test_fit(run_timed, backend, points):
    model = run_timed(backend, lambda: WaveCluster(grid_size=GRID, device=backend.name)
                      .fit(points), rounds=3)
    assert model.n_clusters_ == 4


@pytest.mark.parametrize(("device", "name"), [
    pytest.param(s.backend, s.name, id=f"{s.backend}-{s.name}",
                 marks=[pytest.mark.gpu] if s.backend == "gpu" else [])
    for s in registry.list_strategies("wavecluster.label")])
def test_label(run_timed, mask, device, name):
    backend = get_backend(device)
    label = registry.load_strategy("wavecluster.label", name)
    grid = backend.to_device(mask)
    _, count = run_timed(backend, lambda: label(grid, 2))
    from scipy import ndimage

    assert count == ndimage.label(mask, np.ones((3, 3)))[1]


def test_lowpass(run_timed, backend, mask):
    grid = mask.astype(np.float64)
    lowpass = pipeline.stages_for(backend).lowpass
    device_grid = backend.to_device(grid)
    out = run_timed(backend, lambda: lowpass(device_grid, "haar", 1))
    np.testing.assert_allclose(backend.to_host(out), wavelet.lowpass(grid, "haar", 1))
