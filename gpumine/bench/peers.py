"""Peer k-means implementations measured beside gpumine, and the FP64 label reference.

A peer is used only when it imports; otherwise :func:`peer_steps` reports why it
was skipped. Every peer runs one Lloyd iteration from the same centres as
gpumine, on the same data, so per-iteration times and label agreement compare.
"""

from __future__ import annotations

import importlib

import numpy as np

from gpumine.exceptions import MissingDependency

__all__ = ["fp64_labels", "gpumine_step", "peer_steps", "peer_versions", "torch_step"]


def gpumine_step(backend, X, centers, assign, update):
    """One iteration of gpumine's Lloyd loop (assign, update, average); returns (step, labels)."""
    from gpumine.kmeans.lloyd import bind_update, lloyd_step

    xp = backend.xp
    labels = xp.empty(X.shape[0], dtype=xp.int32)
    weight = xp.ones(X.shape[0], dtype=X.dtype)
    sums, weights = xp.empty(centers.shape, dtype=xp.float64), xp.empty(centers.shape[0])
    update = bind_update(update, X, weight)

    def step():
        return lloyd_step(X, weight, centers, labels, sums, weights, assign=assign,
                          update=update, relocate=False, xp=xp)[0]

    return step, labels


def torch_step(torch, X_rows, centers):
    """A plain PyTorch Lloyd iteration: GEMM distances, argmin, ``index_add_`` sums."""
    k, d = centers.shape
    c = centers.clone()

    def step():
        dist = (c * c).sum(1)[None, :] - 2.0 * (X_rows @ c.T)
        labels = dist.argmin(1)
        sums = torch.zeros((k, d), device=X_rows.device, dtype=X_rows.dtype)
        sums.index_add_(0, labels, X_rows)
        counts = torch.bincount(labels, minlength=k).clamp_min(1).to(X_rows.dtype)
        step.labels = labels
        return sums / counts[:, None]

    return step


def fp64_labels(xp, X, centers):
    """Labels of the closest centre computed in float64 (the reference the shares use)."""
    X64, C64 = X.astype(xp.float64), centers.astype(xp.float64)
    out = xp.empty(X.shape[0], dtype=xp.int32)
    rows = max(1, (1 << 24) // C64.shape[0])
    norms = (C64 * C64).sum(1)[None, :]
    for start in range(0, X.shape[0], rows):
        block = X64[start:start + rows]
        out[start:start + rows] = (norms - 2 * block @ C64.T).argmin(1)
    return out


def _flash_kmeans_step(module, X_rows, centers):
    """flash-kmeans: its batched Lloyd on one iteration from the given centres."""
    fit = getattr(module, "batch_kmeans_Euclid", None)
    if fit is None:
        raise MissingDependency("flash_kmeans has no batch_kmeans_Euclid")

    def step():
        labels, _, _ = fit(X_rows[None], centers.shape[0], max_iters=1, tol=-1.0,
                           init_centroids=centers[None])
        step.labels = labels[0]

    return step


def _fastkmeans_step(module, X_rows, centers):
    """fastkmeans: FastKMeans.fit for one iteration, labels by its predict."""
    model_class = getattr(module, "FastKMeans", None)
    if model_class is None:
        raise MissingDependency("fastkmeans has no FastKMeans")
    host = X_rows.cpu().numpy()
    k = centers.shape[0]

    def step():
        model = model_class(d=host.shape[1], k=k, niter=1, tol=-1, gpu=X_rows.is_cuda,
                            seed=0, max_points_per_centroid=None)
        model.fit(host)
        step.labels = model.predict(host)

    return step


def peer_versions() -> dict:
    """The GPU peers' versions for a record (``torch``, ``flash_kmeans``), or why not."""
    try:
        torch = importlib.import_module("torch")
        flash_kmeans = importlib.import_module("flash_kmeans")
    except ImportError as exc:
        return {"peer_import_error": str(exc)}
    return {"torch": torch.__version__,
            "flash_kmeans": getattr(flash_kmeans, "__version__", "unknown")}


def peer_steps(X_host, centers_host, device: str) -> tuple[dict, dict]:
    """``({name: step}, {name: reason skipped})`` for PyTorch, flash-kmeans and fastkmeans.

    Each step runs one Lloyd iteration and leaves its labels in ``step.labels``.
    """
    steps, skipped = {}, {}
    try:
        torch = importlib.import_module("torch")
        if device == "cuda" and not torch.cuda.is_available():
            raise MissingDependency("torch has no CUDA device")
    except ImportError as exc:
        return {}, {name: f"torch not usable: {exc}" for name in
                    ("torch", "flash-kmeans", "fastkmeans")}
    X_rows = torch.as_tensor(np.ascontiguousarray(X_host), device=device)
    centers = torch.as_tensor(np.ascontiguousarray(centers_host), device=device)
    steps["torch"] = torch_step(torch, X_rows, centers)
    for name, module_name, make in (("flash-kmeans", "flash_kmeans", _flash_kmeans_step),
                                    ("fastkmeans", "fastkmeans", _fastkmeans_step)):
        if name == "flash-kmeans" and device != "cuda":  # its Triton kernels need CUDA tensors
            skipped[name] = f"flash-kmeans runs on CUDA only, not on {device!r}"
            continue
        try:
            steps[name] = make(importlib.import_module(module_name), X_rows, centers)
        except ImportError as exc:
            skipped[name] = f"{module_name} not importable: {exc}"
    return steps, skipped
