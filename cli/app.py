"""The ``gpumine`` command line (typer).

Exit codes: 0 success; 1 a data or runtime error (one line on stderr, no
traceback unless ``--debug``); 2 a usage error (typer's own).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from gpumine.exceptions import GpumineError

__all__ = ["app", "main"]

app = typer.Typer(
    name="gpumine",
    help="GPU clustering for Python: k-means on CPU or GPU, from the shell.\n\n"
         "Exit codes: 0 ok, 1 data or runtime error, 2 usage error.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_stdout = Console()
_stderr = Console(stderr=True)
_DEBUG = {"on": False}

DEMO_SHAPE = (100_000, 8)
DEMO_CLUSTERS = 8


@app.callback()
def _root(debug: Annotated[bool, typer.Option(
        "--debug", help="Show tracebacks on errors.")] = False):
    _DEBUG["on"] = debug


def _fail(exc: BaseException) -> None:
    """Report a user-facing error as one line and exit 1 (the traceback only with --debug)."""
    if _DEBUG["on"]:
        raise exc
    _stderr.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _read_points(path: Path) -> tuple[np.ndarray, list[str]]:
    """Numeric columns of a .parquet, .csv, MineBench .bin or .arff file."""
    from gpumine.datasets import read_arff_points, read_minebench_bin

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".bin":
        X = read_minebench_bin(path)
        return X, [f"x{i}" for i in range(X.shape[1])]
    if suffix == ".arff":
        X, _, names = read_arff_points(path)
        return X, names
    if suffix in (".parquet", ".pq", ".csv"):
        import pyarrow as pa
        import pyarrow.csv as pa_csv
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path) if suffix != ".csv" else pa_csv.read_csv(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise GpumineError(f"{path}: cannot read: {exc}") from exc
        names = [f.name for f in table.schema
                 if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]
        if not names:
            raise GpumineError(f"{path}: no numeric columns")
        X = np.empty((table.num_rows, len(names)), dtype=np.float64)
        for j, name in enumerate(names):
            column = table.column(name)
            if column.null_count:
                raise GpumineError(f"{path}: column {name!r} has {column.null_count} nulls")
            X[:, j] = column.to_numpy()
        return X, names
    raise GpumineError(f"{path}: unsupported file type {suffix!r} "
                       "(expected .parquet, .csv, .bin or .arff)")


@app.command()
def cluster(
    input: Annotated[Path | None, typer.Argument(
        help="Data file: .parquet, .csv, .bin or .arff.")] = None,
    demo: Annotated[bool, typer.Option(
        "--demo", help=f"Cluster {DEMO_SHAPE[0]:,} x {DEMO_SHAPE[1]} uniform MT19937 points "
                       "(seed 5489).")] = False,
    n_clusters: Annotated[int, typer.Option("-k", "--n-clusters", min=1)] = DEMO_CLUSTERS,
    device: Annotated[str, typer.Option(help="auto, cpu or gpu.")] = "auto",
    init: Annotated[str, typer.Option(help="Init strategy name.")] = "k-means++",
    assign: Annotated[str, typer.Option(help="Assign strategy name.")] = "auto",
    update: Annotated[str, typer.Option(help="Update strategy name.")] = "auto",
    max_iter: Annotated[int, typer.Option(min=1)] = 300,
    tol: Annotated[float, typer.Option(min=0.0)] = 1e-4,
    seed: Annotated[int, typer.Option(help="random_state of the initialisation.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
):
    """Cluster a data file (or --demo data) with k-means and print a summary."""
    from gpumine import GPUKMeans
    from gpumine.datasets import DEFAULT_SEED, make_uniform

    if demo == (input is not None):
        raise typer.BadParameter("give either INPUT or --demo")
    try:
        start = time.perf_counter()
        if demo:
            X, source = make_uniform(*DEMO_SHAPE, random_state=DEFAULT_SEED), "demo: make_uniform"
        else:
            X, _ = _read_points(input)
            source = str(input)
        read_s = time.perf_counter() - start
        model = GPUKMeans(n_clusters, init=init, device=device, assign=assign, update=update,
                          max_iter=max_iter, tol=tol, random_state=seed)
        start = time.perf_counter()
        model.fit(X)
        fit_s = time.perf_counter() - start
    except (GpumineError, ValueError, OSError) as exc:
        _fail(exc)
    sizes = np.bincount(model.labels_, minlength=n_clusters)
    summary = {
        "input": source, "rows": int(X.shape[0]), "features": int(X.shape[1]),
        "n_clusters": n_clusters, "device": model.device_, **model.strategies_,
        "iterations": model.n_iter_, "inertia": model.inertia_,
        "cluster_sizes": sizes.tolist(), "read_seconds": round(read_s, 4),
        "fit_seconds": round(fit_s, 4),
    }
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    table = Table(title="gpumine k-means", show_header=False)
    for key, value in summary.items():
        if key == "cluster_sizes":
            value = f"min {sizes.min():,}, max {sizes.max():,}"
        table.add_row(key.replace("_", " "), f"{value:,.6g}" if isinstance(value, float)
                      else str(value))
    _stdout.print(table)


@app.command()
def strategies(
    kind: Annotated[str | None, typer.Option(
        help="Only this kind, e.g. kmeans.update.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
):
    """List the registered strategies and whether they can run here."""
    from gpumine.backend import gpu_available
    from gpumine.registry import broken_plugins, list_strategies

    try:
        found = list_strategies(kind)
    except ValueError as exc:
        _fail(exc)
    gpu = gpu_available()
    rows = [{"kind": s.kind, "name": s.name, "backend": s.backend, "paper": s.paper or "",
             "origin": s.origin, "available": s.backend != "gpu" or gpu,
             "description": s.description} for s in found]
    if as_json:
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    table = Table("kind", "name", "backend", "paper", "here", "description")
    for row in rows:
        table.add_row(row["kind"], row["name"], row["backend"], row["paper"],
                      "yes" if row["available"] else "no GPU", row["description"])
    _stdout.print(table)
    for plugin in broken_plugins():
        _stderr.print(f"[yellow]broken {plugin}[/]", highlight=False)


@app.command()
def info():
    """Versions, backend and GPU."""
    import platform

    import sklearn

    import gpumine
    from gpumine.backend import get_backend

    backend = get_backend("auto")
    rows = {"gpumine": gpumine.__version__, "python": platform.python_version(),
            "numpy": np.__version__, "scikit-learn": sklearn.__version__,
            "backend (auto)": backend.name, "device": backend.device_name}
    if backend.is_gpu:
        cupy = backend.xp
        free, total = cupy.cuda.runtime.memGetInfo()
        rows.update({"cupy": cupy.__version__,
                     "cuda runtime": str(cupy.cuda.runtime.runtimeGetVersion()),
                     "gpu memory": f"{total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)"})
    for key, value in rows.items():
        _stdout.print(f"{key}: {value}", highlight=False)


def main() -> None:
    """Console-script entry point."""
    app()
