"""The real side of a relational run as task graphs: record-level data stays in tasks.

Tables and link tables (numpy codes, pandas or dask DataFrames, Parquet partitions read lazily) become
lists of delayed pandas partitions. Every per-record step runs as a task (on the cluster's workers when
the run has one): each table's codes stacked and range-checked, its key index (unique, no missing
value), each link partition's ids looked up to row positions (a broadcast hash join), and one link-check
task (duplicates, self-loops, d_max check or first-come truncation, degree histograms). The driver
receives only public sizes, check results (one-line errors naming a table, column or row number, never an
id or a degree), degree histograms and, later, count tables; the checked links stay on the workers
(``persist``) and are joined with both tables' codes per partition for counting (``joined_frame``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.relational.stages.degree_bound import enforce_degree
from privcube.storage.frame_tasks import frame_parts, held

MISSING = -2  # position of a missing id
UNKNOWN = -1  # position of an id that is no key


def is_dask(frame: Any) -> bool:
    """Whether ``frame`` is a dask DataFrame."""
    return hasattr(frame, "to_delayed") and hasattr(frame, "npartitions")


def columns_of(data: Any) -> list[str] | None:
    """Column names of a (pandas or dask) DataFrame, None for an array."""
    return [str(c) for c in data.columns] if isinstance(data, pd.DataFrame) or is_dask(data) else None


def partitions(data: Any, domain: Domain, name: str) -> list[Any]:
    """The table as delayed pandas partitions (an array: one frame of its codes, columns in domain order)."""
    if is_dask(data):
        return frame_parts(data)
    if isinstance(data, pd.DataFrame):
        missing = [a for a in domain.attributes if a not in data.columns]
        if missing:
            raise DataError(f"table {name!r} is missing column(s) {missing}")
        return [held(data)]
    arr = np.asarray(data)
    if arr.ndim != 2 or arr.shape[1] != len(domain):
        raise DataError(f"table {name!r}: codes must have shape (n, {len(domain)}), got {arr.shape}")
    return [held(pd.DataFrame(arr, columns=list(domain.attributes)))]


def code_dtype(domain: Domain) -> Any:
    """The smallest integer dtype holding every code of ``domain``."""
    top = max(domain.shape, default=1)
    return np.uint8 if top <= 256 else np.uint16 if top <= 65536 else np.int64


def stack_codes(name: str, domain: Domain, *parts: pd.DataFrame) -> np.ndarray:
    """Task: the (n × d) codes of a table, range-checked (DataError naming table and column, not the value)."""
    dt = code_dtype(domain)
    cols = []
    for a, size in zip(domain.attributes, domain.shape):
        vals = np.concatenate([np.asarray(p[a]) for p in parts]) if parts else np.zeros(0)
        if vals.dtype.kind not in "iu":
            if pd.isna(vals).any():
                raise DataError(f"table {name!r}: column {a!r} has missing values; encode them as a category first")
            vals = vals.astype(np.int64)
        if vals.size and (vals.min() < 0 or vals.max() >= size):
            raise DataError(f"table {name!r}: column {a!r} has a value outside [0, {size})")
        cols.append(vals.astype(dt))
    return np.stack(cols, axis=1) if cols else np.zeros((sum(len(p) for p in parts), 0), dtype=dt)


def key_index(table: str, key: str, *parts: pd.DataFrame) -> pd.Index:
    """Task: the key column of a table as an index (value → row): no missing value, no repeat."""
    vals = pd.concat([p[key] for p in parts], ignore_index=True) if parts else pd.Series([], dtype=object)
    if vals.isna().any():
        raise DataError(f"table {table!r}: key column {key!r} has missing values")
    idx = pd.Index(vals.to_numpy())
    if not idx.is_unique:  # the repeated id itself is private: name the column and a row only
        r = int(np.flatnonzero(idx.duplicated())[0])
        raise DataError(f"table {table!r}: key column {key!r} repeats a value (row {r}); keys must be unique")
    return idx


def row_index(codes: np.ndarray) -> pd.Index:
    """Task: row positions as the key of a table without a key column."""
    return pd.RangeIndex(len(codes))


def positions(values: Any, index: pd.Index) -> np.ndarray:
    """Row positions of ``values`` under ``index`` (UNKNOWN for no key, MISSING for a missing value)."""
    vals = pd.Series(np.asarray(values))
    pos = np.asarray(index.get_indexer(vals.to_numpy()), dtype=np.int64)
    pos[vals.isna().to_numpy()] = MISSING
    return pos


def fk_positions(part: pd.DataFrame, fk: str, parent: pd.Index) -> np.ndarray:
    """Task: one child partition's parent positions (row i of the child is link i)."""
    return positions(part[fk], parent)


def pair_positions(part: Any, cols: tuple[Any, Any], left: pd.Index, right: pd.Index) -> np.ndarray:
    """Task: one link-table partition as a (2 × rows) array of (left, right) row positions."""
    if isinstance(part, pd.DataFrame):
        a, b = part[cols[0]], part[cols[1]]
    else:
        arr = np.asarray(part)
        a, b = arr[:, 0], arr[:, 1]
    return np.stack([positions(a, left), positions(b, right)])


@dataclass(frozen=True)
class LinkSpec:
    """What the link-check task needs: names for messages, the kind, the degree rule."""

    kind: str
    names: tuple[str, str]  # (left table, right table)
    sides: tuple[str, str]  # names used in degree messages
    id_what: tuple[str, str]  # what a bad id is called in messages (e.g. "children.parent_id", "pairs.users")
    targets: tuple[str, str]  # "table.key" a bad id is not a key of
    d_max: int
    truncate: bool
    no_diag: bool
    missing_column: tuple[str, str] | None = None  # link-file column names: a missing value is named by column


def _first_bad(parts: Sequence[np.ndarray], spec: LinkSpec) -> None:
    """Raise the error of the first (in file order) link whose id is missing or no key."""
    off = 0
    for pos in parts:
        arr = pos if pos.ndim == 2 else np.stack([np.arange(pos.size), pos])
        bad = arr < 0
        if bad.any():
            cols = np.flatnonzero(bad.any(axis=0))
            r = int(cols[0])
            side = 0 if spec.kind == "many_to_many" and bad[0, r] else 1
            if arr[side, r] == MISSING:
                if spec.kind == "one_to_many":
                    raise DataError(f"links: {spec.id_what[1]} is missing in row {off + r}; every child needs a parent")
                if spec.missing_column is not None:
                    raise DataError(f"links: column {spec.missing_column[side]!r} is missing a value in row {off + r}")
            raise DataError(f"links: the {spec.id_what[side]} value in row {off + r} is not a key of "
                            f"{spec.targets[side]}")
        off += arr.shape[1]


def link_checks(spec: LinkSpec, n1: int, n2: int, *parts: np.ndarray) -> dict[str, Any]:
    """Task: every check of the real links, in today's order (ids are keys; repeated pairs dropped; no self-loop
    unless allowed; degrees ≤ d_max or truncated first-come), the keep mask of each partition, the kept
    positions' degree histograms and the sizes. Runs where the links are; its masks stay there."""
    _first_bad(parts, spec)
    if spec.kind == "one_to_many":
        j = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        i = np.arange(j.size, dtype=np.int64)
    else:
        both = np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), np.int64)
        i, j = both[0], both[1]
    keep = np.ones(i.size, dtype=bool)
    rep: dict[str, Any] = {}
    if spec.kind == "many_to_many":
        _, first = np.unique(i * max(n2, 1) + j, return_index=True)
        keep[:] = False
        keep[first] = True
        rep["duplicate_pairs_dropped"] = int(i.size - first.size)
    idx = np.flatnonzero(keep)
    if spec.no_diag and np.any(i[idx] == j[idx]):
        raise DataError(f"links: a record of table {spec.names[0]!r} links to itself; self-loops are excluded "
                        "by default: remove them or set mechanism parameter 'self_loops: true'")
    k2, deg_rep = enforce_degree(i[idx], j[idx], spec.d_max, truncate=spec.truncate, names=spec.sides)
    keep[idx[~k2]] = False
    if not keep.any():
        raise DataError(f"links: no relationships between {spec.names[0]!r} and {spec.names[1]!r} (after d_max "
                        "truncation)")
    ki, kj = i[keep], j[keep]
    if spec.kind == "one_to_many":
        n1 = int(keep.sum())  # a child losing its link is dropped
        ki = np.arange(n1, dtype=np.int64)
    sizes = np.cumsum([0] + [p.shape[-1] for p in parts])
    masks = [keep[a:b] for a, b in zip(sizes[:-1], sizes[1:])]
    return {"masks": masks, "links_report": rep, "degree_report": deg_rep, "m": int(keep.sum()), "n1": int(n1),
            "n2": int(n2), "partition_rows": [int(b - a) for a, b in zip(sizes[:-1], sizes[1:])], "degree_histograms": (_histogram(ki, n1), _histogram(kj, n2))}


def _histogram(ids: np.ndarray, n: int) -> np.ndarray:
    """How many of the n records have 0, 1, 2, … links (an aggregate: no record is named)."""
    return np.bincount(np.bincount(ids, minlength=n))


def parent_flags(n2: int, pos: Sequence[np.ndarray], masks: Sequence[np.ndarray]) -> np.ndarray:
    """Task (one-to-many): which of the n2 parents have at least one kept child (stays where the links are)."""
    flags = np.zeros(int(n2), dtype=bool)
    for q, mk in zip(pos, masks):
        flags[np.asarray(q)[np.asarray(mk)]] = True
    return flags


def count_both(a: np.ndarray, b: np.ndarray) -> int:
    """Task: how many parents are flagged in both arrays (the one number that comes back)."""
    if a.shape != b.shape:
        raise DataError("internal: sibling links see different parent tables")
    return int(np.count_nonzero(a & b))


def public_view(checks: dict[str, Any]) -> dict[str, Any]:
    """Task: the link checks without the masks (what the driver receives: sizes, reports, histograms)."""
    return {k: v for k, v in checks.items() if k != "masks"}


def mask_of(checks: dict[str, Any], k: int) -> np.ndarray:
    """Task: partition k's keep mask."""
    return checks["masks"][k]


def kept_codes(codes: np.ndarray, *masks: np.ndarray) -> np.ndarray:
    """Task: the rows of a one-to-many child that keep their link."""
    return codes[np.concatenate(masks)] if masks else codes


def code_chunk(codes: np.ndarray, start: int, stop: int, columns: Sequence[str]) -> pd.DataFrame:
    """Task: rows [start, stop) of a code array as a frame (a partition of the stage-1 table)."""
    return pd.DataFrame(codes[start:stop], columns=list(columns))


def joined_part(pos: np.ndarray, mask: np.ndarray, kind: str, codes1: np.ndarray, codes2: np.ndarray,
                cols1: Sequence[str], cols2: Sequence[str], offset: int) -> pd.DataFrame:
    """Task: one link partition joined with both tables' codes (kept links only): columns ``cols1`` (left codes)
    then ``cols2`` (right codes). ``offset``: the partition's first child row (one-to-many)."""
    if kind == "one_to_many":
        i = np.arange(offset, offset + pos.size, dtype=np.int64)[mask]
        j = pos[mask]
    else:
        i, j = pos[0][mask], pos[1][mask]
    out = {c: codes1[i, k] for k, c in enumerate(cols1)}
    out.update({c: codes2[j, k] for k, c in enumerate(cols2)})
    return pd.DataFrame(out)


def twin_codes(real: np.ndarray, syn: np.ndarray, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Task (NON-private evaluation): each real record's synthetic twin's codes: its own codes when a synthetic
    record has them, else a random synthetic record's (the error floor's transplant; ``_twin`` in the
    benchmarks)."""
    syn = np.asarray(syn, dtype=np.int64)
    if not len(shape):
        return real
    rk = np.ravel_multi_index(tuple(real.astype(np.int64).T), shape)
    sk = np.unique(np.ravel_multi_index(tuple(syn.T), shape))
    has = np.isin(rk, sk)
    out = real.copy()
    rng = np.random.default_rng(seed)
    miss = np.flatnonzero(~has)
    if miss.size and len(syn):
        out[miss] = syn[rng.integers(0, len(syn), miss.size)].astype(real.dtype)
    return out


def chunk_bounds(n: int, rows: int) -> list[tuple[int, int]]:
    """[start, stop) of stage-1 partitions of at most ``rows`` rows (one empty chunk for n = 0)."""
    rows = max(1, int(rows))
    return [(a, min(a + rows, n)) for a in range(0, n, rows)] or [(0, 0)]


def prefixed(domain: Domain, prefix: str) -> list[str]:
    """Joined-frame column names of a table's attributes."""
    return [f"{prefix}{a}" for a in domain.attributes]


def joined_domain(dom1: Domain, dom2: Domain) -> Domain:
    """The domain of the joined frame: left attributes ``L.<a>``, then right ``R.<b>``."""
    return Domain(tuple(prefixed(dom1, "L.") + prefixed(dom2, "R.")), tuple(dom1.shape) + tuple(dom2.shape))


def meta_frame(columns: Sequence[str], dtypes: Sequence[Any]) -> pd.DataFrame:
    """An empty frame with these columns and dtypes (dask meta)."""
    return pd.DataFrame({c: np.zeros(0, dtype=d) for c, d in zip(columns, dtypes)})


def chunk_rows(d: int) -> int:
    """Rows per stage-1 partition: about 8 MB of codes."""
    return max(1, 8_000_000 // max(d, 1)) if d else 1_000_000


__all__ = ["LinkSpec", "chunk_bounds", "chunk_rows", "code_chunk", "code_dtype", "columns_of", "fk_positions",
           "is_dask", "joined_domain", "joined_part", "key_index", "kept_codes", "link_checks", "mask_of",
           "meta_frame", "pair_positions", "partitions", "positions", "prefixed", "public_view", "row_index",
           "stack_codes", "twin_codes"]
