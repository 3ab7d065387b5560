"""A test plug-in input format: JSON Lines (one JSON object per line), registered by one line in a test.

It shows what a new format takes: one module with one ``InputFormat`` class (``FORMATS.register("jsonl",
"jsonl_format:JSONLinesFormat")``); privcube validates, encodes, counts and locates bad rows as for any
other format.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from privcube.core.errors import DataError
from privcube.storage.formats.base import InputFormat


class JSONLinesFormat(InputFormat):
    """JSON Lines: one object per line, the first line's keys are the columns; one partition per file."""

    name = "jsonl"
    label = "JSON Lines"
    description = "JSON Lines files (.jsonl): one JSON object per line (a test plug-in)"
    suffixes = (".jsonl",)
    abilities = frozenset({"lazy"})

    def columns(self, file: str, storage_options: Mapping[str, Any] | None) -> list[str]:
        import fsspec

        with fsspec.open(file, mode="rt", **dict(storage_options or {})) as f:
            first = f.readline()
        try:
            return [str(k) for k in json.loads(first)]
        except (ValueError, TypeError):
            raise DataError(f"input file {file!r} is not a readable JSON Lines file") from None

    def open(self, target: Any, columns: Sequence[str] | None, *, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None, text_dtype: Any = "string") -> Any:
        import dask.dataframe as dd

        files = self.files(target, storage_options)
        cols = list(columns) if columns is not None else self.columns(files[0], storage_options)
        meta = pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
        return dd.from_map(read_jsonl, files, columns=cols, meta=meta, enforce_metadata=False)

    def chunks(self, file: str, columns: Sequence[str] | None,
               storage_options: Mapping[str, Any] | None, rows: int) -> Iterator[pd.DataFrame]:
        frame = read_jsonl(file, columns)
        for start in range(0, max(len(frame), 1), rows):
            yield frame.iloc[start:start + rows]


def read_jsonl(file: str, columns: Sequence[str] | None) -> pd.DataFrame:
    """Task: one file's rows, only ``columns``."""
    frame = pd.read_json(file, lines=True)
    return frame if columns is None else frame[list(columns)]
