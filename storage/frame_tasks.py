"""Task graphs over real rows, for layers that do not import dask themselves (a relational run's real side).

A caller that works on records where they live builds its graph with these: a dask DataFrame's partitions
as lazy pandas frames, an in-memory object as a task input, a function applied lazily to other tasks'
results, and lazy pandas partitions assembled into one lazy dask DataFrame. Nothing here runs anything:
the run's context computes or persists what is built (``RunContext.compute`` / ``persist``), on the
cluster when there is one, with dask's own scheduler otherwise.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd


def task(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as one lazy task (``dask.delayed``); an argument may be another task's result."""
    from dask import delayed

    return delayed(fn)(*args)


def held(obj: Any) -> Any:
    """An in-memory object as a task input, keyed by its content (``dask.delayed(obj, pure=True)``)."""
    from dask import delayed

    return delayed(obj, pure=True)


def frame_parts(frame: Any) -> list[Any]:
    """A dask DataFrame's partitions, each a lazy pandas frame."""
    return list(frame.to_delayed())


def frame_of_parts(parts: Sequence[Any], meta: pd.DataFrame) -> Any:
    """Lazy pandas partitions, each shaped like ``meta``, as one lazy dask DataFrame (not checked per part)."""
    import dask.dataframe as dd

    return dd.from_delayed(list(parts), meta=meta, verify_meta=False)


__all__ = ["frame_of_parts", "frame_parts", "held", "task"]
