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
"""

from __future__ import annotations

import asyncio
import time
import uuid

import numpy as np

from gpumine.exceptions import GpumineError, InvalidParameterError
from gpumine.kmeans.lloyd import average_centers, stopping_rule

__all__ = ["AllGather", "run"]

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

    async def fail(self, reason: str) -> None:
        """Break the gather from outside (the driver saw a worker go)."""
        self.broken = reason
        for record in self.rounds.values():
            record["event"].set()


def _loop(gather, rank, blocks, wblocks, offsets, centers, x_mean, device, assign, update,
          max_iter, tol, resident):
    """One worker's task: the Lloyd loop over its partitions (``blocks``, their weights
    ``wblocks`` or Nones, rows ``offsets``). The loop runs in the ``assign`` strategy's
    ``loop_context``, as the in-memory host loop does (BLAS held to one thread)."""
    from gpumine import registry
    from gpumine.backend import get_backend
    from gpumine.kmeans.lloyd import loop_context

    strategy = registry.resolve_strategy("kmeans.assign", assign, get_backend(device).name)
    with loop_context(strategy.load()):
        # each partition on the worker's backend once, centred, with its labels kept there
        parts = [resident(b, wb, x_mean, device, assign, update)
                 for b, wb in zip(blocks, wblocks, strict=True)]
        return _iterate(gather, rank, parts, offsets, centers, max_iter, tol)


def _iterate(gather, rank, parts_held, offsets, centers, max_iter, tol):
    """:func:`_loop`'s iterations over its resident partitions."""
    from gpumine.kmeans.chunked import relocate_found

    k, d = centers.shape
    step, overheads, seconds = 0, [], []

    def exchange(payload, busy=0.0):
        nonlocal step
        # bounded: a task left waiting on a lost actor must free its worker's thread for the
        # driver's next attempt
        parts = gather.exchange(step, rank, payload).result(
            timeout=max(_EXCHANGE_SECONDS, 10.0 * busy))
        step += 1
        return parts

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
        if empty.size:  # the in-memory rule: the farthest points, ties to the lowest row
            found = [(dist, offset + row, *rest)
                     for part, offset in zip(parts_held, offsets, strict=True)
                     for dist, row, *rest in part.farthest(centers, empty.size)]
            relocate_found(empty, [item for part in exchange(found) for item in part], sums,
                           weights)
        new = average_centers(sums, weights, np.float64)
        shift = float(((new - centers) ** 2).sum())
        centers = new
        unchanged = sum(part[1] for part in parts) == 0  # labels changed on every rank
        stop, _ = stopping_rule(iteration, unchanged, shift, tol, 0)
        seconds.append(time.perf_counter() - start)  # the whole iteration, on this rank
        if stop:
            break
    return (centers, iteration + 1, overheads, seconds) if rank == 0 else None


def run(client, X, W, centers, x_mean, *, device, assign, update, max_iter, tol, resident):
    """The collective loop over persisted dask array ``X`` (weights ``W``, persisted in
    X's row blocks, or None) from ``centers`` (centred).

    Returns ``(centers, n_iter, overheads, seconds)``: the final centred centres, the
    iterations, each iteration's share of wall time not spent in the busiest rank's own
    work, and each iteration's wall time on rank 0 (its step, the exchange, relocation and
    the new centres).
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
            gather_future = client.submit(AllGather, len(workers), actor=True,
                                          workers=[workers[0]],
                                          key=f"gpumine-allgather-{uuid.uuid4().hex}")
            gather = gather_future.result()
            tasks = [client.submit(_loop, gather, rank, [order[i] for i in by_worker[w]],
                                   [worder[i] for i in by_worker[w]],
                                   [offsets[i] for i in by_worker[w]], centers, x_mean, device,
                                   assign, update, max_iter, tol, resident,
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
            return client.gather(tasks)[0]
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


def _break(gather, reason: str) -> None:
    """Fail every waiting and later exchange of ``gather`` (its worker may be gone too)."""
    try:
        gather.fail(reason).result(timeout=_BREAK_SECONDS)
    except Exception:  # the actor's worker was the one lost: its callers fail by themselves
        pass
