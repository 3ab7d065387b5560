"""The tables of a census release over the geography tree, checked and completed for the top-down passes.

``tables[level][S]`` (level ``""`` = the root, then levels coarse to fine) is an array (n_units(level),
*shape_S) for an attribute set ``S`` (a sorted tuple of 0, 1 or 2 attribute names; ``()`` = the unit total,
shape (n_units,)). The top-down passes need, at each level, every sub-margin of a table (a 2-way (a, b) needs
(a,) and (b,) and ()) and, at the parent level, every set of its children: missing ones are derived by summing
(within the unit, or over the children). Structural zeros (``zeros[S]``, bool shape_S, True = impossible) are
closed too: a 1-way cell is zero when a whole row of a 2-way zero mask is, and a 2-way cell when either of its
1-way cells is. Fixed totals (invariants) are propagated up: a parent's total is the sum of fixed children.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from privcube.core.errors import ConfigError

from .hierarchy import ROOT, Hierarchy
from .gls import EXACT_TOLERANCE

AttrSet = tuple[str, ...]
Tables = dict[str, dict[AttrSet, np.ndarray]]


@dataclass
class TableSet:
    """The completed tables: ``chain`` ("" then the levels given, coarse to fine), ``tables`` closed under
    sub-margins and parents, ``sizes`` per attribute, ``zeros`` per attribute set, ``fixed`` totals per level."""

    hierarchy: Hierarchy
    chain: list[str]
    tables: Tables
    sizes: dict[str, int]
    zeros: dict[AttrSet, np.ndarray] = field(default_factory=dict)
    fixed: dict[str, np.ndarray] = field(default_factory=dict)

    def sets(self, level: str, k: int) -> list[AttrSet]:
        """The attribute sets of ``level`` with ``k`` attributes, sorted."""
        return sorted(s for s in self.tables[level] if len(s) == k)

    def zero(self, s: AttrSet) -> np.ndarray:
        """The structural-zero mask of ``s`` (all False when none; a 2-way from its 1-way masks)."""
        if s in self.zeros:
            return self.zeros[s]
        if len(s) == 2:
            return self.zero(s[:1])[:, None] | self.zero(s[1:])[None, :]
        return np.zeros(tuple(self.sizes[a] for a in s), dtype=bool)


def prepare(hierarchy: Hierarchy, tables: Mapping[str, Mapping[AttrSet, np.ndarray]],
            zeros: Mapping[AttrSet, np.ndarray] | None, fixed_totals: Mapping[str, np.ndarray] | None) -> TableSet:
    """Check shapes and keys (ConfigError, one line), complete the sets, close the zeros, propagate invariants."""
    chain = _chain(hierarchy, tables)
    sizes = _sizes(hierarchy, tables)
    done: Tables = {}
    for depth in range(len(chain) - 1, -1, -1):
        level = chain[depth]
        given = {s: np.asarray(a, dtype=np.float64) for s, a in tables.get(level, {}).items()}
        need = set(given) | (set(done[chain[depth + 1]]) if depth + 1 < len(chain) else set())
        need |= {sub for s in need for sub in _subsets(s)} | {()}
        have = dict(given)
        for s in sorted(need, key=len, reverse=True):
            if s not in have:
                have[s] = _derive(hierarchy, s, have, done.get(chain[depth + 1]) if depth + 1 < len(chain) else None,
                                  chain[depth + 1] if depth + 1 < len(chain) else None, level)
        done[level] = have
    ts = TableSet(hierarchy, chain, done, sizes)
    ts.zeros = _close_zeros(zeros or {}, sizes)
    ts.fixed = _propagate_fixed(hierarchy, chain, fixed_totals or {})
    return ts


def _chain(hierarchy: Hierarchy, tables: Mapping[str, Mapping]) -> list[str]:
    known = [ROOT, *hierarchy.levels]
    unknown = sorted(k for k in tables if k not in known)
    if unknown:
        raise ConfigError(f"census tables: unknown level {unknown[0]!r}; levels are {list(hierarchy.levels)}")
    given = [lv for lv in hierarchy.levels if lv in tables]
    if not given or given != list(hierarchy.levels[: len(given)]):
        raise ConfigError(f"census tables: levels given {given} must be the coarsest levels in order, "
                          f"with no gap ({list(hierarchy.levels)})")
    return [ROOT, *given]


def _subsets(s: AttrSet) -> list[AttrSet]:
    return [tuple(a for a in s if a != drop) for drop in s]


def _sizes(hierarchy: Hierarchy, tables: Mapping[str, Mapping[AttrSet, np.ndarray]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for level, sets in tables.items():
        n = hierarchy.n_units(level)
        for s, a in sets.items():
            if tuple(sorted(s)) != tuple(s) or len(s) > 2 or len(set(s)) != len(s):
                raise ConfigError(f"census tables: attribute set {s!r} must be a sorted tuple of at most 2 names")
            shape = np.shape(a)
            if len(shape) != 1 + len(s) or shape[0] != n:
                raise ConfigError(f"census tables: table {s!r} of level {level or 'root'!r} has shape {shape}; "
                                  f"expected ({n}, one axis per attribute)")
            for attr, size in zip(s, shape[1:]):
                if sizes.setdefault(attr, size) != size:
                    raise ConfigError(f"census tables: attribute {attr!r} has sizes {sizes[attr]} and {size}")
    return sizes


def _derive(hierarchy: Hierarchy, s: AttrSet, have: dict[AttrSet, np.ndarray], below: dict | None,
            child: str | None, level: str) -> np.ndarray:
    """A missing set: the sum of a superset table in the unit, else the sum of the children's table."""
    for sup in sorted(have, key=len):
        if len(sup) > len(s) and set(s) <= set(sup):
            axes = tuple(1 + i for i, a in enumerate(sup) if a not in s)
            return have[sup].sum(axis=axes)
    if below is not None and s in below:
        return np.add.reduceat(below[s], hierarchy.segment_starts(child), axis=0)
    raise ConfigError(f"census tables: level {level or 'root'!r} has no table from which to derive {s!r}")


def _close_zeros(zeros: Mapping[AttrSet, np.ndarray], sizes: dict[str, int]) -> dict[AttrSet, np.ndarray]:
    """Structural zeros closed under margins: 1-way cells with a whole 2-way row zero, 2-way cells of a zero 1-way."""
    out: dict[AttrSet, np.ndarray] = {}
    for s, m in zeros.items():
        m = np.asarray(m, dtype=bool)
        if tuple(sorted(s)) != tuple(s) or any(a not in sizes for a in s) or m.shape != tuple(sizes[a] for a in s):
            raise ConfigError(f"census structural zeros: mask {s!r} must be a sorted tuple of known attributes "
                              f"with shape {tuple(sizes.get(a, '?') for a in s)}")
        out[s] = m.copy()
    for _ in range(2):
        for s, m in list(out.items()):
            if len(s) == 2:
                for axis, a in enumerate(s):
                    row = m.all(axis=1 - axis)
                    out[(a,)] = out.get((a,), np.zeros(sizes[a], dtype=bool)) | row
        for s, m in list(out.items()):
            if len(s) == 2:
                a, b = s
                za, zb = out.get((a,), np.zeros(sizes[a], bool)), out.get((b,), np.zeros(sizes[b], bool))
                out[s] = m | za[:, None] | zb[None, :]
    for a in sizes:
        if (a,) in out and out[(a,)].all():
            raise ConfigError(f"census structural zeros: every cell of attribute {a!r} is impossible")
    return out


def _propagate_fixed(hierarchy: Hierarchy, chain: list[str], fixed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Invariant totals per level, with the implied totals of every coarser level (their sums)."""
    out: dict[str, np.ndarray] = {}
    for level, values in fixed.items():
        if level not in chain:
            raise ConfigError(f"census invariants: level {level!r} is not a level of the tables {chain[1:]}")
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (hierarchy.n_units(level),) or not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ConfigError(f"census invariants: totals of level {level or 'root'!r} must be "
                              f"{hierarchy.n_units(level)} finite counts >= 0")
        out[level] = v
    for depth in range(len(chain) - 1, 0, -1):
        level, up = chain[depth], chain[depth - 1]
        if level not in out:
            continue
        sums = np.add.reduceat(out[level], hierarchy.segment_starts(level))
        if up in out:
            if np.any(np.abs(sums - out[up]) > EXACT_TOLERANCE * np.maximum(1.0, out[up])):
                raise ConfigError(f"census invariants contradict each other: the {level} totals do not sum to the "
                                  f"{up or 'grand'} total(s)")
        else:
            out[up] = sums
    return out
