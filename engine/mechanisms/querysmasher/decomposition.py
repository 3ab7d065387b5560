"""Query decomposition into residual-space subworkloads (QuerySmasher Sec. 6.2, Eq. 3), in Gram form.

A query group over attributes 𝒜 is a Kronecker product of factors F_f (one attribute, or a joint
factor over several). For 𝒜' ⊆ 𝒜 its subqueries are q·⊗_j M_j (M_j = C_d on 𝒜', (1/d)1 off it), so
per factor P_f = F_f · ⊗_{a∈f} M_a and the subworkload Gram contribution is

    w · ∏_{f: f∩𝒜' = ∅} ‖P_f‖² · ⊗_{f: f∩𝒜' ≠ ∅} P_fᵀ P_f.

Blocks (P_fᵀP_f over f∩𝒜') are keyed by (query type, factor sizes, mask) so identical blocks are
recognised without comparing arrays. Blocks shared by every term of a subworkload factor out of the
sum; the rest is materialised as one dense "remainder" part. Each subworkload is then a Kronecker
product of parts, solved independently.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from privcube.core.domain import Domain
from privcube.core.query_types import QueryType, attribute_matrix, joint_matrix
from privcube.core.workload import Factor, QueryGroup, Workload

Clique = tuple[str, ...]
BlockKey = tuple  # (query type, sizes of the factor's attributes, mask of attributes kept)


@lru_cache(maxsize=4096)
def factor_matrix(query: QueryType, sizes: tuple[int, ...]) -> np.ndarray:
    """Explicit matrix of one factor (memoised by query type and sizes)."""
    if len(sizes) == 1:  # per-attribute (``random`` may stand on one attribute)
        m = attribute_matrix(query, sizes[0])
    else:
        m = joint_matrix(query, *sizes)
    m.setflags(write=False)
    return m


@lru_cache(maxsize=8192)
def projected(query: QueryType, sizes: tuple[int, ...], mask: tuple[bool, ...]) -> np.ndarray:
    """P = F · ⊗_a (C if kept else (1/d)1): the factor's subqueries on the kept attributes."""
    m = factor_matrix(query, sizes)
    out = m.reshape((m.shape[0],) + sizes)
    for ax, (d, keep) in enumerate(zip(sizes, mask)):
        if keep:
            out = out - out.mean(axis=ax + 1, keepdims=True)
        else:
            out = out.mean(axis=ax + 1, keepdims=True)
    out = out.reshape(m.shape[0], -1)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=8192)
def block_gram(key: BlockKey) -> np.ndarray:
    """PᵀP for a block key (query type, sizes, mask)."""
    p = projected(*key)
    g = p.T @ p
    g.setflags(write=False)
    return g


@lru_cache(maxsize=8192)
def block_scalar(query: QueryType, sizes: tuple[int, ...]) -> float:
    """‖F·(1/d)1‖²: the factor's contribution when none of its attributes is kept."""
    p = projected(query, sizes, (False,) * len(sizes))
    return float(np.sum(p * p))


@dataclass(frozen=True)
class Block:
    """One Kronecker block of a subworkload term: its attributes (domain order) and matrix key."""

    attrs: Clique
    key: BlockKey


@dataclass
class Term:
    """Weight α times the Kronecker product of blocks (covering the subworkload's attributes)."""

    alpha: float
    blocks: tuple[Block, ...]


@dataclass
class Part:
    """One Kronecker factor of a subworkload Gram: a shared block, or the dense remainder."""

    attrs: Clique
    shape: tuple[int, ...]
    key: Hashable
    terms: tuple[tuple[float, tuple[tuple[tuple[int, ...], BlockKey], ...]], ...] = ()

    def gram(self) -> np.ndarray:
        """The part's Gram matrix (dense; for the remainder the sum over its terms)."""
        if not self.terms:
            return np.asarray(block_gram(self.key))
        c = math.prod(self.shape)
        out = np.zeros((c, c))
        for alpha, blocks in self.terms:
            out += alpha * dense_kron(blocks, self.shape)
        return out

    @property
    def size(self) -> int:
        """Number of cells c (the Gram is c × c)."""
        return math.prod(self.shape)

    def row_count(self) -> int:
        """Number of rows of :meth:`rows` (without forming them)."""
        if not self.terms:
            return int(projected(*self.key).shape[0])
        return sum(math.prod(projected(*k).shape[0] for _, k in blocks) for _, blocks in self.terms)

    def rows(self, max_rows: int | None = None) -> np.ndarray | None:
        """Rows R with RᵀR = the part's Gram (√α · ⊗ projected factors per term), or None when
        there would be more than ``max_rows`` of them."""
        if max_rows is not None and self.row_count() > max_rows:
            return None
        if not self.terms:
            return np.asarray(projected(*self.key))
        return np.vstack([math.sqrt(alpha) * term_rows(blocks, self.shape) for alpha, blocks in self.terms])


def dense_kron(blocks: Iterable[tuple[tuple[int, ...], BlockKey]], shape: tuple[int, ...]) -> np.ndarray:
    """⊗ of block Grams placed on the given axis positions, as a dense matrix over ``shape`` (C order)."""
    k = len(shape)
    t = np.ones(())
    row_axes: list[int] = []
    for pos, key in blocks:
        g = np.asarray(block_gram(key))
        sz = tuple(shape[i] for i in pos)
        t = np.multiply.outer(t, g.reshape(sz + sz))
        row_axes.extend(pos)
    # current axis layout: for each block, its row axes then its column axes
    layout = []
    for pos, _ in blocks:
        layout.extend([("r", i) for i in pos] + [("c", i) for i in pos])
    perm = [layout.index(("r", i)) for i in range(k)] + [layout.index(("c", i)) for i in range(k)]
    c = math.prod(shape)
    return np.transpose(t, perm).reshape(c, c)


def term_rows(blocks: Iterable[tuple[tuple[int, ...], BlockKey]], shape: tuple[int, ...]) -> np.ndarray:
    """⊗ of the blocks' projected query rows, columns over ``shape`` (C order): R with RᵀR = dense_kron."""
    blocks = list(blocks)
    k = len(shape)
    t = np.ones(())
    layout: list[tuple[str, int]] = []
    nrows = 1
    for bi, (pos, key) in enumerate(blocks):
        p = np.asarray(projected(*key))
        nrows *= p.shape[0]
        t = np.multiply.outer(t, p.reshape((p.shape[0],) + tuple(shape[i] for i in pos)))
        layout.append(("r", bi))
        layout.extend(("c", i) for i in pos)
    perm = [layout.index(("r", bi)) for bi in range(len(blocks))] + [layout.index(("c", i)) for i in range(k)]
    return np.transpose(t, perm).reshape(nrows, math.prod(shape))


@dataclass
class Subworkload:
    """All subqueries projected onto the residual space of ``attrs``: parts ⊗, times ``alpha``."""

    attrs: Clique
    terms: list[Term] = field(default_factory=list)
    alpha: float = 0.0
    parts: list[Part] = field(default_factory=list)

    def structure(self, domain: Domain, dense_limit: int) -> None:
        """Factor blocks shared by all terms; the remainder becomes one dense part."""
        if not self.attrs:
            self.alpha = sum(t.alpha for t in self.terms)
            self.parts = []
            return
        common = set(self.terms[0].blocks)
        for t in self.terms[1:]:
            common &= set(t.blocks)
        shared = sorted(common, key=lambda b: domain.index(b.attrs[0]))
        rest_attrs = tuple(a for a in self.attrs if not any(a in b.attrs for b in shared))
        parts = [Part(b.attrs, domain.shape_of(b.attrs), b.key) for b in shared]
        if rest_attrs:
            pos = {a: i for i, a in enumerate(rest_attrs)}
            merged: dict[tuple, float] = {}
            for t in self.terms:
                blocks = tuple((tuple(pos[a] for a in b.attrs), b.key) for b in t.blocks if b not in common)
                merged[blocks] = merged.get(blocks, 0.0) + t.alpha
            scale = max(merged.values())
            terms = tuple(sorted(((a / scale, b) for b, a in merged.items()), key=repr))
            shape = domain.shape_of(rest_attrs)
            parts.append(Part(rest_attrs, shape, ("rem", shape, terms), terms))
            self.alpha = scale
        else:
            self.alpha = sum(t.alpha for t in self.terms)
        self.parts = sorted(parts, key=lambda p: domain.index(p.attrs[0]))
        del dense_limit


def group_terms(domain: Domain, g: QueryGroup) -> Iterable[tuple[Clique, Term]]:
    """Yield (𝒜', term) for every subset 𝒜' of the group's attributes with a nonzero Gram."""
    facs = g.factors
    attrs = g.attributes
    for r in range(len(attrs) + 1):
        for sub in itertools.combinations(attrs, r):
            alpha = g.weight
            blocks = []
            for f in facs:
                sizes = domain.shape_of(f.attributes)
                mask = tuple(a in sub for a in f.attributes)
                if any(mask):
                    blocks.append(Block(tuple(a for a in f.attributes if a in sub), (f.query, sizes, mask)))
                else:
                    alpha *= block_scalar(f.query, sizes)
            if alpha <= 0:
                continue
            if any(not np.any(projected(*b.key)) for b in blocks):  # PᵀP = 0 iff P = 0
                continue
            yield sub, Term(alpha, tuple(blocks))


def decompose(workload: Workload, dense_limit: int = 4096) -> dict[Clique, Subworkload]:
    """Subworkloads keyed by attribute subset (domain order), with Kronecker structure found."""
    domain = workload.domain
    subs: dict[Clique, Subworkload] = {}
    for g in workload:
        for sub, term in group_terms(domain, g):
            subs.setdefault(sub, Subworkload(sub)).terms.append(term)
    for s in subs.values():
        s.structure(domain, dense_limit)
    order = {a: i for i, a in enumerate(domain.attributes)}
    return dict(sorted(subs.items(), key=lambda kv: (len(kv[0]), [order[a] for a in kv[0]])))


def factor_of(group: QueryGroup, attr: str) -> Factor:
    """The factor of ``group`` that covers ``attr``."""
    return next(f for f in group.factors if attr in f.attributes)
