"""``gpumine cluster``: cluster a data file (or demo data) and write or summarize the result."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpumine.cli.console import Stages, fail, stdout
from gpumine.devices import is_several_gpus
from gpumine.exceptions import GpumineError, InvalidParameterError
from gpumine.jobs import DEMO_CLUSTERS, DEMO_SHAPE, cluster_file

__all__ = ["DEMO_CLUSTERS", "DEMO_SHAPE", "cluster"]


class Algorithm(str, Enum):
    kmeans = "kmeans"
    wavecluster = "wavecluster"


class Nulls(str, Enum):
    error = "error"
    drop = "drop"


#: ``--device``'s one-device values; "gpu:all" and GPU ids ("0,1") name several GPUs.
DEVICES = ("auto", "cpu", "gpu")


def _check_strategies(given: dict[str, str | None]) -> None:
    """Unknown strategy names are usage errors (exit 2), found before anything is read.

    The registry's own lookup and message; ``"auto"`` is resolved later, per backend.
    """
    from gpumine.registry import get_strategy

    for option, (kind, name) in given.items():
        if name is None or name == "auto":
            continue
        try:
            get_strategy(kind, name)
        except GpumineError as exc:
            raise typer.BadParameter(str(exc), param_hint=option) from None


def _names(option: str | None) -> list[str] | None:
    if option is None:
        return None
    names = [name.strip() for name in option.split(",")]
    if not all(names):
        raise typer.BadParameter(f"empty column name in {option!r}")
    return names


def _device(value: str):
    """``--device``: a device name, "gpu:all", or GPU ids separated by commas (a list,
    checked as the estimators check it: :func:`gpumine.devices.is_several_gpus`)."""
    if value in (*DEVICES, "gpu:all"):
        return value
    try:
        ids = [int(v) for v in value.split(",")]
    except ValueError:
        raise typer.BadParameter(f"--device must be one of {', '.join(DEVICES)}, gpu:all or "
                                 f"GPU ids separated by commas (0,1), got {value!r}") from None
    try:
        is_several_gpus(ids)
    except InvalidParameterError as error:
        raise typer.BadParameter(f"--device {value}: {error}") from None
    return ids


def _grid_size(value: str | None):
    if value is None or value == "auto":
        return "auto"
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise typer.BadParameter(f"--grid-size must be 'auto', an integer or integers "
                                 f"separated by commas, got {value!r}") from None
    return sizes[0] if len(sizes) == 1 else sizes


def _threshold(value: str | None):
    if value is None or value == "auto":
        return "auto"
    try:
        return float(value)
    except ValueError:
        raise typer.BadParameter(f"--threshold must be 'auto' or a number, got {value!r}") \
            from None


def _check_usage(algorithm, given_kmeans, given_wave, out, labels_only, centers_out, demo,
                 source, fit_sample):
    """Usage errors (exit 2): conflicting or misplaced options."""
    if demo == (source is not None):
        raise typer.BadParameter("give either INPUT or --demo")
    wrong = given_wave if algorithm == Algorithm.kmeans else given_kmeans
    if wrong:
        raise typer.BadParameter(f"{', '.join(wrong)} do not apply to --algorithm "
                                 f"{algorithm.value}")
    if labels_only and out is None:
        raise typer.BadParameter("--labels-only needs --out")
    if centers_out is not None and algorithm == Algorithm.wavecluster:
        raise typer.BadParameter("--centers-out is for k-means; WaveCluster has no centres")
    if demo and fit_sample is not None:
        raise typer.BadParameter("--fit-sample needs an INPUT file")


def _print(summary):
    table = Table(title=f"gpumine {summary['algorithm']}", show_header=False)
    for key, value in summary.items():
        if key == "cluster_sizes":
            value = (f"{len(value)} clusters, min {min(value):,}, max {max(value):,}"
                     if value else "none")
        elif key == "columns":
            value = ", ".join(value) if len(value) <= 8 else f"{', '.join(value[:8])}, ..."
        elif key == "seconds":
            value = ", ".join(f"{stage} {seconds:.3g}" for stage, seconds in value.items())
        elif isinstance(value, float):
            value = f"{value:,.6g}"
        elif isinstance(value, int):
            value = f"{value:,}"
        table.add_row(key.replace("_", " "), escape(str(value)))
    stdout.print(table)


def cluster(
    input: Annotated[Path | None, typer.Argument(
        help="Data file (.parquet, .csv, MineBench .bin or .arff), or a directory or quoted "
             "glob of Parquet files read as one table.", show_default=False)] = None,
    demo: Annotated[bool, typer.Option(
        "--demo", help=f"Cluster {DEMO_SHAPE[0]:,} x {DEMO_SHAPE[1]} uniform MT19937 points "
                       "(seed 5489) with k-means, or the built-in snake shapes with "
                       "--algorithm wavecluster.")] = False,
    algorithm: Annotated[Algorithm, typer.Option(help="Clustering algorithm.")] =
        Algorithm.kmeans,
    n_clusters: Annotated[int | None, typer.Option(
        "-k", "--n-clusters", min=1, help="k-means: number of clusters [default: 8].",
        show_default=False)] = None,
    columns: Annotated[str | None, typer.Option(
        help="Comma-separated feature columns [default: every numeric column].")] = None,
    exclude: Annotated[str | None, typer.Option(
        help="Comma-separated columns to leave out.")] = None,
    nulls: Annotated[Nulls, typer.Option(
        help="Rows with a null or NaN feature: error, or drop them (their label is null).")] =
        Nulls.error,
    out: Annotated[Path | None, typer.Option(
        help="Write the input rows plus a label column to this .parquet or .csv file.")] = None,
    labels_only: Annotated[bool, typer.Option(
        "--labels-only", help="With --out: write only the label column.")] = False,
    label_column: Annotated[str, typer.Option(help="Name of the label column.")] = "cluster",
    centers_out: Annotated[Path | None, typer.Option(
        help="k-means: write the centres (one row per cluster, feature columns) here.")] = None,
    fit_sample: Annotated[int | None, typer.Option(
        min=1, help="Fit on this many random rows, then label every row, streaming the "
                    "file (for files larger than memory).")] = None,
    stream: Annotated[bool | None, typer.Option(
        "--stream/--no-stream", help="Fit over the Parquet input's record batches, read again "
        "at every pass, instead of reading it whole [default: when its features would take "
        "more than half of the free memory, with a note].", show_default=False)] = None,
    device: Annotated[str, typer.Option(
        help="Where to run: auto, cpu, gpu, or for k-means several GPUs of this machine: "
             "gpu:all or their ids (0,1).")] = "auto",
    init: Annotated[str | None, typer.Option(
        help="k-means: init strategy [default: k-means++].", show_default=False)] = None,
    assign: Annotated[str | None, typer.Option(
        help="k-means: assign strategy [default: auto].", show_default=False)] = None,
    update: Annotated[str | None, typer.Option(
        help="k-means: update strategy [default: auto].", show_default=False)] = None,
    max_iter: Annotated[int | None, typer.Option(
        min=1, help="k-means: maximum iterations [default: 300].", show_default=False)] = None,
    tol: Annotated[float | None, typer.Option(
        min=0.0, help="k-means: relative tolerance [default: 1e-4].", show_default=False)] = None,
    grid_size: Annotated[str | None, typer.Option(
        help="WaveCluster: cells per feature: auto, N, or N1,N2,... [default: auto].",
        show_default=False)] = None,
    levels: Annotated[int | None, typer.Option(
        min=1, help="WaveCluster: wavelet levels [default: 1].", show_default=False)] = None,
    wavelet: Annotated[str | None, typer.Option(
        help="WaveCluster: haar or bior2.2 [default: haar].", show_default=False)] = None,
    threshold: Annotated[str | None, typer.Option(
        help="WaveCluster: density threshold, or auto [default: auto].",
        show_default=False)] = None,
    seed: Annotated[int, typer.Option(
        help="Random seed (k-means init, --fit-sample rows).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
):
    """Cluster a data file (or --demo data) and print a summary.

    Reads the numeric columns (or --columns), fits k-means or WaveCluster on the
    chosen device, prints rows, features, device, strategies, iterations and
    inertia (k-means) or clusters and noise (WaveCluster) and the time of each
    stage, and with --out writes the input rows plus a label column. Outputs
    are written whole or not at all.

    Exit codes: 0 ok, 1 data or runtime error (one line on stderr), 2 usage error.
    """
    devices = _device(device)
    given_kmeans = [flag for flag, value in (("-k", n_clusters), ("--init", init),
                                             ("--assign", assign), ("--update", update),
                                             ("--max-iter", max_iter), ("--tol", tol))
                    if value is not None]
    given_wave = [flag for flag, value in (("--grid-size", grid_size), ("--levels", levels),
                                           ("--wavelet", wavelet), ("--threshold", threshold))
                  if value is not None]
    _check_usage(algorithm, given_kmeans, given_wave, out, labels_only, centers_out, demo,
                 input, fit_sample)
    _check_strategies({"--init": ("kmeans.init", init), "--assign": ("kmeans.assign", assign),
                       "--update": ("kmeans.update", update),
                       "--wavelet": ("wavecluster.wavelet", wavelet)})
    if algorithm == Algorithm.kmeans:
        params = {"n_clusters": n_clusters, "init": init, "assign": assign, "update": update,
                  "max_iter": max_iter, "tol": tol}
    else:
        params = {"grid_size": _grid_size(grid_size), "levels": levels, "wavelet": wavelet,
                  "threshold": _threshold(threshold)}
    params = {name: value for name, value in params.items() if value is not None}
    try:  # cluster_file raises gpumine's errors only (gpumine.exceptions.translated)
        summary = cluster_file(input, algorithm=algorithm.value, params=params,
                               columns=_names(columns), exclude=_names(exclude),
                               nulls=nulls.value, out=out, labels_only=labels_only,
                               label_column=label_column, centers_out=centers_out,
                               fit_sample=fit_sample, device=devices, seed=seed,
                               stages=Stages(quiet=quiet), note=_note, demo=demo,
                               stream=stream)
    except GpumineError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        _print(summary)


def _note(text: str) -> None:
    from gpumine.cli.console import stderr

    stderr.print(f"note: {text}", markup=False, highlight=False, soft_wrap=True)
