"""Progress reporting: a one-line, in-place bar on stderr, silenced globally by ``set_quiet(True)``.

The bar and ``progress(label, total)`` (local loops) are ``privcube.core.progress`` (no dask), re-exported
here; the dask and distributed entry points draw the same bar:

- ``local_task_progress(label)``: a ``dask.callbacks.Callback`` that counts finished tasks of a
  local (threaded/synchronous) ``dask.compute``;
- ``track_futures(futures, label)``: waits on distributed futures, advancing as each finishes;
- ``distributed_progress(futures, label)``: waits on futures with distributed's scheduler-side
  progress (counts every task the futures depend on), drawn on stderr with our label.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from dask.callbacks import Callback

from privcube.core.progress import BAR_WIDTH, ProgressBar, is_quiet, progress, set_quiet

__all__ = ["ProgressBar", "distributed_progress", "is_quiet", "local_task_progress", "progress", "set_quiet",
           "track_futures"]


class local_task_progress(Callback):
    """Callback for local ``dask.compute``: one bar step per finished task."""

    def __init__(self, label: str, *, stream: TextIO | None = None) -> None:
        super().__init__()
        self._bar = ProgressBar(label, 0, stream=stream)

    def _start_state(self, dsk: Any, state: dict) -> None:
        """Set the total from the scheduler state once the graph is known."""
        n = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished") if k in state)
        self._bar.set_total(n)

    def _posttask(self, key: Any, result: Any, dsk: Any, state: dict, worker_id: Any) -> None:
        """Advance one step per finished task."""
        self._bar.update(1)

    def _finish(self, dsk: Any, state: dict, errored: bool) -> None:
        """Close the bar."""
        self._bar.close()


def track_futures(futures: Iterable[Any], label: str, *, stream: TextIO | None = None,
                  heartbeat: float | None = None) -> list[Any]:
    """Wait for distributed futures, advancing the bar as each completes; returns them in input order."""
    from distributed import as_completed

    futures = list(futures)
    with progress(label, len(futures), stream=stream, heartbeat=heartbeat) as update:
        for _ in as_completed(futures):
            update(1)
    return futures


def distributed_progress(futures: Iterable[Any], label: str) -> None:
    """Block until ``futures`` finish, showing scheduler-side task progress (all dependencies) on stderr."""
    from distributed import wait
    from distributed.diagnostics.progressbar import TextProgressBar

    futures = list(futures)
    if is_quiet() or not futures:
        wait(futures)
        return

    class _StderrBar(TextProgressBar):
        """distributed's text bar, redirected to stderr and prefixed with the label."""

        _last: tuple[int, int] | None = None

        def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
            if self._last == (remaining, all):
                return
            self._last = (remaining, all)
            frac = (1 - remaining / all) if all else 1.0
            filled = int(round(frac * BAR_WIDTH))
            sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                             f"{all - remaining}/{all} {self.elapsed:6.1f}s")
            sys.stderr.flush()

        def _draw_stop(self, **kwargs: Any) -> None:
            sys.stderr.write("\n")
            sys.stderr.flush()

    _StderrBar(futures, complete=True, start=True)
    wait(futures)
