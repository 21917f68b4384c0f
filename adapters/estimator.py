"""What every gpumine estimator does the same way, whatever it clusters.

``GPUKMeans`` and ``WaveCluster`` derive from :class:`GpumineEstimator`: the ``device``
parameter and its backend, input validation through :mod:`gpumine.adapters` (one
dispatch per call: NumPy, pandas, Arrow, CuPy), results in the input's namespace, a
failed fit that leaves the estimator as it was, and the fitted test. The estimators
keep their own parameters, checks and engines.

It lives with the adapters because what it shares is their side of a fit: input in
through :func:`~gpumine.adapters.validate_input`, results out in the input's namespace.
It is not exported by :mod:`gpumine.adapters` (that would import scikit-learn with it).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from gpumine.adapters.columns import validate_input
from gpumine.backend import DEVICES, get_backend
from gpumine.exceptions import InvalidParameterError
from gpumine.validation import fit_or_restore, is_device_array

__all__ = ["GpumineEstimator"]


class GpumineEstimator(ClusterMixin, BaseEstimator):
    """Base of gpumine's estimators (not used directly).

    Subclasses set :attr:`_input_dtype` (what ``validate_input`` converts X to) and
    :attr:`_fitted_attribute` (set by a fit, and only by a fit), define ``_fit(X,
    sample_weight)`` and call :meth:`_checked_fit` from their documented ``fit``.
    """

    #: ``dtype`` of :func:`gpumine.adapters.validate_input`: one type, or a tuple kept as given.
    _input_dtype: object = np.float64
    #: The attribute whose presence means fitted.
    _fitted_attribute = ""

    def __sklearn_is_fitted__(self):
        return hasattr(self, self._fitted_attribute)

    def _check_device(self) -> None:
        if self.device not in DEVICES:
            raise InvalidParameterError(f"device must be one of {DEVICES}, got {self.device!r}")

    def _backend(self):
        """The backend to run on (``"auto"``: the GPU when one answers)."""
        return get_backend(self.device)

    def _validate(self, X, *, reset, backend, copy=False, before_copy=None):
        """X validated and on ``backend`` (column-major there), via :mod:`gpumine.adapters`:
        a :class:`gpumine.adapters.Columns` (``.X``, and ``.means`` when the device check
        computed them).

        ``before_copy(n_samples, n_features)`` runs once the shape is known and before
        any data moves, so that parameter errors come before a transfer.
        """
        return validate_input(self, X, reset=reset, backend=backend, dtype=self._input_dtype,
                              copy=copy, before_copy=before_copy)

    def _validate_X(self, X, *, reset, backend, copy=False, before_copy=None):
        """:meth:`_validate`'s array alone."""
        return self._validate(X, reset=reset, backend=backend, copy=copy,
                              before_copy=before_copy).X

    def _checked_fit(self, X, sample_weight):
        """``self._fit(X, sample_weight)``; on any error the estimator is put back as it was."""
        return fit_or_restore(self, self._fit, X, sample_weight)

    @staticmethod
    def _output(array, device_input):
        """Results in the input's namespace: CuPy in, CuPy out; anything else, NumPy."""
        if device_input or not is_device_array(array):
            return array
        # sync: host input asks for host results -- the one copy of a result, at the end
        return get_backend("gpu").to_host(array)

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit, then return the cluster of each training point (``labels_``).

        Parameters
        ----------
        X : array-like, pandas DataFrame, pyarrow Table or CuPy array of shape \
                (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            CuPy for CuPy input (on its device), NumPy otherwise.
        """
        return self.fit(X, sample_weight=sample_weight).labels_
