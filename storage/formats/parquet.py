"""Parquet files and datasets (a folder of files, hive partitions too), read by row groups by dask."""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from privcube.core.errors import DataError
from privcube.storage.formats.base import InputFormat, full_path, one_line

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_METADATA_FILES = ("_metadata", "_common_metadata")


class ParquetFormat(InputFormat):
    """Apache Parquet: typed columns, names and types from each file's footer; a folder is one dataset."""

    name = "parquet"
    label = "Parquet"
    description = ("Apache Parquet files or datasets (.parquet, .pq, .parq; a folder of them, hive partitions "
                   "included); the default for a path without a known suffix")
    suffixes = PARQUET_SUFFIXES
    abilities = frozenset({"lazy", "partitioned", "schema-from-file", "remote"})

    @classmethod
    def guess_can_open(cls, path: Any) -> bool:
        """A Parquet suffix, or a dataset's ``_metadata`` / ``_common_metadata`` file."""
        return super().guess_can_open(path) or (
            isinstance(path, str) and path.lower().rstrip("/").rsplit("/", 1)[-1] in _METADATA_FILES)

    def files(self, target: Any, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Every file a Parquet input reads (folders walked for Parquet files, as Dask does; other files there,
        e.g. a README, are not data)."""
        import fsspec

        targets = [str(t) for t in target] if isinstance(target, (list, tuple)) else [str(target)]
        fs, _, _ = fsspec.get_fs_token_paths(targets[0], storage_options=dict(storage_options or {}))
        out: list[str] = []
        for t in targets:
            _, _, found = fsspec.get_fs_token_paths(t, storage_options=dict(storage_options or {}))
            for p in found:
                if fs.isdir(p):  # what Dask reads of a folder: every file below it with a Parquet suffix
                    out += sorted(str(f) for f in fs.find(p.rstrip("/")) if str(f).endswith(PARQUET_SUFFIXES))
                else:
                    out.append(str(p))
        return [full_path(fs, f) for f in out]

    def folder_target(self, folder: str, names: Sequence[str]) -> Any:
        """The folder itself: Dask reads a Parquet dataset (partition folders included) natively."""
        return folder

    def columns(self, file: str, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Column names of one Parquet file from its footer (an unreadable file is a DataError naming it)."""
        import fsspec
        import pyarrow.parquet as pq

        try:
            with fsspec.open(file, mode="rb", **dict(storage_options or {})) as f:
                return [str(c) for c in pq.read_schema(f).names]
        except (OSError, ValueError, EOFError) as e:  # pyarrow.ArrowInvalid is a ValueError
            raise DataError(f"input file {file!r} is not a readable Parquet file: {one_line(e)}") from None

    def dataset_columns(self, target: Any, storage_options: Mapping[str, Any] | None, source: str) -> list[str]:
        """The dataset's columns (hive partition columns included) as Dask reads them."""
        import dask.dataframe as dd

        so = {"storage_options": dict(storage_options)} if storage_options else {}
        try:
            probe = dd.read_parquet(target, **so)
        except (FileNotFoundError, OSError, ValueError) as e:
            raise DataError(f"cannot read Parquet input {source!r}: {one_line(e)}") from None
        return [str(c) for c in probe.columns]

    def open(self, target: Any, columns: Sequence[str] | None, *, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None, text_dtype: Any = "string") -> Any:
        import dask.dataframe as dd

        kw: dict[str, Any] = {"storage_options": dict(storage_options)} if storage_options else {}
        if blocksize is not None:
            kw["blocksize"] = blocksize
        return dd.read_parquet(target, columns=list(columns) if columns is not None else None, **kw)

    def chunks(self, file: str, columns: Sequence[str] | None,
               storage_options: Mapping[str, Any] | None, rows: int) -> Iterator[pd.DataFrame]:
        import fsspec
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not storage_options and fsspec.utils.get_protocol(str(file)) in ("file", "local"):
            source = pq.ParquetFile(str(file).removeprefix("file://"))  # Arrow's own file IO: ~2.5x faster locally
            yield from (pa.Table.from_batches([b]).to_pandas() for b in source.iter_batches(batch_size=rows,
                                                                                           columns=columns))
            return
        with fsspec.open(file, mode="rb", **dict(storage_options or {})) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=rows, columns=columns):
                yield pa.Table.from_batches([batch]).to_pandas()

    def reader_frame(self, filename: str) -> bool:
        return f"pyarrow{os.sep}parquet" in filename or filename.endswith("_parquet.pyx")


__all__ = ["PARQUET_SUFFIXES", "ParquetFormat"]
