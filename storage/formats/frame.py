"""A pandas or polars DataFrame given from Python (``privcube.run(config, data=frame)``) as an input format.

The frame is the input itself (no file): it is cut into partitions of ``PARTITION_ROWS`` rows that travel
with the task graph (see :mod:`privcube.storage.frames`); messages name a row by its position in the frame.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from privcube.core.errors import DataError
from privcube.storage.formats.base import InputFormat

#: rows per dask partition of an in-memory frame (each partition is encoded and counted as one task)
PARTITION_ROWS = 1_000_000


def as_pandas(frame: Any) -> pd.DataFrame:
    """A pandas view of a pandas or polars (eager or lazy) DataFrame; other objects are refused by type."""
    if isinstance(frame, pd.DataFrame):
        return _unique_columns(frame)
    cls = type(frame)
    if cls.__module__.split(".")[0] == "polars":
        if cls.__name__ == "LazyFrame":
            frame = frame.collect()
        if type(frame).__name__ == "DataFrame":
            try:
                return _unique_columns(frame.to_pandas())
            except ImportError as e:  # polars needs pyarrow to convert
                raise DataError(f"cannot convert the polars DataFrame to pandas: {e}") from None
    raise DataError(f"data: expected a pandas or polars DataFrame, got a {cls.__name__}")


def _unique_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame, refused when two of its columns share a name (as text: 1 and '1' clash too); columns that are
    not text (e.g. integers) are named by their text, as the schema names them."""
    names = [str(c) for c in frame.columns]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise DataError(f"the DataFrame has two columns named {n!r}; every column needs its own name: rename or "
                            "drop one of them")
        seen.add(n)
    if list(frame.columns) != names:
        frame = frame.set_axis(names, axis=1)
    return frame


#: what ``config.yaml`` records as ``data.path`` when the data was a DataFrame given in Python
FRAME_PLACEHOLDER = "<DataFrame given in Python>"


def is_frame(obj: Any) -> bool:
    """Whether ``obj`` is an in-memory table privcube accepts as data: pandas, polars (eager or lazy)."""
    if isinstance(obj, pd.DataFrame):
        return True
    cls = type(obj)
    return cls.__module__.split(".")[0] == "polars" and cls.__name__ in ("DataFrame", "LazyFrame")


class FrameFormat(InputFormat):
    """An in-memory pandas or polars (eager or lazy) DataFrame."""

    name = "dataframe"
    label = "DataFrame"
    description = ("a pandas or polars DataFrame given from Python as data.path (privcube.run(config, "
                   "data=frame)); typed columns, rows named by their position")
    abilities = frozenset({"in-memory"})

    @classmethod
    def guess_can_open(cls, path: Any) -> bool:
        return is_frame(path)

    def columns(self, file: Any, storage_options: Mapping[str, Any] | None) -> list[str]:
        """The frame's column names as text."""
        return [str(c) for c in as_pandas(file).columns]

    def open(self, target: Any, columns: Sequence[str] | None, *, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None, text_dtype: Any = "string") -> Any:
        """The frame's ``columns`` as a dask DataFrame of ``blocksize`` rows per partition (default
        ``PARTITION_ROWS``), indexed by row position."""
        import dask.dataframe as dd

        pdf = as_pandas(target)
        rows = max(1, int(blocksize)) if blocksize is not None else PARTITION_ROWS
        nparts = max(1, -(-len(pdf) // rows))
        picked = pdf if columns is None else pdf[list(columns)]
        return dd.from_pandas(picked.reset_index(drop=True), npartitions=nparts, sort=False)


__all__ = ["FRAME_PLACEHOLDER", "FrameFormat", "PARTITION_ROWS", "as_pandas", "is_frame"]
