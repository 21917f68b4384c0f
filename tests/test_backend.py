"""gpumine.backend: device choice, GPUMINE_DEVICE, and the missing-GPU error."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from gpumine import backend
from gpumine.exceptions import BackendUnavailable


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now fails
    backend._probe_gpu.cache_clear()
    yield
    backend._probe_gpu.cache_clear()


def test_cpu_backend():
    b = backend.get_backend("cpu")
    assert (b.name, b.is_gpu, b.xp) == ("cpu", False, np)
    a = np.arange(4.0)
    assert b.to_device(a) is a
    np.testing.assert_array_equal(b.to_host(a), a)
    b.synchronize()


def test_auto_without_gpu_is_cpu(no_cupy, monkeypatch):
    monkeypatch.delenv(backend.ENV_VAR, raising=False)
    assert backend.get_backend("auto").name == "cpu"
    assert not backend.gpu_available()


def test_gpu_without_cupy_names_the_extra(no_cupy):
    with pytest.raises(BackendUnavailable) as info:
        backend.get_backend("gpu")
    message = str(info.value)
    assert 'pip install "gpumine[cuda12]"' in message and "cuda13" in message
    assert isinstance(info.value, RuntimeError)


def test_env_override(no_cupy, monkeypatch):
    monkeypatch.setenv(backend.ENV_VAR, "gpu")
    with pytest.raises(BackendUnavailable):
        backend.get_backend("auto")
    # an explicit device in code is not overridden
    assert backend.get_backend("cpu").name == "cpu"
    monkeypatch.setenv(backend.ENV_VAR, "CPU")
    assert backend.get_backend("auto").name == "cpu"
    monkeypatch.setenv(backend.ENV_VAR, "fpga")
    with pytest.raises(ValueError, match="GPUMINE_DEVICE"):
        backend.get_backend("auto")


def test_unknown_device():
    with pytest.raises(ValueError, match="device must be one of"):
        backend.get_backend("tpu")


def test_only_backend_imports_cupy():
    from pathlib import Path

    import gpumine

    roots = [Path(gpumine.__file__).parent]
    roots += [Path(__import__(f"gpumine.{p}", fromlist=["x"]).__file__).parent
              for p in ("adapters", "cli", "kernels", "datasets")]
    importing = re.compile(r"^\s*(import cupy\b|from cupy\b)", re.MULTILINE)
    offenders = [str(path) for root in roots for path in root.rglob("*.py")
                 if path.name != "backend.py" and importing.search(path.read_text())]
    assert offenders == []


@pytest.mark.gpu
def test_gpu_backend_round_trip():
    b = backend.get_backend("gpu")
    a = np.arange(5.0)
    device_array = b.to_device(a)
    assert type(device_array).__module__.startswith("cupy")
    np.testing.assert_array_equal(b.to_host(device_array * 2), a * 2)


def test_upload_on_the_cpu_is_asarray():
    values = [[1, 2], [3, 4]]
    out = backend.upload(values, np, dtype=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.asarray(values))


@pytest.mark.gpu
@pytest.mark.parametrize("size", [0, 1, 3000])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_gpu_upload_is_ordered_and_owns_its_copy(size, non_blocking):
    """A small table uploaded while the device is busy (a spin kernel queued first, on the
    default stream or in a non-blocking one) holds the values of the upload -- the host
    array, changed at once afterwards, does not reach it -- and work queued after it in the
    same stream reads them. A device array passes through."""
    import contextlib

    cp = backend.cupy_module()
    spin = cp.RawKernel(r"""extern "C" __global__ void spin(long long cycles, long long* out) {
        long long t0 = clock64(); while (clock64() - t0 < cycles) {} out[0] = 1; }""", "spin")
    with cp.cuda.Stream(non_blocking=True) if non_blocking else contextlib.nullcontext():
        flag = cp.zeros(1, dtype=cp.int64)
        host = np.arange(size, dtype=np.int64) * 5 - 2
        expected = host.copy()
        spin((1,), (1,), (np.int64(50_000_000), flag))  # ~25 ms queued ahead
        out = backend.upload(host, cp, np.int64)
        host[:] = -99  # the upload owns its values: staged before it returned
        doubled = out * 2  # queued after the upload in the same stream
        assert out.dtype == np.int64 and out.shape == (size,)
        np.testing.assert_array_equal(cp.asnumpy(doubled), expected * 2)
        assert backend.upload(out, cp) is out


@pytest.mark.parametrize("shape", [(0,), (7,), (1000, 3)])
def test_host_buffer_is_written_in_the_background(shape):
    buffer = backend.get_backend("cpu").host_buffer(shape, np.int64)
    array = buffer.result()
    assert array.shape == shape and array.dtype == np.int64
    assert not array.any()  # every page written (with zeros)


@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 1000, (40 << 20) // 8 + 3])  # past one staging chunk
def test_gpu_to_host_fills_a_host_buffer(size):
    b = backend.get_backend("gpu")
    device_array = b.xp.arange(size, dtype=b.xp.int64) * 3 - 7
    buffer = b.host_buffer(size, np.int64)
    out = b.to_host(device_array, out=buffer)
    assert out is buffer.array
    np.testing.assert_array_equal(out, np.arange(size, dtype=np.int64) * 3 - 7)
    from gpumine.exceptions import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="out is"):
        b.to_host(device_array, out=b.host_buffer(size + 1, np.int64))


@pytest.mark.gpu
def test_gpu_to_host_widens_a_narrow_integer_array():
    b = backend.get_backend("gpu")
    values = np.arange(-1, 300_000, dtype=np.int64) % 120 - 1
    out = b.to_host(b.xp.asarray(values.astype(np.int8)), out=b.host_buffer(values.size, np.int64))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, values)
    from gpumine.exceptions import InvalidParameterError

    for narrower in (np.int32, np.float64):  # a narrowing or a change of kind is refused
        with pytest.raises(InvalidParameterError, match="out is"):
            b.to_host(b.xp.asarray(values), out=b.host_buffer(values.size, narrower))


def _forked_fit(queue):
    """In a forked child: a task on the host pool, and a WaveCluster "auto" fit, whose
    coarser levels run there on the CPU (with two threads or more)."""
    from gpumine import WaveCluster
    from gpumine.datasets import make_shape_sets

    try:
        value = backend.host_pool().submit(lambda: 7).result(timeout=30)
        X, _ = make_shape_sets(scale=1.0, random_state=0)["moons"]
        queue.put((value, WaveCluster(device="cpu").fit(X).n_clusters_))
    except Exception as error:  # the parent reports it
        queue.put(repr(error))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_process_gets_its_own_host_pool(monkeypatch):
    """A process forked after the pool started its threads (a WaveCluster fit, a staged
    copy) has none of them: the child's pool is its own, so its tasks run (the parent's
    executor, which believes it has idle threads, would never start one)."""
    import multiprocessing

    from gpumine.wavecluster import engine

    monkeypatch.setattr(backend, "host_pool_threads", lambda: 2)  # threads on any host
    monkeypatch.setattr(engine, "AUTO_COARSER_THREAD_CELLS", 0)  # and on every grid
    assert backend.host_pool().submit(lambda: 1).result() == 1  # the parent's threads exist
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_forked_fit, args=(queue,))
    child.start()
    child.join(120)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child's pool task never ran")
    assert queue.get(timeout=10) == (7, 2)  # the moons: two clusters
