"""Device names that ask for several GPUs (``"gpu:all"``, a list of GPU ids): their form and
their ids, checked without scikit-learn or CuPy (the command line starts without them);
:mod:`gpumine.backend` makes the devices themselves."""

from __future__ import annotations

import numpy as np

from gpumine.exceptions import InvalidParameterError

__all__ = ["is_several_gpus", "resolve_gpu_ids"]


def is_several_gpus(device) -> bool:
    """Whether ``device`` asks for several GPUs: ``"gpu:all"`` or a list of GPU ids (its
    form checked here, before any GPU is asked for). Here, not with the several-GPU loop
    (:mod:`gpumine.kmeans.multi_gpu`), so that the command line and the Airflow operator
    check a device without importing scikit-learn or CuPy.

    Examples
    --------
    >>> is_several_gpus("gpu"), is_several_gpus("gpu:all"), is_several_gpus([1, 0])
    (False, True, True)
    """
    if isinstance(device, str):
        return device == "gpu:all"
    if not isinstance(device, (list, tuple)):
        return False
    if not device:
        raise InvalidParameterError("device as a list must name at least one GPU id")
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0
               for i in device):
        raise InvalidParameterError(
            f"device as a list must hold GPU ids (integers >= 0), got {device!r}")
    if len(set(device)) != len(device):
        raise InvalidParameterError(f"device lists a GPU twice: {device!r}")
    return True


def resolve_gpu_ids(device, count: int | None = None) -> list[int]:
    """The GPU ids of a several-GPU ``device`` (:func:`is_several_gpus`), checked against the
    ``count`` visible GPUs (asked of CUDA when None).

    Examples
    --------
    >>> resolve_gpu_ids("gpu:all", count=2), resolve_gpu_ids([1, 0], count=2)
    ([0, 1], [1, 0])
    """
    if not is_several_gpus(device):
        raise InvalidParameterError(f"device={device!r} names one device, not several GPUs")
    if count is None:
        count = _gpu_count()
    if device == "gpu:all":
        if count < 1:
            raise InvalidParameterError('device="gpu:all": no CUDA GPU is visible')
        return list(range(count))
    missing = [i for i in device if i >= count]
    if missing:
        raise InvalidParameterError(
            f"device={device!r}: GPU {missing[0]} does not exist ({count} visible)")
    return [int(i) for i in device]


def _gpu_count() -> int:
    from gpumine.backend import cupy_module, gpu_available

    if not gpu_available():
        return 0
    return int(cupy_module().cuda.runtime.getDeviceCount())
