"""The tensor cores' FP32 accumulation against the model ``assign="tc-exact"``'s bound rests on.

:mod:`gpumine.kmeans.tensor_cores` bounds what the fused kernel's accumulation can move a
product of d features by a model: blocks of at most four products and the accumulator,
aligned to the largest and cut to float32's 24 bits, each moving the result by less than
``2**-23 (t + 2)`` of the magnitudes a block of t products carries; :func:`model_units`
counts those units over a product's instructions. :func:`probe` measures the device: chains
of the kernel's ``mma.sync`` m16n8k16 (FP16 inputs, FP32 accumulation) on random inputs and
on the model's worst case (every product after a large one just under the accumulator's last
bit, so that an alignment to 24 bits cuts them all), each output's error against the exact
sum in units of ``2**-23 T``, ``T`` the magnitudes the accumulation carries (``|C| + sum
|a_k b_k|``). A device whose errors exceed :func:`model_units` breaks the bound's premise;
the GPU tests hold the device they run on to it, and ``benchmarks/tc_accumulation_probe.py``
records it.

Examples
--------
>>> model_units(128), model_units(100), model_units(3)
(192, 156, 9)
"""

from __future__ import annotations

import numpy as np

from gpumine.backend import cupy_module
from gpumine.kernels import declares, get_kernel, launch

__all__ = ["families", "flushed_units", "model_units", "probe", "units"]

_SOURCE = "kmeans_assign_tc.cu"
_WARPS_PER_BLOCK = 8


def model_units(d: int) -> int:
    """The model's bound on what the accumulation of a product of ``d`` features (FP16
    products in m16n8k16 instructions) moves it, in units of ``2**-23`` of the magnitudes it
    carries: per instruction its products and two for each block that holds one (at most
    four blocks; a block of the padding's zeros and the accumulator alone moves nothing)."""
    full, rest = divmod(d, 16)
    return d + 8 * full + 2 * min(4, rest)


def flushed_units(d: int) -> float:
    """:func:`model_units` where each instruction's large products start from a zero
    accumulator and are then added in float32 (the fused split kernel past 64 features):
    an instruction moves its result by at most ``model_units(16)`` units of *its own*
    magnitudes, which add up to the product's, and each of the ``ceil(d / 16)`` float32
    additions (round to nearest) by half a unit of the magnitudes summed so far.

    Examples
    --------
    >>> flushed_units(128), flushed_units(100), model_units(128)
    (28.0, 27.5, 192)
    """
    return model_units(min(d, 16)) + 0.5 * -(-d // 16)


def _log_uniform(rng, shape, low, high):
    """Random signs, magnitudes ``2**u`` with ``u`` uniform in ``[low, high)``."""
    return np.exp2(rng.uniform(low, high, size=shape)) * rng.choice([-1, 1], size=shape)


def families(rng, problems: int, steps: int) -> dict:
    """``{name: (A, B, C)}``: FP16 operands ``A`` (problems, steps, 16, 16) and ``B``
    (problems, steps, 16, 8), float32 accumulators ``C`` (problems, 16, 8), one family each:
    normal and log-uniform inputs (C zero or not); ``tiny_after_large_same``: an accumulator of
    1 to 2 and every product just under its last bit, all of them cut by an alignment to 24
    bits (``_alt``: alternate signs, cancelling in pairs); ``large_then_tiny_c0``: the large
    product inside the first instruction, the tiny ones after it; ``cancel``: two large
    opposite products and small random ones."""
    a_shape, b_shape, c_shape = (problems, steps, 16, 16), (problems, steps, 16, 8), \
        (problems, 16, 8)
    zero = np.zeros(c_shape, np.float32)
    out = {}
    A = rng.normal(size=a_shape).astype(np.float16)
    B = rng.normal(size=b_shape).astype(np.float16)
    out["normal_c0"] = (A, B, zero)
    out["normal_c"] = (A, B, (rng.normal(size=c_shape) * 8).astype(np.float32))
    A = _log_uniform(rng, a_shape, -12, 4).astype(np.float16)
    B = _log_uniform(rng, b_shape, -12, 4).astype(np.float16)
    out["logu_c0"] = (A, B, zero)
    out["logu_c"] = (A, B, _log_uniform(rng, c_shape, -8, 8).astype(np.float32))
    under = (1 - 2.0**-11) * 2.0**-11  # times B's 2**-12: just under 2**-23
    for name, sign in (("tiny_after_large_same", 1.0), ("tiny_after_large_alt", -1.0)):
        signs = np.where(np.arange(16 * steps) % 2 == 0, 1.0, sign).reshape(steps, 16)
        A = np.broadcast_to(under * signs[None, :, None, :], a_shape).astype(np.float16)
        B = np.full(b_shape, 2.0**-12, np.float16)
        C = rng.choice([1.0, 1.5, 1.75, 1.999], size=c_shape).astype(np.float32)
        out[name] = (A, B, C)
    A = np.full(a_shape, under, np.float16)
    B = np.full(b_shape, 2.0**-12, np.float16)
    A[:, 0, :, 0], B[:, 0, 0, :] = 1.0, 1.0
    out["large_then_tiny_c0"] = (A, B, zero)
    A = _log_uniform(rng, a_shape, -14, -2).astype(np.float16)
    B = _log_uniform(rng, b_shape, -14, -2).astype(np.float16)
    A[:, 0, :, 0], A[:, 0, :, 1], B[:, 0, 0, :], B[:, 0, 1, :] = 1.0, -1.0, 1.0, 1.0
    out["cancel"] = (A, B, zero)
    return out


@declares(_SOURCE, "mma_accumulation_probe")
def units(A, B, C) -> np.ndarray:
    """Each output's error of ``D = C + sum_s A_s B_s`` by the device's ``mma.sync`` (a warp
    a problem, the steps in order), against the exact sum, in units of ``2**-23 T``.

    Parameters
    ----------
    A : numpy.ndarray of float16, (problems, steps, 16, 16)
    B : numpy.ndarray of float16, (problems, steps, 16, 8)
    C : numpy.ndarray of float32, (problems, 16, 8)

    Returns
    -------
    numpy.ndarray of float64, (problems, 16, 8)
    """
    cp = cupy_module()
    problems, steps = A.shape[:2]
    D = cp.full((problems, 16, 8), np.nan, dtype=cp.float32)
    launch(get_kernel(_SOURCE, "mma_accumulation_probe"),
           -(-problems // _WARPS_PER_BLOCK), 32 * _WARPS_PER_BLOCK,
           (cp.asarray(np.ascontiguousarray(A).view(np.uint16)),
            cp.asarray(np.ascontiguousarray(B).view(np.uint16)),
            cp.asarray(np.ascontiguousarray(C, dtype=np.float32)), np.int32(steps),
            np.int32(problems), D))
    got = cp.asnumpy(D).astype(np.float64)  # sync: the probe's outputs, once a call
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    # exact in float64: products of FP16 numbers (22 bits), the families' sums spanning fewer
    # than 53 bits
    exact = C.astype(np.float64) + np.einsum("psik,pskn->pin", A64, B64)
    T = np.abs(C.astype(np.float64)) + np.einsum("psik,pskn->pin", np.abs(A64), np.abs(B64))
    return np.where(T > 0, np.abs(got - exact) / (2.0**-23 * np.where(T > 0, T, 1.0)), 0.0)


def probe(problems: int = 4096, steps=(1, 2, 8), seed: int = 5489) -> dict:
    """Per chain of ``16 s`` products (``s`` in ``steps``): each family's error (:func:`units`:
    max, 99.99th percentile, median) and the model's allowance (:func:`model_units`).

    Returns
    -------
    dict
        ``{"K=16": {"allowance": 24, "families": {name: {"max": ..., ...}}}, ...}``
    """
    rng = np.random.default_rng(seed)
    out = {}
    for s in steps:
        found = {}
        for name, (A, B, C) in families(rng, problems, s).items():
            ratio = units(A, B, C)  # host values
            stats = np.array([ratio.max(), np.quantile(ratio, 0.9999), np.median(ratio)])
            found[name] = dict(zip(("max", "p99.99", "median"), stats.tolist(), strict=True))
        out[f"K={16 * s}"] = {"allowance": model_units(16 * s), "families": found}
    return out
