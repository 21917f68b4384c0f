"""The strategy registry, including real entry-point plugins installed on sys.path."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from gpumine import GPUKMeans, registry
from gpumine.exceptions import StrategyLoadError, UnknownStrategy
from gpumine.kmeans import cpu_fast


def test_builtin_catalogue():
    kinds = {s.kind for s in registry.list_strategies()}
    assert kinds == set(registry.KINDS)
    from gpumine.wavecluster.wavelet import Wavelet

    for strategy in registry.list_strategies():
        assert strategy.origin == "gpumine"
        impl = strategy.load()
        # a wavelet strategy is its filter (a Wavelet); every other kind is a callable
        assert isinstance(impl, Wavelet) if strategy.kind == "wavecluster.wavelet" else callable(
            impl), strategy
    from gpumine.catalogue import BUILTIN_STRATEGIES

    assert {(s.kind, s.name) for s in registry.list_strategies()} == {
        (s.kind, s.name) for s in BUILTIN_STRATEGIES}
    assert all(s.description for s in registry.list_strategies())
    assert [s.name for s in registry.list_strategies("wavecluster.label", backend="cpu")] == [
        "scipy", "union-find"]
    assert [s.name for s in registry.list_strategies("wavecluster.label", backend="gpu")] == [
        "sliding-window", "union-find-gpu"]


def test_unknown_kind_and_name():
    with pytest.raises(ValueError, match=r"kinds are kmeans\.init"):
        registry.list_strategies("kmeans.nope")
    with pytest.raises(UnknownStrategy,
                       match=r"known: atomic, atomic-f64, atomic-fixed, gather, gm-cl, .*, "
                             r"numpy, .*sort"):
        registry.get_strategy("kmeans.update", "gm-cl-typo")
    with pytest.raises(UnknownStrategy, match=r"no kmeans\.init strategy is available"):
        registry.resolve_strategy("kmeans.init", "auto", "gpu")
    cpu_default = "numba" if cpu_fast.available() else "numpy"
    assert registry.resolve_strategy("kmeans.update", "auto", "cpu").name == cpu_default
    assert registry.resolve_strategy("kmeans.update", "auto", "gpu").name == "atomic"
    assert registry.resolve_strategy("kmeans.assign", "auto", "gpu").name == "tiled"


@pytest.mark.parametrize(("d", "k", "expected", "below"), [
    (8, 100_000, "hamerly", "tiled"), (31, 4096, "hamerly", "tiled"),
    (32, 1023, "hamerly", "tiled"), (32, 1024, "tc-exact", "tc-exact"),
    (128, 256, "tc-exact", "tc-exact"), (4096, 8, "tc-exact", "tc-exact"),
    (16, 2048, "hamerly", "tiled"), (33, 16, "tiled", "tiled")])
def test_auto_assign_picks_tensor_cores_or_bounds_on_large_problems(d, k, expected, below):
    sizes = dict(n_samples=10**6, n_features=d, n_clusters=k)
    assert registry.resolve_strategy("kmeans.assign", "auto", "gpu", **sizes).name == expected
    cpu_default = "numba" if cpu_fast.available() else "numpy"
    assert registry.resolve_strategy("kmeans.assign", "auto", "cpu", **sizes).name == cpu_default
    sizes["n_samples"] = 50_000  # too few rows: the re-check's and the bounds' costs do not pay
    assert registry.resolve_strategy("kmeans.assign", "auto", "gpu", **sizes).name == "tiled"
    sizes["n_samples"] = registry.HAMERLY_MIN_SAMPLES
    assert registry.resolve_strategy("kmeans.assign", "auto", "gpu", **sizes).name == expected
    sizes["n_samples"] = registry.HAMERLY_MIN_SAMPLES - 1
    # one row fewer: the bounds no longer pay (tc-exact's threshold is lower)
    assert registry.resolve_strategy("kmeans.assign", "auto", "gpu", **sizes).name == below


@pytest.mark.parametrize(("n", "d", "k", "fit", "unbound"), [
    (10**6, 32, 1024, "hamerly", "tc-exact"),  # hamerly scanning on the tensor cores
    (10**6, 16, 512, "hamerly", "hamerly"),  # (unbound, hamerly is tiled's loop)
    (10**6, 8, 200, "hamerly", "hamerly"),  # the register loop's shape: as before
    (10**6, 128, 1024, "hamerly", "tc-exact"),  # past 32 features: always on the tensor cores
    (10**6, 64, 64, "tiled", "tiled"),  # past 32 features only over tc-exact's picks
    (10**6, 256, 1024, "tc-exact", "tc-exact"),  # past HAMERLY_MAX_FEATURES
    (10**6, 128, 256, "tc-exact", "tc-exact"),  # past 32: TC_SCAN_WIDE_MIN_CLUSTERS
    (50_000, 32, 2048, "tiled", "tiled")])
def test_a_fit_that_binds_takes_hamerly_where_it_scans_on_tensor_cores(n, d, k, fit, unbound):
    """resolve_kmeans_pair: where hamerly would scan its queue on the tensor cores, an auto
    fit that binds its strategies runs hamerly (the same labels, faster), saying why; Dask's
    partitions (binds=False) and predict (resolve_strategy) keep the stateless pick."""
    sizes = dict(n_samples=n, n_features=d, n_clusters=k, dtype="float32")
    assign, update, reasons = registry.resolve_kmeans_pair("auto", "auto", "gpu", **sizes)
    assert assign.name == fit
    assert ("scanning on the tensor cores" in reasons["assign"]) == (fit != unbound)
    if fit == "hamerly":  # float32 under bounds: the sums follow the moved rows
        assert update.name == "atomic-fixed"
    unbound_pick = registry.resolve_kmeans_pair("auto", "auto", "gpu", binds=False, **sizes)[0]
    assert unbound_pick.name == unbound
    assert registry.resolve_strategy("kmeans.assign", "auto", "gpu", n_samples=n,
                                     n_features=d, n_clusters=k).name == unbound


@pytest.mark.parametrize("field", [
    {"kind": "bogus"}, {"backend": "tpu"}, {"target": "no_colon"}, {"name": "auto"},
])
def test_strategy_metadata_is_validated(field):
    spec = {"kind": "kmeans.update", "name": "x", "backend": "cpu", "target": "m:f", **field}
    with pytest.raises(ValueError):
        registry.Strategy(**spec)


def _install_plugin(root, dist, module, entry_points, files):
    """Write a minimal installed distribution (dist-info + modules) under ``root``."""
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[gpumine.strategies]\n{lines}\n")
    for name, source in files.items():
        (root / name).write_text(textwrap.dedent(source))


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Three installed plugins: a good one, one with broken metadata, one with a broken impl."""
    _install_plugin(tmp_path, "gpumine_goodplugin", "goodplugin", {
        "good": "goodplugin_meta:strategies",
    }, {
        "goodplugin_meta.py": """
            import sys
            def strategies():
                return [{"kind": "kmeans.assign", "name": "plugin-assign", "backend": "cpu",
                         "target": "goodplugin_impl:assign", "description": "test plugin"},
                        {"kind": "kmeans.update", "name": "plugin-broken-impl", "backend": "cpu",
                         "target": "goodplugin_missing:update"}]
        """,
        "goodplugin_impl.py": """
            CALLS = []
            def assign(X, centers, labels):
                import numpy as np
                CALLS.append(X.shape)
                d = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
                labels[:] = np.argmin(d, axis=1)
        """,
    })
    _install_plugin(tmp_path, "gpumine_badplugin", "badplugin", {
        "bad": "badplugin_meta:strategies",
    }, {"badplugin_meta.py": "raise ImportError('this plugin is broken on purpose')\n"})
    _install_plugin(tmp_path, "gpumine_clashplugin", "clashplugin", {
        "clash": "clashplugin_meta:STRATEGIES",
    }, {"clashplugin_meta.py": """
            STRATEGIES = [{"kind": "kmeans.update", "name": "numpy", "backend": "cpu",
                           "target": "x:y"}]
        """})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    yield tmp_path
    registry.refresh()
    for name in ("goodplugin_meta", "goodplugin_impl", "badplugin_meta", "clashplugin_meta"):
        sys.modules.pop(name, None)


def test_plugin_discovered_lazily_and_used(plugins):
    strategy = registry.get_strategy("kmeans.assign", "plugin-assign")
    assert strategy.origin.startswith("gpumine_goodplugin")
    assert "goodplugin_impl" not in sys.modules, "implementation imported before it was chosen"
    X = np.random.RandomState(0).uniform(size=(300, 2))
    ours = GPUKMeans(3, assign="plugin-assign", random_state=0, device="cpu").fit(X)
    ref = GPUKMeans(3, random_state=0, device="cpu").fit(X)
    assert sys.modules["goodplugin_impl"].CALLS, "the plugin's assign was not called"
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.strategies_["assign"] == "plugin-assign"


def test_broken_plugins_fail_alone_with_their_name(plugins):
    broken = {b.entry_point: b for b in registry.broken_plugins()}
    assert set(broken) == {"bad", "clash"}
    assert "broken on purpose" in broken["bad"].error
    assert broken["bad"].distribution == "gpumine_badplugin"
    assert "already registered" in broken["clash"].error
    # built-ins and the good plugin still work
    assert registry.get_strategy("kmeans.update", "numpy").origin == "gpumine"
    with pytest.raises(UnknownStrategy, match=r"gpumine_badplugin.*broken on purpose"):
        registry.get_strategy("kmeans.update", "from-the-bad-plugin")


def test_broken_implementation_fails_when_chosen(plugins):
    strategy = registry.get_strategy("kmeans.update", "plugin-broken-impl")
    with pytest.raises(StrategyLoadError, match=r"gpumine_goodplugin.*goodplugin_missing"):
        strategy.load()
    model = GPUKMeans(2, update="plugin-broken-impl", device="cpu")
    with pytest.raises(StrategyLoadError):
        model.fit(np.ones((4, 2)))
    assert not hasattr(model, "cluster_centers_")


def test_cli_lists_plugins(plugins):
    from typer.testing import CliRunner

    from gpumine.cli import app

    result = CliRunner().invoke(app, ["strategies", "--json"])
    assert result.exit_code == 0, result.output
    assert "plugin-assign" in result.stdout


def test_readme_strategy_table_lists_the_catalogue():
    """The README's table of strategies names exactly the built-in ones (kind, name, backend)."""
    import re
    from pathlib import Path

    from gpumine.catalogue import BUILTIN_STRATEGIES

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme[readme.index("## Strategies"):]
    table = table[:table.index("\n## ", 1)]
    listed = set()
    for row in table.splitlines():
        # cells split at unescaped pipes (a name may hold one, written \| in the table)
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        if len(cells) > 2 and cells[0].startswith("`") and "." in cells[0]:
            for name in re.findall(r"`([^`]+)`", cells[1]):
                listed.add((cells[0].strip("`"), name.replace("\\|", "|"), cells[2]))
    assert listed == {(s.kind, s.name, s.backend) for s in BUILTIN_STRATEGIES}


def test_hamerly_feature_limit_is_the_bound_runs():
    """The registry's copy of hamerly's width (it may not import gpumine.kmeans) is the
    bound run's own."""
    from gpumine.kmeans import bounds

    assert registry.HAMERLY_MAX_FEATURES == bounds.MAX_FEATURES
    assert registry._tensor_bounds(10**6, bounds.MAX_FEATURES, 1024)
    assert not registry._tensor_bounds(10**6, bounds.MAX_FEATURES + 1, 1024)


@pytest.mark.parametrize(("d", "k", "with_mma", "without"), [
    (128, 1024, "hamerly", "tc-exact"),  # past 32 hamerly has only the tensor cores' scan
    (32, 1024, "hamerly", "hamerly")])  # its register loop runs anywhere
def test_auto_takes_wide_hamerly_only_on_tensor_cores(d, k, with_mma, without):
    """Before compute capability 8.0 hamerly past 32 features cannot run (BoundAssign
    raises): a fit's auto must not pick it there (tc-exact runs tiled's kernel instead)."""
    sizes = dict(n_samples=10**6, n_features=d, n_clusters=k, dtype="float32")
    assert registry.resolve_kmeans_pair("auto", "auto", "gpu", **sizes)[0].name == with_mma
    assert registry.resolve_kmeans_pair("auto", "auto", "gpu", tensor_cores=False,
                                        **sizes)[0].name == without
