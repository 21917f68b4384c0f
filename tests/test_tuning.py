"""Measured strategy tables (gpumine.tuning): the lookup, the resolver, calibrate and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gpumine import registry, tuning
from gpumine.cli import app
from gpumine.kmeans import GPUKMeans


def _table(*cells, device="cpu"):
    return {"device": device, "cells": [
        {"n": n, "d": d, "k": k, "dtype": dtype, "seconds": seconds}
        for n, d, k, dtype, seconds in cells]}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMINE_CACHE_DIR", str(tmp_path))
    tuning._read.cache_clear()
    tuning._candidates.cache_clear()
    yield tmp_path
    tuning._read.cache_clear()
    tuning._candidates.cache_clear()


def test_choose_reads_the_cells_of_the_dtype_and_takes_the_fastest_pair():
    table = _table((1000, 8, 16, "float32", {"a/x": 2.0, "b/x": 1.0}),
                   (100_000, 8, 16, "float32", {"a/x": 1.0, "b/x": 2.0}),
                   (100_000, 8, 16, "float64", {"a/x": 3.0, "b/x": 9.0}))
    assert tuning.choose(table, n=2000, d=8, k=16, dtype="float32")[0] == ("b", "x")
    assert tuning.choose(table, n=60_000, d=8, k=16, dtype="float32")[0] == ("a", "x")
    assert tuning.choose(table, n=60_000, d=8, k=16, dtype="float64")[0] == ("a", "x")
    assert tuning.choose(table, n=60_000, d=8, k=16, dtype="float16") is None  # not measured
    # a name the user fixed, and a pair that may not run, narrow the choice
    assert tuning.choose(table, n=2000, d=8, k=16, dtype="float32", assign="a")[0] == ("a", "x")
    assert tuning.choose(table, n=2000, d=8, k=16, dtype="float32",
                         allowed=lambda a, u: a != "b")[0] == ("a", "x")
    assert tuning.choose(table, n=2000, d=8, k=16, dtype="float32", update="y") is None


def test_times_are_interpolated_between_the_cells_of_a_full_grid():
    """50k rows lie nearer the 20k-row cell, where tiled wins, but the interpolated times
    cross before them (the H200 table's cells at d = 32, k = 1024, rounded)."""
    table = _table((20_000, 32, 1024, "float32", {"tiled/atomic": 3.9, "tc-exact/atomic": 4.3}),
                   (200_000, 32, 1024, "float32", {"tiled/atomic": 11.3, "tc-exact/atomic": 6.2}))
    pick, why = tuning.choose(table, n=50_000, d=32, k=1024, dtype="float32")
    assert pick == ("tc-exact", "atomic")
    assert why == ("measured on cpu: fastest of 2 pairs between n=20000..200000, d=32, "
                   "k=1024, float32")
    assert tuning.choose(table, n=25_000, d=32, k=1024, dtype="float32")[0] == ("tiled",
                                                                               "atomic")
    # on a cell, its own times; past the grid's ends (up to 4x) the edge cell's
    pick, why = tuning.choose(table, n=20_000, d=32, k=1024, dtype="float32")
    assert pick == ("tiled", "atomic") and why.endswith("at n=20000, d=32, k=1024, float32")
    assert tuning.choose(table, n=6000, d=40, k=2048, dtype="float32")[0] == ("tiled",
                                                                             "atomic")
    assert tuning.choose(table, n=800_000, d=32, k=1024, dtype="float32")[0] == ("tc-exact",
                                                                                "atomic")
    assert tuning.choose(table, n=900_000, d=32, k=1024, dtype="float32") is None
    # a pair some corner did not measure does not count
    partial = _table((20_000, 32, 1024, "float32", {"tiled/atomic": 3.9, "tc-exact/atomic": 4.3}),
                     (200_000, 32, 1024, "float32", {"tiled/atomic": 11.3}))
    assert tuning.choose(partial, n=50_000, d=32, k=1024, dtype="float32")[0] == ("tiled",
                                                                                 "atomic")


def test_a_table_that_is_not_a_full_grid_is_read_at_its_nearest_cell():
    # no (20k, 32) nor (200k, 8) cell
    table = _table((20_000, 8, 16, "float32", {"a/x": 1.0, "b/x": 2.0}),
                   (200_000, 32, 16, "float32", {"a/x": 2.0, "b/x": 1.0}))
    pick, why = tuning.choose(table, n=100_000, d=24, k=16, dtype="float32")
    assert pick == ("b", "x") and why.endswith("at n=200000, d=32, k=16, float32")
    assert tuning.choose(table, n=30_000, d=10, k=16, dtype="float32")[0] == ("a", "x")


def test_the_fixed_rules_pair_stays_unless_a_measured_pair_beats_it_by_the_margin():
    table = _table((1000, 8, 16, "float32", {"a/x": 1.0, "b/x": 1.04, "c/x": 1.2}))
    pick, why = tuning.choose(table, n=1000, d=8, k=16, dtype="float32", prefer=("b", "x"))
    assert pick == ("b", "x")
    assert "the fixed rule's pair, within 5% of the fastest of 3 pairs" in why
    for prefer in (("c", "x"), ("z", "x"), None):  # 20 % slower, not measured, none
        pick, why = tuning.choose(table, n=1000, d=8, k=16, dtype="float32", prefer=prefer)
        assert pick == ("a", "x") and "fastest of 3 pairs" in why


def test_the_resolver_keeps_the_fixed_rules_pair_within_the_margin(cache):
    """Measured 3 % slower than the other CPU pair the fixed rule's pair is kept; 20 %
    slower, the other pair runs (the CPU's pairs: numba's and NumPy's)."""
    pytest.importorskip("numba")
    fixed = tuple(registry.resolve_strategy(f"kmeans.{key}", "auto", "cpu", n_samples=3000,
                                            n_features=4, n_clusters=5).name
                  for key in ("assign", "update"))
    assert fixed == ("numba", "numba")
    other = ("numpy", "numpy")
    sizes = dict(n_samples=3000, n_features=4, n_clusters=5, dtype="float64", device_name="cpu")
    tuning.table_path("cpu").parent.mkdir(parents=True)
    for slower, expected in ((1.03, fixed), (1.2, other)):
        tuning.table_path("cpu").write_text(json.dumps(_table(
            (3000, 4, 5, "float64", {"/".join(fixed): slower, "/".join(other): 1.0}))))
        tuning._read.cache_clear()
        assign, update, reasons = registry.resolve_kmeans_pair("auto", "auto", "cpu", **sizes)
        assert (assign.name, update.name) == expected
        assert ("fixed rule's pair" in reasons["assign"]) == (expected == fixed)


def test_choose_does_not_extrapolate_far():
    table = _table((10_000, 8, 16, "float32", {"a/x": 1.0}))
    assert tuning.choose(table, n=39_000, d=8, k=16, dtype="float32") is not None
    assert tuning.choose(table, n=41_000, d=8, k=16, dtype="float32") is None
    assert tuning.choose(table, n=10_000, d=64, k=16, dtype="float32") is None
    assert tuning.choose({"cells": []}, n=1, d=1, k=1, dtype="float32") is None


def test_the_users_table_wins_and_a_broken_one_is_no_table(cache, monkeypatch):
    shipped = cache / "shipped"
    shipped.mkdir()
    (shipped / "my-gpu.json").write_text(json.dumps(_table(device="shipped")))
    monkeypatch.setattr(tuning, "shipped_dir", lambda: shipped)
    assert tuning.load_table("My GPU")["device"] == "shipped"
    tuning.table_path("My GPU").parent.mkdir(parents=True)
    tuning.table_path("My GPU").write_text(json.dumps(_table(device="mine")))
    assert tuning.load_table("My GPU")["device"] == "mine"
    tuning.table_path("Other").write_text("{not json")
    assert tuning.load_table("Other") is None
    assert tuning.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_auto_follows_the_table_and_says_why(cache):
    X = np.random.default_rng(0).normal(size=(3000, 4))
    without = GPUKMeans(5, device="cpu", max_iter=3, random_state=0).fit(X)
    assert "fixed rule" in without.strategy_reasons_["assign"]
    # a table where the NumPy pair is the fastest (and a pair "auto" may never pick)
    tuning.table_path("cpu").parent.mkdir(parents=True)
    tuning.table_path("cpu").write_text(json.dumps(_table(
        (3000, 4, 5, "float64", {"numpy/numpy": 1.0, "numba/numba": 2.0, "gemm/numpy": 0.1}))))
    tuning._read.cache_clear()
    model = GPUKMeans(5, device="cpu", max_iter=3, random_state=0).fit(X)
    assert model.strategies_["assign"] == "numpy" and model.strategies_["update"] == "numpy"
    assert model.strategy_reasons_["assign"].startswith("measured on cpu: fastest of 2 pairs")
    np.testing.assert_array_equal(model.labels_, without.labels_)  # speed only
    fixed = GPUKMeans(5, device="cpu", max_iter=3, random_state=0, update="numpy").fit(X)
    assert fixed.strategy_reasons_["update"] == "given"
    assert fixed.strategy_reasons_["assign"].startswith("measured")


def test_a_table_pick_that_cannot_run_is_skipped(cache):
    tuning.table_path("cpu").parent.mkdir(parents=True)
    tuning.table_path("cpu").write_text(json.dumps(_table(
        (3000, 4, 5, "float64", {"tiled/atomic": 0.1, "numpy/numpy": 1.0}))))
    assign, update, reasons = registry.resolve_kmeans_pair(
        "auto", "auto", "cpu", n_samples=3000, n_features=4, n_clusters=5, dtype="float64",
        device_name="cpu")
    assert (assign.name, update.name) == ("numpy", "numpy")
    assert reasons["assign"].startswith("measured on cpu: fastest of 1 pairs")


def test_a_gpu_table_pick_of_tiled_runs_as_hamerly_on_large_problems(cache):
    tuning.table_path("gpu-x").parent.mkdir(parents=True)
    tuning.table_path("gpu-x").write_text(json.dumps(_table(
        (2_000_000, 8, 128, "float32", {"tiled/atomic": 0.1, "tc-exact/atomic": 1.0}),
        (200_000, 8, 128, "float32", {"tiled/atomic": 0.1, "tc-exact/atomic": 1.0}))))
    sizes = dict(n_features=8, n_clusters=100, dtype="float32", device_name="gpu-x")
    assign, update, reasons = registry.resolve_kmeans_pair(
        "auto", "auto", "gpu", n_samples=1_000_000, **sizes)
    assert (assign.name, update.name) == ("hamerly", "atomic-fixed")
    assert "run as 'hamerly'" in reasons["assign"]
    assert "run as 'atomic-fixed'" in reasons["update"]
    assign, update, _ = registry.resolve_kmeans_pair("auto", "auto", "gpu",
                                                     n_samples=200_000, **sizes)
    assert (assign.name, update.name) == ("tiled", "atomic")  # too few rows for the bounds
    assign, _, reasons = registry.resolve_kmeans_pair("tiled", "auto", "gpu",
                                                      n_samples=1_000_000, **sizes)
    assert assign.name == "tiled" and reasons["assign"] == "given"


def test_where_hamerlys_bounds_pay_the_gpu_table_is_read_at_its_nearest_cell(cache):
    """Interpolated, tc-exact would win at 1M rows; the nearest cell (2M) says tiled, which
    runs as hamerly there: the table's 10-iteration fits do not see the bounds pay."""
    tuning.table_path("gpu-x").parent.mkdir(parents=True)
    table = _table((200_000, 8, 128, "float32", {"tiled/atomic": 4.0, "tc-exact/atomic": 1.0}),
                   (2_000_000, 8, 128, "float32", {"tiled/atomic": 1.0, "tc-exact/atomic": 1.1}))
    tuning.table_path("gpu-x").write_text(json.dumps(table))
    assert tuning.choose(table, n=1_000_000, d=8, k=128, dtype="float32")[0][0] == "tc-exact"
    assign, _, reasons = registry.resolve_kmeans_pair(
        "auto", "auto", "gpu", n_samples=1_000_000, n_features=8, n_clusters=128,
        dtype="float32", device_name="gpu-x")
    assert assign.name == "hamerly" and "at n=2000000, d=8, k=128" in reasons["assign"]
    assign, _, reasons = registry.resolve_kmeans_pair(  # too few rows for the bounds
        "auto", "auto", "gpu", n_samples=300_000, n_features=8, n_clusters=128,
        dtype="float32", device_name="gpu-x")
    assert assign.name == "tc-exact" and "between n=200000..2000000" in reasons["assign"]


@pytest.mark.parametrize("device_name", [None, "gpu-x"])
def test_an_atomic_update_runs_as_atomic_fixed_where_its_sums_can_follow_the_moves(
        cache, device_name):
    """Without a table and from one: float32 where hamerly (or tc-exact from 2^19 rows)
    assigns takes atomic-fixed; float64, a fixed update, tiled, small fits and Dask's
    unbound partition calls keep atomic."""
    tuning.table_path("gpu-x").parent.mkdir(parents=True)
    tuning.table_path("gpu-x").write_text(json.dumps(_table(
        (2_000_000, 8, 128, "float32", {"tiled/atomic": 0.1, "tiled/atomic-fixed": 0.2}),
        (2_000_000, 8, 128, "float64", {"tiled/atomic": 0.1}))))

    def pair(assign="auto", update="auto", n=1_000_000, dtype="float32", binds=True):
        a, u, why = registry.resolve_kmeans_pair(
            assign, update, "gpu", n_samples=n, n_features=8, n_clusters=100, dtype=dtype,
            device_name=device_name, binds=binds)
        return a.name, u.name, why["update"]

    assign, update, why = pair()
    assert (assign, update) == ("hamerly", "atomic-fixed") and "run as 'atomic-fixed'" in why
    assert pair(assign="hamerly")[:2] == ("hamerly", "atomic-fixed")  # a given hamerly too
    assert pair(dtype="float64")[:2] == ("hamerly", "atomic")
    assert pair(update="atomic")[:2] == ("hamerly", "atomic")
    assert pair(assign="tiled")[:2] == ("tiled", "atomic")
    assert pair(n=100_000)[:2] == ("tiled", "atomic")
    assert pair(binds=False)[:2] == ("hamerly", "atomic")
    assign, update, why = pair(assign="tc-exact")  # its sums follow the moved rows too
    assert (assign, update) == ("tc-exact", "atomic-fixed") and "'tc-exact' assigns" in why
    assert pair(assign="tc-exact", n=100_000)[:2] == ("tc-exact", "atomic")
    assert pair(assign="tc-exact", dtype="float64")[:2] == ("tc-exact", "atomic")


def test_a_table_pick_of_numba_without_numba_is_skipped(cache, monkeypatch):
    tuning.table_path("cpu").parent.mkdir(parents=True)
    tuning.table_path("cpu").write_text(json.dumps(_table(
        (3000, 4, 5, "float64", {"numba/numba": 0.1, "numpy/numpy": 1.0}))))
    monkeypatch.setattr(registry, "_numba_installed", lambda: False)
    assign, update, _ = registry.resolve_kmeans_pair(
        "auto", "auto", "cpu", n_samples=3000, n_features=4, n_clusters=5, dtype="float64",
        device_name="cpu")
    assert (assign.name, update.name) == ("numpy", "numpy")


def test_calibrate_on_the_command_line_writes_the_table_auto_reads(cache):
    result = CliRunner().invoke(app, ["bench", "calibrate", "--device", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    table = json.loads(tuning.table_path("cpu").read_text())
    assert [(c["n"], c["d"], c["k"]) for c in table["cells"]] == [(2000, 2, 4), (5000, 8, 16)]
    assert all(c["seconds"] and min(c["seconds"].values()) > 0 for c in table["cells"])
    assert table["measured_on"]["commit"]
    tuning._read.cache_clear()
    model = GPUKMeans(16, device="cpu", max_iter=2).fit(
        np.random.default_rng(1).normal(size=(5000, 8)))
    assert model.strategy_reasons_["update"].startswith("measured on cpu")


@pytest.mark.parametrize("path", sorted(tuning.shipped_dir().glob("*.json")),
                         ids=lambda p: p.stem)
def test_shipped_tables_are_named_by_their_device_and_pick_allowed_pairs(path):
    table = json.loads(path.read_text())
    assert path.stem == tuning.device_slug(table["device"])
    assert tuning.load_table(table["device"]) is not None
    allowed = {f"{a}/{u}" for a in registry.AUTO_CANDIDATES[("kmeans.assign", "gpu")]
               for u in registry.AUTO_CANDIDATES[("kmeans.update", "gpu")]}
    assert {c["dtype"] for c in table["cells"]} == {"float32", "float64"}
    for cell in table["cells"]:
        assert cell["seconds"] and set(cell["seconds"]) <= allowed
        assert min(cell["seconds"].values()) > 0
