"""Links between two tables: the spec (foreign key or link table) resolved to row positions, and codes.

A one-to-many link is a child table's foreign-key column pointing at a parent's key; a many-to-many link
is a link table of (left key, right key) pairs. Both become a ``Links`` of row positions (i into the left
table, j into the right). Error messages name tables, columns and row numbers, never a key value.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcube.domain import Domain
from privcube.errors import ConfigError, DataError

KINDS = ("one_to_many", "many_to_many")


@dataclass
class Links:
    """Real links as row positions: ``i`` into table ``left`` (rows of B), ``j`` into ``right``.

    one_to_many: ``left`` is the child table (one parent each), ``right`` the parent table.
    """

    left: str
    right: str
    i: np.ndarray
    j: np.ndarray
    kind: str = "many_to_many"
    left_key: str = "id"
    right_key: str = "id"
    fk: str | None = None  # child's foreign-key column (one_to_many)
    report: dict[str, Any] = field(default_factory=dict)
    columns: tuple[str, str] | None = None  # output link columns (self-referential links: the input's names)

    @property
    def self_ref(self) -> bool:
        """Whether both ends are the same table (a self-referential link table, B is n × n)."""
        return self.left == self.right


@dataclass
class RelationalData:
    """The private input of the mechanism: ``{name: (codes or DataFrame, Domain)}`` and a links spec."""

    tables: Mapping[str, tuple[Any, Domain]]
    links: Any


def split_ref(ref: Any, what: str) -> tuple[str, str]:
    """``'table.column'`` → (table, column), or ConfigError naming the key ``what``."""
    if not isinstance(ref, str) or ref.count(".") != 1:
        raise ConfigError(f"links: {what} must look like 'table.column', got {ref!r}")
    t, c = ref.split(".")
    return t, c


def key_positions(frame: Any, table: str, key: str) -> tuple[np.ndarray, dict[Any, int]]:
    """Key values of a table (its key column, or row positions when it has none) and value → row."""
    if isinstance(frame, pd.DataFrame) and key in frame.columns:
        vals = frame[key].to_numpy()
        if pd.isna(vals).any():
            raise DataError(f"table {table!r}: key column {key!r} has missing values")
        pos = {v: k for k, v in enumerate(vals.tolist())}
        if len(pos) != len(vals):  # the repeated id itself is private: name the column only
            r = int(np.flatnonzero(pd.Series(vals).duplicated().to_numpy())[0])
            raise DataError(f"table {table!r}: key column {key!r} repeats a value (row {r}); keys must be unique")
        return vals, pos
    n = len(frame)
    return np.arange(n), {k: k for k in range(n)}


def lookup(values: np.ndarray, pos: dict[Any, int], where: str, target: str) -> np.ndarray:
    """Row positions of ``values`` under the key map ``pos`` (DataError naming the row, not the value)."""
    out = np.empty(len(values), dtype=np.int64)
    for r, v in enumerate(values.tolist()):
        k = pos.get(v)
        if k is None:
            raise DataError(f"links: the {where} value in row {r} is not a key of {target}")
        out[r] = k
    return out


def _known(tables: Mapping[str, Any], *names: str) -> None:
    for t in names:
        if t not in tables:
            raise ConfigError(f"links: unknown table {t!r}; tables are {sorted(tables)}")


def _check_links_object(spec: Links, tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """A ``Links`` given as is: known tables, known kind, positions inside both tables."""
    _known(tables, spec.left, spec.right)
    if spec.kind not in KINDS:
        raise ConfigError(f"links: kind must be one of {KINDS}, got {spec.kind!r}")
    n1, n2 = len(tables[spec.left][0]), len(tables[spec.right][0])
    for arr, n, t in ((spec.i, n1, spec.left), (spec.j, n2, spec.right)):
        arr = np.asarray(arr)
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            bad = arr[(arr < 0) | (arr >= n)][0]
            raise DataError(f"links: row {int(bad)} is not a record of table {t!r}")
    return spec


def _foreign_key_links(spec: Mapping[str, Any], tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """One-to-many: ``{from: child.fk, to: parent.key[, child_key]}``."""
    child, fk = split_ref(spec["from"], "links.from")
    parent, key = split_ref(spec.get("to"), "links.to")
    _known(tables, child, parent)
    if child == parent:
        raise ConfigError(f"links: a foreign key into the same table ({child}.{fk} -> {parent}.{key}) is not "
                          "supported; give the self-referential links as a link table "
                          "{pairs|path, left: t.key, right: t.key}")
    cframe = tables[child][0]
    if not isinstance(cframe, pd.DataFrame) or fk not in cframe.columns:
        raise DataError(f"table {child!r} has no foreign-key column {fk!r}")
    fkv = cframe[fk].to_numpy()
    if pd.isna(fkv).any():
        r = int(np.flatnonzero(pd.isna(fkv))[0])
        raise DataError(f"links: {child}.{fk} is missing in row {r}; every child needs a parent")
    _, pos = key_positions(tables[parent][0], parent, key)
    j = lookup(fkv, pos, f"{child}.{fk}", f"{parent}.{key}")
    ckey = spec.get("child_key", "id")
    return Links(child, parent, np.arange(len(fkv), dtype=np.int64), j, "one_to_many", ckey, key, fk)


def _pair_columns(spec: Mapping[str, Any], lt: str, rt: str) -> tuple[np.ndarray, np.ndarray, tuple[str, str] | None]:
    """The two key columns of a link table (DataFrame with ``columns`` or an (m, 2) array)."""
    pairs = spec["pairs"]
    if isinstance(pairs, pd.DataFrame):
        cols = list(spec.get("columns") or pairs.columns[:2])
        for c in cols:
            if c not in pairs.columns:
                raise DataError(f"links: pairs have no column {c!r}")
        out_cols = (str(cols[0]), str(cols[1])) if lt == rt and cols[0] != cols[1] else None
        return pairs[cols[0]].to_numpy(), pairs[cols[1]].to_numpy(), out_cols
    arr = np.asarray(pairs)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise DataError(f"links: pairs must have shape (m, 2), got {arr.shape}")
    return arr[:, 0], arr[:, 1], None


def _link_table_links(spec: Mapping[str, Any], tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """Many-to-many: ``{pairs, left: t1.key, right: t2.key[, columns]}``; repeated pairs are dropped."""
    lt, lk = split_ref(spec.get("left"), "links.left")
    rt, rk = split_ref(spec.get("right"), "links.right")
    _known(tables, lt, rt)
    a, b, out_cols = _pair_columns(spec, lt, rt)
    _, p1 = key_positions(tables[lt][0], lt, lk)
    _, p2 = key_positions(tables[rt][0], rt, rk)
    i = lookup(a, p1, f"pairs.{lt}", f"{lt}.{lk}")
    j = lookup(b, p2, f"pairs.{rt}", f"{rt}.{rk}")
    flat = i * len(tables[rt][0]) + j
    _, first = np.unique(flat, return_index=True)
    first.sort()
    rep = {"duplicate_pairs_dropped": int(len(flat) - len(first))}
    if lt == rt and out_cols is None:
        out_cols = ("source", "target")
    return Links(lt, rt, i[first], j[first], "many_to_many", lk, rk, None, rep, out_cols)


def parse_links(spec: Any, tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """A ``Links`` from a spec: {from: child.fk, to: parent.key} (one-to-many) or
    {pairs, left: t1.key, right: t2.key[, columns]} (many-to-many), or a ``Links`` as is."""
    if isinstance(spec, Links):
        return _check_links_object(spec, tables)
    if not isinstance(spec, Mapping):
        raise ConfigError(f"links must be a mapping or a Links object, got {type(spec).__name__}")
    if "from" in spec:
        return _foreign_key_links(spec, tables)
    if "pairs" in spec:
        return _link_table_links(spec, tables)
    raise ConfigError("links: give {from: child.fk, to: parent.key} or {pairs, left: t.key, right: t.key}")


def table_codes(data: Any, domain: Domain, name: str) -> np.ndarray:
    """The (n × d) code array of a table given as ndarray or DataFrame (domain columns)."""
    if isinstance(data, pd.DataFrame):
        missing = [a for a in domain.attributes if a not in data.columns]
        if missing:
            raise DataError(f"table {name!r} is missing column(s) {missing}")
        arr = data[list(domain.attributes)].to_numpy()
    else:
        arr = np.asarray(data)
    if arr.ndim != 2 or arr.shape[1] != len(domain):
        raise DataError(f"table {name!r}: codes must have shape (n, {len(domain)}), got {arr.shape}")
    if arr.size and (not np.issubdtype(arr.dtype, np.integer)):
        if np.isnan(arr.astype(float)).any():
            raise DataError(f"table {name!r} has missing values; encode them as a category first")
        arr = arr.astype(np.int64)
    for k, a in enumerate(domain.attributes):
        col = arr[:, k]
        bad = (col < 0) | (col >= domain.shape[k])
        if bad.any():
            raise DataError(f"table {name!r}: column {a!r} has a value outside [0, {domain.shape[k]})")
    return arr.astype(np.int64)


__all__ = ["KINDS", "Links", "RelationalData", "split_ref", "key_positions", "lookup", "parse_links", "table_codes"]
