"""The tensor cores' FP16 ``mma.sync`` m16n8k16 (FP32 accumulation) against exact sums (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_accumulation_probe.py --out benchmarks/results [--tag h100]

``assign="tc-exact"``'s bound (:mod:`gpumine.kmeans.tensor_cores`) models the fused kernel's
FP32 accumulation as blocks of at most four products and the accumulator cut to 24 bits:
at most ``2**-23 (t + 2)`` of the magnitudes a block of t products carries, 24 of them an
instruction of 16. :func:`gpumine.kmeans.accumulation.probe` measures the error of chains of
1, 2 and 8 instructions (16, 32 and 128 products, as the kernel's d) against the exact sum
(float64), in units of ``2**-23 T``, ``T = |C| + sum |a_k b_k|``, on 4,096 warps' problems
of each family: normal and log-uniform inputs (C zero or not), the model's worst case
(every product after a large one just under the accumulator's last bit:
``tiny_after_large_*``, ``large_then_tiny_c0``) and cancellation; with the model's
allowance. (The record at c498dff also gave the allowances of the chain model before
2026-11-28, 4 units a product, and of blocks of 16 products.) Writes
``tc-accumulation-probe[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    from fit_timing import save  # the script's folder is on sys.path

    from gpumine.backend import get_backend
    from gpumine.bench.record import context
    from gpumine.kmeans.accumulation import probe

    backend = get_backend("gpu")
    chains = probe(problems=4096)
    for chain, found in chains.items():
        print(chain, json.dumps(found), flush=True)
    record = {**context(backend), "problems_per_family": 4096, "chains": chains}
    save(args.out, "tc-accumulation-probe" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
