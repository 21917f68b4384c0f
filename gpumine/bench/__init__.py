"""Benchmarks (``gpumine.bench``): the seed papers' experiments and the regression gate.

* :mod:`gpumine.bench.experiments` -- ``gpumine bench EXPERIMENT``: CSV, JSON, PNG; one
  module per seed paper (``synchronization``: 004, ``irregular_reduction``: 000 and 002,
  ``wavelet``: 003) and ``peer_libraries``.
* :mod:`gpumine.bench.gate` -- ratios measured in one run against a shipped baseline.
* :mod:`gpumine.bench.timing` -- the one clock: warm-up, CUDA events, medians, floors.
* :mod:`gpumine.bench.record` -- records: CSV rows, JSON context, the commit measured.
* :mod:`gpumine.bench.peers` -- PyTorch / flash-kmeans / fastkmeans beside gpumine.

Nothing is imported here: ``import gpumine.bench.experiments`` for the experiments.
"""
