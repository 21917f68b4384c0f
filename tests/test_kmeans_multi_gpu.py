"""``GPUKMeans(device="gpu:all")`` and lists of GPU ids: several GPUs of one process, NCCL.

The parameter checks run everywhere; the fits are marked ``gpu``. With one GPU the several-GPU
loop runs with one rank (NCCL's collectives over one GPU, the shares, the readback): the
same code as with two, which the tests marked ``two_gpus`` take where two GPUs are visible.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpumine import GPUKMeans
from gpumine.backend import gpu_available
from gpumine.devices import is_several_gpus, resolve_gpu_ids
from gpumine.exceptions import BackendUnavailable, InvalidParameterError
from gpumine.kmeans.multi_gpu import share_bounds


@pytest.mark.parametrize("n, parts", [(10, 3), (3, 3), (7, 1), (1_000_003, 4), (2, 5)])
def test_share_bounds_cover_every_row_once(n, parts):
    bounds = share_bounds(n, parts)
    assert len(bounds) == parts
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_resolve_gpu_ids():
    assert not is_several_gpus("gpu") and not is_several_gpus("auto")
    with pytest.raises(InvalidParameterError, match="names one device"):
        resolve_gpu_ids("gpu", count=4)
    assert resolve_gpu_ids("gpu:all", count=3) == [0, 1, 2]
    assert resolve_gpu_ids((2, np.int64(0)), count=3) == [2, 0]
    with pytest.raises(InvalidParameterError, match="GPU 3 does not exist"):
        resolve_gpu_ids([0, 3], count=2)
    with pytest.raises(InvalidParameterError, match="no CUDA GPU"):
        resolve_gpu_ids("gpu:all", count=0)


@pytest.mark.parametrize("device, message", [
    ([0, 0], "a GPU twice"),
    ([-1], r"integers >= 0"),
    ([True], r"integers >= 0"),
    ([0.5], r"integers >= 0"),
    ([], "at least one GPU id"),
    ("gpu:2", r"'gpu:all' or a list of GPU ids, got 'gpu:2'"),
])
def test_bad_device_lists_fail_before_any_work(device, message):
    X = np.arange(20.0).reshape(10, 2)
    model = GPUKMeans(2, device=device)
    with pytest.raises(InvalidParameterError, match=message):
        model.fit(X)
    assert not hasattr(model, "cluster_centers_")


@pytest.mark.skipif(gpu_available(), reason="checks the message of a machine without a GPU")
@pytest.mark.parametrize("device", ["gpu:all", [0]])
def test_several_gpus_without_a_gpu_say_what_is_missing(device):
    with pytest.raises(BackendUnavailable, match="not available"):
        GPUKMeans(2, device=device).fit(np.arange(20.0).reshape(10, 2))


def test_several_gpus_refuse_streaming():
    with pytest.raises(InvalidParameterError, match="several GPUs do not take batch_rows"):
        GPUKMeans(2, device=[0], batch_rows=4).fit(np.arange(20.0).reshape(10, 2))


def _blobs(rng, n, d, k, dtype, offset=0.0):
    centres = rng.uniform(-10, 10, (k, d))
    X = centres[rng.randint(0, k, n)] + rng.normal(size=(n, d)) + offset
    return X.astype(dtype)


def _equal_fits(one, many, X):
    np.testing.assert_array_equal(many.labels_, one.labels_)
    assert many.n_iter_ == one.n_iter_
    scale = np.abs(one.cluster_centers_).max()
    tol = 1e-5 if X.dtype == np.float32 else 1e-12
    assert np.abs(many.cluster_centers_ - one.cluster_centers_).max() <= tol * scale
    assert many.inertia_ == pytest.approx(one.inertia_, rel=1e-6 if X.dtype == np.float32
                                          else 1e-12)


def _gpu_count():
    from gpumine.backend import cupy_module

    return cupy_module().cuda.runtime.getDeviceCount()


def _devices(many):
    if many == "all":
        return "gpu:all"
    if _gpu_count() < many:
        pytest.skip(f"needs {many} GPUs, {_gpu_count()} visible")
    return list(range(many))


@pytest.mark.gpu
@pytest.mark.parametrize("many", [1, 2, "all"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("assign", ["auto", "gemm"])  # counts changes on the device, or not
def test_several_gpus_equal_one_from_the_same_init(rng, many, dtype, assign):
    """Same init: the same labels and iterations, centres to the summation order; weights,
    rows not a multiple of the shares, data far from the origin."""
    X = _blobs(rng, 20_011, 5, 16, dtype, offset=1e3)
    weight = rng.uniform(0.5, 2.0, len(X))
    init = X[rng.choice(len(X), 16, replace=False)]
    kwargs = {"init": init, "n_init": 1, "max_iter": 50, "assign": assign}
    one = GPUKMeans(16, device="gpu", **kwargs).fit(X, sample_weight=weight)
    several = GPUKMeans(16, device=_devices(many), **kwargs).fit(X, sample_weight=weight)
    _equal_fits(one, several, X)
    assert several.device_ids_[0] == 0
    assert several.iteration_seconds_.shape == (several.n_iter_,)
    assert not hasattr(one, "iteration_seconds_")


@pytest.mark.gpu
@pytest.mark.parametrize("many", [1, 2])
def test_several_gpus_relocate_empty_clusters_as_one_does(rng, many):
    """Two init centres far from the data: both empty after the first step."""
    X = rng.uniform(size=(9_001, 3))
    init = X[:5].copy()
    init[3], init[4] = 50.0, 60.0
    one = GPUKMeans(5, init=init, n_init=1, device="gpu").fit(X)
    several = GPUKMeans(5, init=init, n_init=1, device=_devices(many)).fit(X)
    assert len(np.unique(several.labels_)) == 5
    _equal_fits(one, several, X)


@pytest.mark.gpu
@pytest.mark.parametrize("many", [1, 2])
def test_several_gpus_seeded_init_and_device_input(many):
    """A seed draws the init on the first GPU over all of X, as one GPU does: the same fit;
    CuPy input gives CuPy output; a second fit (from host data) gives the same labels and
    the centres to float32 rounding (float32 partial sums are added in the order the
    atomics land, on one GPU too: ``update_atomic``)."""
    from gpumine.backend import cupy_module

    cp = cupy_module()
    X = _blobs(np.random.RandomState(3), 30_000, 8, 32, np.float32)
    one = GPUKMeans(32, random_state=7, device="gpu").fit(X)
    several = GPUKMeans(32, random_state=7, device=_devices(many))
    several.fit(cp.asarray(X))
    assert isinstance(several.labels_, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(several.labels_), one.labels_)
    assert several.n_iter_ == one.n_iter_
    again = GPUKMeans(32, random_state=7, device=_devices(many)).fit(X)
    np.testing.assert_array_equal(again.labels_, one.labels_)
    np.testing.assert_allclose(again.cluster_centers_, cp.asnumpy(several.cluster_centers_),
                               rtol=0, atol=1e-5 * np.abs(one.cluster_centers_).max())
    # host data in, host labels out
    np.testing.assert_array_equal(several.predict(X[:100]), one.predict(X[:100]))


@pytest.mark.gpu
@pytest.mark.parametrize("many", [1, 2])
def test_several_gpus_seeded_runs_are_bit_identical(many):
    """The same seed and data twice: the same bits (``atomic-f64``: float64 block partials,
    the same sums run to run in practice; the shares' sums are added by NCCL in rank order)."""
    from gpumine.backend import cupy_module

    cp = cupy_module()
    X = cp.asarray(_blobs(np.random.RandomState(5), 40_000, 6, 24, np.float32))
    fits = [GPUKMeans(24, random_state=11, update="atomic-f64", device=_devices(many)).fit(X)
            for _ in range(2)]
    np.testing.assert_array_equal(cp.asnumpy(fits[0].cluster_centers_),
                                  cp.asnumpy(fits[1].cluster_centers_))
    np.testing.assert_array_equal(cp.asnumpy(fits[0].labels_), cp.asnumpy(fits[1].labels_))
    assert fits[0].inertia_ == fits[1].inertia_


@pytest.mark.gpu
@pytest.mark.parametrize("many", [1, 2, "all"])
def test_the_job_and_the_command_line_take_several_gpus(tmp_path, many):
    """``gpumine cluster --device gpu:all`` / ``0,1`` and ``cluster_file(device=...)``: the
    file read onto the first GPU, the labels those of one GPU, the GPUs in the summary."""
    import json

    import pandas as pd
    from typer.testing import CliRunner

    from gpumine.cli.app import app
    from gpumine.jobs import cluster_file

    devices = _devices(many)
    X = _blobs(np.random.RandomState(4), 30_000, 5, 6, np.float64)
    source = tmp_path / "x.parquet"
    pd.DataFrame(X, columns=[f"f{i}" for i in range(5)]).to_parquet(source)
    params = {"n_clusters": 6}
    one = cluster_file(source, params=params, device="gpu", out=tmp_path / "one.parquet",
                       labels_only=True)
    several = cluster_file(source, params=params, device=devices,
                           out=tmp_path / "many.parquet", labels_only=True)
    assert several["device_ids"] == (list(range(_gpu_count())) if many == "all"
                                     else devices)
    assert several["n_iter"] == one["n_iter"]
    np.testing.assert_array_equal(pd.read_parquet(tmp_path / "many.parquet")["cluster"],
                                  pd.read_parquet(tmp_path / "one.parquet")["cluster"])
    flag = "gpu:all" if many == "all" else ",".join(map(str, devices))
    result = CliRunner().invoke(app, ["cluster", str(source), "-k", "6", "--device", flag,
                                      "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1])["device_ids"] == several["device_ids"]
