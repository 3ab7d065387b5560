"""Reading a relational job's inputs: two tables (or one self-linked table) and their links.

Every schema column is encoded to codes (bad values raise DataError naming table, column and value); key
and foreign-key columns are kept aside as identifiers, never encoded; identifiers written as numbers in
text are compared as numbers, text ids with numeric ids as text. Reads private data; writes nothing.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from privcube.errors import ConfigError, DataError
from privcube.relational_config import RelationalJob, TableSpec


def _read_raw(path: str, columns: list[str], what: str) -> tuple[pd.DataFrame, bool]:
    """The given raw columns of a Parquet/CSV input as pandas (CSV: all text), and whether it was CSV."""
    import dask.dataframe as dd

    from privcube.storage.ingest import input_columns, read_csv

    fmt, target, available = input_columns(path, what=what, columns=columns)
    absent = [c for c in columns if c not in available]
    if absent:
        raise DataError(f"{what}: column {absent[0]!r} is missing from {path!r}; it has columns {available[:30]}")
    if fmt == "csv":
        raw = read_csv(target, usecols=columns, dtype={c: "string" for c in columns})
    else:
        raw = dd.read_parquet(target, columns=columns)
    return raw.compute().reset_index(drop=True), fmt == "csv"


def _ids(series: pd.Series) -> pd.Series:
    """Identifier values in a comparable form (numbers written as text become numbers)."""
    if pd.api.types.is_string_dtype(series.dtype) or series.dtype == object:
        num = pd.to_numeric(series, errors="coerce")
        if num.notna().sum() == series.notna().sum() and (num.dropna() == np.floor(num.dropna())).all():
            return num.astype("Int64") if series.isna().any() else num.astype(np.int64)
        return series.astype(object)
    return series


def _read_table(t: TableSpec, id_cols: list[str]) -> pd.DataFrame:
    """Encoded attribute codes (schema order) plus the raw identifier columns of one table."""
    from privcube.storage.ingest import encode_frame

    id_cols = list(dict.fromkeys(c for c in id_cols if c))
    raw, is_csv = _read_raw(t.path, [*t.schema.names, *id_cols], f"table {t.name!r}")
    try:
        codes = encode_frame(raw[list(t.schema.names)], t.schema, parse_text=is_csv)
    except DataError as e:
        raise DataError(f"table {t.name!r}: {e}") from None
    out = codes.astype(np.int64)
    for c in id_cols:
        out[c] = _ids(raw[c]).to_numpy()
    return out


def _link_pairs(job: RelationalJob) -> tuple[pd.DataFrame, list[str]]:
    lk = job.links
    assert lk.path is not None
    if lk.columns is not None:
        cols = list(lk.columns)
    else:
        from privcube.storage.ingest import input_columns

        _, _, available = input_columns(lk.path, what="links")
        dotted = [f"{lk.left}.{lk.left_col}", f"{lk.right}.{lk.right_col}"]
        if dotted[0] != dotted[1] and all(c in available for c in dotted):
            cols = dotted
        elif len(available) == 2:
            cols = available
        else:
            raise ConfigError(f"data.links.columns: the link file has columns {available[:30]}; name the two id "
                              "columns as columns: [left, right]" + (" (source, target)" if lk.left == lk.right else ""))
    raw, _ = _read_raw(lk.path, cols, "links")
    for c in cols:
        raw[c] = _ids(raw[c]).to_numpy()
        if raw[c].isna().any():
            r = int(np.flatnonzero(raw[c].isna().to_numpy())[0])
            raise DataError(f"links: column {c!r} is missing a value in row {r}")
    return raw, cols


def _harmonise(a: pd.Series, b: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Compare text ids with numeric ids as text."""
    na, nb = pd.api.types.is_numeric_dtype(a.dtype), pd.api.types.is_numeric_dtype(b.dtype)
    if na != nb:
        return a.astype(str), b.astype(str)
    return a, b


def read_inputs(job: RelationalJob) -> tuple[dict[str, tuple[pd.DataFrame, Any]], dict[str, Any]]:
    """Read and encode the job's tables and links: ``(tables, links)`` as ``run_relational`` takes them.

    Every schema column is encoded to codes (bad values raise DataError naming table, column and
    value); key and foreign-key columns are kept as identifiers. Reads private data; writes nothing.
    """
    lk = job.links
    if lk.kind == "one_to_many":
        child, parent = job.tables[lk.left], job.tables[lk.right]
        cframe = _read_table(child, [child.key or "", lk.left_col])
        pframe = _read_table(parent, [lk.right_col])
        a, b = _harmonise(cframe[lk.left_col], pframe[lk.right_col])
        cframe[lk.left_col], pframe[lk.right_col] = a.to_numpy(), b.to_numpy()
        child_key = child.key or next(k for k in ("id", "row_id", "_id") if k not in child.schema and k != lk.left_col)
        tables = {child.name: (cframe, child.domain), parent.name: (pframe, parent.domain)}
        links: Any = {"from": f"{lk.left}.{lk.left_col}", "to": f"{lk.right}.{lk.right_col}", "child_key": child_key}
    else:
        left, right = job.tables[lk.left], job.tables[lk.right]
        lframe = _read_table(left, [lk.left_col])
        rframe = lframe if lk.left == lk.right else _read_table(right, [lk.right_col])
        pairs, cols = _link_pairs(job)
        for c, frame, key in ((cols[0], lframe, lk.left_col), (cols[1], rframe, lk.right_col)):
            a, b = _harmonise(pairs[c], frame[key])
            pairs[c], frame[key] = a.to_numpy(), b.to_numpy()
        tables = {left.name: (lframe, left.domain), right.name: (rframe, right.domain)}
        links = {"pairs": pairs, "left": f"{lk.left}.{lk.left_col}", "right": f"{lk.right}.{lk.right_col}",
                 "columns": cols}
    return tables, links


def read_graph_inputs(job: RelationalJob) -> tuple[dict[str, tuple[pd.DataFrame, Any]], list[tuple[Any, dict]]]:
    """A schema graph (list form of ``data.links``): every table read once (codes + its key + its foreign keys),
    and per link the two frames as ``run_relational`` takes them (``{child, parent}`` with comparable ids) and
    its ``{from, to, child_key}``. Reads private data; writes nothing."""
    frames: dict[str, tuple[pd.DataFrame, Any]] = {}
    for name, t in job.tables.items():
        ids = [job.keys[name], *(f.left_col for f in job.fks if f.left == name)]
        has_key = t.key is not None or any(f.right == name for f in job.fks)  # else ids are row positions
        ids = [c for c in ids if c != job.keys[name] or has_key]
        frames[name] = (_read_table(t, ids), t.domain)
    per_link: list[tuple[Any, dict]] = []
    for f in job.fks:
        if f.kind == "many_to_many":  # a link table: read as the two-table many-to-many form reads it
            sub = replace(job, tables={f.left: job.tables[f.left], f.right: job.tables[f.right]}, links=f, fks=[])
            tables, links = read_inputs(sub)
            per_link.append((f, {"tables": tables, "links": links}))
            continue
        cframe = frames[f.left][0].copy()
        pframe = frames[f.right][0].copy()
        a, b = _harmonise(cframe[f.left_col], pframe[f.right_col])
        cframe[f.left_col], pframe[f.right_col] = a.to_numpy(), b.to_numpy()
        tables = {f.left: (cframe, frames[f.left][1]), f.right: (pframe, frames[f.right][1])}
        spec = {"from": f"{f.left}.{f.left_col}", "to": f"{f.right}.{f.right_col}", "child_key": job.keys[f.left]}
        per_link.append((f, {"tables": tables, "links": spec}))
    return frames, per_link


__all__ = ["read_graph_inputs", "read_inputs"]
