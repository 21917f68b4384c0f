"""The ``gpumine`` command line (typer).

Exit codes: 0 success; 1 a data or runtime error (one line on stderr, no
traceback unless ``--debug``); 2 a usage error (typer's own).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from gpumine.cli.bench import app as bench_app
from gpumine.cli.cluster import cluster
from gpumine.cli.console import DEBUG, fail, stderr, stdout
from gpumine.cli.datasets import app as datasets_app
from gpumine.exceptions import GpumineError

__all__ = ["app", "main"]

app = typer.Typer(
    rich_markup_mode=None,  # help texts are plain: '[default: 8]' is text, not markup
    name="gpumine",
    help="GPU clustering for Python: k-means and WaveCluster on CPU or GPU, from the shell.\n\n"
         "Exit codes: 0 ok, 1 data or runtime error (one line on stderr; --debug shows the "
         "traceback), 2 usage error.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(cluster)
app.add_typer(datasets_app, name="datasets")
app.add_typer(bench_app, name="bench")


@app.callback()
def _root(debug: Annotated[bool, typer.Option(
        "--debug", help="Show tracebacks on errors.")] = False):
    DEBUG["on"] = debug


def _check_kind(kind: str | None) -> str | None:
    """An unknown kind is a usage error (exit 2), with the registry's message."""
    from gpumine.registry import list_strategies

    if kind is not None:
        try:
            list_strategies(kind)
        except GpumineError as exc:
            raise typer.BadParameter(str(exc)) from None
    return kind


@app.command()
def strategies(
    kind: Annotated[str | None, typer.Option(
        help="Only this kind, e.g. kmeans.update.", callback=_check_kind)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
):
    """List the registered strategies and whether they can run here."""
    from gpumine.backend import gpu_unavailable_reason
    from gpumine.registry import broken_plugins, list_strategies

    try:
        found = list_strategies(kind)
    except GpumineError as exc:
        fail(exc)
    why_not_gpu = gpu_unavailable_reason()
    rows = [{"kind": s.kind, "name": s.name, "backend": s.backend, "paper": s.paper or "",
             "origin": s.origin, "available": s.backend != "gpu" or not why_not_gpu,
             "why_not": why_not_gpu if s.backend == "gpu" else "",
             "description": s.description} for s in found]
    if as_json:
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    table = Table("kind", "name", "backend", "paper", "here", "description")
    for row in rows:
        table.add_row(*(escape(str(row[key])) for key in ("kind", "name", "backend", "paper")),
                      "yes" if row["available"] else "no GPU", escape(row["description"]))
    stdout.print(table)
    if why_not_gpu and any(not row["available"] for row in rows):
        stdout.print(f"no GPU: {why_not_gpu}", highlight=False, markup=False)
    for plugin in broken_plugins():
        stderr.print(f"[yellow]broken {escape(str(plugin))}[/]", highlight=False)


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
        stdout.print(f"{key}: {value}", highlight=False, markup=False)


def _terminate(signum, frame) -> None:
    # SIGTERM (kill, timeout, Slurm, Kubernetes) unwinds like Ctrl-C: the atomic outputs'
    # cleanup runs, so no temporary file is left beside the target. Exit 128 + 15.
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    import signal
    import warnings

    signal.signal(signal.SIGTERM, _terminate)
    warnings.showwarning = _one_line_warning
    app()


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    # A warning is one line on stderr, without the source line Python shows by default.
    stderr.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)
