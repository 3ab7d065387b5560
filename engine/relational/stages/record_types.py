"""Record types: the link problem aggregated over records with equal codes.

A cross workload reads a record only through its cell, and the cell is a function of the record's codes
on the workload's attributes. So for a set of fitted workloads, records with equal codes on the union of
their attributes (one *type*) are interchangeable: Q_w vec(B) = vec(C1_wᵀ L C2_w), where L_ab = Σ_{i∈a,
j∈b} B_ij counts the links between left type a and right type b and C_w maps a type to its cell. The
relaxed problem of Alg. 4 therefore depends on B only through L (``type_problem``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privcube.core.domain import Domain
from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload, cell_index


@dataclass
class SideTypes:
    """One side's types: ``of[i]`` = type of record i, ``count[a]`` = records of type a, ``codes[a]`` = its codes
    on ``attrs`` (domain order)."""

    attrs: tuple[str, ...]
    of: np.ndarray
    count: np.ndarray
    codes: np.ndarray

    @property
    def size(self) -> int:
        """Number of types."""
        return int(self.count.size)

    def cells(self, dom: Domain, attrs: tuple[str, ...]) -> np.ndarray:
        """Per type, its cell index on ``attrs`` (a subset of this side's attributes)."""
        full = np.zeros((self.size, len(dom)), dtype=np.int64)
        for k, a in enumerate(self.attrs):
            full[:, dom.index(a)] = self.codes[:, k]
        return cell_index(full, dom, attrs)


def side_types(codes: np.ndarray, dom: Domain, attrs: Sequence[str]) -> SideTypes:
    """Group the records of one table by their codes on ``attrs`` (kept in domain order)."""
    keep = tuple(a for a in dom.attributes if a in set(attrs))
    n = int(np.asarray(codes).shape[0])
    if not keep:
        return SideTypes(keep, np.zeros(n, dtype=np.int64), np.array([n], dtype=np.int64), np.zeros((1, 0), np.int64))
    key = cell_index(codes, dom, keep)
    uniq, of = np.unique(key, return_inverse=True)
    sub = np.stack(np.unravel_index(uniq, dom.shape_of(keep)), axis=1).astype(np.int64)
    return SideTypes(keep, of.astype(np.int64).ravel(), np.bincount(of.ravel(), minlength=uniq.size).astype(np.int64),
                     sub)


def link_types(syn: CrossTables, workloads: Sequence[CrossWorkload]) -> tuple[SideTypes, SideTypes]:
    """Left and right types over the attributes the ``workloads`` read (the coarsest exact grouping)."""
    left = sorted({a for w in workloads for a in w.left})
    right = sorted({a for w in workloads for a in w.right})
    return side_types(syn.codes1, syn.dom1, left), side_types(syn.codes2, syn.dom2, right)


def type_pair_counts(t1: SideTypes, t2: SideTypes, si: np.ndarray, sj: np.ndarray) -> np.ndarray:
    """L: the number of links between each left type and each right type (A × B)."""
    flat = t1.of[si]
    flat *= t2.size
    flat += t2.of[sj]
    return np.bincount(flat, minlength=t1.size * t2.size).reshape(t1.size, t2.size).astype(float)


def shared_records(t1: SideTypes, t2: SideTypes) -> np.ndarray:
    """Self-referential links: per type pair (a, b), how many records are of left type a AND right type b
    (those cells (i, i) are the forbidden diagonal)."""
    flat = t1.of * t2.size + t2.of
    return np.bincount(flat, minlength=t1.size * t2.size).reshape(t1.size, t2.size).astype(float)


__all__ = ["SideTypes", "side_types", "link_types", "type_pair_counts", "shared_records"]
