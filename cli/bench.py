"""``gpumine bench``: the seed papers' experiments, and the regression gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpumine.cli.console import fail, stdout
from gpumine.exceptions import GpumineError, translated

__all__ = ["app"]

app = typer.Typer(
    help="Benchmarks: reproduce the seed papers' experiments; the regression gate; calibrate "
         "'auto'.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: '[default: 8]' is text, not markup
)


@app.command("run")
def run_command(
    experiment: Annotated[str, typer.Argument(
        help="update-vs-k, update-vs-d, corel, gpu-vs-hybrid, gpu-vs-cpu, wavecluster, peers, "
             "wavecluster-quality, or all.")],
    quick: Annotated[bool, typer.Option(
        "--quick", help="Shrunk sizes: each experiment runs on a CPU in seconds.")] = False,
    out: Annotated[Path, typer.Option(help="Directory for the CSV, JSON and PNG files.")] =
        Path("bench-results"),
    device: Annotated[str, typer.Option(help="auto, cpu or gpu.")] = "auto",
    data_home: Annotated[Path | None, typer.Option(
        help="Where the Corel files are (for corel and peers), and shapes/ with the labelled "
             "ARFF sets (for wavecluster-quality).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No per-cell lines.")] = False,
):
    """Run an experiment; it resumes from the CSV of an interrupted run with the same sizes."""
    from gpumine.backend import get_backend
    from gpumine.bench.experiments import EXPERIMENTS, Run, run_experiment

    names = list(EXPERIMENTS) if experiment == "all" else [experiment]
    if any(name not in EXPERIMENTS for name in names):
        raise typer.BadParameter(f"unknown experiment {experiment!r}; choose one of "
                                 f"{', '.join(EXPERIMENTS)} or all")
    try:
        with translated():
            backend = get_backend(device)
            for name in names:
                run = Run(backend, out, quick=quick, data_home=data_home,
                          log=(lambda line: None) if quiet else
                          (lambda line: stdout.print(line, highlight=False, markup=False)))
                path = run_experiment(name, run)
                stdout.print(f"{name}: wrote {path.parent}/{name}.csv, {path.name} and plots",
                             highlight=False, markup=False)
    except GpumineError as exc:
        fail(exc)


@app.command("report")
def report_command(
    experiment: Annotated[str, typer.Argument(
        help="An experiment recorded in --out, or all (those recorded there).")],
    out: Annotated[Path, typer.Option(help="Directory `gpumine bench run` wrote.")] =
        Path("bench-results"),
):
    """Rewrite the summary and plots of recorded experiments from their CSV; measures nothing.

    The rows, device, versions and commit stay as recorded; the JSON gains a
    ``reported`` entry naming the commit that wrote the new summary and plots.
    """
    from gpumine.bench.experiments import EXPERIMENTS, report_experiment

    if experiment == "all":
        names = [name for name in EXPERIMENTS if (out / f"{name}.csv").exists()]
        if not names:
            fail(GpumineError(f"no recorded experiment in {out}"))
    elif experiment in EXPERIMENTS:
        names = [experiment]
    else:
        raise typer.BadParameter(f"unknown experiment {experiment!r}; choose one of "
                                 f"{', '.join(EXPERIMENTS)} or all")
    try:
        with translated():
            for name in names:
                path = report_experiment(name, out)
                stdout.print(f"{name}: rewrote {path} and plots", highlight=False, markup=False)
    except GpumineError as exc:
        fail(exc)


@app.command("calibrate")
def calibrate_command(
    device: Annotated[str, typer.Option(help="auto, cpu or gpu.")] = "auto",
    quick: Annotated[bool, typer.Option(
        "--quick", help="Two small cells (seconds on a CPU) instead of the full grid.")] = False,
    out: Annotated[Path | None, typer.Option(
        help="Write the table here instead of the cache (where 'auto' reads it).")] = None,
):
    """Time the strategy pairs 'auto' may pick on this device; 'auto' then uses the table."""
    from gpumine import tuning
    from gpumine.backend import get_backend
    from gpumine.bench.calibrate import GRID, QUICK_GRID, calibrate, write_table

    try:
        with translated():
            backend = get_backend(device)
            table = calibrate(backend, QUICK_GRID if quick else GRID, write=out is None,
                              log=lambda line: stdout.print(line, highlight=False,
                                                            markup=False))
            path = out or tuning.table_path(backend.device_name)
            if out is not None:
                write_table(table, out)
    except GpumineError as exc:
        fail(exc)
    stdout.print(f"wrote {path}", highlight=False, markup=False)


@app.command("gate")
def gate_command(
    device: Annotated[str, typer.Option(help="auto, cpu or gpu.")] = "auto",
    baseline: Annotated[Path | None, typer.Option(
        help="Baseline JSON [default: the one shipped in gpumine/bench/baselines/].")] = None,
    update_baseline: Annotated[bool, typer.Option(
        "--update-baseline", help="Record the measured ratios as the baseline.")] = False,
    runs: Annotated[int, typer.Option(
        min=1, help="Measurements per ratio; the gate takes their median.")] = 3,
):
    """Measure the gate's ratios and compare them with the baseline (exit 1 on a regression)."""
    import json

    from gpumine.backend import get_backend
    from gpumine.bench.gate import baseline_path, check, measure_ratios, write_baseline

    try:
        with translated():
            backend = get_backend(device)
            path = baseline or baseline_path(backend)
            ratios = measure_ratios(backend, runs)
            for name, value in ratios.items():
                stdout.print(f"{value:8.3f}  {name}", highlight=False, markup=False)
            if update_baseline:
                write_baseline(path, backend, ratios)
                stdout.print(f"wrote {path}", highlight=False, markup=False)
                return
            failures = check(ratios, json.loads(path.read_text()))
    except GpumineError as exc:
        fail(exc)
    if failures:
        fail(GpumineError("performance regression: " + "; ".join(failures)))
    stdout.print("gate passed", highlight=False, markup=False)
