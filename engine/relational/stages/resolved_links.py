"""Links between two tables: the spec (foreign key or link table) resolved against the tables, and codes.

A one-to-many link is a child table's foreign-key column pointing at a parent's key; a many-to-many link
is a link table of (left key, right key) pairs. Both become a ``Links`` naming the tables, the kind and the
key columns; the ids are looked up and checked where they live (``real_side``). Error messages name
tables, columns and row numbers, never a key value.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, DataError

KINDS = ("one_to_many", "many_to_many")


@dataclass
class Links:
    """A link spec resolved against the tables (names, kind, key columns); the real links themselves stay in
    their source (``source``: the child table's FK column, or a link table) and are checked where they live
    (``privcube.relational.stages.real_side``). ``i``/``j`` are row positions when given as such.

    one_to_many: ``left`` is the child table (one parent each), ``right`` the parent table.
    """

    left: str
    right: str
    i: Any = None
    j: Any = None
    kind: str = "many_to_many"
    left_key: str = "id"
    right_key: str = "id"
    fk: str | None = None  # child's foreign-key column (one_to_many)
    report: dict[str, Any] = field(default_factory=dict)
    columns: tuple[str, str] | None = None  # output link columns (self-referential links: the input's names)
    pairs: Any = None  # many_to_many: the link table (pandas/dask DataFrame or (m, 2) array)
    pair_columns: tuple[Any, Any] | None = None  # its two id columns (None: an array)
    missing_column: tuple[str, str] | None = None  # name a missing id by its link-file column
    positions: bool = False  # ids are row positions (a Links given with i, j)

    @property
    def self_ref(self) -> bool:
        """Whether both ends are the same table (a self-referential link table, B is n × n)."""
        return self.left == self.right


def split_ref(ref: Any, what: str) -> tuple[str, str]:
    """``'table.column'`` → (table, column), or ConfigError naming the key ``what``."""
    if not isinstance(ref, str) or ref.count(".") != 1:
        raise ConfigError(f"links: {what} must look like 'table.column', got {ref!r}")
    t, c = ref.split(".")
    return t, c


def _known(tables: Mapping[str, Any], *names: str) -> None:
    for t in names:
        if t not in tables:
            raise ConfigError(f"links: unknown table {t!r}; tables are {sorted(tables)}")


def _check_links_object(spec: Links, tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """A ``Links`` given with row positions: known tables, known kind; positions become a link table of
    row positions (checked like ids: a position outside a table is no key)."""
    _known(tables, spec.left, spec.right)
    if spec.kind not in KINDS:
        raise ConfigError(f"links: kind must be one of {KINDS}, got {spec.kind!r}")
    pairs = np.stack([np.asarray(spec.i, dtype=np.int64), np.asarray(spec.j, dtype=np.int64)], axis=1)
    return Links(spec.left, spec.right, None, None, "many_to_many", spec.left_key, spec.right_key, spec.fk,
                 dict(spec.report), spec.columns, pairs, None, None, True)


def _foreign_key_links(spec: Mapping[str, Any], tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """One-to-many: ``{from: child.fk, to: parent.key[, child_key]}``."""
    from privcube.relational.stages.real_kernels import columns_of

    child, fk = split_ref(spec["from"], "links.from")
    parent, key = split_ref(spec.get("to"), "links.to")
    _known(tables, child, parent)
    if child == parent:
        raise ConfigError(f"links: a foreign key into the same table ({child}.{fk} -> {parent}.{key}) is not "
                          "supported; give the self-referential links as a link table "
                          "{pairs|path, left: t.key, right: t.key}")
    cols = columns_of(tables[child][0])
    if cols is None or fk not in cols:
        raise DataError(f"table {child!r} has no foreign-key column {fk!r}")
    ckey = spec.get("child_key", "id")
    return Links(child, parent, None, None, "one_to_many", ckey, key, fk)


def _link_table_links(spec: Mapping[str, Any], tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """Many-to-many: ``{pairs, left: t1.key, right: t2.key[, columns]}``; repeated pairs are dropped."""
    from privcube.relational.stages.real_kernels import columns_of

    lt, lk = split_ref(spec.get("left"), "links.left")
    rt, rk = split_ref(spec.get("right"), "links.right")
    _known(tables, lt, rt)
    pairs = spec["pairs"]
    cols_in = columns_of(pairs)
    if cols_in is not None:
        cols = list(spec.get("columns") or cols_in[:2])
        for c in cols:
            if c not in cols_in:
                raise DataError(f"links: pairs have no column {c!r}")
        out_cols = (str(cols[0]), str(cols[1])) if lt == rt and cols[0] != cols[1] else None
        pair_cols: tuple[Any, Any] | None = (cols[0], cols[1])
    else:
        arr = np.asarray(pairs)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise DataError(f"links: pairs must have shape (m, 2), got {arr.shape}")
        pairs, out_cols, pair_cols = arr, None, None
    if lt == rt and out_cols is None:
        out_cols = ("source", "target")
    missing = tuple(map(str, pair_cols)) if spec.get("missing_by_column") and pair_cols else None
    return Links(lt, rt, None, None, "many_to_many", lk, rk, None, {}, out_cols, pairs, pair_cols,
                 missing)  # type: ignore[arg-type]


def parse_links(spec: Any, tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """A ``Links`` from a spec: {from: child.fk, to: parent.key} (one-to-many) or
    {pairs, left: t1.key, right: t2.key[, columns]} (many-to-many), or a ``Links`` of row positions."""
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
        nan = np.isnan(arr.astype(float))
        if nan.any():
            raise DataError(f"table {name!r}: column {domain.attributes[int(np.flatnonzero(nan.any(axis=0))[0])]!r} "
                            "has missing values; encode them as a category first")
        arr = arr.astype(np.int64)
    for k, a in enumerate(domain.attributes):
        col = arr[:, k]
        bad = (col < 0) | (col >= domain.shape[k])
        if bad.any():
            raise DataError(f"table {name!r}: column {a!r} has a value outside [0, {domain.shape[k]})")
    return arr.astype(np.int64)


__all__ = ["KINDS", "Links", "split_ref", "parse_links", "table_codes"]
