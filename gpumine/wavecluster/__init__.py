"""WaveCluster: the estimator, its engine, wavelets and labelling strategies."""

from gpumine.wavecluster.estimator import WaveCluster

__all__ = ["WaveCluster"]
