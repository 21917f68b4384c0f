"""Input checks shared by the estimators (at the edge: inner code assumes valid data)."""

from __future__ import annotations

import numbers

import numpy as np

from gpumine.exceptions import InvalidInputError

__all__ = ["check_sample_weight", "fit_or_restore"]


def check_sample_weight(sample_weight, n_samples: int, dtype) -> np.ndarray:
    """Validated per-sample weights: ones if None; finite, non-negative, positive sum.

    Raises
    ------
    InvalidInputError
        Non-numeric, wrong shape, NaN/inf, negative, or all zero; the message says which.
    """
    if sample_weight is None:
        return np.ones(n_samples, dtype=dtype)
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(n_samples, sample_weight, dtype=dtype)
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
    return sample_weight


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
