"""Input checks shared by the estimators (at the edge: inner code assumes valid data)."""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils import check_array

from gpumine.exceptions import InvalidInputError

__all__ = ["check_init_array", "check_sample_weight", "fit_or_restore", "is_device_array"]


def check_init_array(init, dtype):
    """Initial centres as a checked (2-d, numeric, finite) C-ordered copy in ``dtype``.

    A CuPy array stays on its device (checked there, one flag read back); anything else
    goes through scikit-learn's ``check_array``.

    Raises
    ------
    InvalidInputError
        Not a non-empty 2-d numeric array, or NaN/inf; the message says which.
    """
    device = is_device_array(init)
    if (isinstance(init, np.ndarray) or device) and (
            init.ndim == 2 and init.size and init.dtype.kind in "fiu"):
        # a plain 2-d numeric array: scikit-learn's checks without their per-call
        # dispatch (about 0.1 ms, a tenth of a small device fit)
        if device:
            from gpumine.backend import cupy_module

            xp = cupy_module()
        else:
            xp = np
        centers = xp.array(init, dtype=dtype, order="C", copy=True)
        if not bool(xp.isfinite(centers).all()):  # sync (device centres): one flag, per fit
            raise InvalidInputError("init array: Input contains NaN or infinity.")
        return centers
    if device:
        raise InvalidInputError(f"init array: expected a non-empty 2-d numeric array, got "
                                f"shape {init.shape} of {init.dtype}")
    try:
        return check_array(init, dtype=dtype, copy=True, order="C")
    except ValueError as exc:
        raise InvalidInputError(f"init array: {exc}") from exc


def check_sample_weight(sample_weight, n_samples: int, dtype, xp=np):
    """Validated per-sample weights on ``xp``: ones if None; finite, non-negative, positive sum.

    ``None`` becomes ones made on ``xp`` itself (on the GPU: no host array of n
    elements); a CuPy array is checked on the device with one small readback; other
    input is checked on the host and then placed on ``xp``.

    Raises
    ------
    InvalidInputError
        Non-numeric, wrong shape, NaN/inf, negative, or all zero; the message says which.
    """
    if sample_weight is None:
        return xp.ones(n_samples, dtype=dtype)
    if is_device_array(sample_weight):
        return _check_device_weight(sample_weight, n_samples, dtype, xp)
    if isinstance(sample_weight, numbers.Number):
        check_sample_weight(np.full(1, sample_weight, dtype=dtype), 1, dtype)  # the value alone
        return xp.full(n_samples, sample_weight, dtype=dtype)
    try:
        sample_weight = np.asarray(sample_weight, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"sample_weight must be numeric: {exc}") from exc
    if sample_weight.shape != (n_samples,):
        raise InvalidInputError(f"sample_weight must have shape ({n_samples},) to match X, "
                                f"got {sample_weight.shape}")
    if not np.all(np.isfinite(sample_weight)):
        raise InvalidInputError("sample_weight contains NaN or infinity")
    if np.any(sample_weight < 0):
        raise InvalidInputError("sample_weight must be non-negative; "
                                f"found {int(np.sum(sample_weight < 0))} negative values")
    if not sample_weight.sum() > 0:
        raise InvalidInputError("sample_weight sums to zero; at least one weight must be > 0")
    return sample_weight if xp is np else xp.asarray(sample_weight)


def _check_device_weight(sample_weight, n_samples, dtype, xp):
    if sample_weight.shape != (n_samples,):
        raise InvalidInputError(f"sample_weight must have shape ({n_samples},) to match X, "
                                f"got {sample_weight.shape}")
    if sample_weight.dtype.kind not in "biuf":
        raise InvalidInputError(f"sample_weight must be numeric, got dtype {sample_weight.dtype}")
    if xp is np:
        return check_sample_weight(sample_weight.get(), n_samples, dtype)
    weight = sample_weight.astype(dtype, copy=False)
    # sync: 24 bytes, once per fit -- all finite? how many negative? the sum.
    finite, negative, total = xp.stack([
        xp.isfinite(weight).all().astype(xp.float64), (weight < 0).sum().astype(xp.float64),
        weight.sum(dtype=xp.float64)]).get().tolist()
    if not finite:
        raise InvalidInputError("sample_weight contains NaN or infinity")
    if negative:
        raise InvalidInputError(f"sample_weight must be non-negative; found {int(negative)} "
                                "negative values")
    if not total > 0:
        raise InvalidInputError("sample_weight sums to zero; at least one weight must be > 0")
    return weight


def is_device_array(data) -> bool:
    """True for a CuPy array (any array exposing CUDA memory with a ``.get()``)."""
    return (type(data).__module__.startswith("cupy")
            and hasattr(data, "__cuda_array_interface__"))


def fit_or_restore(estimator, fit, *args):
    """Run ``fit(*args)``; if it raises, put the estimator back as it was before the call.

    scikit-learn's validation sets ``n_features_in_`` before it can fail, so without this a
    failed fit would leave a half-fitted estimator (or mix a previous fit with new metadata).
    """
    previous_state = dict(estimator.__dict__)
    try:
        return fit(*args)
    except BaseException:
        estimator.__dict__.clear()
        estimator.__dict__.update(previous_state)
        raise
