"""adapters/read_ahead.py: batches converted one ahead on a thread, in order, each chunk
valid until the next is asked for, errors raised at their chunk, the thread gone after."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from gpumine.adapters.read_ahead import ReadAheadStream, read_ahead
from gpumine.backend import get_backend
from gpumine.exceptions import InvalidInputError

pa = pytest.importorskip("pyarrow")


def _batches(sizes, width=3, seed=0):
    rng = np.random.default_rng(seed)
    return [pa.record_batch({f"c{j}": rng.standard_normal(rows) for j in range(width)})
            for rows in sizes]


def _copy(index, first, batch, out):
    for j, column in enumerate(batch.columns):
        out[j] = column.to_numpy()
    return out.T, (index, first)


def _threads():
    return [t for t in threading.enumerate() if t.name == "gpumine-read-ahead"]


def _stream(backend, batches, convert=_copy, slots=2):
    return read_ahead(batches, convert, backend=backend, width=3, dtype=np.float64,
                      stream=ReadAheadStream(backend), slots=slots)


@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


@pytest.fixture
def cpu():
    return get_backend("cpu")


def test_chunks_come_in_order_and_stay_valid_until_the_next_is_asked_for(cpu):
    """Sizes that shrink, skip (0 rows) and grow again (a slot reallocated): each chunk is
    the batch's values while held, although the thread has converted the next meanwhile."""
    batches = _batches([5, 4, 0, 2, 7, 7, 1])
    expected = [np.column_stack([c.to_numpy() for c in b.columns]) for b in batches
                if b.num_rows]
    firsts = np.cumsum([0] + [len(e) for e in expected])[:-1]
    indices = []
    for (chunk, (index, first)), want, first_row in zip(_stream(cpu, batches), expected, firsts,
                                                        strict=True):
        time.sleep(0.02)  # the thread fills the other slot now
        np.testing.assert_array_equal(chunk, want)
        assert first == first_row
        indices.append(index)
    assert indices == [0, 1, 3, 4, 5, 6]  # batch 2 (empty) skipped, indices are the batches'
    assert not _threads()


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_any_number_of_slots_gives_the_same_chunks(cpu, slots):
    batches = _batches([3, 3, 3, 1], seed=slots)
    got = [chunk.copy() for chunk, _ in _stream(cpu, batches, slots=slots)]
    want = [chunk.copy() for chunk, _ in _stream(cpu, batches, slots=2)]
    assert len(got) == 4
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_error_is_raised_at_its_chunk_and_the_thread_ends(cpu):
    def convert(index, first, batch, out):
        if index == 2:
            raise InvalidInputError(f"batch {index} (rows {first} to ...): bad")
        return _copy(index, first, batch, out)

    got = []
    with pytest.raises(InvalidInputError, match=r"batch 2 \(rows 8 to"):
        for chunk, _ in _stream(cpu, _batches([4, 4, 4, 4]), convert):
            got.append(chunk.shape[0])
    assert got == [4, 4]
    assert not _threads()


def test_an_error_of_the_batches_themselves_is_raised(cpu):
    def batches():
        yield from _batches([2])
        raise OSError("the file went away")

    with pytest.raises(OSError, match="went away"):
        list(_stream(cpu, batches()))
    assert not _threads()


def test_an_abandoned_pass_stops_the_thread(cpu):
    converted = []

    def convert(index, first, batch, out):
        converted.append(index)
        return _copy(index, first, batch, out)

    chunks = _stream(cpu, _batches([2] * 50), convert)
    next(chunks)
    chunks.close()
    assert not _threads()
    assert len(converted) <= 3  # the held chunk, the one ready and at most one more


@pytest.mark.gpu
def test_device_chunks_stay_valid_while_the_caller_works_on_them(cp):
    """On the GPU the thread writes a slot only after the caller's stream has passed its
    last use: a slow kernel on the caller's stream reads the chunk while the next ones are
    converted, and sees the batch's values."""
    gpu = get_backend("gpu")
    batches = _batches([200_000] * 6, seed=4)

    def convert(index, first, batch, out):
        for j, column in enumerate(batch.columns):
            out[j].set(column.to_numpy())
        cp.cuda.get_current_stream().synchronize()
        return out.T, index

    sums = []
    for chunk, _ in _stream(gpu, batches, convert):
        for _ in range(20):  # keep the caller's stream busy reading the chunk
            total = chunk.sum(axis=0)
        sums.append(total)
    want = [np.column_stack([c.to_numpy() for c in b.columns]).sum(axis=0) for b in batches]
    for got, expected in zip(sums, want, strict=True):
        np.testing.assert_allclose(cp.asnumpy(got), expected, rtol=1e-12)
    assert not _threads()


def test_a_cpu_dataset_stream_keeps_no_cache(cpu):
    import pyarrow.dataset as ds

    from gpumine.adapters.chunks import dataset_chunks

    stream = dataset_chunks(ds.dataset(pa.Table.from_batches(_batches([4, 4]))), backend=cpu,
                            batch_rows=4)
    for _ in range(3):
        assert sum(len(X) for X, _ in stream.chunks()) == 8
    assert stream.cache.budget == 0 and not stream.cache.complete and not stream.cache.parts


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [None, 1000])
def test_gpu_dataset_passes_after_the_second_come_from_the_pinned_cache(cp, budget):
    """Pass 1 counts, pass 2 keeps every converted batch in page-locked memory, passes 3 and
    on copy those up: the same chunks every pass. A budget smaller than the data keeps
    nothing; a keeping pass abandoned half-way keeps nothing and the next one keeps."""
    import pyarrow.dataset as ds

    from gpumine.adapters.chunks import dataset_chunks

    gpu = get_backend("gpu")
    batches = _batches([5000, 5000, 1234], seed=9)
    want = np.concatenate([np.column_stack([c.to_numpy() for c in b.columns]) for b in batches])
    stream = dataset_chunks(ds.dataset(pa.Table.from_batches(batches)), backend=gpu,
                            batch_rows=5000, cache_bytes=budget)

    def one_pass():
        return np.concatenate([cp.asnumpy(X) for X, _ in stream.chunks()])

    np.testing.assert_array_equal(one_pass(), want)
    assert not stream.cache.complete
    if budget is None:  # abandon the keeping pass after one chunk
        chunks = stream.chunks()
        next(chunks)
        chunks.close()
        assert not stream.cache.complete
    np.testing.assert_array_equal(one_pass(), want)
    assert stream.cache.complete == (budget is None)
    for _ in range(2):
        np.testing.assert_array_equal(one_pass(), want)
    if budget is None:
        assert [p.shape for p in stream.cache.parts] == [(3, 5000), (3, 5000), (3, 1234)]
    else:
        assert not stream.cache.parts


def test_the_cache_budget_comes_from_the_environment(monkeypatch):
    from gpumine.adapters.chunks import CACHE_ENV_VAR, PinnedCache, default_cache_bytes
    from gpumine.exceptions import InvalidParameterError

    monkeypatch.setenv(CACHE_ENV_VAR, "0")
    assert default_cache_bytes() == 0
    monkeypatch.setenv(CACHE_ENV_VAR, str(3 << 30))
    assert default_cache_bytes() == 3 << 30
    assert PinnedCache(get_backend("cpu"), None).budget == 3 << 30
    assert PinnedCache(get_backend("cpu"), 5).budget == 5  # an explicit budget wins
    for bad in ("-1", "lots", "1.5"):
        monkeypatch.setenv(CACHE_ENV_VAR, bad)
        with pytest.raises(InvalidParameterError, match=CACHE_ENV_VAR):
            default_cache_bytes()
    monkeypatch.delenv(CACHE_ENV_VAR)
    assert default_cache_bytes() >= 0
