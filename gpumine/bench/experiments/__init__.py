"""The seed papers' experiments, reproduced: ``gpumine bench EXPERIMENT``.

Each experiment writes ``<name>.csv`` (one row per measured cell, appended as it
goes, so an interrupted run resumes), ``<name>.json`` (parameters, device,
versions, commit, a summary and the rows) and PNG plots into the output
directory. ``quick=True`` shrinks every experiment to a CPU run of seconds (CI
runs each one so); the full sizes are the papers'. Each experiment is a
``measure`` step (fills the CSV) and a ``report`` step (summary and plots from the
recorded rows alone), so ``gpumine bench report`` redraws a record on any machine.

=================  ==========================================================
``update-vs-k``    seed 004 Figures 1-4: update phase (summation + normalization)
                   of every update strategy vs k, n in {5000, 50000}, d = 32
``update-vs-d``    seed 004 Figure 5: update phase vs d, k in {32, 256, 2048}
``corel``          seed 004 Figure 6: update phase vs k on Corel edge and color
``gpu-vs-hybrid``  seed 000 Figure 7: 50 forced Lloyd iterations including
                   transfers, each GPU-only update strategy against ``hybrid``
``gpu-vs-cpu``     seed 000 Figure 8, seed 002 Figure 11: whole fit against
                   scikit-learn (all cores) and gpumine's CPU path
``wavecluster``    seed 003 Table 1: WaveCluster per stage, CPU and GPU, and
                   the paper's aggregate speed-up
``peers``          per-iteration time against PyTorch, flash-kmeans, fastkmeans
                   with label agreement and time / floor, and the whole fit
                   (``GPUKMeans.fit`` from host and device data) against
                   scikit-learn's on every core
``wavecluster-     WaveCluster's defaults against DBSCAN (best eps) and HDBSCAN
quality``          by adjusted Rand index on labelled shape sets
                   (:mod:`gpumine.bench.quality`)

Every experiment records, beside its stage times, what users call: ``fit`` from
device data and from host data (rows ``fit from device data`` / ``fit from host
data``; the sweeps' and gpu-vs-hybrid's summaries give their medians).
=================  ==========================================================

Strategies are those the backend can run (every GPU update strategy on a GPU,
``numpy`` on the CPU). The reference of the speed-ups is seed 004's: a
shared-nothing kernel with a thread per cluster (``gm-ct``, KMCUDA's scheme) on
the GPU, ``numpy`` on the CPU; ``hybrid`` for ``gpu-vs-hybrid``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpumine.bench.experiments.common import Run
from gpumine.bench.experiments.irregular_reduction import (
    gpu_vs_cpu,
    gpu_vs_hybrid,
    report_gpu_vs_cpu,
    report_gpu_vs_hybrid,
)
from gpumine.bench.experiments.peer_libraries import peers, report_peers
from gpumine.bench.experiments.synchronization import corel, sweep_report, update_vs_d, update_vs_k
from gpumine.bench.experiments.wavelet import report_wavecluster, wavecluster
from gpumine.bench.quality import report_quality, wavecluster_quality
from gpumine.bench.record import Results
from gpumine.exceptions import InvalidParameterError


@dataclass(frozen=True)
class Experiment:
    """One experiment: ``measure`` fills the CSV, ``report`` derives the summary and plots.

    ``measure(run)`` returns the :class:`Results` and what it measured beside the rows
    (peers' copy bandwidth and GEMM rate); ``report(results, measured)`` reads only
    those, so a recorded experiment can be re-reported on any machine.
    """

    measure: Callable[[Run], tuple[Results, dict]]
    report: Callable[[Results, dict], dict]


EXPERIMENTS: dict[str, Experiment] = {
    "update-vs-k": Experiment(update_vs_k, sweep_report("update-vs-k", "n", "k", "update phase",
                                                          speedup_plot=True)),
    "update-vs-d": Experiment(update_vs_d, sweep_report("update-vs-d", "k", "d",
                                                          "update phase, n = {n}")),
    "corel": Experiment(corel, sweep_report("corel", "subset", "k", "Corel, update phase")),
    "gpu-vs-hybrid": Experiment(gpu_vs_hybrid, report_gpu_vs_hybrid),
    "gpu-vs-cpu": Experiment(gpu_vs_cpu, report_gpu_vs_cpu),
    "wavecluster": Experiment(wavecluster, report_wavecluster),
    "peers": Experiment(peers, report_peers),
    "wavecluster-quality": Experiment(wavecluster_quality, report_quality),
}


def _experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise InvalidParameterError(f"unknown experiment {name!r}; choose one of "
                                    f"{', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def run_experiment(name: str, run: Run) -> Path:
    """Run one experiment (resuming from its CSV) and write its JSON; returns the JSON path."""
    experiment = _experiment(name)
    results, measured = experiment.measure(run)
    return results.finish(run.backend, experiment.report(results, measured), measured)


def report_experiment(name: str, out_dir) -> Path:
    """Re-derive the summary and plots of a recorded experiment from its CSV and JSON.

    Nothing is measured and no device is needed: the rows, parameters, context
    (device, versions, commit) and run-level measurements stay as recorded; the
    summary and the PNG files are rewritten by the current code.

    Parameters
    ----------
    name : str
        One of :data:`EXPERIMENTS`.
    out_dir : path-like
        The directory ``gpumine bench run`` wrote.

    Returns
    -------
    pathlib.Path
        The rewritten JSON.

    Examples
    --------
    >>> import tempfile
    >>> from gpumine.backend import get_backend
    >>> out = tempfile.mkdtemp()
    >>> _ = run_experiment("update-vs-d", Run(get_backend("cpu"), out, quick=True,
    ...                                       log=lambda line: None))
    >>> report_experiment("update-vs-d", out).name
    'update-vs-d.json'
    """
    experiment = _experiment(name)
    results = Results.read(out_dir, name)
    return results.rewrite_summary(experiment.report(results, results.measured))


__all__ = ["EXPERIMENTS", "Experiment", "Run", "report_experiment", "run_experiment"]
