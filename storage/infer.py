"""NON-PRIVATE helper: propose a rich schema from the data itself.

Categories are the observed values and bins are data quantiles, so the proposed schema reveals
facts about individual records. It is a convenience for getting started on public or test data;
``infer_schema`` always returns a warning string that callers must show to the user, and the schema it
returns carries ``inferred_from_data: true`` (``Schema.inferred_from_data``; kept in its YAML/JSON), so any
run that uses it warns in its outputs that the domain came from the data.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.errors import DataError, DomainError
from privcube.storage.schema import Attribute, Schema

WARNING = (
    "NON-PRIVATE: this schema was derived from the data (categories are observed values, bin edges "
    "are data quantiles); it reveals information about individual records and must not be used for a "
    "differentially private release unless it is reviewed and replaced by public knowledge."
)
_SAMPLE = 20_000


@dataclass
class _Summary:
    """Mergeable one-pass statistics of one column."""

    n: int = 0
    n_na: int = 0
    numeric: bool = True
    integral: bool = True
    date: bool = True
    boolean: bool = True
    lo: float = np.inf
    hi: float = -np.inf
    counts: Counter | None = field(default_factory=Counter)
    sample: list[np.ndarray] = field(default_factory=list)
    date_sample: list[np.ndarray] = field(default_factory=list)

    def merge(self, other: _Summary, max_categories: int) -> _Summary:
        """Combine two partitions' statistics."""
        out = _Summary(
            self.n + other.n, self.n_na + other.n_na, self.numeric and other.numeric,
            self.integral and other.integral, self.date and other.date, self.boolean and other.boolean,
            min(self.lo, other.lo), max(self.hi, other.hi), None,
            self.sample + other.sample, self.date_sample + other.date_sample,
        )
        if self.counts is not None and other.counts is not None:
            c = self.counts + other.counts
            out.counts = c if len(c) <= max_categories else None
        return out


def _summarise(part: pd.DataFrame, max_categories: int, seed: int) -> dict[str, _Summary]:
    """Statistics of every column of one partition."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in part.columns:
        s = part[name]
        na = s.isna()
        x = s[~na]
        sm = _Summary(n=len(s), n_na=int(na.sum()))
        sm.boolean = pd.api.types.is_bool_dtype(s.dtype)
        if pd.api.types.is_datetime64_any_dtype(s.dtype):
            sm.numeric = sm.integral = False
            ts = x
        else:
            num = x if pd.api.types.is_numeric_dtype(x.dtype) else pd.to_numeric(x, errors="coerce")
            sm.numeric = bool(num.notna().all()) and not sm.boolean
            if sm.numeric and len(num):
                v = num.to_numpy(dtype=np.float64)
                sm.integral = bool(np.all(v == np.floor(v)))
                sm.lo, sm.hi = float(v.min()), float(v.max())
                sm.sample.append(rng.choice(v, min(len(v), _SAMPLE), replace=False))
            ts = None
            if not sm.numeric and (pd.api.types.is_string_dtype(x.dtype) or x.dtype == object):
                ts = pd.to_datetime(x.astype(str), errors="coerce", format="ISO8601") if len(x) else x
                if len(x) and ts.isna().any():
                    ts = None
        sm.date = ts is not None and not sm.numeric
        if sm.date and len(x):
            d = pd.Series(ts).dt.tz_localize(None) if getattr(ts.dtype, "tz", None) else pd.Series(ts)
            v = d.to_numpy(dtype="datetime64[ns]").astype(np.int64)
            sm.date_sample.append(rng.choice(v, min(len(v), _SAMPLE), replace=False))
            sm.lo, sm.hi = float(v.min()), float(v.max())
        vc = x.map(str).value_counts() if len(x) else pd.Series(dtype=int)
        sm.counts = Counter(dict(vc.items())) if len(vc) <= max_categories else None
        out[str(name)] = sm
    return out


def _quantile_edges(sample: np.ndarray, lo: float, hi: float, n_bins: int, integral: bool) -> list[float]:
    """Strictly increasing bin edges from sample quantiles, covering [lo, hi]."""
    qs = np.quantile(sample, np.linspace(0.0, 1.0, n_bins + 1)) if len(sample) else np.array([lo, hi])
    if integral:
        inner = np.floor(qs[1:-1])
        edges = np.unique(np.concatenate([[np.floor(lo)], inner, [np.floor(hi) + 1]]))
    else:
        edges = np.unique(np.concatenate([[lo], qs[1:-1], [np.nextafter(hi, np.inf)]]))
    if len(edges) < 2:
        edges = np.array([lo, lo + 1])
    return [int(e) if integral else float(e) for e in edges]


def infer_schema(
    source: str | Path | pd.DataFrame,
    *,
    columns: Sequence[str] | None = None,
    max_categories: int = 100,
    n_bins: int = 10,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[Schema, str]:
    """NON-PRIVATE: propose a schema from the data; returns (schema, warning that must be printed)."""
    import dask
    import dask.dataframe as dd

    from privcube.storage.ingest import open_input

    if max_categories < 1 or n_bins < 1:
        raise DomainError(f"max_categories={max_categories} and n_bins={n_bins} must be >= 1")
    if isinstance(source, pd.DataFrame):
        absent = [c for c in columns or () if c not in source.columns]
        if absent:
            raise DataError(f"column {absent[0]!r} is missing from the data; it has {list(source.columns)[:30]}")
        ddf = dd.from_pandas(source if columns is None else source[list(columns)], npartitions=1)
    else:
        info = open_input(source, storage_options, columns=columns)
        available = info.available
        if columns is not None:
            absent = [c for c in columns if c not in available]
            if absent:
                raise DataError(f"column {absent[0]!r} is missing from {str(source)!r}; it has {available[:30]}")
        ddf = info.read(list(columns) if columns else None, text_dtype=str)
    parts = ddf.to_delayed()
    summaries = dask.compute(*[dask.delayed(_summarise)(p, max_categories, i) for i, p in enumerate(parts)])
    attrs: list[Attribute] = []
    skipped: list[str] = []
    for name in map(str, ddf.columns):
        sm = summaries[0][name]
        for other in summaries[1:]:
            sm = sm.merge(other[name], max_categories)
        missing = "code" if sm.n_na else "error"
        observed = sm.n - sm.n_na
        if observed == 0:
            skipped.append(f"{name} (no values)")
            continue
        if sm.numeric and sm.integral and sm.lo >= 0 and sm.hi < max_categories:
            attrs.append(Attribute(name, "integer", int(sm.hi) + 1 + (1 if sm.n_na else 0), missing=missing))
        elif sm.numeric:
            edges = _quantile_edges(np.concatenate(sm.sample), sm.lo, sm.hi, n_bins, sm.integral)
            attrs.append(Attribute(name, "numeric", bins=tuple(edges), missing=missing, clip=True))
        elif sm.date:
            days = 86_400 * 10**9
            e = _quantile_edges(np.concatenate(sm.date_sample) // days, sm.lo // days, sm.hi // days, n_bins, True)
            bins = tuple(str(pd.Timestamp(int(d) * days).date()) for d in e)
            attrs.append(Attribute(name, "date", bins=bins, missing=missing, clip=True))
        elif sm.counts is not None:
            cats = sorted(sm.counts)
            attrs.append(Attribute(name, "categorical", categories=tuple(cats), missing=missing))
        else:
            skipped.append(f"{name} (more than {max_categories} distinct values)")
    if not attrs:
        raise DataError(f"no column could be described; skipped {skipped}")
    warning = WARNING + (f" Skipped columns: {', '.join(skipped)}." if skipped else "")
    return Schema(tuple(attrs), inferred_from_data=True), warning


__all__ = ["WARNING", "infer_schema"]
