"""In-memory tables as input: a pandas or polars DataFrame given from Python instead of ``data.path``.

The frame becomes a lazy dask DataFrame (``dask.dataframe.from_pandas``) encoded partition by partition
with the same kernel as Parquet/CSV input (``encode_frame``), so a run on a DataFrame counts exactly what
a run on the same rows written to Parquet counts, on threads or on any dask cluster (the partitions are
shipped with the task graph; nothing is written to disk). Errors name columns, types, rules and row
positions (the frame's rows counted from 0), never values of the frame.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.storage.formats.frame import PARTITION_ROWS, FrameFormat, as_pandas
from privcube.storage.ingest import EncodedTable, empty_codes, encode_frame
from privcube.storage.schema import Schema, load_schema


def open_frame(frame: Any, schema: Schema | Domain | Mapping[str, Any] | str,
               columns: Sequence[str] | None = None, *, partition_rows: int = PARTITION_ROWS) -> EncodedTable:
    """Lazily encode an in-memory DataFrame by ``schema`` (only the schema's columns, or ``columns``).

    A missing column raises DataError now (naming it and the frame's columns); value errors surface when
    partitions are computed, as for files.
    """
    pdf = as_pandas(frame)
    schema = load_schema(schema)
    if columns is not None:
        schema = schema.project(list(columns))
    names = list(schema.names)
    available = [str(c) for c in pdf.columns]
    absent = [n for n in names if n not in available]
    if absent:
        raise DataError(f"column {absent[0]!r} is missing from the DataFrame; it has columns {available[:30]}")
    raw = FrameFormat().open(pdf, names, blocksize=partition_rows)
    encoded = raw.map_partitions(encode_frame, schema, parse_text=False, source="the DataFrame", positional=True,
                                 meta=empty_codes(schema))
    return EncodedTable(encoded, schema, f"<{type(frame).__module__.split('.')[0]} DataFrame>")


__all__ = ["open_frame"]
