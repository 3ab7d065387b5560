"""Progress reporting: a one-line, in-place bar on stderr, silenced globally by ``set_quiet(True)``.

The bar itself and ``progress(label, total)`` (a context manager yielding ``update(n=1)`` for local loops)
live here, free of dask, so that engine code (a run context's local ``map``) can draw it; the dask and
distributed hooks (``local_task_progress``, ``track_futures``, ``distributed_progress``) are in
``privcube.graphs.progress`` and draw the same bar.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

_QUIET = False
BAR_WIDTH = 30


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
        self.note = ""

    def set_note(self, note: str) -> None:
        """Text shown after the counts (e.g. an objective and its last change); redrawn with the bar."""
        with self._lock:
            self.note = note
            self._drawn = None

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
        filled = int(round(frac * BAR_WIDTH))
        elapsed = time.perf_counter() - self._start
        return (f"{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                f"{self.done}/{self.total} {elapsed:6.1f}s" + (f"  {self.note}" if self.note else ""))

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


class FractionLine:
    """``label:  42.0%`` redrawn in place on a stream (a mechanism's share of the budget spent, say).

    The line is ended as soon as it reads 100.0% (a float share such as rho_used / rho_total may stop a hair
    below 1), when another label starts, or by :func:`end_line` (before anything else is printed), so the
    next output never lands on the bar's line (``aim-grem: 100.0%outputs: ...``)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.label: str | None = None

    def __call__(self, label: str, fraction: float) -> None:
        if _QUIET:
            return
        stream = self.stream if self.stream is not None else sys.stderr
        shown = f"{100 * min(max(float(fraction), 0.0), 1.0):5.1f}"
        if self.label is not None and label != self.label:
            stream.write("\n")
        stream.write(f"\r{label}: {shown}%")
        self.label = label
        if shown == "100.0":
            stream.write("\n")
            self.label = None
        stream.flush()
        _OPEN_LINES.add(self)

    def end(self) -> None:
        """End the line if it is still open."""
        if self.label is not None:
            stream = self.stream if self.stream is not None else sys.stderr
            stream.write("\n")
            stream.flush()
            self.label = None


_OPEN_LINES: set[FractionLine] = set()


def end_line() -> None:
    """End every in-place line still open (call before printing what follows a run)."""
    for line in list(_OPEN_LINES):
        line.end()
    _OPEN_LINES.clear()


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
