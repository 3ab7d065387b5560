"""Tables read lazily with identifier columns beside their codes: every schema column encoded per partition,
key and foreign-key columns kept aside as identifiers, never encoded.

A Parquet file or partitioned directory, or CSV read as text (``ingest.open_input``), becomes a lazy dask
DataFrame; bad values raise DataError naming table, column, file and rule -- never the value -- when a
partition is read, on the cluster. Identifiers compared with text identifiers are compared as text, an
integer written either way becoming its digits (``canonical_ids``). Only metadata and headers are read
here; nothing is computed and nothing written.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.errors import DataError


def read_columns(path: str, columns: Sequence[str], what: str) -> tuple[Any, bool, str]:
    """The given raw columns of a Parquet/CSV input as a lazy dask DataFrame (CSV: all text), whether it was CSV
    and how messages name it. Only metadata and headers are read here (a missing column is refused now)."""
    import dask.dataframe as dd

    from privcube.storage.ingest import open_input, read_csv

    columns = list(columns)
    info = open_input(path, what=what, columns=columns)
    fmt, target, available = info.fmt, info.target, info.available
    absent = [c for c in columns if c not in available]
    if absent:
        raise DataError(f"{what}: column {absent[0]!r} is missing from {path!r}; it has columns {available[:30]}")
    if fmt == "csv":
        return read_csv(target, usecols=columns, dtype={c: "string" for c in columns}), True, info.label
    return dd.read_parquet(target, columns=columns), False, info.label


def column_dtype(frame: Any, column: str) -> Any:
    """The dtype of one column of a lazy frame, read from its metadata (no data)."""
    return frame._meta[column].dtype


def is_text(dtype: Any) -> bool:
    """Whether values of ``dtype`` are text (string or object)."""
    return pd.api.types.is_string_dtype(dtype) or dtype == object


def canonical_ids(series: pd.Series) -> pd.Series:
    """Identifier values as comparable text, the same in every partition: a value that is an integer
    (written as text or as a number) becomes its decimal digits, anything else stays as written."""
    out = series.astype(object)
    num = pd.to_numeric(series, errors="coerce")
    whole = num.notna().to_numpy() & (num.to_numpy(dtype=float, na_value=np.nan) == np.floor(
        num.to_numpy(dtype=float, na_value=np.nan)))
    if whole.any():
        out = out.copy()
        out[whole] = [str(int(v)) for v in num[whole].tolist()]
    out[series.isna().to_numpy()] = None
    return out


def encode_part(raw: pd.DataFrame, schema: Any, table: str, is_csv: bool, id_cols: list[str], text_ids: set[str],
                source: str | None = None) -> pd.DataFrame:
    """Task: one partition's schema columns encoded to codes (DataError naming table, column, file and rule, never
    a value) plus its identifier columns (as comparable text where ``text_ids`` says so)."""
    from privcube.storage.ingest import encode_frame

    try:
        codes = encode_frame(raw[list(schema.names)], schema, parse_text=is_csv, source=source)
    except DataError as e:
        err = DataError(f"table {table!r}: {e}")
        err.__dict__.update(e.__dict__)  # what locates the file and row later (storage.ingest.locate_error)
        raise err from None
    out = codes.reset_index(drop=True)
    for c in id_cols:
        col = raw[c].reset_index(drop=True)
        out[c] = canonical_ids(col) if c in text_ids else col
    return out


def encode_lazily(raw: Any, schema: Any, table: str, is_csv: bool, id_cols: list[str], text_ids: set[str],
                  label: str) -> Any:
    """The lazily encoded table: codes (schema order) plus identifier columns, encoded per partition."""
    from privcube.storage.ingest import empty_codes

    meta = empty_codes(schema)
    for c in id_cols:
        meta[c] = pd.Series([], dtype=object) if c in text_ids else raw._meta[c]
    return raw.map_partitions(encode_part, schema, table, is_csv, id_cols, text_ids, label, meta=meta)


def ids_as_text(frame: Any, columns: Sequence[str]) -> Any:
    """``frame`` with these identifier columns as comparable text (per partition)."""
    return frame.assign(**{c: frame[c].map_partitions(canonical_ids, meta=(c, object)) for c in columns})


__all__ = ["canonical_ids", "column_dtype", "encode_lazily", "encode_part", "ids_as_text", "is_text", "read_columns"]
