"""Shared fixtures: paths to ../shared/datasets, generators, masks (the GPU skip rule and
SciPy's array-API switch are in the repository's root conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# ../shared/datasets beside the checkout; GPUMINE_SHARED_DATASETS points elsewhere (the GPU
# machine receives a copy inside the working tree).
SHARED_DATASETS = Path(os.environ.get("GPUMINE_SHARED_DATASETS",
                                      REPO_ROOT.parent / "shared" / "datasets"))


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The optional larger data sets (real Corel features, labelled shapes).

    A user's clone has no ``../shared`` beside it: the checks that need those files skip
    with this reason, and the suite stays complete without them (generated data and the
    small files under ``tests/data`` cover the same code). CI runs the suite both ways.
    """
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"optional data not here: {SHARED_DATASETS} (a checkout's ../shared/datasets, "
                    "or GPUMINE_SHARED_DATASETS)")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def corel(shared_datasets):
    """Corel subsets from ../shared/datasets/corel, through the real loader (no download)."""
    from gpumine.datasets import load_corel

    def load(subset):
        return load_corel(subset, data_home=shared_datasets / "corel", download=False)

    return load


@pytest.fixture
def rng(request) -> np.random.RandomState:
    """A fresh generator per test, seeded from the test's name (reproducible, not shared)."""
    import zlib

    return np.random.RandomState(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def snake():
    """Factory of an n x n mask holding one long snake: the worst case for propagation."""

    def make(n):
        mask = np.zeros((n, n), dtype=bool)
        mask[::2, :] = True
        for row in range(1, n, 2):
            mask[row, -1 if (row // 2) % 2 == 0 else 0] = True
        return mask

    return make


@pytest.fixture
def labelled_arff(tmp_path):
    """A generated labelled 2-d ARFF file (x, y, CLASS): 4 blobs and noise, 2,200 points."""
    rng = np.random.default_rng(8)
    centres = np.array([[0.2, 0.2], [0.8, 0.2], [0.2, 0.8], [0.8, 0.8]])
    y = rng.integers(0, 4, 2000)
    X = np.concatenate([centres[y] + rng.normal(scale=0.04, size=(2000, 2)),
                        rng.uniform(size=(200, 2))]).round(5)
    classes = [str(c) for c in y] + ["noise"] * 200
    lines = ["@RELATION blobs", "@ATTRIBUTE x REAL", "@ATTRIBUTE y REAL",
             "@ATTRIBUTE CLASS {0,1,2,3,noise}", "@DATA"]
    lines += [f"{a},{b},{c}" for (a, b), c in zip(X, classes, strict=True)]
    path = tmp_path / "blobs.arff"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def small_corel(tmp_path, monkeypatch):
    """A 300 x 9 'color' file in the Corel format, which the loader is told to expect.

    The real files are 1.9 MB and not part of the repository; the loader's search
    order, download, checksum and shape checks are the same for this one.
    """
    import hashlib

    from gpumine.datasets import corel as corel_module
    from gpumine.datasets import make_uniform, write_minebench_bin

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    X = make_uniform(300, 9, random_state=3)
    path = mirror / "color17695.bin"
    write_minebench_bin(path, X)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setitem(corel_module.COREL_SUBSETS, "color", (9, digest))
    monkeypatch.setattr(corel_module, "_N_SAMPLES", 300)
    monkeypatch.delenv("GPUMINE_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return path, X


@pytest.fixture(scope="module")
def client():
    """A two-worker ``distributed.LocalCluster`` of one-thread processes and its client, per
    test module (the Dask tests; skipped without ``distributed``, part of ``dev``)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def _gpu_worker_cluster(distributed, gpus: int):
    """A ``distributed.SpecCluster`` of ``gpus`` one-thread worker processes (nannies), worker
    i seeing only GPU i (``CUDA_VISIBLE_DEVICES``), as dask-cuda's ``LocalCUDACluster``
    pins them."""
    workers = {f"gpu{i}": {"cls": distributed.Nanny,
                           "options": {"nthreads": 1, "memory_limit": 0,
                                       "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
               for i in range(gpus)}
    return distributed.SpecCluster(
        workers=workers,
        scheduler={"cls": distributed.Scheduler, "options": {"dashboard_address": None}})


@pytest.fixture
def gpu_worker_cluster():
    """``make(gpus)``: a fresh ``SpecCluster`` of ``gpus`` workers, one a GPU
    (:func:`_gpu_worker_cluster`)."""
    distributed = pytest.importorskip("distributed")
    return lambda gpus: _gpu_worker_cluster(distributed, gpus)


@pytest.fixture
def fit_killing_a_worker():
    """``run(fit, X, chunks, *, task, victim=0, settle=0.0, gpus=False)``: on a fresh
    two-worker ``LocalCluster`` of one-thread processes (``gpus``: :func:`_gpu_worker_cluster`,
    a GPU each), persist X in row blocks of ``chunks``, call
    ``fit(data)`` on a thread, and kill worker ``victim`` (index in address order) once a
    task whose key holds ``task`` runs and ``settle`` seconds more have passed; returns what
    ``fit`` returned, after checking that the kill came before the fit ended."""
    distributed = pytest.importorskip("distributed")
    import os
    import threading
    import time

    import dask.array as da

    def run(fit, X, chunks, *, task, victim=0, settle=0.0, gpus=False):
        cluster = (_gpu_worker_cluster(distributed, 2) if gpus else
                   distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                            dashboard_address=None))
        with cluster, distributed.Client(cluster) as client:
            data = da.from_array(X, chunks=(chunks, X.shape[1])).persist()
            result, times = {}, {}

            def target():
                result["value"] = fit(data)
                times["end"] = time.perf_counter()

            thread = threading.Thread(target=target)
            thread.start()
            deadline = time.perf_counter() + 120
            while not any(task in str(key) for keys in client.processing().values()
                          for key in keys):
                assert time.perf_counter() < deadline and thread.is_alive(), \
                    "the fit never began"
                time.sleep(0.005)
            time.sleep(settle)
            address = sorted(client.scheduler_info()["workers"])[victim]
            times["kill"] = time.perf_counter()
            try:
                client.run(os._exit, 1, workers=[address])
            except Exception:  # the worker dies before it can answer
                pass
            thread.join(timeout=300)
            assert "value" in result and times["kill"] < times["end"], "the kill came too late"
        return result["value"]

    return run


@pytest.fixture
def levels_tree(monkeypatch):
    """``levels_tree(on)``: whether the CPU's WaveCluster stages take the ``"auto"`` rule's
    levels from the compiled component tree (``Stages.levels_tree``, with Numba: the CPU's
    default) or, as without Numba, from stacks of labelled levels (or level by level)."""
    import dataclasses

    from gpumine.wavecluster import cpu_fast, pipeline

    default = pipeline._CPU

    def use(on: bool) -> None:
        if on and not cpu_fast.available():
            pytest.skip("the component tree needs Numba (the fast extra)")
        monkeypatch.setattr(pipeline, "_CPU", dataclasses.replace(
            default, levels_tree=cpu_fast.levels_tree if on else None))

    return use


@pytest.fixture
def border_case():
    """``border_case(rng, shape) -> (components, coarse, sizes)``: a random labelling of
    clusters 1..8 of every size (about a fifth of the cells), a coarse grid with occupied
    and empty cells (every cluster cell occupied) and each cluster's mass: the add_border_cells
    joins' test input, at the grid's edges and corners too."""

    def make(rng, shape):
        components = (rng.randint(1, 9, size=shape) * (rng.random_sample(shape) < 0.2))
        components = components.astype(np.int64)
        coarse = rng.uniform(0, 3, size=shape) * (rng.random_sample(shape) < 0.6)
        coarse[components > 0] = np.maximum(coarse[components > 0], 1.0)
        sizes = np.bincount(components.ravel(), weights=coarse.ravel(), minlength=9)[1:]
        return components, coarse, sizes

    return make
