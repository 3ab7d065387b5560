"""Arrow IPC files (Feather v2) and streams: typed columns, read by record batches, a partition per few batches.

An IPC *file* (``.arrow``, ``.feather``, ``.ipc``) has a footer listing its record batches, so a partition reads
a run of batches at random; an IPC *stream* (``.arrows``, or an ``.ipc`` file without footer) is read whole,
one partition per file. Column names and types come from the schema block; nothing else is read up front.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from privcube.core.errors import DataError
from privcube.storage.formats.base import InputFormat, one_line

ARROW_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
#: bytes of a file read by one partition (a run of record batches), unless a reader asks for another blocksize
DEFAULT_BLOCKSIZE = 128 * 2**20


class ArrowFormat(InputFormat):
    """Apache Arrow IPC files and streams (Feather v2 is the IPC file format)."""

    name = "arrow"
    label = "Arrow IPC"
    description = ("Apache Arrow IPC files or streams (.arrow, .feather, .ipc, .arrows), e.g. written by "
                   "pyarrow.feather.write_feather or polars' write_ipc; typed columns, read by record batches")
    suffixes = ARROW_SUFFIXES
    abilities = frozenset({"lazy", "schema-from-file", "remote"})

    def columns(self, file: str, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Column names from the file's schema block (an unreadable file is a DataError naming it)."""
        import fsspec

        try:
            with fsspec.open(file, mode="rb", **dict(storage_options or {})) as f:
                return [str(c) for c in _reader(f).schema.names]
        except (OSError, ValueError, EOFError) as e:  # pyarrow.ArrowInvalid is a ValueError
            raise DataError(f"input file {file!r} is not a readable Arrow IPC file: {one_line(e)}") from None

    def open(self, target: Any, columns: Sequence[str] | None, *, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None, text_dtype: Any = "string") -> Any:
        """One partition per run of record batches of about ``blocksize`` bytes (a stream: per file)."""
        import dask.dataframe as dd
        import fsspec
        from dask.utils import parse_bytes

        so = dict(storage_options or {})
        size = parse_bytes(blocksize) if blocksize is not None else DEFAULT_BLOCKSIZE
        files = self.files(target, so)
        parts: list[tuple[str, int | None, int | None]] = []
        for file in files:
            opened = fsspec.open(file, mode="rb", **so)
            nbytes = max(int(opened.fs.size(opened.path) or 1), 1)
            with opened as f:
                reader = _reader(f)
                if not hasattr(reader, "num_record_batches"):  # a stream: read whole
                    parts.append((file, None, None))
                    continue
                n = reader.num_record_batches
                step = max(1, n * size // nbytes)
                parts += [(file, i, min(i + step, n)) for i in range(0, n, step)] or [(file, 0, 0)]
        with fsspec.open(files[0], mode="rb", **so) as f:
            schema = _reader(f).schema
        cols = list(columns) if columns is not None else list(schema.names)
        meta = schema.empty_table().select(cols).to_pandas()
        return dd.from_map(read_part, parts, columns=cols, storage_options=so, meta=meta, label="read-arrow",
                           enforce_metadata=False)

    def chunks(self, file: str, columns: Sequence[str] | None,
               storage_options: Mapping[str, Any] | None, rows: int) -> Iterator[pd.DataFrame]:
        import fsspec
        import pyarrow as pa

        with fsspec.open(file, mode="rb", **dict(storage_options or {})) as f:
            reader = _reader(f)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
                if hasattr(reader, "num_record_batches") else iter(reader)
            for batch in batches:
                table = pa.Table.from_batches([batch])
                yield (table.select(list(columns)) if columns is not None else table).to_pandas()

    def reader_frame(self, filename: str) -> bool:
        return os.path.abspath(filename) == os.path.abspath(__file__)


def _reader(f: Any) -> Any:
    """An IPC file reader (random access to record batches) or, for a stream, a stream reader."""
    import pyarrow as pa

    try:
        return pa.ipc.open_file(f)
    except pa.ArrowInvalid:
        f.seek(0)
        return pa.ipc.open_stream(f)


def read_part(part: tuple[str, int | None, int | None], columns: Sequence[str],
              storage_options: Mapping[str, Any]) -> pd.DataFrame:
    """Task: record batches ``[start, stop)`` of one file (a stream: all of it) as pandas, only ``columns``."""
    import fsspec
    import pyarrow as pa

    file, start, stop = part
    with fsspec.open(file, mode="rb", **dict(storage_options)) as f:
        reader = _reader(f)
        if start is None:
            table = reader.read_all()
        else:
            table = pa.Table.from_batches([reader.get_batch(i) for i in range(start, stop)], schema=reader.schema)
        return table.select(list(columns)).to_pandas()


__all__ = ["ARROW_SUFFIXES", "ArrowFormat", "read_part"]
