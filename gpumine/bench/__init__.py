"""Benchmarks (``gpumine.bench``): the seed papers' experiments and the regression gate.

* :mod:`gpumine.bench.experiments` -- ``gpumine bench EXPERIMENT``: CSV, JSON, PNG.
* :mod:`gpumine.bench.gate` -- ratios measured in one run against a committed baseline.
* :mod:`gpumine.bench.timing` -- warm-up, CUDA events, medians, measured floors.
* :mod:`gpumine.bench.peers` -- PyTorch / flash-kmeans / fastkmeans beside gpumine.
"""

from gpumine.bench.experiments import EXPERIMENTS, Run, report_experiment, run_experiment

__all__ = ["EXPERIMENTS", "Run", "report_experiment", "run_experiment"]
