"""Peak resident memory of a process tree, sampled in a background thread (shared by the benchmarks).

``MemorySampler`` sums the RSS of this process and every descendant (LocalCluster nannies, workers,
stage subprocesses) every ``interval`` seconds. It keeps the peak of the total, of this process
alone and of the descendants alone over its lifetime, plus a per-stage peak reset by
``reset_stage()``. Import it from a benchmark script run as ``python benchmarks/NAME.py`` with
``from _rss import MemorySampler`` (the script's folder is on ``sys.path``).
"""
from __future__ import annotations

import threading

import psutil


class MemorySampler:
    """Samples the summed RSS of this process and all its descendants every ``interval`` seconds.

    ``peak`` is the peak of the whole tree since start, ``peak_main`` / ``peak_children`` the peaks of
    this process and of its descendants (each on its own), ``stage_peak`` the tree's peak since the
    last ``reset_stage()``, ``samples`` the number of samples taken.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak = self.stage_peak = self.peak_main = self.peak_children = 0
        self.samples = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    @staticmethod
    def measure() -> tuple[int, int]:
        """(RSS of this process, summed RSS of its descendants) in bytes, now."""
        me = psutil.Process()
        main = me.memory_info().rss
        children = 0
        for c in me.children(recursive=True):
            try:
                children += c.memory_info().rss
            except psutil.Error:  # a child that just exited
                pass
        return main, children

    def sample(self) -> int:
        """Take one sample, fold it into the peaks and return the tree's summed RSS (bytes)."""
        main, children = self.measure()
        total = main + children
        with self._lock:
            self.samples += 1
            self.peak = max(self.peak, total)
            self.stage_peak = max(self.stage_peak, total)
            self.peak_main = max(self.peak_main, main)
            self.peak_children = max(self.peak_children, children)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except psutil.Error:
                pass
            self._stop.wait(self.interval)

    def reset_stage(self) -> None:
        """Start a new stage window (seeded with one sample, so even a very short stage has a peak)."""
        with self._lock:
            self.stage_peak = 0
        self.sample()

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
