"""The long-lived Lloyd loop of ``gpumine.dask.GPUKMeans(engine="collective")``.

One task per worker runs every iteration on the partitions that worker holds, as cuML's
multi-node k-means does: no Dask graph per iteration. The task moves each partition to its
backend once, centred, and keeps its labels there (``resident``, e.g.
:class:`gpumine.dask.kmeans.ResidentPartition`), so an iteration brings only k x (d + 1)
sums and one count off a GPU. Each iteration the tasks exchange their partitions' sums and
weights and their numbers of changed labels through an
:class:`AllGather` actor -- a Dask actor, so the calls go from worker to worker, not
through the scheduler -- and every task adds the partitions' sums in partition order and
takes the same decisions (relocation, averaging, stopping rule) on the same numbers. Rank 0
returns the centres.

A lost worker: the driver sees it go and breaks the exchange (every waiting task fails),
Dask recomputes the lost partitions from their lineage, and the driver runs the whole loop
again from the same initial centres (the same result, :func:`run`); a rerun task that
sends a step again also breaks it. Losing the worker that holds the actor leaves the other
tasks waiting on it: each exchange waits at most a minute (or ten times the task's own
iteration), then the task fails and the driver starts again (70 s to recover in a trial).
The sums are added partition by partition in partition order whichever worker holds
which, so a fit is the same run to run and on one worker or many (the same partitions:
bit for bit); against the in-memory fit the centres differ only by the summation order.

**NCCL among GPU workers** (``exchange="nccl"``, and ``"auto"`` where every worker has a
GPU of its own and CuPy's NCCL): the sums never leave the GPUs. Each rank writes each of
its partitions' sums, weights and changed count into a row of a device buffer; an NCCL
all-gather hands every GPU every row; every rank adds the rows in partition order (the
actor's order, so the same bits as the actor exchange), averages the centres on its GPU and
reads back one status (shift, empty clusters, changed labels, the busiest rank's step
time: 32 bytes). The actor stays, for the start (a rendezvous that also catches a restarted
rank), for the rare relocation (on the host, as above) and as the alarm: a rank waiting for
its GPU looks at the actor every second and aborts its communicator when the driver has
broken the exchange (NCCL itself would wait for a lost peer forever). Ranks sharing a GPU
(NCCL refuses two ranks on one device) use the actor.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid

import numpy as np

from gpumine.exceptions import GpumineError, InvalidParameterError
from gpumine.kmeans.lloyd import average_centers, divide_sums, stopping_rule

__all__ = ["EXCHANGES", "AllGather", "run"]

#: How the collective loop's ranks exchange their sums (module docstring).
EXCHANGES = ("auto", "nccl", "actor")

#: Whole-loop attempts before a fit gives up (a worker lost mid-fit costs one).
ATTEMPTS = 3
#: The least time a task waits for the other ranks in one exchange (seconds); at least ten
#: times its own iteration's work.
_EXCHANGE_SECONDS = 60.0


class AllGather:
    """A Dask actor: step by step, every rank's payload, handed to every rank in rank order.

    A rank that sends a step it has sent before was restarted (its worker was lost): the
    gather is broken and every waiting and later call raises, so the driver can start over.
    """

    def __init__(self, parties: int):
        self.parties = parties
        self.rounds: dict = {}
        self.sent: dict = {}
        self.broken: str | None = None

    async def exchange(self, step: int, rank: int, payload):
        if self.broken is None and step <= self.sent.get(rank, -1):
            self.broken = f"rank {rank} sent step {step} again: its task was restarted"
            for record in self.rounds.values():
                record["event"].set()
        if self.broken is not None:
            raise GpumineError(self.broken)
        self.sent[rank] = step
        record = self.rounds.setdefault(step, {"parts": {}, "event": asyncio.Event(),
                                               "taken": 0})
        record["parts"][rank] = payload
        if len(record["parts"]) == self.parties:
            record["event"].set()
        await record["event"].wait()
        if self.broken is not None:
            raise GpumineError(self.broken)
        parts = [record["parts"][r] for r in range(self.parties)]
        record["taken"] += 1
        if record["taken"] == self.parties:
            del self.rounds[step]
        return parts

    async def state(self):
        """Why the gather is broken, or None."""
        return self.broken

    async def fail(self, reason: str) -> None:
        """Break the gather from outside (the driver saw a worker go)."""
        self.broken = reason
        for record in self.rounds.values():
            record["event"].set()


def _loop(gather, rank, blocks, wblocks, offsets, centers, x_mean, device, assign, update,
          max_iter, tol, resident, nccl_plan=None):
    """One worker's task: the Lloyd loop over its partitions (``blocks``, their weights
    ``wblocks`` or Nones, rows ``offsets``). The loop runs in the ``assign`` strategy's
    ``loop_context``, as the in-memory host loop does (BLAS held to one thread).
    ``nccl_plan`` (:func:`_nccl_plan`): exchange through NCCL, else through the actor."""
    from gpumine import registry
    from gpumine.backend import get_backend
    from gpumine.kmeans.lloyd import loop_context

    strategy = registry.resolve_strategy("kmeans.assign", assign, get_backend(device).name)
    with loop_context(strategy.load()):
        # each partition on the worker's backend once, centred, with its labels kept there
        parts = [resident(b, wb, x_mean, device, assign, update)
                 for b, wb in zip(blocks, wblocks, strict=True)]
        if nccl_plan is not None:
            return _iterate_nccl(gather, rank, parts, offsets, centers, max_iter, tol,
                                 nccl_plan)
        return _iterate(gather, rank, parts, offsets, centers, max_iter, tol)


class _Actor:
    """A rank's side of the :class:`AllGather` actor, its steps numbered."""

    def __init__(self, gather, rank):
        self.gather, self.rank, self.step = gather, rank, 0

    def __call__(self, payload, busy=0.0):
        """Every rank's ``payload`` of this step, in rank order. Bounded: a task left
        waiting on a lost actor must free its worker's thread for the driver's next
        attempt."""
        parts = self.gather.exchange(self.step, self.rank, payload).result(
            timeout=max(_EXCHANGE_SECONDS, 10.0 * busy))
        self.step += 1
        return parts

    def broken(self):
        """Why the driver broke the exchange, or None."""
        return self.gather.state().result(timeout=_EXCHANGE_SECONDS)


def _relocate(exchange, parts_held, offsets, centers, empty, sums, weights) -> None:
    """The in-memory rule over every rank's partitions: the farthest points, ties to the
    lowest row, each rank's candidates exchanged through the actor (host ``sums`` and
    ``weights`` updated in place)."""
    from gpumine.kmeans.chunked import relocate_found

    found = [(dist, offset + row, *rest)
             for part, offset in zip(parts_held, offsets, strict=True)
             for dist, row, *rest in part.farthest(centers, empty.size)]
    relocate_found(empty, [item for part in exchange(found) for item in part], sums, weights)


def _iterate(gather, rank, parts_held, offsets, centers, max_iter, tol):
    """:func:`_loop`'s iterations over its resident partitions, exchanging through the
    actor."""
    k, d = centers.shape
    exchange = _Actor(gather, rank)
    overheads, seconds = [], []
    iteration = 0
    for iteration in range(max_iter):
        start = time.perf_counter()
        own = [part.step(centers) for part in parts_held]
        busy = time.perf_counter() - start
        # each partition's sums, keyed by its first row: every rank adds all of them in the
        # partitions' order, so that the sums, and the fit, do not depend on how many
        # workers hold the partitions (per-rank subtotals added in rank order did: float64
        # addition does not associate, and k-means amplifies a last bit)
        pieces = [(offset, part_sums, part_weights)
                  for offset, (part_sums, part_weights, _) in zip(offsets, own, strict=True)]
        parts = exchange((pieces, sum(p[2] for p in own), busy), busy)
        wall = time.perf_counter() - start
        overheads.append(max(0.0, 1.0 - max(p[2] for p in parts) / wall))
        sums, weights = np.zeros((k, d)), np.zeros(k)  # sync: none -- host NumPy, k (d + 1)
        for _, part_sums, part_weights in sorted((piece for p in parts for piece in p[0]),
                                                 key=lambda piece: piece[0]):
            sums += part_sums
            weights += part_weights
        empty = np.flatnonzero(weights == 0)  # host NumPy (sync: none)
        if empty.size:
            _relocate(exchange, parts_held, offsets, centers, empty, sums, weights)
        new = average_centers(sums, weights, np.float64)
        shift = float(((new - centers) ** 2).sum())  # sync: none -- host NumPy
        centers = new
        unchanged = sum(part[1] for part in parts) == 0  # labels changed on every rank
        stop, _ = stopping_rule(iteration, unchanged, shift, tol, 0)
        seconds.append(time.perf_counter() - start)  # the whole iteration, on this rank
        if stop:
            break
    return (centers, iteration + 1, overheads, seconds) if rank == 0 else None


def _iterate_nccl(gather, rank, parts_held, offsets, centers, max_iter, tol, plan):
    """:func:`_iterate` with the sums exchanged by NCCL among the ranks' GPUs (module
    docstring): a rank's partitions in the rows ``plan["slots"]`` wide of its buffer, every
    rank's gathered, added in partition order (``plan["rows"]``)."""
    from gpumine.backend import cupy_module, nccl_module

    cp, nccl = cupy_module(), nccl_module()
    exchange = _Actor(gather, rank)
    exchange(None)  # the rendezvous: every rank is here (a restarted one breaks the gather)
    comm = nccl.NcclCommunicator(plan["ranks"], plan["uid"], rank)
    stream = cp.cuda.Stream(non_blocking=True)
    try:
        with stream:
            result = _nccl_iterations(cp, nccl, comm, stream, exchange, parts_held, offsets,
                                      centers, max_iter, tol, plan)
    except BaseException:
        comm.abort()  # peers may wait in a collective: they see the broken actor and abort
        raise
    comm.destroy()
    return result if rank == 0 else None


def _nccl_iterations(cp, nccl, comm, stream, exchange, parts_held, offsets, centers,
                     max_iter, tol, plan):
    k, d = centers.shape
    width = k * d + k + 2  # the sums, weights, changed count, the rank's last step (ms)
    rows = plan["rows"]
    mine = cp.zeros((plan["slots"], width))
    gathered = cp.empty((plan["ranks"] * plan["slots"], width))
    total = cp.empty(width)
    centers_dev = cp.asarray(centers)
    overheads, seconds, busy_ms = [], [], 0.0
    iteration = 0
    for iteration in range(max_iter):
        start = time.perf_counter()
        began = stream.record()
        for slot, part in enumerate(parts_held):
            part.step_into(centers_dev, mine[slot, :-1])
        ended = stream.record()
        mine[0, -1] = busy_ms  # the previous iteration's steps, for its overhead
        comm.allGather(mine.data.ptr, gathered.data.ptr, mine.size, nccl.NCCL_FLOAT64,
                       stream.ptr)
        # the partitions' rows added in partition order, from zero: the actor's sums
        total[...] = gathered[rows[0]]
        for row in rows[1:]:
            total += gathered[row]
        sums, weights = total[:k * d].reshape(k, d), total[k * d:k * d + k]
        # average_centers' arithmetic (its empty-cluster branch reads the host: below)
        new, positive = divide_sums(sums, weights, cp)
        status = cp.stack([((new - centers_dev) ** 2).sum(), (~positive).sum(),
                           total[k * d + k], gathered[:, -1].max()])
        _wait(stream.record(), exchange)
        # the iteration's one readback; _wait has seen the GPU finish it
        shift, n_empty, n_changed, busiest_ms = status.get().tolist()  # sync: 32 bytes
        busy_ms = cp.cuda.get_elapsed_time(began, ended)  # sync: none -- both events passed
        if n_empty:  # rare: the host rule, candidates through the actor
            # only in an iteration with an empty cluster (rare)
            sums_h, weights_h, old = sums.get(), weights.get(), centers_dev.get()  # sync: k(2d+1)
            _relocate(exchange, parts_held, offsets, old, np.flatnonzero(weights_h == 0),
                      sums_h, weights_h)
            new_h = average_centers(sums_h, weights_h, np.float64)
            shift = float(((new_h - old) ** 2).sum())  # sync: none -- host NumPy
            new = cp.asarray(new_h)
        centers_dev = new
        if seconds:  # the previous iteration's: the busiest rank's steps came with this one
            overheads.append(max(0.0, 1.0 - busiest_ms / 1e3 / seconds[-1]))
        stop, _ = stopping_rule(iteration, n_changed == 0, shift, tol, 0)
        seconds.append(time.perf_counter() - start)  # the whole iteration, on this rank
        if stop:
            break
    # the last iteration's overhead by this rank's own steps (the others' are not sent)
    overheads.append(max(0.0, 1.0 - busy_ms / 1e3 / seconds[-1]))
    return centers_dev.get(), iteration + 1, overheads, seconds  # sync: k x d, once a fit


def _wait(event, exchange) -> None:
    """Until the stream passes ``event``, polled, looking at the actor every second: a rank
    whose peer was lost would wait in NCCL forever, so it fails (and aborts its
    communicator) once the driver has broken the exchange."""
    look = time.perf_counter() + 1.0
    while not event.done:  # sync: an event query, no wait
        if time.perf_counter() > look:
            reason = exchange.broken()
            if reason is not None:
                raise GpumineError(reason)
            look = time.perf_counter() + 1.0
        time.sleep(_SPIN_SECONDS)


def _gpu_identity(device):
    """This worker's GPU for ``device`` as (host name, PCI bus id), or None: no GPU there, or
    no NCCL."""
    from gpumine.backend import cupy_module, get_backend, nccl_module

    try:
        if not get_backend(device).is_gpu:
            return None
        nccl_module()
    except GpumineError:  # BackendUnavailable: no CuPy, GPU or NCCL
        return None
    return socket.gethostname(), cupy_module().cuda.Device().pci_bus_id


def _nccl_unique_id():
    from gpumine.backend import nccl_module

    return nccl_module().get_unique_id()


def _nccl_plan(client, workers, by_worker, device, exchange):
    """What the ranks need for the NCCL exchange, or None for the actor's (``exchange``
    "actor", or "auto" where a worker has no GPU or NCCL, or two share a GPU)."""
    if exchange == "actor":
        return None
    gpus = client.run(_gpu_identity, device, workers=workers)
    held = [gpus.get(w) for w in workers]
    why = ("a worker has no GPU or no NCCL" if None in held
           else "workers share a GPU (NCCL takes one rank a GPU)"
           if len(set(held)) < len(held) else None)
    if why is not None:
        if exchange == "nccl":
            raise InvalidParameterError(f"exchange='nccl': {why}: {gpus}")
        return None
    uid = client.run(_nccl_unique_id, workers=[workers[0]])[workers[0]]
    slots = max(len(by_worker[w]) for w in workers)
    rows = {index: rank * slots + slot for rank, w in enumerate(workers)
            for slot, index in enumerate(by_worker[w])}
    return {"ranks": len(workers), "uid": uid, "slots": slots,
            "rows": [rows[index] for index in sorted(rows)]}


def run(client, X, W, centers, x_mean, *, device, assign, update, max_iter, tol, resident,
        exchange="auto"):
    """The collective loop over persisted dask array ``X`` (weights ``W``, persisted in
    X's row blocks, or None) from ``centers`` (centred); the sums exchanged as ``exchange``
    says (:data:`EXCHANGES`, module docstring).

    Returns ``(centers, n_iter, overheads, seconds, exchange)``: the final centred centres,
    the iterations, each iteration's share of wall time not spent in the busiest rank's own
    work, each iteration's wall time on rank 0 (its step, the exchange, relocation and
    the new centres), and the exchange used ("nccl" or "actor").
    """
    from distributed import futures_of, wait

    blocks = futures_of(X)
    if len(blocks) != X.numblocks[0]:
        raise InvalidParameterError("engine='collective' needs X persisted on a distributed "
                                    "cluster (a distributed.Client)")
    order = sorted(blocks, key=lambda f: f.key[1:])  # (name, i, 0): partition order
    worder = ([None] * len(order) if W is None
              else sorted(futures_of(W), key=lambda f: f.key[1:]))
    sizes = [int(rows) for rows in X.chunks[0]]
    offsets = np.cumsum([0, *sizes[:-1]]).tolist()
    last_error = None
    for _ in range(ATTEMPTS):
        tasks, gather_future = [], None
        try:
            wait([*order, *(f for f in worder if f is not None)])
            by_worker = _placement(client.who_has(order), order, sizes,
                                   sorted(client.scheduler_info()["workers"]))
            workers = sorted(by_worker)
            plan = _nccl_plan(client, workers, by_worker, device, exchange)
            gather_future = client.submit(AllGather, len(workers), actor=True,
                                          workers=[workers[0]],
                                          key=f"gpumine-allgather-{uuid.uuid4().hex}")
            gather = gather_future.result()
            tasks = [client.submit(_loop, gather, rank, [order[i] for i in by_worker[w]],
                                   [worder[i] for i in by_worker[w]],
                                   [offsets[i] for i in by_worker[w]], centers, x_mean, device,
                                   assign, update, max_iter, tol, resident, plan,
                                   workers=[w], allow_other_workers=True, pure=False,
                                   key=f"gpumine-lloyd-{uuid.uuid4().hex}-{rank}")
                     for rank, w in enumerate(workers)]
            # Watch the tasks and the workers: a task of a lost worker is rerun elsewhere,
            # possibly behind a task that waits for it, so a lost worker breaks the gather.
            while not all(task.done() for task in tasks):
                lost = set(workers) - set(client.scheduler_info()["workers"])
                if lost or any(task.status == "error" for task in tasks):
                    _break(gather, f"workers lost: {sorted(lost)}" if lost else "a task failed")
                    try:  # the tasks fail once the exchange is broken; those that do not
                        wait(tasks, timeout=_BREAK_SECONDS)  # (on a lost actor) are released
                    except Exception:  # a timeout
                        pass
                    raise GpumineError(f"the loop was broken: {sorted(lost)} lost"
                                       if lost else "a task of the loop failed")
                time.sleep(_POLL_SECONDS)
            return (*client.gather(tasks)[0], "actor" if plan is None else "nccl")
        except InvalidParameterError:  # exchange="nccl" where it cannot be
            raise
        except Exception as exc:  # a lost worker, the gather broken by a restart, ...
            last_error = exc
        finally:
            # released, not cancelled: cancelling tasks whose inputs were lost with a worker
            # cancelled those inputs (the persisted partitions) too
            for future in (*tasks, *([gather_future] if gather_future is not None else [])):
                future.release()
    raise GpumineError(f"the collective Lloyd loop failed {ATTEMPTS} times; last: "
                       f"{last_error!r}")


def _placement(holders, order, sizes, workers) -> dict:
    """Which worker's task takes which partitions: each its own, then partitions moved from
    the most to the least loaded worker (by rows) while that narrows the gap -- a task runs
    every iteration on its partitions, so the busiest sets the pace. A moved partition is
    copied once, when its task starts."""
    by_worker: dict = {w: [] for w in workers}
    for index, future in enumerate(order):
        held = [w for w in sorted(holders.get(future.key, ())) if w in by_worker]
        by_worker[held[0] if held else workers[index % len(workers)]].append(index)
    load = {w: sum(sizes[i] for i in parts) for w, parts in by_worker.items()}
    while True:
        most, least = max(load, key=load.get), min(load, key=load.get)
        movable = [i for i in by_worker[most] if load[most] - sizes[i] > load[least]]
        if not movable:
            break
        index = min(movable, key=lambda i: abs(load[most] - load[least] - 2 * sizes[i]))
        by_worker[most].remove(index)
        by_worker[least].append(index)
        load[most] -= sizes[index]
        load[least] += sizes[index]
    return {w: sorted(parts) for w, parts in by_worker.items() if parts}


#: How often the driver looks at the tasks and the workers, and how long it waits for the
#: tasks to fail once it has broken their exchange (seconds).
_POLL_SECONDS, _BREAK_SECONDS = 0.05, 30.0
#: How long a rank sleeps between two looks at its GPU's progress (seconds).
_SPIN_SECONDS = 50e-6


def _break(gather, reason: str) -> None:
    """Fail every waiting and later exchange of ``gather`` (its worker may be gone too)."""
    try:
        gather.fail(reason).result(timeout=_BREAK_SECONDS)
    except Exception:  # the actor's worker was the one lost: its callers fail by themselves
        pass
