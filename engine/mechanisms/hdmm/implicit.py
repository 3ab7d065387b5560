"""A privcube Workload as HDMM's implicit union of Kronecker products over attribute blocks.

The data vector is the marginal over the workload's attributes (domain order). Attributes joined by a
joint query type (affine, abs-diff, random) are merged into one block; blocks are contiguous runs of
attributes, so the block-major data vector is the C-order marginal itself. Each query group becomes one
term ``(weight, [factor per block])`` whose rows are in the group's Kronecker order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

from privcube.core.errors import WorkloadError
from privcube.linalg.matrices import VStack, union_of_kron
from privcube.core.workload import QueryGroup, Workload


@dataclass
class ImplicitWorkload:
    """Blocks of attributes, their sizes, and one Kronecker term per query group."""

    attributes: tuple[str, ...]
    blocks: list[tuple[str, ...]]
    shape: tuple[int, ...]
    terms: list[tuple[float, list[np.ndarray]]]
    groups: list[QueryGroup]

    @property
    def size(self) -> int:
        """Cells of the data vector."""
        return math.prod(self.shape)

    def num_queries(self) -> list[int]:
        """Rows of each term (group)."""
        return [math.prod(f.shape[0] for f in fs) for _, fs in self.terms]

    def matrix(self) -> VStack:
        """The weighted workload as an implicit matrix."""
        return union_of_kron(self.terms)

    def merged(self) -> ImplicitWorkload:
        """The same workload with all blocks merged into one explicit block (for OPT_0)."""
        terms = [(c, [reduce(np.kron, fs)]) for c, fs in self.terms]
        return ImplicitWorkload(self.attributes, [self.attributes], (self.size,), terms, self.groups)


def _blocks(workload: Workload, attrs: tuple[str, ...]) -> list[tuple[str, ...]]:
    pos = {a: i for i, a in enumerate(attrs)}
    span = list(range(len(attrs)))  # span[i] = last position of i's block
    for g in workload.groups:
        for f in g.factors:
            if len(f.attributes) > 1:
                lo, hi = min(pos[a] for a in f.attributes), max(pos[a] for a in f.attributes)
                for i in range(lo, hi + 1):
                    span[i] = max(span[i], hi)
    out, i = [], 0
    while i < len(attrs):
        end = span[i]
        j = i
        while j <= end:
            end = max(end, span[j])
            j += 1
        out.append(attrs[i:end + 1])
        i = end + 1
    return out


def _block_factor(group: QueryGroup, block: tuple[str, ...], workload: Workload) -> np.ndarray:
    domain = workload.domain
    pieces = [f for f in group.factors if set(f.attributes) <= set(block)]
    size = math.prod(domain[a] for a in block)
    if not pieces:
        return np.ones((1, size))
    mat = reduce(np.kron, [f.matrix(domain) for f in pieces])
    covered = [a for f in pieces for a in f.attributes]
    if covered == list(block):
        return mat
    rows = mat.shape[0]
    t = mat.reshape((rows,) + tuple(domain[a] for a in covered))
    for k, a in enumerate(block):
        if a not in covered:
            t = np.expand_dims(t, k + 1)
    t = np.broadcast_to(t, (rows,) + tuple(domain[a] for a in block))
    return np.ascontiguousarray(t).reshape(rows, size)


def from_workload(workload: Workload) -> ImplicitWorkload:
    """Convert a Workload (groups of factors) to blocks and Kronecker terms."""
    if not workload.groups:
        raise WorkloadError("workload has no query groups")
    attrs = workload.attributes()
    blocks = _blocks(workload, attrs)
    shape = tuple(math.prod(workload.domain[a] for a in b) for b in blocks)
    terms = [(g.weight, [_block_factor(g, b, workload) for b in blocks]) for g in workload.groups]
    if not attrs:  # only totals: a one-cell domain
        blocks, shape = [()], (1,)
        terms = [(g.weight, [np.ones((1, 1))]) for g in workload.groups]
    return ImplicitWorkload(attrs, blocks, shape, terms, list(workload.groups))
