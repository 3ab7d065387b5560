"""Lazy ingest of any input format: column projection, encoding to integer codes, validation.

``open_table`` asks the input's format (:mod:`privcube.storage.formats`: Parquet, CSV, Arrow IPC, or a
registered plug-in) for a dask DataFrame that reads only the schema's columns and encodes each
partition with ``encode_frame`` (pure pandas/numpy), so the table is never held in memory at once.
Bad data raises ``DataError`` naming the column, the file (or the DataFrame) with the row where it can be
found, and the rule broken -- never the offending value (see :func:`locate_error`).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.storage.formats import DEFAULT_FORMAT, FORMATS, get_format, guess_format, loaded_formats
from privcube.storage.formats.base import full_path, one_line as _one_line, source_str as _source_str
from privcube.storage.formats.csv import read_csv
from privcube.storage.schema import Attribute, Schema, category_text, edge_text, load_schema

_MAX_SHOWN = 10


# ---- per-partition kernel ----------------------------------------------------------------------
# Errors name the column, where it was read (the file, or the DataFrame, and the row when known) and the rule
# broken, never a value: a value outside the public domain is exactly the rare, identifying one.

def _first_pos(mask: np.ndarray) -> int:
    """Position of the first row where ``mask`` holds."""
    return int(np.flatnonzero(mask)[0])


def _is_text(series: pd.Series) -> bool:
    """Whether the column holds text (string dtype or object)."""
    return pd.api.types.is_string_dtype(series.dtype) or series.dtype == object


class Where:
    """Where a partition was read from, for messages: ``source`` (a file, an input, the DataFrame) and whether
    the partition's index is the row position in it (an in-memory frame, reset to a RangeIndex)."""

    def __init__(self, source: str | None = None, positional: bool = False) -> None:
        self.source, self.positional = source, positional

    def text(self, series: pd.Series, pos: int | None) -> str:
        where = f" of {self.source}" if self.source else ""
        if self.positional and pos is not None:
            try:
                where += f", row {int(series.index[pos])}"
            except (TypeError, ValueError, IndexError):
                pass
        return where


_NOWHERE = Where()


def value_error(name: str, rule: str, series: pd.Series | None = None, mask: np.ndarray | None = None,
                where: Where = _NOWHERE, *, attr: Attribute | None = None, parse_text: bool = False) -> DataError:
    """DataError "column 'x' of SOURCE, row R: RULE" -- the column, where, and the rule broken, never the value.

    It carries what :func:`locate_error` needs to find the file and row of a file input afterwards: the rule,
    the row's position in the partition, the column and the attribute (public schema) it was checked against."""
    pos = _first_pos(mask) if mask is not None and mask.any() else None
    err = DataError(f"column {name!r}{where.text(series, pos) if series is not None else ''}: {rule}")
    err.privcube_rule = rule  # type: ignore[attr-defined]
    err.privcube_row = pos  # type: ignore[attr-defined]
    err.privcube_check = (name, attr, parse_text,  # type: ignore[attr-defined]
                          None if where.positional else where.source)
    return err


def _text_where_numbers(series: pd.Series, expected: str) -> str:
    return f"holds text where {expected} are expected (column dtype {series.dtype}); store the column as numbers"


def _to_number(attr: Attribute, series: pd.Series, parse_text: bool, expected: str, where: Where) -> np.ndarray:
    """Column as float64/int64 numbers (NaN for missing), rejecting text unless ``parse_text``."""
    dt = series.dtype
    if isinstance(dt, pd.CategoricalDtype):  # a pandas categorical of numbers (or of text): its values
        cats = dt.categories
        if pd.api.types.is_numeric_dtype(cats.dtype) and not pd.api.types.is_bool_dtype(cats.dtype):
            series = series.astype(np.float64 if series.isna().any() or cats.dtype.kind == "f" else cats.dtype)
        else:
            series = series.astype(object)
        dt = series.dtype
    if pd.api.types.is_bool_dtype(dt):
        return series.to_numpy(dtype=np.int64)
    if pd.api.types.is_integer_dtype(dt) and not isinstance(dt, pd.api.extensions.ExtensionDtype):
        return series.to_numpy()
    if pd.api.types.is_numeric_dtype(dt) and not pd.api.types.is_complex_dtype(dt):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    if _is_text(series):
        notna = series.notna().to_numpy()
        if not parse_text:
            is_str = series.map(lambda v: isinstance(v, (str, bytes)), na_action="ignore").fillna(False)
            is_str = is_str.to_numpy(dtype=bool)
            if is_str.any():
                raise value_error(attr.name, _text_where_numbers(series, expected), series, is_str, where,
                                  attr=attr, parse_text=parse_text)
        num = pd.to_numeric(series, errors="coerce")
        bad = notna & num.isna().to_numpy()
        if bad.any():
            what = "a value is not a number" if parse_text else f"a value is not a number (column dtype {dt})"
            raise value_error(attr.name, f"{what}; the attribute is {attr.kind} and needs {expected}", series, bad,
                              where, attr=attr, parse_text=parse_text)
        return num.to_numpy(dtype=np.float64, na_value=np.nan)
    mask = series.notna().to_numpy()
    if not mask.any():
        return np.full(len(series), np.nan)
    raise value_error(attr.name, f"column dtype {dt} cannot hold {expected} (attribute type {attr.kind})", series,
                      mask, where, attr=attr, parse_text=parse_text)


def _missing(attr: Attribute, series: pd.Series, na: np.ndarray, where: Where, parse_text: bool) -> None:
    """Raise unless the attribute encodes missing values."""
    if na.any() and attr.missing == "error" and attr.from_domain:
        raise value_error(
            attr.name, "a value is missing, but an integer-coded domain {column: size} cannot hold missing values; "
            "describe the data with a rich schema instead (data.schema) whose entry for this column has missing: "
            f"code, e.g. {{name: {attr.name}, type: integer, size: {attr.size}, missing: code}} (code {attr.size} "
            "then means missing)", series, na, where, attr=attr, parse_text=parse_text)
    if na.any() and attr.missing == "error":
        raise value_error(attr.name, "a value is missing but the schema has missing: error; declare missing: code "
                          "to encode it", series, na, where, attr=attr, parse_text=parse_text)


def _range_error(attr: Attribute, series: pd.Series, bad: np.ndarray, domain: str, where: Where,
                 parse_text: bool) -> DataError:
    """DataError for an out-of-domain value (the domain is public; the value is not shown)."""
    hint = "" if attr.from_domain else "; clip: true in the schema puts such values in the end bins or codes"
    return value_error(attr.name, f"a value is outside the domain {domain}{hint}", series, bad, where, attr=attr,
                       parse_text=parse_text)


def _encode_integer(attr: Attribute, series: pd.Series, parse_text: bool, where: Where) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes checked against ``[0, n_values)``."""
    v = _to_number(attr, series, parse_text, "integer codes", where)
    n = attr.n_values
    if v.dtype.kind == "f":
        na = np.isnan(v)
        _missing(attr, series, na, where, parse_text)
        ok = ~na
        frac = ok & (v != np.floor(np.where(ok, v, 0)))
        if frac.any():
            raise value_error(attr.name, f"a value is not a whole number; the attribute takes integer codes in "
                              f"[0, {n})", series, frac, where, attr=attr, parse_text=parse_text)
        vv = np.where(ok, v, 0)
        low, high = ok & (vv < 0), ok & (vv >= n)
        codes = vv
    else:
        na = np.zeros(len(v), dtype=bool)
        if v.dtype.kind == "u":
            low = na
            high = v >= n
        else:
            low, high = v < 0, v >= n
        codes = v
    bad = low | high
    if bad.any():
        if not attr.clip:
            raise _range_error(attr, series, bad, f"[0, {n})", where, parse_text)
        codes = np.clip(codes, 0, n - 1)
    return codes.astype(np.int64, copy=False), na


def _categories_shown(attr: Attribute) -> list[str]:
    cats = list(attr.categories or ())
    return cats[:_MAX_SHOWN] + (["..."] if len(cats) > _MAX_SHOWN else [])


def _encode_categorical(attr: Attribute, series: pd.Series, parse_text: bool,
                        where: Where) -> tuple[np.ndarray, np.ndarray]:
    """Category positions; unknown categories are errors."""
    na = series.isna().to_numpy()
    dt = series.dtype
    numeric = False
    if isinstance(dt, pd.CategoricalDtype) or dt == object:
        strs = series.map(category_text, na_action="ignore")
    elif pd.api.types.is_string_dtype(dt):
        strs = series
    elif pd.api.types.is_bool_dtype(dt) or pd.api.types.is_integer_dtype(dt):
        strs, numeric = series.astype(object).map(category_text, na_action="ignore"), True
    elif pd.api.types.is_float_dtype(dt):
        strs, numeric = series.map(category_text, na_action="ignore"), True
    else:
        raise value_error(attr.name, f"column dtype {dt} cannot hold category labels", series, ~na, where, attr=attr,
                          parse_text=parse_text)
    codes = pd.Index(list(attr.categories or ()), dtype=object).get_indexer(strs.astype(object)).astype(np.int64)
    unknown = (codes < 0) & ~na
    if unknown.any():
        if numeric and not any(_is_int_text(c) for c in attr.categories or ()):
            rule = (f"the column holds numbers but the schema's categories are labels {_categories_shown(attr)}; "
                    "give the labels, or, if the numbers are codes 0..n-1, declare the attribute "
                    f"{{name: {attr.name}, type: integer, size: {attr.n_values}}}")
        else:
            rule = (f"a value is not one of the categories {_categories_shown(attr)} (compared as text, exactly: "
                    "case and spaces count)")
        raise value_error(attr.name, rule, series, unknown, where, attr=attr, parse_text=parse_text)
    _missing(attr, series, na, where, parse_text)
    return codes, na


def _is_int_text(c: str) -> bool:
    try:
        int(c)
    except ValueError:
        return False
    return True


def _binned(attr: Attribute, series: pd.Series, v: np.ndarray, na: np.ndarray, edges: np.ndarray,
            shown: str, where: Where, parse_text: bool) -> np.ndarray:
    """Left-closed bin index of ``v`` given ``edges``; out-of-range values error unless clipped."""
    nb = len(edges) - 1
    ok = ~na
    bad = ok & ((v < edges[0]) | (v >= edges[-1]))
    if bad.any() and not attr.clip:
        raise _range_error(attr, series, bad, shown, where, parse_text)
    codes = np.searchsorted(edges, v, side="right") - 1
    return np.clip(codes, 0, nb - 1).astype(np.int64)


def _encode_numeric(attr: Attribute, series: pd.Series, parse_text: bool, where: Where) -> tuple[np.ndarray, np.ndarray]:
    """Bin numbers into ``[e_k, e_{k+1})``."""
    v = np.asarray(_to_number(attr, series, parse_text, "numbers", where), dtype=np.float64)
    na = np.isnan(v)
    _missing(attr, series, na, where, parse_text)
    edges = attr.bin_edges()
    shown = f"[{edge_text(float(edges[0]))}, {edge_text(float(edges[-1]))})"
    return _binned(attr, series, np.where(na, edges[0], v), na, edges, shown, where, parse_text), na


def _encode_date(attr: Attribute, series: pd.Series, parse_text: bool, where: Where) -> tuple[np.ndarray, np.ndarray]:
    """Bin dates (datetime columns or ISO text) into left-closed date bins."""
    dt = series.dtype
    if pd.api.types.is_datetime64_any_dtype(dt):
        ts = series
        if getattr(dt, "tz", None) is not None:
            ts = ts.dt.tz_convert(None)
    elif _is_text(series):
        notna = series.notna().to_numpy()
        ts = pd.to_datetime(series, errors="coerce", format="ISO8601")
        bad = notna & ts.isna().to_numpy()
        if bad.any():
            retry = pd.to_datetime(series[bad], errors="coerce", format="mixed")
            ts = ts.copy()
            ts[bad] = retry
            bad = notna & ts.isna().to_numpy()
            if bad.any():
                raise value_error(attr.name, "a value is not a date (ISO 8601 text such as 2014-07-01 expected)",
                                  series, bad, where, attr=attr, parse_text=parse_text)
        if getattr(ts.dtype, "tz", None) is not None:
            ts = ts.dt.tz_convert(None)
    else:
        na0 = series.isna().to_numpy()
        if (~na0).any():
            raise value_error(attr.name, f"column dtype {dt} cannot hold dates (datetime values or ISO 8601 text "
                              "expected)", series, ~na0, where, attr=attr, parse_text=parse_text)
        ts = pd.Series(pd.NaT, index=series.index, dtype="datetime64[ns]")
    na = ts.isna().to_numpy()
    _missing(attr, series, na, where, parse_text)
    v = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    edges = attr.bin_edges().astype(np.int64)
    shown = f"[{attr.bins[0]}, {attr.bins[-1]})"
    return _binned(attr, series, np.where(na, edges[0], v), na, edges, shown, where, parse_text), na


_ENCODERS = {
    "integer": _encode_integer,
    "categorical": _encode_categorical,
    "numeric": _encode_numeric,
    "date": _encode_date,
}


def encode_column(attr: Attribute, series: pd.Series, *, parse_text: bool = False, source: str | None = None,
                  positional: bool = False) -> np.ndarray:
    """Encode one column to codes in the attribute's smallest unsigned dtype (a DataError names the column,
    ``source`` and the rule broken; with ``positional``, the series' index is the row number in the source)."""
    if isinstance(series, pd.DataFrame):  # a frame with two columns of this name
        raise DataError(f"column {attr.name!r}{f' of {source}' if source else ''} appears more than once; every "
                        "column needs its own name")
    codes, na = _ENCODERS[attr.kind](attr, series, parse_text, Where(source, positional))
    if na.any():
        codes = np.where(na, attr.missing_code, codes)
    return codes.astype(attr.dtype)


def encode_frame(frame: pd.DataFrame, schema: Schema | Domain | Mapping[str, Any], *,
                 parse_text: bool = False, source: str | None = None, positional: bool = False) -> pd.DataFrame:
    """Per-partition kernel: raw pandas columns -> integer codes, in schema order (joined by name).

    ``parse_text`` accepts numbers written as text (CSV input); otherwise strings in an integer or
    numeric column are a type error. ``source`` (e.g. "file 'a.csv'") and ``positional`` (the index is the row
    number) say where the rows come from, for messages: they name the column, the source and the rule broken,
    never a value.
    """
    schema = load_schema(schema)
    absent = [n for n in schema.names if n not in frame.columns]
    if absent:
        raise DataError(
            f"column {absent[0]!r} is missing from the data; it has columns {list(map(str, frame.columns))[:30]}"
        )
    out = {a.name: encode_column(a, frame[a.name], parse_text=parse_text, source=source, positional=positional)
           for a in schema}
    return pd.DataFrame(out, index=frame.index, copy=False)


def empty_codes(schema: Schema) -> pd.DataFrame:
    """Zero-row frame with the encoded dtypes (dask meta)."""
    return pd.DataFrame({a.name: np.empty(0, dtype=a.dtype) for a in schema})


# ---- lazy table ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class EncodedTable:
    """A lazily encoded table: a dask DataFrame of codes plus its schema."""

    frame: Any  # dask.dataframe.DataFrame of codes, columns in schema order
    schema: Schema
    source: str = ""

    @property
    def domain(self) -> Domain:
        """The code domain of the encoded columns."""
        return self.schema.domain

    @property
    def npartitions(self) -> int:
        """Number of partitions of the lazy frame."""
        return int(self.frame.npartitions)

    @property
    def columns(self) -> tuple[str, ...]:
        """Encoded column names (schema order)."""
        return self.schema.names

    def to_pandas(self) -> pd.DataFrame:
        """Compute the whole encoded table (small data only)."""
        return self.frame.compute().reset_index(drop=True)

    def to_records(self) -> np.ndarray:
        """Codes as an ``(n_rows, n_attributes)`` array in the widest column dtype (small data only)."""
        df = self.to_pandas()
        dtype = np.result_type(*[a.dtype for a in self.schema])
        return df.to_numpy(dtype=dtype)


_MAX_NAMED = 3  # files named in a one-line error


def _base(name: str) -> str:
    return str(name).rstrip("/").rsplit("/", 1)[-1]


def _kind(name: str) -> Any:
    """The format a file name belongs to (by its suffix, see ``InputFormat.guess_can_open``), else None."""
    return guess_format(str(name))


def _refuse_mixed(where: str, names: Sequence[str]) -> None:
    """DataError if ``names`` hold files of two formats (e.g. Parquet and CSV): one format per input, naming
    the files (a dataset's ``_metadata`` files are not named)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for n in names:
        fmt = _kind(n)
        if fmt is not None and not _base(n).startswith("_"):
            found.setdefault(fmt.name, (fmt.label, []))[1].append(_base(n))
    if len(found) > 1:
        order = FORMATS.names()  # the registry's order: Parquet, then CSV, then the others
        kinds = [found[n] for n in sorted(found, key=order.index)]
        labels = [label for label, _ in kinds]
        shown = ", ".join(f for _, files in kinds for f in sorted(files)[:_MAX_NAMED])
        said = ", ".join(labels[:-1]) + f" and {labels[-1]}"
        raise DataError(f"input {where!r} mixes {said} files ({shown}); privcube reads one format per "
                        "input: convert them to one format or give the files of one format")


def _target(paths: Sequence[str]) -> Any:
    """What to read: one path, or the list when there are several."""
    return list(paths) if len(paths) > 1 else paths[0]


def _detect_format(path: Any, storage_options: Mapping[str, Any] | None, name: str | None = None) -> tuple[Any, Any]:
    """The input's format (``name``, else guessed from the suffix or the folder's files; Parquet when nothing
    says otherwise) and what to read: ``(InputFormat, path, glob or list of files)``.

    Every data file is read: a folder (or glob, or list) of CSV files with different compressions
    (``a.csv`` + ``b.csv.gz``) is read as one table; files of two formats in one input are refused, naming files.
    """
    import fsspec

    so = dict(storage_options or {})
    paths = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    _refuse_mixed(_source_str(path), paths)
    given = get_format(name) if name is not None else None
    guessed = _kind(paths[0])
    if guessed is not None:
        for p in paths:  # a missing file or an empty glob: one clear line, not a reader's traceback
            fs, _, found = fsspec.get_fs_token_paths(p, storage_options=so)
            if not found or not fs.exists(found[0]):
                raise DataError(f"input {p!r} " + ("matches no file" if any(ch in p for ch in "*?[") else
                                                   "does not exist"))
        return given or guessed, _target(paths)
    fs, _, resolved = fsspec.get_fs_token_paths(paths[0], storage_options=so)
    if len(paths) == 1 and not any(ch in paths[0] for ch in "*?[") and fs.isdir(resolved[0]):
        names = [str(p) for p in fs.ls(resolved[0], detail=False)]
        _refuse_mixed(paths[0], names)
        fmt = given or next((f for f in map(_kind, names) if f is not None and "partitioned" not in f.abilities),
                            None) or get_format(DEFAULT_FORMAT)
        return fmt, fmt.folder_target(paths[0], [_base(n) for n in names])
    if len(paths) == 1 and any(ch in paths[0] for ch in "*?["):
        matches = sorted(str(m) for m in resolved)  # fsspec expanded the glob
        _refuse_mixed(paths[0], matches)
        kinds = {getattr(_kind(m), "name", None) for m in matches}
        fmt = given or (_kind(matches[0]) if matches and len(kinds) == 1 and None not in kinds else None)
        if fmt is not None and "partitioned" not in fmt.abilities:
            return fmt, _target([full_path(fs, m) for m in matches])
    if not fs.exists(resolved[0]) and not fs.glob(resolved[0]):
        raise DataError(f"input {paths[0]!r} does not exist")
    return given or get_format(DEFAULT_FORMAT), _target(paths)


def missing_filesystem(path: Any, e: ImportError) -> str:
    """What to install for the fsspec protocol of ``path`` (e.g. ``pip install s3fs`` for s3://)."""
    first = str(path[0] if isinstance(path, (list, tuple)) and path else path)
    protocol = first.split("://", 1)[0] if "://" in first else "file"
    try:
        from fsspec.registry import known_implementations

        known = known_implementations.get(protocol, {})
    except ImportError:  # pragma: no cover - fsspec is a dependency
        known = {}
    package = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
               "abfss": "adlfs", "adl": "adlfs", "hf": "huggingface_hub", "sftp": "paramiko", "ssh": "paramiko",
               "http": "aiohttp", "https": "aiohttp"}.get(protocol)
    hint = f"pip install {package}" if package else (known.get("err") or _one_line(e))
    return f"reading {protocol}:// paths needs a package that is not installed: {hint}"


def _reader_text(e: BaseException) -> str:
    """A reader's error in one line, without anything of the data (a decoding error quotes the bytes)."""
    if isinstance(e, UnicodeDecodeError):
        return f"not {e.encoding} text"
    return _one_line(e)


def unreadable_input(e: BaseException) -> str | None:
    """One line for an input error found while partitions were read, naming the file where it can be found, else
    None. A DataError of the encoding kernel is located (:func:`locate_error`); an error raised while a format's
    reader decoded a file's pages (a damaged or truncated file whose footer still parses) names the file that
    does not read (:func:`locate_damaged`). Read off the exception and its traceback (local or a worker's), so
    it serves every job kind; neither line holds a data value."""
    import traceback

    if isinstance(e, DataError):
        return locate_error(e)
    if isinstance(e, OSError) and e.errno is not None:  # disk full, permission: not the data's fault
        return None
    if not isinstance(e, (OSError, ValueError, EOFError)):
        return None
    frames = traceback.extract_tb(e.__traceback__)
    readers = loaded_formats()
    if not any(fmt.reader_frame(fr.filename) for fr in frames for fmt in readers):
        return None
    return locate_damaged() or (f"input data: a file could not be read ({_reader_text(e)}); it is damaged or "
                                "truncated: rewrite or replace it")


# ---- naming the file and row of an error found while partitions were encoded ---------------------
# A partition does not know which file it came from (Dask's readers do not say), so an error names the input;
# the error path then reads the column again, file by file, a chunk at a time, to name the file and row.

#: inputs opened by this process (newest last): label -> (format name, {file: columns}, storage options)
_OPENED: OrderedDict[str, tuple[str, dict[str, list[str]], dict[str, Any]]] = OrderedDict()
_OPENED_MAX = 16
#: how long the error path may spend reading the input again to name the file and row
LOCATE_SECONDS = 60.0
_CHUNK_ROWS = 250_000


def _remember(label: str, fmt: str, per_file: Mapping[str, list[str]], so: Mapping[str, Any] | None) -> None:
    _OPENED.pop(label, None)
    _OPENED[label] = (fmt, dict(per_file), dict(so or {}))
    while len(_OPENED) > _OPENED_MAX:
        _OPENED.popitem(last=False)


def _file_chunks(fmt: str, name: str, columns: Sequence[str] | None, so: Mapping[str, Any]) -> Any:
    """One file's rows as pandas frames of at most ``_CHUNK_ROWS`` rows (only ``columns``; CSV as text)."""
    return get_format(fmt).chunks(name, columns, so, _CHUNK_ROWS)


def _check_rows(check: tuple[Any, ...], chunk: pd.DataFrame, rule: str) -> None:
    """Apply an error's rule to ``chunk``: the attribute's encoding, or (no attribute: an id column, ``rule``)
    a value on every row."""
    name, attr, parse_text, _ = check
    if attr is None:
        na = chunk[name].isna().to_numpy()
        if na.any():
            raise value_error(name, rule, chunk[name], na)
        return
    encode_column(attr, chunk[name], parse_text=parse_text)


def locate_error(e: DataError) -> str | None:
    """The message of a kernel DataError with the file and row where its column breaks its rule, found by reading
    that column again file by file (inputs opened by this process; at most ``LOCATE_SECONDS``); None when it
    carries no check, its input is unknown or nothing is found in time. A file that cannot be read is named."""
    import time

    check = getattr(e, "privcube_check", None)
    if check is None:
        return None
    name, _, _, label = check
    prefix = str(e).split(f"column {name!r}", 1)[0]
    if label not in _OPENED:  # an in-memory frame (its message has the row already) or an input not opened here
        return None
    deadline = time.monotonic() + LOCATE_SECONDS
    fmt, per_file, so = _OPENED[label]
    for fname, cols in per_file.items():
        if name not in cols:
            continue
        row0 = 0
        try:
            for chunk in _file_chunks(fmt, fname, [name], so):
                try:
                    _check_rows(check, chunk, getattr(e, "privcube_rule", "a value is missing"))
                except DataError as inner:
                    rule, pos = getattr(inner, "privcube_rule", None), getattr(inner, "privcube_row", None)
                    if rule is None:
                        return None
                    row = "" if pos is None else f", row {row0 + pos}"
                    return f"{prefix}column {name!r} of file {fname!r}{row}: {rule}"
                row0 += len(chunk)
                if time.monotonic() > deadline:
                    return None
        except DataError:
            return None
        except Exception as err:  # noqa: BLE001 - a file that does not read: that is the problem to name
            return _damaged_line(fname, err)
    return None


def _damaged_line(name: str, e: BaseException) -> str:
    return f"input file {name!r} could not be read ({_reader_text(e)}); it is damaged or truncated: rewrite or replace it"


def locate_damaged() -> str | None:
    """The line naming the first file of the inputs opened by this process (newest first) that does not read to
    its end, or None (none found within ``LOCATE_SECONDS``)."""
    import time

    deadline = time.monotonic() + LOCATE_SECONDS
    for fmt, per_file, so in reversed(list(_OPENED.values())):
        for fname in per_file:
            try:
                for _ in _file_chunks(fmt, fname, None, so):
                    if time.monotonic() > deadline:
                        return None
            except Exception as err:  # noqa: BLE001 - any failure to read it is the damage
                return _damaged_line(fname, err)
    return None


def _file_columns(fmt: Any, target: Any, storage_options: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """{file: column names} of every file of the input, read from headers / footers only (in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    files = fmt.files(target, storage_options)
    if not files:
        raise DataError(f"input {_source_str(target)!r} holds no data file")
    with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
        columns = list(pool.map(lambda f: fmt.columns(f, storage_options), files))
    return dict(zip(files, columns))


def _check_same_columns(per_file: Mapping[str, list[str]], names: Sequence[str], source: str) -> None:
    """DataError naming the first file that lacks a needed column the other files have (a renamed column)."""
    for n in names:
        lacking = [f for f, cols in per_file.items() if n not in cols]
        if lacking and len(lacking) < len(per_file):
            raise DataError(f"column {n!r} is missing from file {lacking[0]!r} of input {source!r} (its other files "
                            "have it); every file must have the same columns")


@dataclass(frozen=True)
class InputInfo:
    """An input as :func:`open_input` found it, from headers and footers only."""

    fmt: str  # the format's name ("csv", "parquet", "arrow", ...; see privcube.storage.formats)
    target: Any  # what the reader reads (a path, a glob, a list of files)
    available: list[str]  # the dataset's columns
    label: str  # how messages name it: "file '...'" for one file, "input '...' (N files)" otherwise
    storage_options: Mapping[str, Any] | None = None

    @property
    def format(self) -> Any:
        """The :class:`~privcube.storage.formats.base.InputFormat` that reads it."""
        return get_format(self.fmt)

    def read(self, columns: Sequence[str] | None, *, blocksize: Any = None, text_dtype: Any = "string") -> Any:
        """A lazy dask DataFrame of the raw ``columns`` (all when None); a text format's columns are text."""
        return self.format.open(self.target, columns, blocksize=blocksize, storage_options=self.storage_options,
                                text_dtype=text_dtype)


def _repeated(per_file: Mapping[str, list[str]], needed: Sequence[str] | None) -> tuple[str, str] | None:
    """(file, column) of the first needed column (any column when ``needed`` is None) that a file's header or
    footer names twice: a reader would silently use one of the two."""
    for f, cols in per_file.items():
        seen: set[str] = set()
        for c in cols:
            if c in seen and (needed is None or c in needed):
                return f, c
            seen.add(c)
    return None


def _scan_input(path: Any, storage_options: Mapping[str, Any] | None, prefix: str,
                fmt_name: str | None) -> tuple[Any, Any, dict[str, list[str]]]:
    """(format, target, {file: columns}) of an input; DataErrors get ``prefix``, a missing fsspec package or a
    bad protocol is one DataError line."""
    try:
        fmt, target = _detect_format(path, storage_options, fmt_name)
        return fmt, target, _file_columns(fmt, target, storage_options)
    except DataError as e:
        raise DataError(f"{prefix}{e}") from None
    except ImportError as e:  # an fsspec protocol whose package is not installed (s3://, gs://, ...)
        raise DataError(f"{prefix}input {_source_str(path)!r}: {missing_filesystem(path, e)}") from None
    except ValueError as e:
        if "protocol" not in str(e).lower():
            raise
        raise DataError(f"{prefix}input {_source_str(path)!r}: {_one_line(e)}") from None


def open_input(path: Any, storage_options: Mapping[str, Any] | None = None, what: str = "",
               columns: Sequence[str] | None = None, fmt: str | None = None) -> InputInfo:
    """Format, target, columns and message label of an input, from metadata or headers only; ``fmt`` names
    its format (``data.format``), else it is guessed from the file names.

    Every file's header / footer is read: an empty or unreadable file, a file lacking one of ``columns``
    (default: every column) that the others have, or a header naming one of them twice, is a DataError naming
    the file. The input is remembered (this process, the last few) so that :func:`locate_error` can name the
    file and row of a bad value found later, when partitions are encoded."""
    prefix = f"{what}: " if what else ""
    fmt_obj, target, per_file = _scan_input(path, storage_options, prefix, fmt)
    twice = _repeated(per_file, columns)
    if twice is not None:
        raise DataError(f"{prefix}column {twice[1]!r} appears twice in the header of file {twice[0]!r}; every column "
                        "needs its own name: rename or drop one of them")
    available = list(dict.fromkeys(next(iter(per_file.values()))))
    try:  # the dataset's columns (hive partition columns included) as the reader reads them
        available = fmt_obj.dataset_columns(target, storage_options, _source_str(path)) or available
    except DataError as e:
        raise DataError(f"{prefix}{e}") from None
    for cols in per_file.values():  # a column only some files have: the check below names a file without it
        # (not pandas' saved index, ``__index_level_N__``: it is the frame's index, not a column)
        available += [c for c in cols if c not in available and not str(c).startswith("__index_level_")]
    needed = [c for c in (columns if columns is not None else available) if c in available]
    try:
        _check_same_columns(per_file, needed, _source_str(path))
    except DataError as e:
        raise DataError(f"{prefix}{e}") from None
    files = list(per_file)
    label = f"file {files[0]!r}" if len(files) == 1 else f"input {_source_str(path)!r} ({len(files)} files)"
    _remember(label, fmt_obj.name, per_file, storage_options)
    return InputInfo(fmt_obj.name, target, available, label, dict(storage_options) if storage_options else None)


def input_columns(path: Any, storage_options: Mapping[str, Any] | None = None,
                  what: str = "", columns: Sequence[str] | None = None) -> tuple[str, Any, list[str]]:
    """(format, resolved target, column names) of an input, from metadata or headers only (see
    :func:`open_input`)."""
    info = open_input(path, storage_options, what, columns)
    return info.fmt, info.target, info.available


def open_table(
    path: str | Path | Sequence[str | Path],
    schema: Schema | Domain | Mapping[str, Any] | str | Path,
    columns: Sequence[str] | None = None,
    *,
    blocksize: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    fmt: str | None = None,
) -> EncodedTable:
    """Lazily open an input (file, directory, glob or fsspec URL; format ``fmt`` or guessed) encoded by
    ``schema``.

    Only the schema's columns (or ``columns``) are read. A missing column raises DataError now,
    from the file metadata or header; value errors surface when partitions are computed (see
    ``validate``).
    """
    schema = load_schema(schema)
    if columns is not None:
        schema = schema.project(list(columns))
    names = list(schema.names)
    info = open_input(path, storage_options, columns=names, fmt=fmt)
    source = _source_str(path)
    absent = [n for n in names if n not in info.available]
    if absent:
        raise DataError(
            f"column {absent[0]!r} is missing from {source!r}; the data has columns {info.available[:30]}"
        )
    raw = info.read(names, blocksize=blocksize)
    frame = raw.map_partitions(encode_frame, schema, parse_text=info.format.text_values, source=info.label,
                               meta=empty_codes(schema))
    return EncodedTable(frame, schema, source)


def _partition_rows(part: pd.DataFrame) -> int:
    """Row count of one computed partition (forces its encoding)."""
    return len(part)


def validate(table: EncodedTable, client: Any = None) -> int:
    """Encode every partition once; raise the first DataError, else return the row count."""
    import dask

    parts = table.frame.to_delayed()
    total = dask.delayed(sum)([dask.delayed(_partition_rows)(p) for p in parts])
    try:
        if client is not None:
            return int(client.compute(total).result())
        return int(total.compute())
    except Exception as e:
        line = unreadable_input(e)
        if line is None:
            raise
        raise DataError(line) from None


__all__ = ["EncodedTable", "InputInfo", "encode_column", "encode_frame", "empty_codes", "input_columns",
           "locate_damaged", "locate_error", "open_input", "open_table", "read_csv", "unreadable_input", "validate",
           "Where", "value_error"]
