"""Cross-table k-way workloads and their answers over the links, never materialising n1×n2.

A cross workload (S1, S2) has cells dom(S1) × dom(S2). With per-row cell indices c1 (table 1) and c2
(table 2), its count table over a set of links (i, j) is ``bincount(c1[i]·|D2| + c2[j])`` (Lemma 1 /
the "marginal trick"): Q_w vec(B) without building Q_w.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DataError, WorkloadError


@dataclass(frozen=True)
class CrossWorkload:
    """A cross-table workload: attributes ``left`` of table 1 and ``right`` of table 2 (both non-empty)."""

    left: tuple[str, ...]
    right: tuple[str, ...]

    def label(self) -> str:
        """Readable name, e.g. ``age|genre1,genre2``."""
        return ",".join(self.left) + "|" + ",".join(self.right)

    def sizes(self, dom1: Domain, dom2: Domain) -> tuple[int, int]:
        """Cell counts (|D1_w|, |D2_w|) of the two sides."""
        return dom1.size(self.left), dom2.size(self.right)


def cross_workloads(dom1: Domain, dom2: Domain, k: int = 3) -> list[CrossWorkload]:
    """All (S1, S2) with |S1| + |S2| = k and both sides non-empty, in a fixed order."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise WorkloadError(f"cross-table marginal order k must be an integer >= 2, got {k!r}")
    out = []
    for k1 in range(1, k):
        k2 = k - k1
        if k1 > len(dom1) or k2 > len(dom2):
            continue
        for s1 in itertools.combinations(dom1.attributes, k1):
            for s2 in itertools.combinations(dom2.attributes, k2):
                out.append(CrossWorkload(s1, s2))
    if not out:
        raise WorkloadError(f"no cross-table {k}-way workloads: tables have {len(dom1)} and {len(dom2)} attributes")
    return out


def cell_index(codes: np.ndarray, domain: Domain, attrs: Sequence[str]) -> np.ndarray:
    """Per-row cell index (C order over ``attrs``) of an (n × d) code array in domain column order."""
    codes = np.asarray(codes)
    dt = np.int32 if domain.size(tuple(attrs)) < 2**31 else np.int64  # half the memory of int64 per cached index
    if not attrs:
        return np.zeros(codes.shape[0], dtype=dt)
    cols = [codes[:, domain.index(a)].astype(np.int64) for a in attrs]
    return np.ravel_multi_index(tuple(cols), domain.shape_of(attrs)).astype(dt)


def cross_counts(c1: np.ndarray, c2: np.ndarray, size1: int, size2: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Count table (flattened size1·size2) of the cells of linked pairs (i, j)."""
    dt = np.int32 if size1 * size2 < 2**31 else np.int64  # 10^7 links: 40 MB per temporary instead of 80
    flat = c1[i].astype(dt)  # (compact indices: a 1–2-byte gather, then one int32 array, updated in place)
    flat *= dt(size2)
    flat += c2[j]
    return np.bincount(flat, minlength=size1 * size2).astype(float)


class CrossTables:
    """Two encoded tables with cached per-workload cell indices (real or synthetic side)."""

    def __init__(self, codes1: np.ndarray, dom1: Domain, codes2: np.ndarray, dom2: Domain) -> None:
        """Hold the code arrays (columns in domain order) of both tables."""
        self.codes1, self.dom1 = _check_codes(codes1, dom1, "table 1"), dom1
        self.codes2, self.dom2 = _check_codes(codes2, dom2, "table 2"), dom2
        self._cache: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}
        self._compact: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}

    @property
    def n1(self) -> int:
        """Rows of table 1."""
        return int(self.codes1.shape[0])

    @property
    def n2(self) -> int:
        """Rows of table 2."""
        return int(self.codes2.shape[0])

    def index(self, side: int, attrs: tuple[str, ...]) -> np.ndarray:
        """Cached cell indices of table ``side`` (1 or 2) on ``attrs``."""
        key = (side, attrs)
        if key not in self._cache:
            codes, dom = (self.codes1, self.dom1) if side == 1 else (self.codes2, self.dom2)
            self._cache[key] = cell_index(codes, dom, attrs)
        return self._cache[key]

    def compact_index(self, side: int, attrs: tuple[str, ...]) -> np.ndarray:
        """``index(side, attrs)`` in the smallest unsigned dtype that holds its cells (cached apart: the count
        tables' cache of every workload's indices then takes 1–2 bytes per record instead of 4)."""
        key = (side, attrs)
        if key not in self._compact:
            dom = self.dom1 if side == 1 else self.dom2
            dt = np.min_scalar_type(max(dom.size(attrs) - 1, 0))
            idx = self._cache.get(key)
            if idx is None:
                codes = self.codes1 if side == 1 else self.codes2
                idx = cell_index(codes, dom, attrs)
            self._compact[key] = idx.astype(dt)
        return self._compact[key]

    def counts(self, w: CrossWorkload, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Count table of workload ``w`` over links (i, j) (flattened, C order, left cells major)."""
        s1, s2 = w.sizes(self.dom1, self.dom2)
        return cross_counts(self.compact_index(1, w.left), self.compact_index(2, w.right), s1, s2, i, j)

    def marginal(self, w: CrossWorkload, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """P_w: the count table divided by the number of links (zeros when there are none)."""
        c = self.counts(w, i, j)
        return c / max(len(i), 1)


class FixedLinkCounts:
    """Cross marginals of one fixed set of synthetic links (the shrinkage prior's random start) without keeping
    the links: the count table over all attributes of both tables (one bincount; every workload's counts are
    its sums) when it has at most ``max_cells`` cells, else a copy of the links. Same values as
    ``CrossTables.marginal`` (sums of integer counts are exact)."""

    def __init__(self, syn: CrossTables, i: np.ndarray, j: np.ndarray, max_cells: int = 1 << 22) -> None:
        """Count (i, j) over the full domains of ``syn`` (or keep a copy of the links when that is too large)."""
        self.m = int(len(i))
        s1, s2 = syn.dom1.size(), syn.dom2.size()
        self.full: np.ndarray | None = None
        self.links: tuple[np.ndarray, np.ndarray] | None = None
        if s1 * s2 <= max_cells:
            full = cross_counts(syn.compact_index(1, syn.dom1.attributes), syn.compact_index(2, syn.dom2.attributes),
                                s1, s2, i, j)
            self.full = full.reshape(*syn.dom1.shape, *syn.dom2.shape)
        else:
            self.links = (np.array(i, copy=True), np.array(j, copy=True))

    @classmethod
    def restore(cls, full: np.ndarray | None, links: tuple[np.ndarray, np.ndarray] | None, m: int) -> FixedLinkCounts:
        """From what ``arrays`` returned (a checkpoint)."""
        out = cls.__new__(cls)
        out.m, out.full, out.links = int(m), full, links
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """What a checkpoint keeps: the full count table, or the links."""
        if self.full is not None:
            return {"prior_counts": self.full}
        assert self.links is not None
        return {"si0": self.links[0], "sj0": self.links[1]}

    def marginal(self, syn: CrossTables, w: CrossWorkload) -> np.ndarray:
        """P_w of the fixed links (``syn.marginal(w, i, j)`` of the links counted)."""
        if self.links is not None:
            return syn.marginal(w, *self.links)
        assert self.full is not None
        d1, d2 = syn.dom1, syn.dom2
        axes = [d1.index(a) for a in w.left] + [len(d1) + d2.index(b) for b in w.right]
        rest = tuple(k for k in range(self.full.ndim) if k not in axes)
        c = self.full.sum(axis=rest) if rest else self.full
        kept = sorted(axes)
        c = np.transpose(c, [kept.index(a) for a in axes])
        return np.ascontiguousarray(c).ravel() / max(self.m, 1)


@runtime_checkable
class RealCross(Protocol):
    """The real side of stage 2, as selection, measurement and evaluation read it: count tables of cross
    workloads over the real links. Implementations may hold the codes in memory (``LinkedCodes``) or count
    where the data lives; callers only ever see per-workload count tables."""

    def counts(self, w: CrossWorkload) -> np.ndarray:
        """Count table of ``w`` over the real links (flattened, C order, left cells major)."""
        ...

    def marginal(self, w: CrossWorkload) -> np.ndarray:
        """``counts(w)`` divided by the number of real links."""
        ...


class LinkedCodes:
    """``RealCross`` over codes and links held in this process: two tables' codes and links (i, j)."""

    def __init__(self, tables: CrossTables, i: np.ndarray, j: np.ndarray) -> None:
        """Hold the encoded tables and the (already checked) link indices."""
        self.tables, self.i, self.j = tables, np.asarray(i), np.asarray(j)

    def counts(self, w: CrossWorkload) -> np.ndarray:
        """Count table of ``w`` over the links."""
        return self.tables.counts(w, self.i, self.j)

    def marginal(self, w: CrossWorkload) -> np.ndarray:
        """Count table over the number of links."""
        return self.tables.marginal(w, self.i, self.j)


def average_error(real: RealCross, syn: CrossTables, si: np.ndarray, sj: np.ndarray,
                  workloads: Sequence[CrossWorkload]) -> float:
    """The paper's metric: 100 · mean over workloads of ‖P_w(real) − P_w(syn)‖₁ (range [0, 200])."""
    if not workloads:
        return math.nan
    tot = 0.0
    for w in workloads:
        tot += float(np.abs(real.marginal(w) - syn.marginal(w, si, sj)).sum())
    return 100.0 * tot / len(workloads)


def _check_codes(codes: np.ndarray, dom: Domain, what: str) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != len(dom):
        raise DataError(f"{what}: codes must have shape (n, {len(dom)}), got {codes.shape}")
    for k, a in enumerate(dom.attributes):
        col = codes[:, k]
        bad = (col < 0) | (col >= dom.shape[k])
        if bad.any():
            raise DataError(f"{what}: column {a!r} has value {col[bad][0]!r} outside [0, {dom.shape[k]})")
    return codes.astype(np.int64, copy=False)


__all__ = ["CrossWorkload", "cross_workloads", "cell_index", "cross_counts", "CrossTables", "FixedLinkCounts", "RealCross", "LinkedCodes",
           "average_error"]
