"""What every command shares: the two consoles, one-line errors, delayed progress."""

from __future__ import annotations

import threading
import time

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

__all__ = ["DEBUG", "Stages", "fail", "stderr", "stdout"]

stdout = Console()
stderr = Console(stderr=True)
#: Set by the root ``--debug`` option: errors show their traceback.
DEBUG = {"on": False}


def fail(exc: BaseException) -> None:
    """Report a user-facing error as one line on stderr and exit 1 (traceback with --debug)."""
    if DEBUG["on"]:
        raise exc
    stderr.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


class Stages:
    """Timed stages of a command, with a rich progress display on stderr.

    The display starts only once the command has run for ``delay`` seconds, so
    quick commands print nothing; ``quiet`` turns it off. :attr:`seconds` holds
    the wall time of each finished stage.

    Examples
    --------
    >>> stages = Stages(quiet=True)
    >>> with stages:
    ...     with stages.stage("read", total=10) as advance:
    ...         advance(10)
    >>> list(stages.seconds)
    ['read']
    """

    def __init__(self, *, quiet: bool = False, delay: float = 1.0):
        self.seconds: dict[str, float] = {}
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                  BarColumn(), TextColumn("{task.completed:,.0f}"),
                                  TimeElapsedColumn(), console=stderr, transient=True,
                                  disable=quiet)
        self._timer = threading.Timer(delay, self._progress.start)
        self._timer.daemon = True

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc_info):
        self._timer.cancel()
        self._progress.stop()

    def stage(self, name: str, total: int | None = None):
        """Context manager for one stage; yields ``advance(done)`` to report rows done."""
        stages = self

        class _Stage:
            def __enter__(self):
                self.task = stages._progress.add_task(name, total=total)
                self.start = time.perf_counter()
                return lambda done: stages._progress.update(self.task, completed=done)

            def __exit__(self, *exc_info):
                stages.seconds[name] = round(time.perf_counter() - self.start, 4)
                stages._progress.remove_task(self.task)

        return _Stage()
