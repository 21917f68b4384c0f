"""gpumine.datasets: MT19937 data, the Corel loader (download path included), file readers."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest

from gpumine.datasets import (
    NOISE_LABEL,
    load_corel,
    make_uniform,
    read_arff_points,
    read_minebench_bin,
    write_minebench_bin,
)
from gpumine.datasets import corel as corel_module
from gpumine.exceptions import DataFormatError


def test_make_uniform_is_mt19937_random_sample():
    X = make_uniform(1000, 7, random_state=5489, dtype=np.float64)
    np.testing.assert_array_equal(X, np.random.RandomState(5489).random_sample((1000, 7)))
    X32 = make_uniform(1000, 7, random_state=5489)
    assert X32.dtype == np.float32
    np.testing.assert_array_equal(X32, X.astype(np.float32))


def test_make_uniform_blocks_equal_one_draw(monkeypatch):
    from gpumine.datasets import synthetic

    monkeypatch.setattr(synthetic, "_BLOCK_VALUES", 64)
    X = make_uniform(333, 5, random_state=1, dtype=np.float64)
    np.testing.assert_array_equal(X, np.random.RandomState(1).random_sample((333, 5)))
    # MT19937 seeded with 5489 first outputs 3499211612, 581869302 (the reference
    # implementation's published stream); genrand_res53 makes one double from the two.
    first = ((3499211612 >> 5) * 67108864 + (581869302 >> 6)) / 9007199254740992
    assert make_uniform(1, 1, random_state=5489, dtype=np.float64)[0, 0] == first


@pytest.mark.parametrize(("args", "match"), [
    ((0, 3), "n_samples"), ((3, 0), "n_features"), ((2.5, 3), "n_samples"),
])
def test_make_uniform_bad_args(args, match):
    with pytest.raises(ValueError, match=match):
        make_uniform(*args)
    with pytest.raises(ValueError, match="dtype"):
        make_uniform(3, 3, dtype=np.int32)


@pytest.mark.parametrize(("subset", "d"), [("color", 9), ("edge", 18)])
def test_load_corel_from_data_home(subset, d, corel):
    X = corel(subset)
    assert X.shape == (17695, d) and X.dtype == np.float32
    assert np.isfinite(X).all()


def test_load_corel_search_order(tmp_path, small_corel, monkeypatch):
    path, X = small_corel
    home = tmp_path / "env"
    home.mkdir()
    shutil.copy(path, home)
    monkeypatch.setenv("GPUMINE_DATA", str(home))
    np.testing.assert_array_equal(load_corel("color", download=False), X)
    monkeypatch.delenv("GPUMINE_DATA")
    with pytest.raises(FileNotFoundError, match="download=False"):
        load_corel("color", download=False)
    cache = tmp_path / "home" / ".cache" / "gpumine"
    cache.mkdir(parents=True)
    shutil.copy(path, cache)
    np.testing.assert_array_equal(load_corel("color", download=False), X)


def test_load_corel_downloads_and_verifies(tmp_path, small_corel):
    path, X = small_corel
    mirror = path.parent.as_uri() + "/{subset}17695.bin"
    target = tmp_path / "cache"
    np.testing.assert_array_equal(load_corel("color", data_home=target, url=mirror), X)
    stored = target / "color17695.bin"
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == corel_module.COREL_SUBSETS[
        "color"][1]
    assert sorted(p.name for p in target.iterdir()) == ["color17695.bin"]  # no temp files left
    # now found locally: no URL needed
    np.testing.assert_array_equal(load_corel("color", data_home=target, url="file:///nowhere/"
                                             "{subset}"), X)


def test_load_corel_rejects_a_bad_download(tmp_path, small_corel):
    path, _ = small_corel
    bad = tmp_path / "bad-mirror"
    bad.mkdir()
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    (bad / "color17695.bin").write_bytes(bytes(data))
    target = tmp_path / "cache"
    with pytest.raises(DataFormatError, match="sha256"):
        load_corel("color", data_home=target, url=bad.as_uri() + "/{subset}17695.bin")
    assert not any(target.iterdir()), "the bad file was kept"
    # a corrupted local copy is refused too
    (target / "color17695.bin").write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match="sha256"):
        load_corel("color", data_home=target, download=False)


def test_the_real_corel_files_match_their_checksums(shared_datasets, monkeypatch):
    """Optional: the published files themselves (../shared/datasets/corel)."""
    monkeypatch.delenv("GPUMINE_DATA", raising=False)
    for subset, d in (("color", 9), ("edge", 18)):
        X = load_corel(subset, data_home=shared_datasets / "corel", download=False)
        assert X.shape == (17695, d)


def test_load_corel_unreachable(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(OSError, match="could not download"):
        load_corel("texture", data_home=tmp_path, url=(tmp_path / "none").as_uri() + "/{subset}")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="subset"):
        load_corel("shape")


def test_minebench_round_trip(tmp_path, rng):
    X = rng.normal(size=(37, 5)).astype(np.float32)
    path = tmp_path / "x.bin"
    write_minebench_bin(path, X)
    assert path.stat().st_size == 8 + 37 * 5 * 4
    np.testing.assert_array_equal(read_minebench_bin(path), X)
    write_minebench_bin(path, np.empty((0, 3)))
    assert read_minebench_bin(path).shape == (0, 3)


@pytest.mark.parametrize(("content", "match"), [
    (b"", "too short"),
    (b"\x01\x00\x00", "too short"),
    (np.array([3, 2], "<i4").tobytes() + b"\x00" * 20, "truncated"),
    (np.array([3, 2], "<i4").tobytes() + b"\x00" * 28, "truncated"),
    (np.array([-1, 2], "<i4").tobytes(), "n=-1"),
    (np.array([1, 0], "<i4").tobytes(), "d >= 1"),
])
def test_minebench_corrupt(tmp_path, content, match):
    path = tmp_path / "bad.bin"
    path.write_bytes(content)
    with pytest.raises(DataFormatError, match=match):
        read_minebench_bin(path)


def test_write_minebench_is_atomic(tmp_path):
    path = tmp_path / "out.bin"
    with pytest.raises(ValueError):
        write_minebench_bin(path, np.ones(3))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "n", "d", "n_clusters", "has_noise"), [
    ("cluto-t4-8k", 8000, 2, 6, True), ("cluto-t7-10k", 10000, 2, 9, True),
    ("aggregation", 788, 2, 7, False), ("compound", 399, 2, 6, False), ("jain", 373, 2, 2, False),
    ("3-spiral", 312, 2, 3, False), ("atom", 800, 3, 2, False), ("chainlink", 1000, 3, 2, False),
    ("hepta", 212, 3, 7, False),
])
def test_read_shapes(name, n, d, n_clusters, has_noise, shared_datasets):
    X, y, names = read_arff_points(shared_datasets / "shapes" / f"{name}.arff")
    assert X.shape == (n, d) and y.shape == (n,)
    assert names == ["x", "y", "z"][:d]
    assert len(set(y.tolist()) - {NOISE_LABEL}) == n_clusters
    assert (NOISE_LABEL in y) == has_noise


def test_read_labelled_points(tmp_path):
    """A labelled 3-d set with a noise class, as the shape benchmarks write them."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 3)).round(4)
    classes = rng.choice(["1", "2", "noise"], size=50)
    lines = ["% generated", "@RELATION blobs", "@ATTRIBUTE x REAL", "@ATTRIBUTE y REAL",
             "@ATTRIBUTE z REAL", "@ATTRIBUTE CLASS {1,2,noise}", "@DATA"]
    lines += [f"{a},{b},{c},{label}" for (a, b, c), label in zip(X, classes, strict=True)]
    path = tmp_path / "blobs.arff"
    path.write_text("\n".join(lines) + "\n")
    got, y, names = read_arff_points(path)
    np.testing.assert_allclose(got, X)
    assert names == ["x", "y", "z"]
    assert ((y == NOISE_LABEL) == (classes == "noise")).all()
    assert len(set(y.tolist()) - {NOISE_LABEL}) == len(set(classes.tolist()) - {"noise"})


def test_read_arff_errors(tmp_path):
    path = tmp_path / "bad.arff"
    path.write_text("@relation r\n@attribute x REAL\n@data\n1.0\nnot-a-number\n")
    with pytest.raises(DataFormatError):
        read_arff_points(path)
    path.write_text("@relation r\n@attribute x REAL\n@attribute class {a,noise}\n@data\n"
                    "1.0,a\n2.0,noise\n")
    _, y, _ = read_arff_points(path)
    assert y.tolist() == [0, NOISE_LABEL]


def _serve(behaviour):
    """A local HTTP host on a thread: ``behaviour(connection)`` answers one request."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def run():
        connection, _ = server.accept()
        with connection:
            connection.recv(4096)
            behaviour(connection)

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}/{{subset}}17695.bin", server


def _stall(connection):
    import time

    time.sleep(5)


def _trickle(connection):
    import time

    connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 100000\r\n\r\n")
    try:
        for _ in range(50):
            connection.sendall(b"x")
            time.sleep(0.1)
    except OSError:
        pass


@pytest.mark.parametrize("behaviour", [_stall, _trickle], ids=["stalled", "trickling"])
def test_load_corel_gives_up_on_a_slow_host_and_says_where_it_looked(tmp_path, monkeypatch,
                                                                     behaviour):
    import time

    monkeypatch.setattr(corel_module, "STALL_SECONDS", 0.5)
    monkeypatch.setattr(corel_module, "DEADLINE_SECONDS", 1.0)
    monkeypatch.setenv("GPUMINE_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    url, server = _serve(behaviour)
    start = time.monotonic()
    with server, pytest.raises(OSError) as info:
        load_corel("color", data_home=tmp_path / "home-dir", url=url)
    assert time.monotonic() - start < 4
    message = str(info.value)
    assert "could not download" in message
    for place in ("home-dir", "env", ".cache/gpumine", "data_home", "$GPUMINE_DATA"):
        assert place in message, place
    assert not any((tmp_path / "home-dir").glob("*")), "a partial download was kept"


def test_shape_sets_are_reproducible_and_labelled_as_named():
    from gpumine.datasets import SHAPE_SETS, make_shape_sets

    sets = make_shape_sets(scale=0.2, random_state=3)
    assert tuple(sets) == SHAPE_SETS
    again = make_shape_sets(scale=0.2, random_state=3)
    for name, (X, y) in sets.items():
        assert np.array_equal(X, again[name][0]) and np.array_equal(y, again[name][1])
        assert X.dtype == np.float64 and y.dtype == np.int64 and len(X) == len(y)
        assert np.isfinite(X).all() and (y == -1).any()  # every set has noise
    assert sets["tori-3d"][0].shape[1] == 3
    assert [sets[f"blobs-noise20-d{d}"][0].shape[1] for d in range(2, 7)] == [2, 3, 4, 5, 6]
    X, y = sets["blobs-noise20-d4"]
    assert sorted(set(y.tolist())) == [-1, 0, 1, 2, 3] and (y == -1).mean() == 0.2
    with pytest.raises(ValueError, match="scale"):
        make_shape_sets(scale=0)
