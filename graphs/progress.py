"""Progress reporting: a one-line, in-place bar on stderr, silenced globally by ``set_quiet(True)``.

Three entry points share one bar renderer:

- ``progress(label, total)``: a context manager yielding a callable ``update(n=1)`` for local loops;
- ``local_task_progress(label)``: a ``dask.callbacks.Callback`` that counts finished tasks of a
  local (threaded/synchronous) ``dask.compute``;
- ``track_futures(futures, label)``: waits on distributed futures, advancing as each finishes;
- ``distributed_progress(futures, label)``: waits on futures with distributed's scheduler-side
  progress (counts every task the futures depend on), drawn on stderr with our label.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from dask.callbacks import Callback

_QUIET = False
_WIDTH = 30


def set_quiet(quiet: bool) -> None:
    """Silence (True) or enable (False) every progress bar in this process."""
    global _QUIET
    _QUIET = bool(quiet)


def is_quiet() -> bool:
    """Whether progress bars are currently silenced."""
    return _QUIET


class ProgressBar:
    """A one-line bar ``label [####....] done/total  elapsed`` redrawn in place on a stream."""

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None,
                 min_interval: float = 0.1) -> None:
        self.label = label
        self.total = max(int(total), 0)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self._start = time.perf_counter()
        self._last = 0.0
        self._lock = threading.Lock()
        self._closed = False
        self._drawn: int | None = None

    def set_total(self, total: int) -> None:
        """Change the total (e.g. once a task graph's size is known)."""
        with self._lock:
            self.total = max(int(total), 0)

    def update(self, n: int = 1) -> None:
        """Advance by ``n`` steps and redraw (rate-limited)."""
        with self._lock:
            self.done += n
            now = time.perf_counter()
            if now - self._last >= self.min_interval or self.done >= self.total:
                self._last = now
                self._draw()

    def _render(self) -> str:
        """The current line of text (without carriage return)."""
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(round(frac * _WIDTH))
        elapsed = time.perf_counter() - self._start
        return (f"{self.label} [{'#' * filled}{'.' * (_WIDTH - filled)}] "
                f"{self.done}/{self.total} {elapsed:6.1f}s")

    def tick(self) -> None:
        """Redraw with the current elapsed time even if nothing finished (heartbeat of a long step)."""
        with self._lock:
            self._drawn = None
            self._draw()

    def _draw(self) -> None:
        """Write the line if not quiet."""
        if _QUIET or self._closed or self._drawn == self.done:
            return
        self._drawn = self.done
        self.stream.write("\r" + self._render())
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        with self._lock:
            if self._closed:
                return
            self._draw()
            if not _QUIET:
                self.stream.write("\n")
                self.stream.flush()
            self._closed = True


@contextmanager
def progress(label: str, total: int, *, stream: TextIO | None = None,
             heartbeat: float | None = None) -> Iterator[Callable[[int], None]]:
    """Context manager yielding ``update(n=1)``; the bar is finished (newline) on exit. With ``heartbeat``
    (seconds) the elapsed time is redrawn that often even while no step finishes (one long solve)."""
    bar = ProgressBar(label, total, stream=stream)
    stop = threading.Event()
    ticker = None
    if heartbeat is not None and not _QUIET:
        def beat() -> None:
            while not stop.wait(heartbeat):
                bar.tick()
        ticker = threading.Thread(target=beat, name=f"progress-{label}", daemon=True)
        ticker.start()
    try:
        yield bar.update
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()
        bar.close()


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
    if _QUIET or not futures:
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
            filled = int(round(frac * _WIDTH))
            sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (_WIDTH - filled)}] "
                             f"{all - remaining}/{all} {self.elapsed:6.1f}s")
            sys.stderr.flush()

        def _draw_stop(self, **kwargs: Any) -> None:
            sys.stderr.write("\n")
            sys.stderr.flush()

    _StderrBar(futures, complete=True, start=True)
    wait(futures)
