"""Datasets (``gpumine.datasets``): MT19937 synthetic data, the Corel features, point-file I/O.

Examples
--------
>>> from gpumine.datasets import make_uniform
>>> make_uniform(1000, 8, random_state=5489).shape
(1000, 8)
"""

from gpumine.datasets.arff import NOISE_LABEL, read_arff_points
from gpumine.datasets.corel import COREL_SUBSETS, load_corel
from gpumine.datasets.minebench import read_minebench_bin, write_minebench_bin
from gpumine.datasets.shape_sets import SHAPE_SETS, make_shape_sets
from gpumine.datasets.synthetic import DEFAULT_SEED, iter_uniform, make_shapes, make_uniform

__all__ = [
    "COREL_SUBSETS",
    "DEFAULT_SEED",
    "NOISE_LABEL",
    "SHAPE_SETS",
    "iter_uniform",
    "load_corel",
    "make_shape_sets",
    "make_shapes",
    "make_uniform",
    "read_arff_points",
    "read_minebench_bin",
    "write_minebench_bin",
]
