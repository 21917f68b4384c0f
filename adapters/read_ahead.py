"""Record batches converted one batch ahead, on a thread of their own.

A streamed fit reads its data again at every pass. Converting a record batch --
pyarrow's read, the checks, the copy into pinned memory and up to the device -- is host
work and a copy; computing on the chunk is device work. One after the other they add
up; :func:`read_ahead` converts the next batch on a background thread while the caller
computes on the current one.

Memory: the chunks are written into ``slots`` buffers (two: double buffering), each
allocated at its first batch on the caller's stream (where the caller's work on it is
ordered), so a pass holds two chunks on the backend, not one. On the GPU the thread
writes a slot again only after the caller's stream has passed the point where the
caller asked for the next chunk (a CUDA event the thread's stream waits on; no host
wait). A chunk is therefore valid until the next one is asked for -- the contract of a
chunk source (:data:`gpumine.kmeans.chunked.ChunkSource`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["ReadAheadStream", "read_ahead"]

_POLL_SECONDS = 0.05  # how often a blocked thread looks whether the pass was abandoned


@dataclass
class _Slot:
    buffer: Any = None     # flat backend array, as large as the largest batch it held
    released: Any = None   # the caller's CUDA event after its last use (GPU), else None


@dataclass
class _Failure:
    error: BaseException


_END = object()


class ReadAheadStream:
    """The stream a source's background thread works on (one per source, reused by every
    pass, so that CuPy's memory pool keeps its temporaries in one arena); nothing on the CPU.
    """

    def __init__(self, backend):
        self.backend = backend
        self._stream = None
        self._device = None

    def bind(self) -> None:
        """Make the stream on the caller's current device (GPU; called on its thread)."""
        if not self.backend.is_gpu:
            return
        cuda = self.backend.xp.cuda
        device = cuda.Device().id
        if self._stream is None or device != self._device:
            with cuda.Device(device):
                self._device, self._stream = device, cuda.Stream(non_blocking=True)

    def context(self):
        """Enter the bound device and stream (on the background thread)."""
        import contextlib

        stack = contextlib.ExitStack()
        if self.backend.is_gpu:
            stack.enter_context(self.backend.xp.cuda.Device(self._device))
            stack.enter_context(self._stream)
        return stack

    def prepare(self, slot: _Slot, size: int, dtype, caller) -> None:
        """Make ``slot`` hold ``size`` elements and order this stream's next work after the
        caller's last use of it."""
        xp = self.backend.xp
        if slot.buffer is not None and slot.buffer.size >= size:
            if slot.released is not None:
                self._stream.wait_event(slot.released)
            return
        if slot.released is not None:
            # only when a batch is larger than the slot's earlier ones (rare: pyarrow gives
            # full batches first), so that the old buffer is freed unused
            slot.released.synchronize()  # sync: the caller's last use of the slot, rare
        slot.buffer = None
        if caller is None:
            slot.buffer = xp.empty(size, dtype=dtype)
            return
        with caller:  # the caller's arena of the memory pool: freed in order with its work
            slot.buffer = xp.empty(size, dtype=dtype)


def read_ahead(batches: Iterable, convert: Callable, *, backend, width: int, dtype,
               stream: ReadAheadStream, slots: int = 2,
               rows: Callable = lambda batch: batch.num_rows) -> Iterator:
    """Yield ``convert(index, first_row, batch, out)`` for every non-empty batch, each
    converted on a background thread while the caller works on the one before.

    Parameters
    ----------
    batches : iterable of pyarrow.RecordBatch (or of anything ``rows`` measures)
        Iterated on the background thread only.
    convert : callable
        ``convert(index, first_row, batch, out)`` returns the chunk, written into ``out``,
        a C-contiguous ``(width, rows(batch))`` array of ``dtype`` on the backend. It
        must leave the chunk complete on return (on the GPU: its stream synchronized, as
        :func:`gpumine.adapters.as_columns` does when it checks the values).
    backend : gpumine.backend.Backend
    width, dtype :
        Features and dtype of the chunks.
    stream : ReadAheadStream
        The source's background stream.
    slots : int, default=2
        Chunk buffers: the caller's chunk and the next one being converted.
    rows : callable, default ``batch.num_rows``
        The rows of a batch.

    Yields
    ------
    The converted chunks, in order. An error raised by ``batches`` or ``convert`` is
    raised here, at the chunk it concerns. Abandoning the iterator stops the thread.

    Examples
    --------
    >>> import numpy as np, pyarrow as pa
    >>> from gpumine.backend import get_backend
    >>> cpu = get_backend("cpu")
    >>> batches = [pa.record_batch({"a": [1.0, 2.0]}), pa.record_batch({"a": [3.0]})]
    >>> def convert(index, first, batch, out):
    ...     out[0] = batch.column(0).to_numpy()
    ...     return out.T
    >>> chunks = read_ahead(batches, convert, backend=cpu, width=1, dtype=np.float64,
    ...                     stream=ReadAheadStream(cpu))
    >>> [chunk.ravel().tolist() for chunk in chunks]
    [[1.0, 2.0], [3.0]]
    """
    xp = backend.xp
    caller = xp.cuda.get_current_stream() if backend.is_gpu else None
    stream.bind()
    free: queue.Queue = queue.Queue()
    for _ in range(slots):
        free.put(_Slot())
    ready: queue.Queue = queue.Queue(maxsize=max(1, slots - 1))
    stop = threading.Event()

    def blocking(operation, *args):
        while not stop.is_set():
            try:
                return operation(*args, timeout=_POLL_SECONDS)
            except (queue.Empty, queue.Full):
                continue
        return None

    def produce():
        try:
            with stream.context():
                first = 0
                for index, batch in enumerate(batches):
                    size = rows(batch)
                    if size == 0:
                        continue
                    slot = blocking(free.get)
                    if slot is None:
                        return
                    stream.prepare(slot, size * width, dtype, caller)
                    out = slot.buffer[:size * width].reshape(width, size)
                    chunk = convert(index, first, batch, out)
                    first += size
                    blocking(ready.put, (slot, chunk))
            blocking(ready.put, _END)
        except BaseException as error:  # raised again by the caller, at this chunk
            blocking(ready.put, _Failure(error))

    def release(slot):
        if backend.is_gpu:
            slot.released = xp.cuda.get_current_stream().record()
        free.put(slot)

    thread = threading.Thread(target=produce, name="gpumine-read-ahead", daemon=True)
    thread.start()
    held = None
    try:
        while True:
            if held is not None:  # the caller asked for the next chunk: its slot is free
                release(held)
                held = None
            item = ready.get()  # sync: none -- the read-ahead thread's queue, host only
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            held, chunk = item
            yield chunk
            del chunk
    finally:
        stop.set()
        thread.join()  # the thread's last copy into a slot is done before slots are freed
