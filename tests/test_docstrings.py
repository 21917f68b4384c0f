"""Every docstring example in the package runs and shows what it claims."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gpumine
import gpumine.adapters
import gpumine.cli
import gpumine.datasets
import gpumine.kernels

# adapters/, cli/, datasets/ and kernels/ are mapped into gpumine from the top level,
# so each is walked from its own path
MODULES = sorted({info.name for package in (gpumine, gpumine.adapters, gpumine.cli,
                                            gpumine.datasets, gpumine.kernels)
                  for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")}
                 | {"gpumine", "gpumine.adapters", "gpumine.cli", "gpumine.datasets"})
# The operators import Airflow, whose import configures logging and makes a home folder:
# test_airflow.py runs their examples in a subprocess with a temporary AIRFLOW_HOME.
MODULES = [name for name in MODULES if not name.startswith("gpumine.airflow.operators")]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
