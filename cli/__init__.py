"""The ``gpumine`` command line (``gpumine.cli``); see :mod:`gpumine.cli.app`."""

from gpumine.cli.app import app, main

__all__ = ["app", "main"]
