"""The public geography map of a census release: which county and state each finest unit (tract) lies in.

``read_geography_map`` reads it (Parquet, or CSV by suffix) and checks what the file alone can show: the levels
are columns, codes are non-negative integers, one row per finest unit. The map is public, so an
error may name a code. Whether it is a tree (no unit with two parents) is the hierarchy's check
(``privcube.census.hierarchy``), not repeated here.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from privcube.core.errors import ConfigError

_CSV_SUFFIXES = (".csv", ".csv.gz", ".txt")


def _read(path: Path, levels: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """(the levels' columns as pandas, every column name); an unreadable file is one ConfigError line."""
    try:
        if path.name.lower().endswith(_CSV_SUFFIXES):
            frame = pd.read_csv(path)
            names = [str(c) for c in frame.columns]
        else:
            import pyarrow.parquet as pq

            names = [str(c) for c in pq.read_schema(path).names if not str(c).startswith("__index_level_")]
            frame = pq.read_table(path, columns=[c for c in levels if c in names]).to_pandas()
    except (OSError, ValueError, pd.errors.ParserError) as e:  # pyarrow.ArrowInvalid is a ValueError
        raise ConfigError(f"geography.map {str(path)!r} is not a readable Parquet or CSV file: "
                          f"{' '.join(str(e).split())[:200]}") from None
    frame.columns = [str(c) for c in frame.columns]
    return frame, names


def _codes(frame: pd.DataFrame, level: str, path: Path) -> np.ndarray:
    """One level's column as int64 codes: integers (or whole floats), no missing value, none negative."""
    col = frame[level]
    if col.isna().any():
        raise ConfigError(f"geography.map {str(path)!r}: column {level!r} has {int(col.isna().sum())} missing codes; "
                          "every finest unit needs a code at every level")
    values = col.to_numpy()
    if values.dtype.kind == "f" and np.all(values == np.floor(values)):
        values = values.astype(np.int64)
    if values.dtype.kind not in "iu":
        raise ConfigError(f"geography.map {str(path)!r}: column {level!r} holds {values.dtype} values, not integer "
                          "codes")
    values = values.astype(np.int64)
    if len(values) and values.min() < 0:
        raise ConfigError(f"geography.map {str(path)!r}: column {level!r} has negative codes (e.g. "
                          f"{int(values[values < 0][0])}); codes are non-negative integers")
    return values


def read_geography_map(path: str | Path, levels: Sequence[str], attribute: str) -> dict[str, np.ndarray]:
    """``{level: int64 codes}`` of every level in ``levels`` (which includes ``attribute``, the finest unit), one
    entry per finest unit, ordered by the finest unit's code (``out[attribute]`` is sorted and unique)."""
    levels = [str(v) for v in levels]
    if attribute not in levels:
        raise ConfigError(f"geography.levels {levels} must include geography.attribute {attribute!r} (the finest "
                          "level)")
    twice = [v for i, v in enumerate(levels) if v in levels[:i]]
    if twice:
        raise ConfigError(f"geography.levels names {twice[0]!r} twice")
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"geography.map {str(p)!r} does not exist or is not a file")
    frame, names = _read(p, levels)
    missing = [v for v in levels if v not in names]
    if missing:
        raise ConfigError(f"geography.map {str(p)!r} has no column {missing[0]!r} for level {missing[0]!r}; its "
                          f"columns are {names[:30]}")
    if frame.empty:
        raise ConfigError(f"geography.map {str(p)!r} has no rows")
    out = {v: _codes(frame, v, p) for v in levels}
    order = np.argsort(out[attribute], kind="stable")
    out = {v: c[order] for v, c in out.items()}
    finest = out[attribute]
    dup = finest[1:] == finest[:-1]
    if dup.any():
        raise ConfigError(f"geography.map {str(p)!r}: {attribute} {int(finest[1:][dup][0])} has more than one row "
                          f"({int(dup.sum())} duplicated rows); the map has one row per finest unit")
    return out


__all__ = ["read_geography_map"]
