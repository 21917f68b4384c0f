"""Lloyd's loop on several GPUs of one process: ``GPUKMeans(device="gpu:all")`` or a list of
GPU ids.

The fit itself is the in-memory one (:func:`gpumine.kmeans.lloyd.fit_lloyd`): X is validated
onto the first GPU, centred there, and the init (k-means++, random, ...) runs there on all
of X, so a seed draws the same initial centres as on one GPU. Each Lloyd run is then this
module's: the centred rows are split into contiguous shares, one per GPU (copied once per
fit from the first GPU, peer to peer), and every iteration

1. each GPU assigns its share against its copy of the centres and adds its share's weighted
   sums, weights and changed-label count (the same assign and update kernels, the same
   float64 accumulators as one GPU), each on a stream of its own, queued without a sync;
2. NCCL sums the partial sums, weights and counts onto the first GPU (``ncclReduce``,
   grouped) -- GPU to GPU, no host round trip;
3. the first GPU averages them, with the centre shift and the empty and changed counts
   (:func:`gpumine.kmeans.gpu.finish_centers`, as on one GPU), and NCCL broadcasts the new
   centres to the others;
4. the iteration's one readback: those three numbers (24 bytes) from the first GPU.

An empty cluster (rare) takes the one-GPU rule on the first GPU: the labels are gathered
there, :func:`gpumine.kmeans.gpu.relocate_empty_clusters` moves the farthest points over
all of X, and the moved labels go back to their GPUs. The labels and the inertia of the
result are on the first GPU.

Against one GPU from the same initial centres, the labels and ``n_iter_`` are the same and
the centres equal to the float64 rounding of the summation order (the shares' partial sums
are added share by share). X must fit on the first GPU (with its own share); data larger
than a GPU streams instead (``batch_rows``, a pyarrow dataset).

Examples
--------
>>> from gpumine import GPUKMeans  # doctest: +SKIP
>>> GPUKMeans(1024, device="gpu:all").fit(X)  # doctest: +SKIP
"""

from __future__ import annotations

import time

import numpy as np

from gpumine.backend import cupy_module, nccl_module
from gpumine.exceptions import InvalidParameterError
from gpumine.kmeans.lloyd import LloydResult, inertia, stopping_rule

__all__ = ["MultiGPULloyd", "share_bounds"]


def share_bounds(n_samples: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous row ranges of ``n_samples`` rows in ``parts`` shares, the first ones a row
    longer where they do not divide.

    Examples
    --------
    >>> share_bounds(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    base, extra = divmod(n_samples, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class _Share:
    """One GPU's rows (a column-major copy), weights, labels and loop buffers."""

    def __init__(self, device_id, X, sample_weight, start, stop, k, assign):
        from gpumine.kmeans import gpu

        cp = cupy_module()
        self.device_id, self.start, self.stop = device_id, start, stop
        n, d = stop - start, X.shape[1]
        source = cp.ascontiguousarray(X.T[:, start:stop])  # on the first GPU
        source_weight = sample_weight[start:stop]
        # sync: once a fit and GPU -- the share is made on the first GPU's current stream and
        # copied by a blocking memcpy
        cp.cuda.get_current_stream().synchronize()
        with cp.cuda.Device(device_id):
            self.stream = cp.cuda.Stream(non_blocking=True)
            if device_id == X.device.id:
                self.X_columns, self.weight = source, source_weight
            else:  # peer copies (through the host where the GPUs have no peer access)
                # sync: blocking copies, once a fit and GPU
                self.X_columns = cp.empty((d, n), dtype=X.dtype)
                self.X_columns.data.copy_from_device(source.data, source.nbytes)
                self.weight = cp.empty(n, dtype=sample_weight.dtype)
                self.weight.data.copy_from_device(source_weight.data, source_weight.nbytes)
            self.X = self.X_columns.T  # (n, d), column-major: what the kernels take
            self.labels = cp.full(n, -1, dtype=cp.int32)
            self.counts = getattr(assign, "counts_changes", False)
            self.labels_old = None if self.counts else self.labels.copy()
            self.sums = cp.zeros((k, d), dtype=cp.float64)
            self.weights = cp.zeros(k, dtype=cp.float64)
            self.centers = cp.empty((k, d), dtype=X.dtype)
            self.centers_new = cp.empty((k, d), dtype=X.dtype)
            self.buffers = gpu.LoopBuffers()
            # sync: once a fit and GPU -- the buffers above were made on the device's default
            # stream; the loop runs on its own non-blocking one
            cp.cuda.Device(device_id).synchronize()
        del source


class MultiGPULloyd:
    """:func:`gpumine.kmeans.lloyd.lloyd_single` over several GPUs (module docstring): pass
    it as ``fit_lloyd(..., single=MultiGPULloyd(ids, update))``.

    Parameters
    ----------
    device_ids : list of int
        The GPUs, the first one holding X.
    update : callable
        The update strategy, unbound (each share binds its own, where it binds).

    Attributes
    ----------
    iteration_seconds : list of float
        The last run's wall time of each iteration (its queueing, the exchange and the
        readback, which waits for every GPU's work).
    """

    def __init__(self, device_ids, update):
        self.device_ids = list(device_ids)
        self.update = update
        self.iteration_seconds: list = []
        self._shares = None
        self._comm = None

    def _prepare(self, X, sample_weight, k, assign):
        if self._shares is not None:  # a later run of n_init: the same shares
            return self._shares
        nccl = nccl_module()
        if X.device.id != self.device_ids[0]:
            raise InvalidParameterError(
                f"X is on GPU {X.device.id}, the first of device={self.device_ids} must hold it")
        bounds = share_bounds(X.shape[0], len(self.device_ids))
        self._shares = [_Share(i, X, sample_weight, start, stop, k, assign)
                        for i, (start, stop) in zip(self.device_ids, bounds, strict=True)]
        # CuPy 14: one communicator per GPU, in the ids' order (rank i: device_ids[i])
        self._comm = nccl.NcclCommunicator.initAll(self.device_ids)
        return self._shares

    def __call__(self, X, sample_weight, centers_init, *, assign, update, max_iter, tol,
                 verbose=0, xp=None) -> LloydResult:
        """One run from ``centers_init`` (centred, on the first GPU); ``update`` (bound to
        all of X by the caller) is not used: each share runs its own."""
        from gpumine.kmeans import gpu

        nccl = nccl_module()
        cp = cupy_module()
        k, d = centers_init.shape
        shares = self._prepare(X, sample_weight, k, assign)
        first = shares[0]
        kinds = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64}
        center_kind = kinds[np.dtype(centers_init.dtype)]
        # sync: once a run -- the initial centres are made on the first GPU's current stream
        cp.cuda.get_current_stream().synchronize()
        steps = []
        for share in shares:
            with cp.cuda.Device(share.device_id):
                # sync: a blocking copy of k x d numbers, once a run and GPU
                share.centers_new.data.copy_from_device(centers_init.data, centers_init.nbytes)
                with share.stream:
                    share.labels.fill(-1)
                    if share.labels_old is not None:
                        share.labels_old.fill(-1)
                    share.buffers.changed.fill(0)
                assign_share = assign.bind(share.X) if hasattr(assign, "bind") else assign
                update_share = (self.update.bind(share.X, share.weight)
                                if hasattr(self.update, "bind") else self.update)
            steps.append((assign_share, update_share))
        self.iteration_seconds = []
        strict_convergence = False
        for iteration in range(max_iter):
            start = time.perf_counter()
            for share, (assign_share, update_share) in zip(shares, steps, strict=True):
                with cp.cuda.Device(share.device_id), share.stream:
                    share.centers[...] = share.centers_new
                    if share.counts:
                        assign_share(share.X, share.centers, share.labels,
                                     changed=share.buffers.changed)
                    else:
                        assign_share(share.X, share.centers, share.labels)
                    update_share(share.X, share.labels, share.weight, share.sums, share.weights)
                    if not share.counts:
                        share.buffers.changed[0] = cp.count_nonzero(
                            share.labels != share.labels_old)
                        share.labels_old[...] = share.labels
            self._reduce(shares, nccl)
            with cp.cuda.Device(first.device_id), first.stream:
                gpu.finish_centers(first.sums, first.weights, first.centers, first.centers_new,
                                   first.buffers)
            self._broadcast(shares, k * d, center_kind, nccl)
            with cp.cuda.Device(first.device_id), first.stream:
                # sync: the iteration's one readback (shift, empty, changed: 24 bytes)
                shift, n_empty, n_changed = first.buffers.read_status()
            if n_empty:
                shift = self._relocate(shares, X, sample_weight, n_empty, steps)
                self._broadcast(shares, k * d, center_kind, nccl)
            self.iteration_seconds.append(time.perf_counter() - start)
            if verbose:
                print(f"Iteration {iteration}: centre shift {shift}.")
            stop, strict_convergence = stopping_rule(iteration, n_changed == 0, shift, tol,
                                                     verbose)
            if stop:
                break
        if not strict_convergence:
            for share, (assign_share, _) in zip(shares, steps, strict=True):
                with cp.cuda.Device(share.device_id), share.stream:
                    assign_share(share.X, share.centers_new, share.labels)
        labels = self._gather_labels(shares, X.shape[0])
        with cp.cuda.Device(first.device_id):
            first.stream.synchronize()  # sync: the gathered labels, once a run
            centers = first.centers_new.copy()
            total = inertia(X, sample_weight, centers, labels, cp)
        return LloydResult(labels=labels, inertia=total, centers=centers, n_iter=iteration + 1,
                           iteration_seconds=list(self.iteration_seconds))

    def _reduce(self, shares, nccl):
        """Every share's sums, weights and changed count added onto the first GPU's."""
        nccl.groupStart()
        for comm, share in zip(self._comm, shares, strict=True):
            stream = share.stream.ptr
            for array, kind in ((share.sums, nccl.NCCL_FLOAT64),
                                (share.weights, nccl.NCCL_FLOAT64),
                                (share.buffers.changed, nccl.NCCL_UINT64)):
                comm.reduce(array.data.ptr, array.data.ptr, array.size, kind, nccl.NCCL_SUM,
                            0, stream)
        nccl.groupEnd()
        cp = cupy_module()
        for share in shares[1:]:  # their counts were added in: start the next from zero
            with cp.cuda.Device(share.device_id), share.stream:
                share.buffers.changed.fill(0)

    def _broadcast(self, shares, count, kind, nccl):
        """The first GPU's new centres to every other."""
        nccl.groupStart()
        for comm, share in zip(self._comm, shares, strict=True):
            comm.bcast(share.centers_new.data.ptr, count, kind, 0, share.stream.ptr)
        nccl.groupEnd()

    def _gather_labels(self, shares, n_samples):
        """Every share's labels in one array on the first GPU (queued on its stream)."""
        cp = cupy_module()
        first = shares[0]
        with cp.cuda.Device(first.device_id):
            labels = cp.empty(n_samples, dtype=cp.int32)
            for share in shares:
                with cp.cuda.Device(share.device_id):  # an event of the stream's own device
                    done = share.stream.record()
                first.stream.wait_event(done)
                part = labels[share.start:share.stop]
                part.data.copy_from_device_async(share.labels.data, share.labels.nbytes,
                                                 stream=first.stream)
        return labels

    def _relocate(self, shares, X, sample_weight, n_empty, steps) -> float:
        """The one-GPU relocation on the first GPU over all of X (module docstring); the
        moved labels back to their GPUs. Returns the new centre shift."""
        from gpumine.kmeans import gpu

        cp = cupy_module()
        first = shares[0]
        labels = self._gather_labels(shares, X.shape[0])
        with cp.cuda.Device(first.device_id), first.stream:
            gpu.relocate_empty_clusters(X, sample_weight, first.centers, first.sums,
                                        first.weights, labels, n_empty)
            gpu.finish_centers(first.sums, first.weights, first.centers, first.centers_new,
                               first.buffers, count=False)
            done = first.stream.record()
        for share, (assign_share, _) in zip(shares, steps, strict=True):
            with cp.cuda.Device(share.device_id), share.stream:
                share.stream.wait_event(done)
                part = labels[share.start:share.stop]
                share.labels.data.copy_from_device_async(part.data, part.nbytes,
                                                         stream=share.stream)
                if hasattr(assign_share, "reset"):  # labels moved outside the assignment
                    assign_share.reset()
        with cp.cuda.Device(first.device_id):
            first.stream.synchronize()  # sync: 8 bytes, rare (an empty cluster)
            return float(first.buffers.status[0])  # sync: none, after the stream's sync
