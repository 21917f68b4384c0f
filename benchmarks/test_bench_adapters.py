"""DataFrame / Arrow / Parquet to the backend: the adapters' one copy per column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpumine.adapters import as_columns, read_columns
from gpumine.bench.timing import SUITE_SCALE as SCALE
from gpumine.datasets import make_uniform

N, D = 100_000 * SCALE, 8


@pytest.fixture(scope="module")
def host():
    return make_uniform(N, D, random_state=5489)


@pytest.mark.parametrize("kind", ["numpy", "pandas", "arrow"])
def test_to_backend(run_timed, backend, host, kind):
    data = {"numpy": host, "pandas": pd.DataFrame(host, columns=[f"x{j}" for j in range(D)]),
            "arrow": pa.table({f"x{j}": host[:, j] for j in range(D)})}[kind]
    cols = run_timed(backend, lambda: as_columns(data, backend=backend))
    np.testing.assert_array_equal(backend.to_host(cols.X), host)


def test_read_parquet(run_timed, backend, host, tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "x.parquet"
    pq.write_table(pa.table({f"x{j}": host[:, j] for j in range(D)}), path,
                   row_group_size=N // 4 or 1)
    cols = run_timed(backend, lambda: read_columns(path, backend=backend), rounds=3)
    np.testing.assert_array_equal(backend.to_host(cols.X), host)
