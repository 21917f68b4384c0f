"""Experiment output: a CSV that grows row by row (and resumes), a JSON of context, PNG plots.

Examples
--------
>>> import tempfile
>>> from gpumine.bench.record import Results
>>> out = tempfile.mkdtemp()
>>> results = Results(out, "demo", {"n": 10}, key=("k",))
>>> results.add({"k": 1, "seconds": 0.5})
>>> Results(out, "demo", {"n": 10}, key=("k",)).has({"k": 1})  # resumed from the CSV
True
"""

from __future__ import annotations

import csv
import datetime
import functools
import json
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

from gpumine.exceptions import DataFormatError, DataNotFoundError, MissingDependency

__all__ = ["Results", "commit", "context", "write_record"]


#: The source the package is built from: a change elsewhere (results, docs) is not "dirty".
_SOURCE = (":/gpumine", ":/adapters", ":/cli", ":/kernels", ":/datasets", ":/pyproject.toml")


def commit(checkout=".") -> str:
    """The commit a record names: ``GPUMINE_COMMIT`` when set, else the checkout's HEAD.

    ``checkout`` is the git working tree the measured code comes from (the current
    directory by default: benchmarks run from the repository root); ``-dirty`` is added
    when its source has uncommitted changes, ``"unknown"`` when it is no git checkout.
    ``GPUMINE_COMMIT`` is for copies of the tree whose git metadata is not the source's
    (the GPU machine receives such a copy).
    """
    return os.environ.get("GPUMINE_COMMIT") or _git_commit(str(Path(checkout).resolve()))


@functools.cache
def _git_commit(checkout: str) -> str:
    # Once per process and checkout: the code that runs is the code imported, whatever
    # is committed later.
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=checkout).stdout.strip()
        changes = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no",
                                  "--", *_SOURCE], capture_output=True, text=True, check=True,
                                 cwd=checkout).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changes.strip() else "")


def write_record(out, prefix: str, record: dict) -> Path:
    """Write ``record`` as ``<out>/<prefix>-<date>-<commit>.json`` (folder made); returns it.

    The commit in the name is ``record["commit"]``'s first 7 characters.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{prefix}-{datetime.date.today().isoformat()}-{record['commit'][:7]}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def context(backend) -> dict:
    """Device, versions and commit: what a result needs to be read later."""
    import sklearn

    import gpumine

    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": backend.device_name, "backend": backend.name,
            "host": platform.processor() or platform.machine(), "python":
            platform.python_version(), "numpy": np.__version__,
            "scikit-learn": sklearn.__version__, "gpumine": gpumine.__version__,
            "commit": commit()}
    if backend.is_gpu:
        cupy = backend.xp
        info.update(cupy=cupy.__version__, cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
                    cuda_driver=cupy.cuda.runtime.driverGetVersion())
    return info


class Results:
    """Rows of one experiment in ``DIR/<name>.csv``, context in ``DIR/<name>.json``.

    Rows already in the CSV (from an interrupted run with the same parameters) are
    kept; :meth:`has` tells the experiment which cells to skip, so a run resumes.
    """

    def __init__(self, out_dir, name: str, params: dict, key: tuple[str, ...]):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self._attach(out_dir, name, params, key, measured={})
        if self.csv.exists() and self.json.exists():
            previous = json.loads(self.json.read_text()).get("parameters")
            if previous == json.loads(json.dumps(params)):
                self._read_rows()
        if not self.rows:
            self.csv.unlink(missing_ok=True)
        self.json.write_text(json.dumps({"experiment": name, "parameters": params,
                                         "complete": False}, indent=2) + "\n")

    @classmethod
    def read(cls, out_dir, name: str) -> Results:
        """A recorded experiment as it is on disk, to report on; nothing is rewritten."""
        path = Path(out_dir) / f"{name}.json"
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            raise DataNotFoundError(f"no record of {name} in {out_dir}: {path.name} "
                                    "is missing (run `gpumine bench run` first)") from None
        if not isinstance(record, dict) or "parameters" not in record:
            raise DataFormatError(f"{path} is not a gpumine bench record (no parameters)")
        results = cls.__new__(cls)  # not __init__: that starts a new run's JSON
        results._attach(out_dir, name, record["parameters"], (), record.get("measured", {}))
        if not results.csv.exists():
            raise DataNotFoundError(f"no rows of {name} in {out_dir}: "
                                    f"{results.csv.name} is missing")
        results._read_rows()
        return results

    def _attach(self, out_dir, name: str, params: dict, key: tuple, measured: dict) -> None:
        """The record's files and an empty row list (rows come from :meth:`_read_rows`)."""
        self.dir, self.name, self.params, self.key = Path(out_dir), name, params, key
        self.csv, self.json = self.dir / f"{name}.csv", self.dir / f"{name}.json"
        #: What the run measured beside the rows (recorded in the JSON as ``measured``).
        self.measured = measured
        self.rows: list[dict] = []
        self._fields: list[str] | None = None

    def _read_rows(self) -> None:
        with open(self.csv, newline="") as handle:
            self.rows = [_parse(row) for row in csv.DictReader(handle)]
        if self.rows:
            self._fields = list(self.rows[0])

    def _key(self, row) -> tuple:
        return tuple(str(row.get(k)) for k in self.key)

    def has(self, row: dict) -> bool:
        """True when a row with the same key values is already recorded."""
        wanted = self._key(row)
        return any(self._key(r) == wanted for r in self.rows)

    def add(self, row: dict) -> None:
        """Append one row to the CSV now (a crash keeps everything before it)."""
        if self._fields is None:
            self._fields = list(row)
        missing = [f for f in row if f not in self._fields]
        if missing:
            raise DataFormatError(f"row has fields {missing} that the CSV header lacks")
        new = not self.csv.exists()
        with open(self.csv, "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self._fields)
            if new:
                writer.writeheader()
            writer.writerow({f: row.get(f, "") for f in self._fields})
        self.rows.append({f: row.get(f, "") for f in self._fields})

    def finish(self, backend, summary: dict, measured: dict | None = None) -> Path:
        """Write the JSON: parameters, context, run-level measurements, summary and rows."""
        self.measured = measured or {}
        record = {"experiment": self.name, "parameters": self.params, "complete": True,
                  **context(backend), "measured": self.measured, "summary": summary,
                  "rows": self.rows}
        self.json.write_text(json.dumps(record, indent=2, default=_jsonable) + "\n")
        return self.json

    def rewrite_summary(self, summary: dict) -> Path:
        """Replace the recorded JSON's summary (and rows, from the CSV); keep its context.

        ``reported`` names the commit and date of the code that wrote the summary and
        plots, which may differ from the ``commit`` that measured the rows.
        """
        record = json.loads(self.json.read_text())
        record.update(summary=summary, rows=self.rows, reported={
            "commit": commit(), "date": datetime.datetime.now(
                datetime.timezone.utc).isoformat(timespec="seconds")})
        self.json.write_text(json.dumps(record, indent=2, default=_jsonable) + "\n")
        return self.json

    def figure(self, name: str):
        """A new matplotlib figure and the PNG path to save it to (needs the ``bench`` extra)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise MissingDependency('plots need matplotlib: pip install "gpumine[bench]"') from exc
        return plt, self.dir / f"{name}.png"


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    # json.dumps's `default` protocol: TypeError for what it cannot serialize
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _parse(row: dict) -> dict:
    """CSV strings back to numbers where they are numbers."""
    out = {}
    for key, value in row.items():
        try:
            number = float(value)
            out[key] = int(number) if number.is_integer() and "." not in value \
                and "e" not in value.lower() else number
        except (TypeError, ValueError):
            out[key] = value
    return out
