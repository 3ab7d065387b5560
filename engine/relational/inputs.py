"""Opening a relational job's inputs lazily: two tables (or one self-linked table, or a schema graph) and
their links, as dask DataFrames (a Parquet file or partitioned directory, CSV as text), in the shape
``run_relational`` takes.

Every schema column is encoded to codes per partition (bad values raise DataError naming table, column,
file and rule -- never the value -- when the partition is read, on the cluster); key and foreign-key columns
are kept aside as identifiers, never encoded; ids compared with text ids are compared as text, integers
written either way as their digits (reading and encoding: ``privcube.storage.keyed_frames``; here: which
columns are identifiers and which pairs of them are compared). Only metadata and headers are read here;
nothing is computed and nothing written.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from privcube.core.errors import ConfigError
from privcube.relational.config import RelationalJob, TableSpec
from privcube.storage.keyed_frames import column_dtype, encode_lazily, ids_as_text, is_text, read_columns


def _open(t: TableSpec, id_cols: list[str]) -> tuple[Any, bool, list[str], str]:
    """A table's raw lazy frame, whether it is CSV, its identifier columns and how messages name it."""
    id_cols = [c for c in dict.fromkeys(id_cols) if c and c not in t.schema.names]
    raw, is_csv, label = read_columns(t.path, [*t.schema.names, *id_cols], f"table {t.name!r}")
    return raw, is_csv, id_cols, label


def _encoded(t: TableSpec, opened: tuple[Any, bool, list[str], str], text_ids: set[str]) -> Any:
    """The lazily encoded table: codes (schema order) plus identifier columns, encoded per partition."""
    raw, is_csv, id_cols, label = opened
    return encode_lazily(raw, t.schema, t.name, is_csv, id_cols, text_ids, label)


def _text_pair(a: Any, b: Any) -> bool:
    """Whether two id columns are compared as text: either is text (numbers written as text, as numbers)."""
    return is_text(a) or is_text(b)


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
    raw, _, _ = read_columns(lk.path, cols, "links")
    return raw, cols


def read_inputs(job: RelationalJob) -> tuple[dict[str, tuple[Any, Any]], dict[str, Any]]:
    """Open the job's tables and links lazily: ``(tables, links)`` as ``run_relational`` takes them, each table a
    dask DataFrame encoded per partition (bad values raise DataError naming table, column, file and rule when
    the partition is read, on the cluster); key and foreign-key columns are kept as identifiers. Reads only
    metadata and headers here; writes nothing."""
    lk = job.links
    if lk.kind == "one_to_many":
        child, parent = job.tables[lk.left], job.tables[lk.right]
        oc, op = _open(child, [child.key or "", lk.left_col]), _open(parent, [lk.right_col])
        text = _text_pair(column_dtype(oc[0], lk.left_col), column_dtype(op[0], lk.right_col))
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
    text_l = _text_pair(column_dtype(pairs, cols[0]), column_dtype(ol[0], lk.left_col))
    text_r = _text_pair(column_dtype(pairs, cols[1]), column_dtype(orr[0], lk.right_col))
    if lk.left == lk.right:
        text_l = text_r = text_l or text_r
    lframe = _encoded(left, ol, {lk.left_col} if text_l else set())
    rframe = lframe if lk.left == lk.right else _encoded(right, orr, {lk.right_col} if text_r else set())
    pairs = ids_as_text(pairs, [c for c, t in zip(cols, (text_l, text_r)) if t])
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
        if f.kind != "many_to_many" and _text_pair(column_dtype(opened[f.left][0], f.left_col),
                                                   column_dtype(opened[f.right][0], f.right_col)):
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
