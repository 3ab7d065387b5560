"""Opening a relational job's inputs lazily: two tables (or one self-linked table, or a schema graph) and
their links, as dask DataFrames (a Parquet file or partitioned directory, CSV as text).

Every schema column is encoded to codes per partition (bad values raise DataError naming table, column,
file and rule -- never the value -- when the partition is read, on the cluster); key and foreign-key columns are kept aside as
identifiers, never encoded; ids compared with text ids are compared as text, integers written either way
as their digits. Only metadata and headers are read here; nothing is computed and nothing written.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.errors import ConfigError, DataError
from privcube.relational_config import RelationalJob, TableSpec


def _read_raw(path: str, columns: list[str], what: str) -> tuple[Any, bool, str]:
    """The given raw columns of a Parquet/CSV input as a lazy dask DataFrame (CSV: all text), whether it was CSV
    and how messages name it. Only metadata and headers are read here (a missing column is refused now)."""
    import dask.dataframe as dd

    from privcube.storage.ingest import open_input, read_csv

    info = open_input(path, what=what, columns=columns)
    fmt, target, available = info.fmt, info.target, info.available
    absent = [c for c in columns if c not in available]
    if absent:
        raise DataError(f"{what}: column {absent[0]!r} is missing from {path!r}; it has columns {available[:30]}")
    if fmt == "csv":
        return read_csv(target, usecols=columns, dtype={c: "string" for c in columns}), True, info.label
    return dd.read_parquet(target, columns=columns), False, info.label


def _is_text(dtype: Any) -> bool:
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


def _encode_part(raw: pd.DataFrame, t: TableSpec, is_csv: bool, id_cols: list[str], text_ids: set[str],
                 source: str | None = None) -> pd.DataFrame:
    """Task: one partition's schema columns encoded to codes (DataError naming table, column, file and rule, never
    a value) plus its identifier columns (as comparable text where ``text_ids`` says so)."""
    from privcube.storage.ingest import encode_frame

    try:
        codes = encode_frame(raw[list(t.schema.names)], t.schema, parse_text=is_csv, source=source)
    except DataError as e:
        err = DataError(f"table {t.name!r}: {e}")
        err.__dict__.update(e.__dict__)  # what locates the file and row later (storage.ingest.locate_error)
        raise err from None
    out = codes.reset_index(drop=True)
    for c in id_cols:
        col = raw[c].reset_index(drop=True)
        out[c] = canonical_ids(col) if c in text_ids else col
    return out


def _open(t: TableSpec, id_cols: list[str]) -> tuple[Any, bool, list[str], str]:
    """A table's raw lazy frame, whether it is CSV, its identifier columns and how messages name it."""
    id_cols = [c for c in dict.fromkeys(id_cols) if c and c not in t.schema.names]
    raw, is_csv, label = _read_raw(t.path, [*t.schema.names, *id_cols], f"table {t.name!r}")
    return raw, is_csv, id_cols, label


def _encoded(t: TableSpec, opened: tuple[Any, bool, list[str], str], text_ids: set[str]) -> Any:
    """The lazily encoded table: codes (schema order) plus identifier columns, encoded per partition."""
    from privcube.storage.ingest import empty_codes

    raw, is_csv, id_cols, label = opened
    meta = empty_codes(t.schema)
    for c in id_cols:
        meta[c] = pd.Series([], dtype=object) if c in text_ids else raw._meta[c]
    return raw.map_partitions(_encode_part, t, is_csv, id_cols, text_ids, label, meta=meta)


def _text_pair(a: Any, b: Any) -> bool:
    """Whether two id columns are compared as text: either is text (numbers written as text, as numbers)."""
    return _is_text(a) or _is_text(b)


def _link_pairs(job: RelationalJob) -> tuple[Any, list[str]]:
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
    raw, _, _ = _read_raw(lk.path, cols, "links")
    return raw, cols


def _as_text(frame: Any, cols: list[str]) -> Any:
    """``frame`` with these id columns as comparable text (per partition)."""
    return frame.assign(**{c: frame[c].map_partitions(canonical_ids, meta=(c, object)) for c in cols})


def read_inputs(job: RelationalJob) -> tuple[dict[str, tuple[Any, Any]], dict[str, Any]]:
    """Open the job's tables and links lazily: ``(tables, links)`` as ``run_relational`` takes them, each table a
    dask DataFrame encoded per partition (bad values raise DataError naming table, column, file and rule when
    the partition is read, on the cluster); key and foreign-key columns are kept as identifiers. Reads only
    metadata and headers here; writes nothing."""
    lk = job.links
    if lk.kind == "one_to_many":
        child, parent = job.tables[lk.left], job.tables[lk.right]
        oc, op = _open(child, [child.key or "", lk.left_col]), _open(parent, [lk.right_col])
        text = _text_pair(oc[0]._meta[lk.left_col].dtype, op[0]._meta[lk.right_col].dtype)
        cframe = _encoded(child, oc, {lk.left_col} if text else set())
        pframe = _encoded(parent, op, {lk.right_col} if text else set())
        child_key = child.key or next(k for k in ("id", "row_id", "_id") if k not in child.schema and k != lk.left_col)
        tables = {child.name: (cframe, child.domain), parent.name: (pframe, parent.domain)}
        links: Any = {"from": f"{lk.left}.{lk.left_col}", "to": f"{lk.right}.{lk.right_col}", "child_key": child_key}
        return tables, links
    left, right = job.tables[lk.left], job.tables[lk.right]
    pairs, cols = _link_pairs(job)
    ol = _open(left, [lk.left_col])
    orr = ol if lk.left == lk.right else _open(right, [lk.right_col])
    text_l = _text_pair(pairs._meta[cols[0]].dtype, ol[0]._meta[lk.left_col].dtype)
    text_r = _text_pair(pairs._meta[cols[1]].dtype, orr[0]._meta[lk.right_col].dtype)
    if lk.left == lk.right:
        text_l = text_r = text_l or text_r
    lframe = _encoded(left, ol, {lk.left_col} if text_l else set())
    rframe = lframe if lk.left == lk.right else _encoded(right, orr, {lk.right_col} if text_r else set())
    pairs = _as_text(pairs, [c for c, t in zip(cols, (text_l, text_r)) if t])
    tables = {left.name: (lframe, left.domain), right.name: (rframe, right.domain)}
    links = {"pairs": pairs, "left": f"{lk.left}.{lk.left_col}", "right": f"{lk.right}.{lk.right_col}",
             "columns": cols, "missing_by_column": True}
    return tables, links


def read_graph_inputs(job: RelationalJob) -> tuple[dict[str, tuple[Any, Any]], list[tuple[Any, dict]]]:
    """A schema graph (list form of ``data.links``): every table opened once, lazily (codes + its key + its
    foreign keys), and per link the two frames as ``run_relational`` takes them (``{child, parent}`` with
    comparable ids) and its ``{from, to, child_key}``. Reads only metadata here; writes nothing."""
    opened: dict[str, tuple[Any, bool, list[str]]] = {}
    for name, t in job.tables.items():
        ids = [job.keys[name], *(f.left_col for f in job.fks if f.left == name)]
        has_key = t.key is not None or any(f.right == name for f in job.fks)  # else ids are row positions
        opened[name] = _open(t, [c for c in ids if c != job.keys[name] or has_key])
    text: dict[str, set[str]] = {n: set() for n in job.tables}
    for f in job.fks:
        if f.kind != "many_to_many" and _text_pair(opened[f.left][0]._meta[f.left_col].dtype, opened[f.right][0]._meta[f.right_col].dtype):
            text[f.left].add(f.left_col)
            text[f.right].add(f.right_col)
    frames = {n: (_encoded(t, opened[n], text[n]), t.domain) for n, t in job.tables.items()}
    per_link: list[tuple[Any, dict]] = []
    for f in job.fks:
        if f.kind == "many_to_many":  # a link table: read as the two-table many-to-many form reads it
            sub = replace(job, tables={f.left: job.tables[f.left], f.right: job.tables[f.right]}, links=f, fks=[])
            tables, links = read_inputs(sub)
            per_link.append((f, {"tables": tables, "links": links}))
            continue
        tables = {f.left: frames[f.left], f.right: frames[f.right]}
        spec = {"from": f"{f.left}.{f.left_col}", "to": f"{f.right}.{f.right_col}", "child_key": job.keys[f.left]}
        per_link.append((f, {"tables": tables, "links": spec}))
    return frames, per_link


__all__ = ["read_graph_inputs", "read_inputs"]
