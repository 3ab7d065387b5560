"""Degree bound d_max: check the real links, or truncate them first-come (file order) with a report.

The DP guarantee assumes every real record has degree ≤ d_max (a public constant). Truncation is a
public-rule preprocessing step applied before anything else (the authors keep the first d_max links per
right-side record, then per left-side record).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privcube.core.errors import ConfigError, DataError


def _first_k(ids: np.ndarray, k: int) -> np.ndarray:
    """Mask keeping the first k occurrences (in array order) of each id."""
    if ids.size == 0:
        return np.ones(0, dtype=bool)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, ids.size]))
    rank = np.empty(ids.size, dtype=np.int64)
    rank[order] = np.arange(ids.size) - group_start
    return rank < k


def check_d_max(d_max: Any) -> int:
    """Validate d_max (a positive integer) or raise ConfigError naming it."""
    if isinstance(d_max, bool) or not isinstance(d_max, (int, np.integer)) or int(d_max) < 1:
        raise ConfigError(f"mechanism 'relational': parameter 'd_max' must be a positive integer, got {d_max!r}")
    return int(d_max)


def enforce_degree(i: np.ndarray, j: np.ndarray, d_max: int, *, truncate: bool, names: tuple[str, str] = ("left", "right"),
                   keys: tuple[np.ndarray | None, np.ndarray | None] = (None, None)) -> tuple[np.ndarray, dict[str, Any]]:
    """Mask of links kept so every record has degree ≤ d_max, and a report; without ``truncate`` raise DataError."""
    d_max = check_d_max(d_max)
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    deg1 = np.bincount(i) if i.size else np.zeros(0, dtype=np.int64)
    deg2 = np.bincount(j) if j.size else np.zeros(0, dtype=np.int64)
    max1 = int(deg1.max()) if deg1.size else 0
    max2 = int(deg2.max()) if deg2.size else 0
    if not truncate:
        for side, deg in ((0, deg1), (1, deg2)):
            if deg.size and deg.max() > d_max:  # no record id, no degree: both are private
                raise DataError(
                    f"table {names[side]!r}: a record has more links than d_max={d_max}; raise 'd_max' or set "
                    "mechanism parameter 'truncate: true' to drop links beyond d_max (file order)")
        keep = np.ones(i.size, dtype=bool)
    else:
        keep = _first_k(j, d_max)
        # the second pass ranks only kept links per left record
        idx = np.flatnonzero(keep)
        k2 = _first_k(i[idx], d_max)
        keep[idx[~k2]] = False
    report = {"d_max": d_max, "links_in": int(i.size), "links_kept": int(keep.sum()),
              "links_dropped": int(i.size - keep.sum()), f"max_degree_{names[0]}": max1,
              f"max_degree_{names[1]}": max2, "truncated": bool(truncate)}
    return keep, report


__all__ = ["check_d_max", "enforce_degree"]
