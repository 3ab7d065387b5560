"""The counting pass of a census release on the run's cluster: every partition counted where it is read.

:func:`count_tables` sends each partition to :func:`privcube.storage.census_counts.count_partition` (the partition
read by the caller's ``read``, on a worker when there is a cluster) and adds the returned slices into the whole
tables as they arrive. Only a bounded number of partitions is in flight (twice the cluster's threads), so the
driver holds the totals plus a few slices, never every partition's result at once. The geography's unit arrays
go to the cluster once (``context.scatter``). Without a cluster the partitions are counted through the context's
``map``, a few at a time.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from privcube.core.context import RunContext
from privcube.core.progress import ProgressBar
from privcube.storage.census_counts import LevelTable, add_slices, count_partition, empty_totals

Slices = dict[LevelTable, tuple[int, np.ndarray]]


def _narrow(counts: np.ndarray) -> np.ndarray:
    """The counts in the smallest unsigned type that holds them (the slices travel to the driver: 4x fewer bytes
    for most partitions; the driver adds them into int64 totals)."""
    top = int(counts.max()) if counts.size else 0
    for dtype in (np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return counts.astype(dtype)
    return counts


def _count_one(item: tuple[Any, Callable[[Any], Mapping[str, np.ndarray]], Any, tuple]) -> tuple[int, Slices]:
    """One task: read a partition, count its tables; returns (rows, slices)."""
    partition, read, unit_of, (finest, tables, sizes, n_units) = item
    columns = read(partition)
    rows = len(columns[finest])
    slices = count_partition(columns, unit_of, finest, tables, sizes, n_units)
    return rows, {t: (first, _narrow(counts)) for t, (first, counts) in slices.items()}


def _streamed(client: Any, items: list[Any], window: int) -> Iterator[tuple[int, Slices]]:
    """Results of ``_count_one`` over ``items`` on ``client`` as they finish, ``window`` tasks in flight."""
    from distributed import as_completed

    pending = iter(enumerate(items))
    running = as_completed()
    for i, item in pending:
        running.add(client.submit(_count_one, item, key=f"census-count-{i}-{time.time_ns()}", pure=False))
        if running.count() >= window:
            break
    try:
        for future in running:
            result = future.result()
            future.release()
            nxt = next(pending, None)
            if nxt is not None:
                running.add(client.submit(_count_one, nxt[1], key=f"census-count-{nxt[0]}-{time.time_ns()}",
                                          pure=False))
            yield result
    finally:
        client.cancel(list(running.futures))


def _waves(context: RunContext, items: list[Any], window: int) -> Iterator[tuple[int, Slices]]:
    """Results of ``_count_one`` over ``items`` through ``context.map``, ``window`` items per call."""
    for start in range(0, len(items), window):
        yield from context.map(_count_one, items[start:start + window], label="census-count")


def count_tables(context: RunContext, partitions: Sequence[Any], read: Callable[[Any], Mapping[str, np.ndarray]],
                 unit_of: Mapping[str, np.ndarray], finest: str, tables: Sequence[LevelTable],
                 sizes: Mapping[str, int], n_units: Mapping[str, int], *, title: str | None = "counting census tables",
                 window: int | None = None) -> dict[LevelTable, np.ndarray]:
    """The exact tables ``(n_units[level], *sizes)`` (int64) of every :class:`LevelTable`, summed over
    ``partitions`` (each read by ``read`` into the columns :func:`count_partition` takes). ``window`` caps the
    partitions in flight (default: twice the cluster's threads); ``title`` draws a progress line (partitions
    done, rows/s)."""
    tables = list(dict.fromkeys(tables))
    total = empty_totals(tables, sizes, n_units)
    client = context.client
    units = context.scatter(dict(unit_of)) if client is not None else dict(unit_of)
    read = context.scatter(read) if client is not None else read  # the reader may hold the map (finest codes)
    spec = (finest, tables, dict(sizes), dict(n_units))
    items = [(p, read, units, spec) for p in partitions]
    if window is None:
        window = max(2, 2 * sum(client.nthreads().values())) if client is not None else 1
    results = _streamed(client, items, window) if client is not None else _waves(context, items, window)
    bar = ProgressBar(title, len(items)) if title else None
    start, rows = time.perf_counter(), 0
    try:
        for n, part in results:
            add_slices(total, part)
            rows += n
            if bar is not None:
                bar.set_note(f"{rows / max(time.perf_counter() - start, 1e-9):.3g} rows/s")
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return total


__all__ = ["count_tables"]
