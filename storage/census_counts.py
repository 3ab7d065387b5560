"""Exact counts of a census workload per geographic level: the numpy kernel run on each partition (issue 35).

A census workload asks, for every unit of a level (each state, county or tract), the marginal of a few
attributes (:class:`LevelTable`). :func:`count_partition` counts one partition's rows with one composite key and
one ``np.bincount`` per table, over the range of units the partition holds only (data written grouped by
geography gives small slices); :func:`add_slices` adds those slices into the whole tables. Rows carry the finest
unit's *index* (its position in the sorted map, :func:`finest_index` maps codes to it); a level's unit index is
``unit_of[level][finest index]`` (:func:`unit_indexes` builds both from the map).

:func:`open_partitions` lists an input's files and gives a picklable reader of one file that goes through the
input format's reader and the ingest encoder (``encode_frame``), the same checks as every other run. The
cluster driver is :func:`privcube.graphs.census_counts.count_tables`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.storage.formats import get_format
from privcube.storage.ingest import encode_frame, open_input
from privcube.storage.schema import Schema, load_schema


@dataclass(frozen=True)
class LevelTable:
    """One table to count: per unit of ``level``, the marginal on ``attributes`` (``()``: the unit totals)."""

    level: str
    attributes: tuple[str, ...] = ()


def unit_indexes(geo: Mapping[str, np.ndarray], finest: str) -> tuple[dict[str, np.ndarray], dict[str, int],
                                                                       dict[str, np.ndarray]]:
    """``(unit_of, n_units, codes)`` of a map read by :func:`~privcube.storage.geography_map.read_geography_map`:
    ``unit_of[level][i]`` is the index of finest unit ``i``'s unit at ``level``, ``codes[level][j]`` the code of
    unit ``j`` (units indexed in code order; the finest level's index is its position in the map)."""
    unit_of, n_units, codes = {}, {}, {}
    for level, column in geo.items():
        uniq, inverse = np.unique(np.asarray(column, dtype=np.int64), return_inverse=True)
        codes[level], n_units[level] = uniq, len(uniq)
        unit_of[level] = np.arange(len(column), dtype=np.int64) if level == finest else inverse.astype(np.int64)
    return unit_of, n_units, codes


def finest_index(values: np.ndarray, finest_codes: np.ndarray, column: str, source: str = "the data") -> np.ndarray:
    """Finest-unit codes of the data -> their index in the sorted map ``finest_codes``; codes the map lacks are
    one DataError naming the column and how many rows hold them (never the codes)."""
    values = np.asarray(values)
    n = len(finest_codes)
    if n and finest_codes[0] == 0 and finest_codes[-1] == n - 1:  # codes 0..n-1: the code is the index
        index = values.astype(np.int64, copy=False)
        bad = int(np.count_nonzero((index < 0) | (index >= n))) if len(index) else 0
    else:
        index = np.minimum(np.searchsorted(finest_codes, values), max(n - 1, 0)).astype(np.int64)
        bad = int(np.count_nonzero(finest_codes[index] != values)) if len(values) else 0
    if bad:
        raise DataError(f"column {column!r} of {source}: {bad} rows hold a unit that is not in the geography map")
    return index


def _check_domain(name: str, column: np.ndarray, size: int) -> None:
    """Codes of ``name`` within ``[0, size)``; else one DataError with the column and the count of rows."""
    if not len(column):
        return
    if column.dtype.kind == "u":
        bad = int(np.count_nonzero(column >= size)) if column.max() >= size else 0
    else:
        bad = int(np.count_nonzero((column < 0) | (column >= size))) if column.min() < 0 or column.max() >= size else 0
    if bad:
        raise DataError(f"column {name!r}: {bad} rows hold a code outside the domain [0, {size})")


_FEW_RUNS = 64  # a level whose units form at most this many runs in a partition is counted run by run


def _runs(unit: np.ndarray) -> np.ndarray | None:
    """Start offsets (plus the end) of the runs of equal units when ``unit`` is sorted and has few runs, else None."""
    if len(unit) < 2:
        return np.array([0, len(unit)])
    step = np.diff(unit)
    if step.min() < 0:
        return None
    cuts = np.flatnonzero(step)
    return None if len(cuts) >= _FEW_RUNS else np.concatenate([[0], cuts + 1, [len(unit)]])


def _key_into(buf: np.ndarray, columns: Mapping[str, np.ndarray], attributes: tuple[str, ...],
              shape: tuple[int, ...], rows: slice, base: np.ndarray | None = None) -> np.ndarray:
    """The composite key ``(base, *attributes)`` of ``rows``, written into the int64 buffer ``buf`` (reused: dask's
    workers set ``MALLOC_TRIM_THRESHOLD_``, under which every fresh large array costs page faults)."""
    key = buf[: rows.stop - rows.start]
    cols = [np.asarray(columns[a])[rows] for a in attributes]
    if base is not None:
        np.multiply(base, math.prod(shape), out=key)
    elif len(cols) > 1:
        np.multiply(cols[0], math.prod(shape[1:]), out=key, dtype=np.int64)  # one pass: widen and scale
        cols, shape = cols[1:], shape[1:]
    else:
        np.copyto(key, cols[0], casting="unsafe")
        return key
    for i, col in enumerate(cols):
        stride = math.prod(shape[i + 1:])
        if stride == 1:
            np.add(key, col, out=key, casting="unsafe")
        else:  # a middle attribute of a 3-way key: the only temporary
            np.add(key, np.multiply(col, stride, dtype=np.int64), out=key)
    return key


def _by_runs(columns: Mapping[str, np.ndarray], tables: list[LevelTable], shapes: list[tuple[int, ...]],
             unit: np.ndarray, runs: np.ndarray, lo: int, width: int,
             buf: np.ndarray) -> dict[LevelTable, tuple[int, np.ndarray]]:
    """A level with few units here (data grouped by geography): per run of one unit, keys of the attributes only
    (no unit part), one bincount per table."""
    out = {t: (lo, np.zeros((width, *shape), dtype=np.int64)) for t, shape in zip(tables, shapes)}
    for a, b in zip(runs[:-1], runs[1:]):
        u = int(unit[a]) - lo
        for t, shape in zip(tables, shapes):
            if not shape:
                out[t][1][u] += b - a
                continue
            key = _key_into(buf, columns, t.attributes, shape, slice(int(a), int(b)))
            out[t][1][u] += np.bincount(key, minlength=math.prod(shape)).reshape(shape)
    return out


def _by_key(columns: Mapping[str, np.ndarray], tables: list[LevelTable], shapes: list[tuple[int, ...]],
            unit: np.ndarray, lo: int, width: int, buf: np.ndarray) -> dict[LevelTable, tuple[int, np.ndarray]]:
    """Any layout: one composite key (unit, then the attributes) and one bincount per table; the unit key shared."""
    out = {}
    base = unit.astype(np.int64) - lo
    rows = slice(0, len(unit))
    for table, shape in zip(tables, shapes):
        key = _key_into(buf, columns, table.attributes, shape, rows, base)
        out[table] = (lo, np.bincount(key, minlength=width * math.prod(shape)).reshape((width, *shape)))
    return out


def count_partition(columns: Mapping[str, np.ndarray], unit_of: Mapping[str, np.ndarray], finest: str,
                    tables: Sequence[LevelTable], sizes: Mapping[str, int],
                    n_units: Mapping[str, int]) -> dict[LevelTable, tuple[int, np.ndarray]]:
    """Per table ``(first unit, counts)``: ``counts[u - first, *cell]`` rows of unit ``u`` in that cell, for the
    units ``first .. first + len(counts) - 1`` this partition holds (int64). ``columns[finest]`` holds finest-unit
    indexes (:func:`finest_index`). A level's unit keys are computed once for its tables; a level with few units
    in the partition (sorted: data grouped by geography) is counted unit by unit, without the unit in the key."""
    fin = np.asarray(columns[finest])
    _check_domain(finest, fin, n_units[finest])
    for name in dict.fromkeys(a for t in tables for a in t.attributes):
        _check_domain(name, np.asarray(columns[name]), sizes[name])
    out: dict[LevelTable, tuple[int, np.ndarray]] = {}
    buf = np.empty(len(fin), dtype=np.int64)  # every table's key is written here
    for level in dict.fromkeys(t.level for t in tables):
        unit = np.asarray(unit_of[level])[fin] if level in unit_of else fin  # a map may reorder the finest units
        mine = [t for t in tables if t.level == level]
        shapes = [tuple(int(sizes[a]) for a in t.attributes) for t in mine]
        if not len(unit):
            out.update({t: (0, np.zeros((0, *shape), dtype=np.int64)) for t, shape in zip(mine, shapes)})
            continue
        lo = int(unit.min())
        width = int(unit.max()) - lo + 1
        runs = _runs(unit)
        out.update(_by_runs(columns, mine, shapes, unit, runs, lo, width, buf) if runs is not None
                   else _by_key(columns, mine, shapes, unit, lo, width, buf))
    return out


def empty_totals(tables: Sequence[LevelTable], sizes: Mapping[str, int],
                 n_units: Mapping[str, int]) -> dict[LevelTable, np.ndarray]:
    """Zero int64 tables ``(n_units[level], *sizes)`` to accumulate into with :func:`add_slices`."""
    return {t: np.zeros((int(n_units[t.level]), *(int(sizes[a]) for a in t.attributes)), dtype=np.int64)
            for t in tables}


def add_slices(total: dict[LevelTable, np.ndarray], part: Mapping[LevelTable, tuple[int, np.ndarray]]) -> None:
    """Add a partition's slices (:func:`count_partition`) into the whole tables ``total``, in place."""
    for table, (first, counts) in part.items():
        if len(counts):
            total[table][first:first + len(counts)] += counts


@dataclass(frozen=True)
class CodeReader:
    """Reads one file of an input as integer code columns (numpy), through the input format's chunk reader and
    the ingest encoder (skipped for a chunk whose columns are all integer codes inside the domain already: the
    encoder would only copy them); with ``finest``, that column becomes finest-unit indexes
    (:func:`finest_index`). Picklable: a cluster's workers read their files themselves."""

    fmt: str
    schema: Schema
    storage_options: Mapping[str, Any] | None = None
    finest: str | None = None
    finest_codes: np.ndarray | None = field(default=None, repr=False)
    rows: int = 1 << 22  # rows per chunk read and encoded at once

    def _codes(self, chunk: Any) -> dict[str, np.ndarray] | None:
        """The chunk's columns as they are when every one is already integer codes inside its domain (checked by
        min and max, no copy), else None: ``encode_frame`` then encodes the chunk, or raises its one-line error."""
        out = {}
        for a in self.schema:
            if a.kind != "integer" or a.missing != "error" or a.clip:
                return None
            v = chunk[a.name].to_numpy()
            if v.dtype.kind not in "iu" or (len(v) and (v.min() < 0 or v.max() >= a.n_values)):
                return None
            out[a.name] = v if v.dtype == a.dtype else v.astype(a.dtype)
        return out

    def __call__(self, file: str) -> dict[str, np.ndarray]:
        """The schema's columns of ``file`` as code arrays."""
        fmt = get_format(self.fmt)
        names = list(self.schema.names)
        parts = [self._codes(chunk) or encode_frame(chunk, self.schema, parse_text=fmt.text_values,
                                                    source=f"file {file!r}")
                 for chunk in fmt.chunks(file, names, self.storage_options, self.rows)]
        if len(parts) == 1:
            cols = {n: np.asarray(parts[0][n]) for n in names}
        else:
            cols = {n: (np.concatenate([np.asarray(p[n]) for p in parts]) if parts
                        else np.zeros(0, dtype=self.schema[n].dtype)) for n in names}
        if self.finest is not None and self.finest_codes is not None:
            cols[self.finest] = finest_index(cols[self.finest], self.finest_codes, self.finest, f"file {file!r}")
        return cols


def open_partitions(path: Any, schema: Schema | Domain | Mapping[str, Any] | str, columns: Sequence[str], *,
                    finest: str | None = None, finest_codes: np.ndarray | None = None,
                    storage_options: Mapping[str, Any] | None = None,
                    fmt: str | None = None) -> tuple[list[str], CodeReader]:
    """(the input's files, a reader of one file's ``columns`` as codes): the partitions :func:`count_partition`
    counts. A column the input lacks is a DataError now, from the files' headers or footers."""
    schema = load_schema(schema).project(list(columns))
    names = list(schema.names)
    info = open_input(path, storage_options, columns=names, fmt=fmt)
    absent = [n for n in names if n not in info.available]
    if absent:
        raise DataError(f"column {absent[0]!r} is missing from {info.label}; the data has columns "
                        f"{info.available[:30]}")
    files = info.format.files(info.target, info.storage_options)
    return files, CodeReader(info.fmt, schema, info.storage_options, finest, finest_codes)


__all__ = ["CodeReader", "LevelTable", "add_slices", "count_partition", "empty_totals", "finest_index",
           "open_partitions", "unit_indexes"]
