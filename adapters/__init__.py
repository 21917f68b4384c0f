"""Adapters between gpumine and pandas / Arrow / Parquet (``gpumine.adapters``).

For now the estimators take anything scikit-learn's ``validate_data`` accepts
(NumPy arrays, pandas DataFrames with their feature names, array-likes). The
column-wise conversion entry point (pandas/Arrow columns straight into a
column-major device buffer), Parquet streaming and the result writers are the
adapters issue's work and land here.
"""

__all__: list[str] = []
