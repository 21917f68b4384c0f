"""The tensor cores' FP16 ``mma.sync`` m16n8k16 (FP32 accumulation) against exact sums (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_accumulation_probe.py --out benchmarks/results [--tag h100]

``assign="tc-exact"``'s bound (:mod:`gpumine.kmeans.tensor_cores`) models the fused kernel's
FP32 accumulation as blocks of at most four products and the accumulator cut to 24 bits:
at most ``2**-23 (t + 2)`` of the magnitudes a block of t products carries, 24 of them an
instruction of 16. This probe measures the error of chains of 1, 2 and 8 instructions (16,
32 and 128 products, as the kernel's d) against the exact sum (float64), in units of
``2**-23 T``, ``T = |C| + sum |a_k b_k|``, on 4,096 warps' problems of each family: normal
and log-uniform inputs (C zero or not), the model's worst case (every product after a
large one just under the accumulator's last bit: ``tiny_after_large_*``,
``large_then_tiny_c0``) and cancellation; with the allowance of each model. Writes
``tc-accumulation-probe[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

SRC = r'''
extern "C" __global__ void probe(const unsigned short* __restrict__ A,  // IN  (P, S, 16, 16) row
                                 const unsigned short* __restrict__ B,  // IN  (P, S, 16, 8) k x n
                                 const float* __restrict__ C,           // IN  (P, 16, 8)
                                 int steps, int problems,               // IN  S, P
                                 float* __restrict__ D)                 // OUT (P, 16, 8)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (warp >= problems) return;
    const float* c = C + (size_t)warp * 128;
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1],
                    c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    for (int s = 0; s < steps; ++s) {
        const unsigned short* a = A + ((size_t)warp * steps + s) * 256;
        const unsigned short* b = B + ((size_t)warp * steps + s) * 128;
        unsigned ra[4], rb[2];
        auto pack = [](unsigned short lo, unsigned short hi) {
            return (unsigned)lo | ((unsigned)hi << 16);
        };
        ra[0] = pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]);
        ra[1] = pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]);
        ra[2] = pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]);
        ra[3] = pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]);
        rb[0] = pack(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
        rb[1] = pack(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
    }
    float* d = D + (size_t)warp * 128;
    d[g * 8 + 2 * t] = acc[0]; d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2]; d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
'''


def run(cp, kernel, A, B, C):
    """The error of ``D = C + sum_s A_s B_s`` by the tensor cores (a warp a problem), per
    output, in units of ``2**-23 T``."""
    P, S = A.shape[:2]
    D = cp.full((P, 16, 8), np.nan, dtype=cp.float32)
    kernel(((P * 32 + 255) // 256,), (256,),
           (cp.asarray(A.view(np.uint16)), cp.asarray(B.view(np.uint16)), cp.asarray(C),
            np.int32(S), np.int32(P), D))
    D = cp.asnumpy(D).astype(np.float64)  # sync: the probe's results, once a family
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    exact = C.astype(np.float64) + np.einsum("psik,pskn->pin", A64, B64)
    T = np.abs(C).astype(np.float64) + np.einsum("psik,pskn->pin", np.abs(A64), np.abs(B64))
    err = np.abs(D - exact)
    ratio = np.where(T > 0, err / (2.0 ** -23 * np.maximum(T, 1e-300)), 0.0)
    return ratio


def _log_uniform(rng, shape, low, high):
    """Random signs, magnitudes 2**u with u uniform in [low, high)."""
    return np.exp2(rng.uniform(low, high, size=shape)) * rng.choice([-1, 1], size=shape)


def _families(rng, problems, steps) -> dict:
    """``{name: (A, B, C)}``: each family's FP16 operands and float32 accumulators."""
    P, K = problems, 16 * steps
    a_shape, b_shape, c_shape = (P, steps, 16, 16), (P, steps, 16, 8), (P, 16, 8)
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
    # an accumulator of 1 to 2, every product just under its last bit: all of them cut by an
    # alignment to 24 bits (same signs), or cancelling in pairs (alternate signs)
    under = (1 - 2.0**-11) * 2.0**-11  # times 2**-12: just under 2**-23
    for name, sign in (("tiny_after_large_same", 1.0), ("tiny_after_large_alt", -1.0)):
        signs = np.where(np.arange(K) % 2 == 0, 1.0, sign).reshape(steps, 16)
        A = np.broadcast_to(under * signs[None, :, None, :], a_shape).astype(np.float16)
        B = np.full(b_shape, 2.0**-12, np.float16)
        C = rng.choice([1.0, 1.5, 1.75, 1.999], size=c_shape).astype(np.float32)
        out[name] = (A, B, C)
    # the large product inside the first instruction (the accumulator 0), tiny ones after it
    A = np.full(a_shape, under, np.float16)
    B = np.full(b_shape, 2.0**-12, np.float16)
    A[:, 0, :, 0], B[:, 0, 0, :] = 1.0, 1.0
    out["large_then_tiny_c0"] = (A, B, zero)
    # two large opposite products and small random ones
    A = _log_uniform(rng, a_shape, -14, -2).astype(np.float16)
    B = _log_uniform(rng, b_shape, -14, -2).astype(np.float16)
    A[:, 0, :, 0], A[:, 0, :, 1], B[:, 0, 0, :], B[:, 0, 1, :] = 1.0, -1.0, 1.0, 1.0
    out["cancel"] = (A, B, zero)
    return out


def probe(cp, problems=4096) -> dict:
    """Per chain length (16, 32, 128 products), each family's error in units of 2**-23 T
    (max, 99.99th percentile, median) and each model's allowance."""
    kernel = cp.RawKernel(SRC, "probe")
    rng = np.random.default_rng(5489)
    out = {}
    for steps in (1, 2, 8):
        K = 16 * steps
        results = {}
        for name, (A, B, C) in _families(rng, problems, steps).items():
            ratio = run(cp, kernel, A, B, C)
            results[name] = {"max": float(ratio.max()),
                             "p99.99": float(np.quantile(ratio, 0.9999)),
                             "median": float(np.median(ratio))}
        out[f"K={K}"] = {"results": results, "allowance_units_2^-23_T": {
            "chain of d additions of 2^-21 (before 2026-11-28)": 4 * K,
            "blocks of 4 products (the bound since 2026-11-28)": K + 8 * steps,
            "blocks of 16 products": K + 2 * steps}}
        print(K, json.dumps(out[f"K={K}"]), flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.record import context, write_record

    backend = get_backend("gpu")
    record = {**context(backend), "problems_per_family": 4096, "chains": probe(backend.xp)}
    path = write_record(args.out, "tc-accumulation-probe" + (f"-{args.tag}" if args.tag else ""),
                        record)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
