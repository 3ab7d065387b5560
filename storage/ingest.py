"""Lazy Parquet/CSV ingest: column projection, encoding to integer codes, validation.

``open_table`` builds a dask DataFrame that reads only the schema's columns and encodes each
partition with ``encode_frame`` (pure pandas/numpy), so the table is never held in memory at once.
Bad data raises ``DataError`` naming the column and one offending value.
"""
from __future__ import annotations

import os

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.domain import Domain
from privcube.errors import DataError
from privcube.storage.schema import Attribute, Schema, category_text, edge_text, load_schema

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst", ".tsv")
_MAX_SHOWN = 10


# ---- per-partition kernel ----------------------------------------------------------------------

def _show(value: Any) -> str:
    """Short repr of an offending value for error messages."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, (np.integer,)):
        return str(int(value))
    if isinstance(value, (np.floating,)):
        return repr(float(value))
    if isinstance(value, pd.Timestamp):
        return repr(str(value))
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _first(series: pd.Series, mask: np.ndarray) -> Any:
    """The first value of ``series`` where ``mask`` holds."""
    return series.iloc[int(np.flatnonzero(mask)[0])]


def _is_text(series: pd.Series) -> bool:
    """Whether the column holds text (string dtype or object)."""
    return pd.api.types.is_string_dtype(series.dtype) or series.dtype == object


def _wrong_type(attr: Attribute, series: pd.Series, mask: np.ndarray, expected: str) -> DataError:
    """DataError for a value of the wrong type."""
    return DataError(
        f"column {attr.name!r}: value {_show(_first(series, mask))} is not {expected} "
        f"(column dtype {series.dtype}; attribute type {attr.kind})"
    )


def _to_number(attr: Attribute, series: pd.Series, parse_text: bool, expected: str) -> np.ndarray:
    """Column as float64/int64 numbers (NaN for missing), rejecting text unless ``parse_text``."""
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
                raise _wrong_type(attr, series, is_str, expected)
        num = pd.to_numeric(series, errors="coerce")
        bad = notna & num.isna().to_numpy()
        if bad.any():
            raise _wrong_type(attr, series, bad, expected)
        return num.to_numpy(dtype=np.float64, na_value=np.nan)
    mask = series.notna().to_numpy()
    if not mask.any():
        return np.full(len(series), np.nan)
    raise _wrong_type(attr, series, mask, expected)


def _missing(attr: Attribute, series: pd.Series, na: np.ndarray) -> None:
    """Raise unless the attribute encodes missing values."""
    if na.any() and attr.missing == "error" and attr.from_domain:
        raise DataError(
            f"column {attr.name!r}: missing value ({_show(_first(series, na))}), but an integer-coded domain "
            "{column: size} cannot hold missing values; describe the data with a rich schema instead "
            f"(data.schema) whose entry for this column has missing: code, e.g. {{name: {attr.name}, type: integer, "
            f"size: {attr.size}, missing: code}} (code {attr.size} then means missing)"
        )
    if na.any() and attr.missing == "error":
        raise DataError(
            f"column {attr.name!r}: missing value ({_show(_first(series, na))}) but the schema has "
            "missing: error; declare missing: code to encode it"
        )


def _range_error(attr: Attribute, series: pd.Series, bad: np.ndarray, domain: str) -> DataError:
    """DataError for an out-of-domain value."""
    return DataError(f"column {attr.name!r}: value {_show(_first(series, bad))} is outside the domain {domain}")


def _encode_integer(attr: Attribute, series: pd.Series, parse_text: bool) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes checked against ``[0, n_values)``."""
    v = _to_number(attr, series, parse_text, "an integer code")
    n = attr.n_values
    if v.dtype.kind == "f":
        na = np.isnan(v)
        _missing(attr, series, na)
        ok = ~na
        frac = ok & (v != np.floor(np.where(ok, v, 0)))
        if frac.any():
            raise _wrong_type(attr, series, frac, "an integer code")
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
            raise _range_error(attr, series, bad, f"[0, {n})")
        codes = np.clip(codes, 0, n - 1)
    return codes.astype(np.int64, copy=False), na


def _encode_categorical(attr: Attribute, series: pd.Series, parse_text: bool) -> tuple[np.ndarray, np.ndarray]:
    """Category positions; unknown categories are errors."""
    na = series.isna().to_numpy()
    dt = series.dtype
    if isinstance(dt, pd.CategoricalDtype) or dt == object:
        strs = series.map(category_text, na_action="ignore")
    elif pd.api.types.is_string_dtype(dt):
        strs = series
    elif pd.api.types.is_bool_dtype(dt) or pd.api.types.is_integer_dtype(dt):
        strs = series.astype(object).map(category_text, na_action="ignore")
    elif pd.api.types.is_float_dtype(dt):
        strs = series.map(category_text, na_action="ignore")
    else:
        raise _wrong_type(attr, series, ~na, "a category label")
    codes = pd.Index(list(attr.categories or ()), dtype=object).get_indexer(strs.astype(object)).astype(np.int64)
    unknown = (codes < 0) & ~na
    if unknown.any():
        cats = list(attr.categories or ())
        shown = cats[:_MAX_SHOWN] + (["..."] if len(cats) > _MAX_SHOWN else [])
        raise DataError(
            f"column {attr.name!r}: value {_show(_first(series, unknown))} is not a known category "
            f"(expected one of {shown})"
        )
    _missing(attr, series, na)
    return codes, na


def _binned(attr: Attribute, series: pd.Series, v: np.ndarray, na: np.ndarray, edges: np.ndarray,
            shown: str) -> np.ndarray:
    """Left-closed bin index of ``v`` given ``edges``; out-of-range values error unless clipped."""
    nb = len(edges) - 1
    ok = ~na
    bad = ok & ((v < edges[0]) | (v >= edges[-1]))
    if bad.any() and not attr.clip:
        raise _range_error(attr, series, bad, shown)
    codes = np.searchsorted(edges, v, side="right") - 1
    return np.clip(codes, 0, nb - 1).astype(np.int64)


def _encode_numeric(attr: Attribute, series: pd.Series, parse_text: bool) -> tuple[np.ndarray, np.ndarray]:
    """Bin numbers into ``[e_k, e_{k+1})``."""
    v = np.asarray(_to_number(attr, series, parse_text, "a number"), dtype=np.float64)
    na = np.isnan(v)
    _missing(attr, series, na)
    edges = attr.bin_edges()
    shown = f"[{edge_text(float(edges[0]))}, {edge_text(float(edges[-1]))})"
    return _binned(attr, series, np.where(na, edges[0], v), na, edges, shown), na


def _encode_date(attr: Attribute, series: pd.Series, parse_text: bool) -> tuple[np.ndarray, np.ndarray]:
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
                raise _wrong_type(attr, series, bad, "a date")
        if getattr(ts.dtype, "tz", None) is not None:
            ts = ts.dt.tz_convert(None)
    else:
        na0 = series.isna().to_numpy()
        if (~na0).any():
            raise _wrong_type(attr, series, ~na0, "a date")
        ts = pd.Series(pd.NaT, index=series.index, dtype="datetime64[ns]")
    na = ts.isna().to_numpy()
    _missing(attr, series, na)
    v = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    edges = attr.bin_edges().astype(np.int64)
    shown = f"[{attr.bins[0]}, {attr.bins[-1]})"
    return _binned(attr, series, np.where(na, edges[0], v), na, edges, shown), na


_ENCODERS = {
    "integer": _encode_integer,
    "categorical": _encode_categorical,
    "numeric": _encode_numeric,
    "date": _encode_date,
}


def encode_column(attr: Attribute, series: pd.Series, *, parse_text: bool = False) -> np.ndarray:
    """Encode one column to codes in the attribute's smallest unsigned dtype."""
    codes, na = _ENCODERS[attr.kind](attr, series, parse_text)
    if na.any():
        codes = np.where(na, attr.missing_code, codes)
    return codes.astype(attr.dtype)


def encode_frame(frame: pd.DataFrame, schema: Schema | Domain | Mapping[str, Any], *,
                 parse_text: bool = False) -> pd.DataFrame:
    """Per-partition kernel: raw pandas columns -> integer codes, in schema order (joined by name).

    ``parse_text`` accepts numbers written as text (CSV input); otherwise strings in an integer or
    numeric column are a type error.
    """
    schema = load_schema(schema)
    absent = [n for n in schema.names if n not in frame.columns]
    if absent:
        raise DataError(
            f"column {absent[0]!r} is missing from the data; it has columns {list(map(str, frame.columns))[:30]}"
        )
    out = {a.name: encode_column(a, frame[a.name], parse_text=parse_text) for a in schema}
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


def _source_str(path: Any) -> str:
    """Printable name of the input location."""
    if isinstance(path, (list, tuple)):
        return str(path[0]) + (f" (+{len(path) - 1} more)" if len(path) > 1 else "")
    return str(path)


_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}
_MAX_NAMED = 3  # files named in a one-line error


def _kind(name: str) -> str | None:
    """``csv`` / ``parquet`` by a file name's suffix (Parquet's ``_metadata`` files too), else None."""
    low = name.lower().rstrip("/")
    if low.endswith(_CSV_SUFFIXES):
        return "csv"
    if low.endswith(_PARQUET_SUFFIXES) or low.rsplit("/", 1)[-1] in ("_metadata", "_common_metadata"):
        return "parquet"
    return None


def _base(name: str) -> str:
    return str(name).rstrip("/").rsplit("/", 1)[-1]


def _refuse_mixed(where: str, names: Sequence[str]) -> None:
    """DataError if ``names`` hold both Parquet and CSV files: one format per input, naming the files."""
    pq_files = sorted(_base(n) for n in names if _kind(n) == "parquet" and not _base(n).startswith("_"))
    csv_files = sorted(_base(n) for n in names if _kind(n) == "csv")
    if pq_files and csv_files:
        shown = ", ".join(pq_files[:_MAX_NAMED] + csv_files[:_MAX_NAMED])
        raise DataError(f"input {where!r} mixes Parquet and CSV files ({shown}); privcube reads one format per "
                        "input: convert them to one format or give the files of one format")


def _csv_target(paths: Sequence[str]) -> Any:
    """What to read for these CSV files: one path, or the list when there are several."""
    return list(paths) if len(paths) > 1 else paths[0]


def _detect_format(path: Any, storage_options: Mapping[str, Any] | None) -> tuple[str, Any]:
    """Decide CSV vs Parquet from the suffix or directory contents; return (format, path to read).

    Every data file is read: a folder (or glob, or list) of CSV files with different compressions
    (``a.csv`` + ``b.csv.gz``) is read as one table; Parquet mixed with CSV is refused, naming files.
    """
    import fsspec

    so = dict(storage_options or {})
    paths = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    _refuse_mixed(_source_str(path), paths)
    first = paths[0].lower()
    if first.endswith(_CSV_SUFFIXES + _PARQUET_SUFFIXES):
        for p in paths:  # a missing file or an empty glob: one clear line, not a reader's traceback
            fs, _, found = fsspec.get_fs_token_paths(p, storage_options=so)
            if not found or not fs.exists(found[0]):
                raise DataError(f"input {p!r} " + ("matches no file" if any(ch in p for ch in "*?[") else
                                                   "does not exist"))
        return ("csv" if _kind(first) == "csv" else "parquet"), paths if len(paths) > 1 else paths[0]
    fs, _, resolved = fsspec.get_fs_token_paths(paths[0], storage_options=so)
    if len(paths) == 1 and not any(ch in paths[0] for ch in "*?[") and fs.isdir(resolved[0]):
        names = [str(p) for p in fs.ls(resolved[0], detail=False)]
        _refuse_mixed(paths[0], names)
        csvs = sorted(n for n in names if _kind(n) == "csv")
        if csvs:
            base = paths[0].rstrip("/")
            return "csv", _csv_target([f"{base}/{_base(n)}" for n in csvs])
        return "parquet", paths[0]
    if len(paths) == 1 and any(ch in paths[0] for ch in "*?["):
        matches = sorted(str(m) for m in resolved)  # fsspec expanded the glob
        _refuse_mixed(paths[0], matches)
        if matches and all(_kind(m) == "csv" for m in matches):
            return "csv", _csv_target([_full(fs, m) for m in matches])
    if not fs.exists(resolved[0]) and not fs.glob(resolved[0]):
        raise DataError(f"input {paths[0]!r} does not exist")
    return "parquet", paths if len(paths) > 1 else paths[0]


def _csv_options(name: str) -> dict[str, Any]:
    """Reader options of one CSV file from its suffix: separator (``.tsv``) and compression."""
    low = name.lower()
    comp = next((c for suf, c in _COMPRESSION.items() if low.endswith(suf)), None)
    return {"sep": "\t" if low.endswith(".tsv") else ",", "compression": comp}


def _csv_files(target: Any, storage_options: Mapping[str, Any] | None) -> list[str]:
    """Every CSV file a target names (globs expanded), in reading order."""
    import fsspec

    files = fsspec.open_files(target if isinstance(target, list) else [target], mode="rb",
                              **dict(storage_options or {}))
    if not files:
        raise DataError(f"input {_source_str(target)!r} matches no CSV file")
    return [_full(f.fs, f.path) for f in files]


def _full(fs: Any, path: str) -> str:
    """A path readers and messages understand: plain for local files, with its protocol otherwise."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return path if "file" in protocols or "local" in protocols else fs.unstrip_protocol(path)


def _one_csv_header(name: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    """Column names of one CSV file (its header line; an empty or unreadable file is a DataError)."""
    import fsspec

    opts = _csv_options(name)
    try:
        with fsspec.open(name, mode="rb", compression=opts["compression"], **dict(storage_options or {})) as f:
            return [str(c) for c in pd.read_csv(f, nrows=0, sep=opts["sep"]).columns]
    except pd.errors.EmptyDataError:
        raise DataError(f"input file {name!r} is empty: a CSV file needs a header line naming its columns") from None
    except (OSError, EOFError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as e:
        raise DataError(f"input file {name!r} is not a readable CSV file: {_one_line(e)}") from None


def _one_parquet_schema(fs: Any, name: str) -> list[str]:
    """Column names of one Parquet file from its footer (an unreadable file is a DataError naming it)."""
    import pyarrow.parquet as pq

    try:
        with fs.open(name, mode="rb") as f:
            return [str(c) for c in pq.read_schema(f).names]
    except (OSError, ValueError, EOFError) as e:  # pyarrow.ArrowInvalid is a ValueError
        raise DataError(f"input file {name!r} is not a readable Parquet file: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    """A reader's error text in one line, without Dask's wrapper and a repeated file name."""
    text = str(e) or type(e).__name__
    text = text.split("Original Message:", 1)[-1]
    text = " ".join(text.split())
    return text[:300]


def unreadable_input(e: BaseException) -> str | None:
    """One line for an error raised while a Parquet/CSV reader decoded a file's pages (a damaged or truncated
    file whose footer still parses), else None. Read off the traceback (local or a worker's), so it serves
    every job kind; the reader's text names no data value."""
    import traceback

    if isinstance(e, OSError) and e.errno is not None:  # disk full, permission: not the data's fault
        return None
    if not isinstance(e, (OSError, ValueError, EOFError)):
        return None
    frames = traceback.extract_tb(e.__traceback__)
    if not any(f"pyarrow{os.sep}parquet" in fr.filename or fr.filename.endswith(("_parquet.pyx", "_csv.pyx"))
               or f"pandas{os.sep}io{os.sep}parsers" in fr.filename for fr in frames):
        return None
    return f"input data: a file could not be read ({_one_line(e)}); it is damaged or truncated: rewrite or replace it"


def _parquet_files(target: Any, storage_options: Mapping[str, Any] | None) -> tuple[Any, list[str]]:
    """The filesystem and every file a Parquet input reads (folders walked for ``.parquet``/``.pq``/``.parq``
    files, as Dask does; other files there, e.g. a README, are not data)."""
    import fsspec

    targets = [str(t) for t in target] if isinstance(target, (list, tuple)) else [str(target)]
    fs, _, _ = fsspec.get_fs_token_paths(targets[0], storage_options=dict(storage_options or {}))
    out: list[str] = []
    for t in targets:
        _, _, found = fsspec.get_fs_token_paths(t, storage_options=dict(storage_options or {}))
        for p in found:
            if fs.isdir(p):  # what Dask reads of a folder: every file below it with a Parquet suffix
                out += sorted(str(f) for f in fs.find(p.rstrip("/")) if str(f).endswith(_PARQUET_SUFFIXES))
            else:
                out.append(str(p))
    return fs, out


def _file_columns(fmt: str, target: Any, storage_options: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """{file: column names} of every file of the input, read from headers / footers only (in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    if fmt == "csv":
        files = _csv_files(target, storage_options)
        read = lambda f: _one_csv_header(f, storage_options)  # noqa: E731
    else:
        fs, files = _parquet_files(target, storage_options)
        read = lambda f: _one_parquet_schema(fs, f)  # noqa: E731
    if not files:
        raise DataError(f"input {_source_str(target)!r} holds no data file")
    with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
        columns = list(pool.map(read, files))
    return dict(zip(files, columns))


def _check_same_columns(per_file: Mapping[str, list[str]], names: Sequence[str], source: str) -> None:
    """DataError naming the first file that lacks a needed column the other files have (a renamed column)."""
    for n in names:
        lacking = [f for f, cols in per_file.items() if n not in cols]
        if lacking and len(lacking) < len(per_file):
            raise DataError(f"column {n!r} is missing from file {lacking[0]!r} of input {source!r} (its other files "
                            "have it); every file must have the same columns")


def _csv_header(path: Any, storage_options: Mapping[str, Any] | None) -> list[str]:
    """Column names from the first CSV file's header (no data read)."""
    return _one_csv_header(_csv_files(path, storage_options)[0], storage_options)


def read_csv(target: Any, *, usecols: Sequence[str] | None = None, dtype: Any = None, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None) -> Any:
    """A dask DataFrame of CSV files (one path, glob or a list), each read with its own separator and
    compression; compressed files are read whole (``blocksize=None``, no Dask warning to the user)."""
    import dask.dataframe as dd

    files = _csv_files(target, storage_options)
    groups: dict[tuple[str, Any], list[str]] = {}
    for f in files:
        o = _csv_options(f)
        groups.setdefault((o["sep"], o["compression"]), []).append(f)
    so = {"storage_options": dict(storage_options)} if storage_options else {}
    frames = []
    for (sep, comp), group in groups.items():
        kw: dict[str, Any] = {"sep": sep, "compression": comp, **so}
        if comp is not None:
            kw["blocksize"] = None
        elif blocksize is not None:
            kw["blocksize"] = blocksize
        frames.append(dd.read_csv(group, usecols=list(usecols) if usecols is not None else None, dtype=dtype, **kw))
    return frames[0] if len(frames) == 1 else dd.concat(frames, ignore_index=True)


def input_columns(path: Any, storage_options: Mapping[str, Any] | None = None,
                  what: str = "", columns: Sequence[str] | None = None) -> tuple[str, Any, list[str]]:
    """(format, resolved target, column names) of a Parquet/CSV input, from metadata or headers only.

    Every file's header / footer is read: an empty or unreadable file, or a file lacking one of
    ``columns`` (default: every column) that the others have, is a DataError naming the file."""
    import dask.dataframe as dd

    prefix = f"{what}: " if what else ""
    fmt, target = _detect_format(path, storage_options)
    try:
        per_file = _file_columns(fmt, target, storage_options)
    except DataError as e:
        raise DataError(f"{prefix}{e}") from None
    available = list(next(iter(per_file.values())))
    if fmt == "parquet":  # the dataset's columns (hive partition columns included) as Dask reads them
        so = {"storage_options": dict(storage_options)} if storage_options else {}
        try:
            probe = dd.read_parquet(target, **so)
        except (FileNotFoundError, OSError, ValueError) as e:
            raise DataError(f"{prefix}cannot read Parquet input {_source_str(path)!r}: {_one_line(e)}") from None
        available = [str(c) for c in probe.columns]
    for cols in per_file.values():  # a column only some files have: the check below names a file without it
        # (not pandas' saved index, ``__index_level_N__``: it is the frame's index, not a column)
        available += [c for c in cols if c not in available and not str(c).startswith("__index_level_")]
    needed = [c for c in (columns if columns is not None else available) if c in available]
    try:
        _check_same_columns(per_file, needed, _source_str(path))
    except DataError as e:
        raise DataError(f"{prefix}{e}") from None
    return fmt, target, available


def open_table(
    path: str | Path | Sequence[str | Path],
    schema: Schema | Domain | Mapping[str, Any] | str | Path,
    columns: Sequence[str] | None = None,
    *,
    blocksize: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> EncodedTable:
    """Lazily open Parquet/CSV data (file, directory, glob or fsspec URL) encoded by ``schema``.

    Only the schema's columns (or ``columns``) are read. A missing column raises DataError now,
    from the file metadata or header; value errors surface when partitions are computed (see
    ``validate``).
    """
    import dask.dataframe as dd

    schema = load_schema(schema)
    if columns is not None:
        schema = schema.project(list(columns))
    names = list(schema.names)
    fmt, target, available = input_columns(path, storage_options, columns=names)
    source = _source_str(path)
    so = {"storage_options": dict(storage_options)} if storage_options else {}
    absent = [n for n in names if n not in available]
    if absent:
        raise DataError(
            f"column {absent[0]!r} is missing from {source!r}; the data has columns {available[:30]}"
        )
    if fmt == "csv":
        raw = read_csv(target, usecols=names, dtype={n: "string" for n in names}, blocksize=blocksize,
                       storage_options=storage_options)
    else:
        kw: dict[str, Any] = dict(so)
        if blocksize is not None:
            kw["blocksize"] = blocksize
        raw = dd.read_parquet(target, columns=names, **kw)
    frame = raw.map_partitions(encode_frame, schema, parse_text=(fmt == "csv"), meta=empty_codes(schema))
    return EncodedTable(frame, schema, source)


def _partition_rows(part: pd.DataFrame) -> int:
    """Row count of one computed partition (forces its encoding)."""
    return len(part)


def validate(table: EncodedTable, client: Any = None) -> int:
    """Encode every partition once; raise the first DataError, else return the row count."""
    import dask

    parts = table.frame.to_delayed()
    total = dask.delayed(sum)([dask.delayed(_partition_rows)(p) for p in parts])
    if client is not None:
        return int(client.compute(total).result())
    return int(total.compute())


__all__ = ["EncodedTable", "encode_column", "encode_frame", "empty_codes", "input_columns", "open_table", "read_csv",
           "unreadable_input", "validate"]
