"""In-memory tables as input: a pandas or polars DataFrame given from Python instead of ``data.path``.

The frame becomes a lazy dask DataFrame (``dask.dataframe.from_pandas``) encoded partition by partition
with the same kernel as Parquet/CSV input (``encode_frame``), so a run on a DataFrame counts exactly what
a run on the same rows written to Parquet counts, on threads or on any dask cluster (the partitions are
shipped with the task graph; nothing is written to disk). Errors name columns, types, rules and row
positions (the frame's rows counted from 0), never values of the frame.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.storage.ingest import EncodedTable, empty_codes, encode_frame
from privcube.storage.schema import Schema, load_schema

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


def open_frame(frame: Any, schema: Schema | Domain | Mapping[str, Any] | str,
               columns: Sequence[str] | None = None, *, partition_rows: int = PARTITION_ROWS) -> EncodedTable:
    """Lazily encode an in-memory DataFrame by ``schema`` (only the schema's columns, or ``columns``).

    A missing column raises DataError now (naming it and the frame's columns); value errors surface when
    partitions are computed, as for files.
    """
    import dask.dataframe as dd

    pdf = as_pandas(frame)
    schema = load_schema(schema)
    if columns is not None:
        schema = schema.project(list(columns))
    names = list(schema.names)
    available = [str(c) for c in pdf.columns]
    absent = [n for n in names if n not in available]
    if absent:
        raise DataError(f"column {absent[0]!r} is missing from the DataFrame; it has columns {available[:30]}")
    nparts = max(1, math.ceil(len(pdf) / max(1, int(partition_rows))))
    raw = dd.from_pandas(pdf[names].reset_index(drop=True), npartitions=nparts, sort=False)
    encoded = raw.map_partitions(encode_frame, schema, parse_text=False, source="the DataFrame", positional=True,
                                 meta=empty_codes(schema))
    return EncodedTable(encoded, schema, f"<{type(frame).__module__.split('.')[0]} DataFrame>")


__all__ = ["PARTITION_ROWS", "as_pandas", "open_frame"]
