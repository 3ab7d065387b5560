"""The geography tree of a census release: levels coarse to fine under an implicit root (the nation).

Built from the public geography map (one row per finest unit, one integer code column per level). Within a
level, units are ordered by ``(parent index, code)``: the children of one parent are CONTIGUOUS, so every
pass over the tree is a segment sum (``np.add.reduceat`` over ``segment_starts``) and an expansion
(``values[parent]``) — linear in the number of units, no Python loop over units. ``codes[level]`` is in that
order; it is globally sorted when codes nest (e.g. FIPS county = state * 1000 + county), not in general.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from privcube.core.errors import ConfigError, DataError

ROOT = ""


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """Levels coarse -> fine; ``codes[level]`` unit codes (unit index = position, ordered by (parent, code));
    ``parent[level]`` the index of each unit's parent in the previous level (zeros for ``levels[0]``: the root).
    Compared by identity (its fields are arrays)."""

    levels: tuple[str, ...]
    codes: dict[str, np.ndarray]
    parent: dict[str, np.ndarray]

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray], levels: Sequence[str]) -> "Hierarchy":
        """The tree of a geography map: ``columns[level]`` has one entry per finest unit. Refuses (ConfigError,
        one line) a missing level, a negative or non-integer code, duplicate finest codes, a unit with two parents."""
        levels = tuple(levels)
        if not levels:
            raise ConfigError("geography: levels is empty; name at least one level")
        if len(set(levels)) != len(levels) or ROOT in levels:
            raise ConfigError(f"geography: levels {list(levels)} repeat a name or use the empty name")
        cols = [_code_column(columns, level) for level in levels]
        if len({len(c) for c in cols}) != 1 or len(cols[0]) == 0:
            raise ConfigError("geography map: the level columns are empty or of different lengths")
        finest = cols[-1]
        if len(np.unique(finest)) != len(finest):
            dup = int(np.sort(finest)[np.flatnonzero(np.diff(np.sort(finest)) == 0)[0]])
            raise ConfigError(f"geography map: finest level {levels[-1]!r} has duplicate code {dup} (one row per unit)")
        codes: dict[str, np.ndarray] = {}
        parent: dict[str, np.ndarray] = {}
        codes[levels[0]] = np.unique(cols[0])
        parent[levels[0]] = np.zeros(len(codes[levels[0]]), dtype=np.int64)
        for i in range(1, len(levels)):
            level, up = levels[i], levels[i - 1]
            pairs = np.unique(np.stack([cols[i], cols[i - 1]], axis=1), axis=0)   # sorted by (code, parent code)
            twice = np.flatnonzero(np.diff(pairs[:, 0]) == 0)
            if len(twice):
                j = twice[0]
                raise ConfigError(f"geography map is not a tree: {level} {int(pairs[j, 0])} lies in {up} "
                                  f"{int(pairs[j, 1])} and {up} {int(pairs[j + 1, 1])}")
            pidx = _lookup(codes[up], pairs[:, 1])
            order = np.lexsort((pairs[:, 0], pidx))
            codes[level] = pairs[order, 0].copy()
            parent[level] = pidx[order].astype(np.int64)
        return cls(levels, codes, parent)

    def n_units(self, level: str) -> int:
        """Number of units of ``level`` (1 for the root ``""``)."""
        return 1 if level == ROOT else len(self.codes[self._known(level)])

    def parent_level(self, level: str) -> str:
        """The level above ``level`` (``""`` = the root above ``levels[0]``)."""
        i = self.levels.index(self._known(level))
        return ROOT if i == 0 else self.levels[i - 1]

    def parent_of(self, level: str) -> np.ndarray:
        """Parent index of each unit of ``level`` in ``parent_level(level)``."""
        return self.parent[self._known(level)]

    def children_counts(self, level: str) -> np.ndarray:
        """Per unit of ``level`` (or of the root ``""``), its number of children in the next level (0 at the finest)."""
        i = -1 if level == ROOT else self.levels.index(self._known(level))
        if i == len(self.levels) - 1:
            return np.zeros(self.n_units(level), dtype=np.int64)
        return np.bincount(self.parent[self.levels[i + 1]], minlength=self.n_units(level)).astype(np.int64)

    def segment_starts(self, level: str) -> np.ndarray:
        """Start index, in ``level``, of each parent's block of children (for ``np.add.reduceat``; every
        parent has at least one child, since every unit has a finest descendant)."""
        counts = self.children_counts(self.parent_level(level))
        return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)

    def ancestor(self, level: str, index: np.ndarray, to_level: str) -> np.ndarray:
        """Index of each unit's ancestor at the coarser ``to_level`` (``""`` = the root: zeros)."""
        idx = np.asarray(index, dtype=np.int64)
        i = self.levels.index(self._known(level))
        stop = -1 if to_level == ROOT else self.levels.index(self._known(to_level))
        if stop > i:
            raise ConfigError(f"geography: {to_level!r} is finer than {level!r}; ancestor goes up the tree")
        for j in range(i, stop, -1):
            idx = self.parent[self.levels[j]][idx]
        return np.zeros_like(idx) if to_level == ROOT else idx

    def index_of(self, level: str, codes: np.ndarray) -> np.ndarray:
        """Unit index of each code of ``level``; DataError naming the level and the count of unknown codes."""
        known = self.codes[self._known(level)]
        q = np.asarray(codes, dtype=np.int64)
        sorter = np.argsort(known, kind="stable")
        pos = np.searchsorted(known, q, sorter=sorter)
        pos = np.minimum(pos, len(known) - 1)
        idx = sorter[pos]
        bad = int(np.count_nonzero(known[idx] != q))
        if bad:
            raise DataError(f"geography level {level!r}: {bad} code(s) in the data are not in the geography map")
        return idx.astype(np.int64)

    def _known(self, level: str) -> str:
        if level not in self.codes:
            raise ConfigError(f"geography: unknown level {level!r}; levels are {list(self.levels)}")
        return level


def _code_column(columns: Mapping[str, np.ndarray], level: str) -> np.ndarray:
    if level not in columns:
        raise ConfigError(f"geography map: no column for level {level!r}; columns are {sorted(columns)}")
    col = np.asarray(columns[level])
    if col.dtype.kind not in "iu":
        if col.dtype.kind != "f" or not np.all(np.isfinite(col)) or not np.all(col == np.round(col)):
            raise ConfigError(f"geography map: column {level!r} must hold integer codes (dtype {col.dtype})")
    col = col.astype(np.int64)
    if len(col) and int(col.min()) < 0:
        raise ConfigError(f"geography map: column {level!r} has negative code {int(col.min())}")
    return col


def _lookup(codes: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Positions in ``codes`` (unique, any order) of codes ``q`` known to be present."""
    sorter = np.argsort(codes, kind="stable")
    return sorter[np.searchsorted(codes, q, sorter=sorter)].astype(np.int64)
