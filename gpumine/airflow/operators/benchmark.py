"""``GpuMineBenchmarkOperator``: the performance regression gate as a task of a DAG."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpumine.exceptions import InvalidParameterError

__all__ = ["GpuMineBenchmarkOperator"]


class GpuMineBenchmarkOperator(BaseOperator):
    """Measure the gate's ratios on the worker and fail the task on a regression.

    The same measurement as ``gpumine bench gate`` (:mod:`gpumine.bench.gate`):
    ratios measured in one process (a gpumine step against its floor measured
    beside it, a strategy against a reference, a whole fit against scikit-learn),
    each the median of ``runs`` measurements, compared with a baseline of the
    same backend. A ratio over the baseline's tolerance fails the task (no
    retries: a re-run measures the same code), naming every ratio that regressed.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}
        Where to measure (``"auto"``: the worker's GPU, else its CPU).
    baseline : str or path-like, optional
        The baseline JSON (``gpumine bench gate --update-baseline --baseline PATH``
        writes one); by default the baseline shipped with the package
        (``gpumine/bench/baselines/<cpu|gpu>.json``).
        Templated.
    runs : int
        Measurements per ratio; the gate takes their median.
    **kwargs
        :class:`~airflow.sdk.BaseOperator` arguments.

    Returns
    -------
    dict
        The XCom value: ``device``, ``baseline``, ``ratios`` (measured),
        ``baseline_ratios`` and ``passed`` (True: a regression fails the task).

    Examples
    --------
    >>> from gpumine.airflow import GpuMineBenchmarkOperator
    >>> GpuMineBenchmarkOperator(task_id="gate", device="cpu", runs=1).runs
    1
    """

    template_fields: Sequence[str] = ("baseline",)
    ui_color = "#f6d7a7"

    def __init__(self, *, device: str = "auto", baseline=None, runs: int = 3, **kwargs):
        super().__init__(**kwargs)
        if device not in ("auto", "cpu", "gpu"):
            raise InvalidParameterError(f"{self.task_id}: device must be one of auto, cpu, "
                                        f"gpu, got {device!r}")
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise InvalidParameterError(f"{self.task_id}: runs must be an integer >= 1, got "
                                        f"{runs!r}")
        self.device = device
        self.baseline = baseline
        self.runs = runs

    def execute(self, context) -> dict:
        from gpumine.backend import get_backend
        from gpumine.bench.gate import baseline_path, check, measure_ratios
        from gpumine.exceptions import GpumineError

        try:
            backend = get_backend(self.device)
        except GpumineError as exc:
            raise AirflowFailException(f"gpumine: {exc}") from None
        path = Path(str(self.baseline)) if self.baseline else baseline_path(backend)
        try:
            baseline = json.loads(path.read_text())
            expected = baseline["ratios"]
        except FileNotFoundError:
            raise AirflowFailException(
                f"gpumine: no baseline at {path}; record one on a known-good version with "
                f"`gpumine bench gate --device {backend.name} --update-baseline --baseline "
                f"{path}`") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise AirflowFailException(f"gpumine: {path} is not a gate baseline ({exc})") \
                from None
        except OSError as exc:
            raise AirflowException(f"gpumine: cannot read {path}: {exc}") from None
        self.log.info("gpumine: measuring the gate's ratios on %s (%s), %d run(s)",
                      backend.name, backend.device_name, self.runs)
        try:
            ratios = measure_ratios(backend, self.runs)
        finally:
            backend.release_memory()
        for name, value in ratios.items():
            reference = expected.get(name)
            against = f" (baseline {reference:.3g})" if reference is not None else ""
            self.log.info("gpumine: %8.3f  %s%s", value, name, against)
        failures = check(ratios, baseline)
        if failures:
            message = "performance regression: " + "; ".join(failures)
            self.log.error("gpumine: %s", message)
            raise AirflowFailException(f"gpumine: {message}")
        self.log.info("gpumine: gate passed against %s", path)
        return {"device": backend.name, "device_name": backend.device_name,
                "baseline": str(path), "ratios": ratios, "baseline_ratios": expected,
                "passed": True}
