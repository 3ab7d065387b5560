"""CSV and TSV files (compressed too): text values under a header line, read in blocks by dask."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from privcube.core.errors import DataError
from privcube.storage.formats.base import InputFormat, one_line, source_str

CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst", ".tsv")
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}


class CSVFormat(InputFormat):
    """Comma-separated text with a header line (``.tsv``: tab-separated); each file's compression from its suffix."""

    name = "csv"
    label = "CSV"
    description = ("CSV/TSV text files with a header line (.csv, .tsv, also .gz/.bz2/.xz/.zst compressed); "
                   "numbers and dates are parsed from the text")
    suffixes = CSV_SUFFIXES
    abilities = frozenset({"lazy", "text-values", "remote"})

    def files(self, target: Any, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Every CSV file a target names (globs expanded), in reading order."""
        files = super().files(target, storage_options)
        if not files:
            raise DataError(f"input {source_str(target)!r} matches no CSV file")
        return files

    def columns(self, file: str, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Column names of one CSV file (its header line; an empty or unreadable file is a DataError)."""
        import fsspec

        opts = csv_options(file)
        try:
            with fsspec.open(file, mode="rb", compression=opts["compression"], **dict(storage_options or {})) as f:
                head = pd.read_csv(f, nrows=1, header=None, sep=opts["sep"], dtype=str, keep_default_na=False)
                return [str(c) for c in head.iloc[0].tolist()]  # as written: pandas would rename a repeated name
        except pd.errors.EmptyDataError:
            raise DataError(f"input file {file!r} is empty: a CSV file needs a header line naming its "
                            "columns") from None
        except (OSError, EOFError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as e:
            raise DataError(f"input file {file!r} is not a readable CSV file: {one_line(e)}") from None

    def open(self, target: Any, columns: Sequence[str] | None, *, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None, text_dtype: Any = "string") -> Any:
        """Every column as text (``text_dtype``), parsed later by the encoding kernel."""
        dtype = text_dtype if columns is None else {c: text_dtype for c in columns}
        return read_csv(target, usecols=columns, dtype=dtype, blocksize=blocksize, storage_options=storage_options)

    def chunks(self, file: str, columns: Sequence[str] | None,
               storage_options: Mapping[str, Any] | None, rows: int) -> Iterator[pd.DataFrame]:
        import fsspec

        opts = csv_options(file)
        with fsspec.open(file, mode="rb", compression=opts["compression"], **dict(storage_options or {})) as f:
            yield from pd.read_csv(f, sep=opts["sep"], usecols=columns, dtype="string", chunksize=rows)

    def reader_frame(self, filename: str) -> bool:
        import os

        return filename.endswith("_csv.pyx") or f"pandas{os.sep}io{os.sep}parsers" in filename


def csv_options(name: str) -> dict[str, Any]:
    """Reader options of one CSV file from its suffix: separator (``.tsv``) and compression."""
    low = name.lower()
    comp = next((c for suf, c in _COMPRESSION.items() if low.endswith(suf)), None)
    return {"sep": "\t" if low.endswith(".tsv") else ",", "compression": comp}


def read_csv(target: Any, *, usecols: Sequence[str] | None = None, dtype: Any = None, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None) -> Any:
    """A dask DataFrame of CSV files (one path, glob or a list), each read with its own separator and
    compression; compressed files are read whole (``blocksize=None``, no Dask warning to the user)."""
    import dask.dataframe as dd

    files = CSVFormat().files(target, storage_options)
    groups: dict[tuple[str, Any], list[str]] = {}
    for f in files:
        o = csv_options(f)
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


__all__ = ["CSVFormat", "CSV_SUFFIXES", "csv_options", "read_csv"]
