"""Distinct-row compression: collapse encoded rows to (unique record, count).

Repeated marginal passes over the compressed table cost O(unique rows) instead of O(rows); the
counts are weights (column ``count``, int64).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.errors import DataError

COUNT = "count"


def compress(frame: Any, *, split_out: int | None = None) -> Any:
    """Dask (or pandas) frame of codes -> unique rows plus an int64 ``count`` column."""
    from privcube.storage.ingest import EncodedTable

    if isinstance(frame, EncodedTable):
        frame = frame.frame
    cols = [str(c) for c in frame.columns]
    if COUNT in cols:
        raise DataError(f"column {COUNT!r} clashes with the count column of the compressed table")
    if not cols:
        raise DataError("cannot compress a frame without columns")
    kw = {"split_out": split_out} if split_out is not None and not isinstance(frame, pd.DataFrame) else {}
    sizes = frame.groupby(cols, sort=False, observed=True, dropna=False).size(**kw)
    out = sizes.to_frame(COUNT).reset_index()
    dtypes = {c: frame.dtypes[c] for c in cols}
    dtypes[COUNT] = np.int64
    return out.astype(dtypes)


def compress_records(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n, d)`` code array -> (unique rows sorted lexicographically, int64 counts)."""
    arr = np.asarray(records)
    if arr.ndim != 2:
        raise DataError(f"records must be a 2-D (rows, attributes) array, got shape {arr.shape}")
    if arr.shape[0] == 0:
        return arr.copy(), np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iub":
        raise DataError(f"records must hold integer codes, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and (arr < 0).any():
        col = int(np.flatnonzero((arr < 0).any(axis=0))[0])
        raise DataError(f"records column {col}: a value is a negative code; codes are integers from 0")
    dims = [int(m) + 1 for m in arr.max(axis=0)]
    if math.prod(dims) < 2**62:
        keys = np.ravel_multi_index(tuple(arr.T.astype(np.int64)), dims)
        uniq, counts = np.unique(keys, return_counts=True)
        rows = np.stack(np.unravel_index(uniq, dims), axis=1).astype(arr.dtype)
        return rows, counts.astype(np.int64)
    rows, counts = np.unique(arr, axis=0, return_counts=True)
    return rows, counts.astype(np.int64)


__all__ = ["COUNT", "compress", "compress_records"]
