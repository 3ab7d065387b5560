"""Exact inference on a junction tree of log-potentials: calibrated clique marginals (sum-product),
the least value of a sum of clique tables (min-sum, for the Frank–Wolfe gap), and the marginal of any
attribute set, also one that no single clique holds (variable elimination over the smallest subtree).

Tables are keyed by ascending attribute indices (as in :mod:`privcube.synth.factor_ops`); every table of
a clique has one axis per attribute. Messages are kept in log space with a max shift, so potentials of
any scale neither overflow nor underflow. Cost: a few passes over every clique table; nothing here
grows with the number of workload marginals.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from privcube.synth.factor_ops import expand_idx, project_idx, scale_idx
from privcube.synth.junction_tree import JunctionTree

Idx = tuple[int, ...]


@dataclass
class TreeOrder:
    """A junction tree rooted once per component: cliques in breadth-first order and each one's parent."""

    tree: JunctionTree
    order: list[int] = field(default_factory=list)
    parent: dict[int, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        adj = self.tree.neighbours()
        for r in range(len(self.tree.cliques)):
            if r in self.parent:
                continue
            self.parent[r] = None
            queue = [r]
            while queue:
                u = queue.pop(0)
                self.order.append(u)
                for v in sorted(adj[u]):
                    if v not in self.parent:
                        self.parent[v] = u
                        queue.append(v)

    def separator(self, child: int) -> Idx:
        """Attributes a clique shares with its parent (ascending)."""
        p = self.parent[child]
        if p is None:
            return ()
        a, b = self.tree.cliques[child], self.tree.cliques[p]
        return tuple(x for x in a if x in b)

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {i: [] for i in self.order}
        for c, p in self.parent.items():
            if p is not None:
                out[p].append(c)
        return out


def calibrate(theta: Sequence[np.ndarray], order: TreeOrder) -> list[np.ndarray]:
    """Sum-product on the tree: each clique's marginal probability table of the distribution
    ∝ exp(Σ_C θ_C) (every component sums to one). Potentials are exp(θ_C − max θ_C) and every message
    is scaled to a maximum of one, so nothing overflows and only negligible mass underflows."""
    cliques = order.tree.cliques
    acc = [np.exp(t - np.max(t)) for t in theta]  # potential × messages from the children
    up: dict[int, np.ndarray] = {}
    for c in reversed(order.order):  # leaves first
        p = order.parent[c]
        if p is None:
            continue
        sep = order.separator(c)
        up[c] = _scaled(project_idx(acc[c], cliques[c], sep))
        acc[p] = scale_idx(acc[p], up[c], sep, cliques[p])
    beliefs: list[np.ndarray] = [np.empty(0)] * len(cliques)
    for c in order.order:  # roots first: each clique gets its parent's belief less its own branch
        p = order.parent[c]
        if p is not None:
            sep = order.separator(c)
            have = project_idx(beliefs[p], cliques[p], sep)
            down = np.divide(have, up[c], out=np.zeros_like(have), where=up[c] > 0)
            acc[c] = scale_idx(acc[c], _scaled(down), sep, cliques[c])
        total = float(acc[c].sum())
        beliefs[c] = acc[c] / total if total > 0 else np.full(acc[c].shape, 1.0 / acc[c].size)
    return beliefs


def _scaled(m: np.ndarray) -> np.ndarray:
    """A message scaled to a maximum of one (its scale cancels when beliefs are normalised)."""
    top = float(np.max(m))
    return m / top if top > 0 else m


def entropy(beliefs: Sequence[np.ndarray], order: TreeOrder) -> float:
    """Entropy (nats) of the tree's distribution from its calibrated marginals: Σ_C H(b_C) − Σ_S H(b_S)."""
    def h(p: np.ndarray) -> float:
        q = p[p > 0]
        return float(-np.sum(q * np.log(q)))  # not np.dot: a threaded BLAS call costs more than it saves here

    cliques = order.tree.cliques
    out = sum(h(b.reshape(-1)) for b in beliefs)
    for c in order.order:
        sep = order.separator(c)
        if sep:
            out -= h(project_idx(beliefs[c], cliques[c], sep).reshape(-1))
    return out


def min_sum(tables: Sequence[np.ndarray], order: TreeOrder) -> float:
    """min over complete assignments x of Σ_C tables_C(x_C) (exact on a junction tree: min-sum)."""
    cliques = order.tree.cliques
    acc = [np.array(t, dtype=float, copy=True) for t in tables]
    total = 0.0
    for c in reversed(order.order):
        p = order.parent[c]
        sep = order.separator(c)
        axes = tuple(k for k, a in enumerate(cliques[c]) if a not in sep)
        low = np.min(acc[c], axis=axes) if axes else acc[c]
        if p is None:
            total += float(np.min(low))
        else:
            acc[p] += expand_idx(low, sep, cliques[p])
    return total


def _cover(tree: JunctionTree, attrs: Idx) -> list[int]:
    """Cliques of a small connected subtree whose union holds ``attrs`` (greedy: the clique holding most of
    them, then the nearest clique holding each one still missing, with the tree path to it)."""
    cliques = tree.cliques
    adj = tree.neighbours()
    start = max(range(len(cliques)), key=lambda i: (len(set(attrs) & set(cliques[i])), -len(cliques[i])))
    chosen = {start}
    missing = [a for a in attrs if a not in cliques[start]]
    while missing:
        a = missing[0]
        prev: dict[int, int | None] = {c: None for c in chosen}
        queue = list(chosen)
        hit = None
        while queue:  # breadth first from the chosen subtree to the nearest clique holding a
            u = queue.pop(0)
            if a in cliques[u]:
                hit = u
                break
            for v in adj[u]:
                if v not in prev:
                    prev[v] = u
                    queue.append(v)
        if hit is None:  # another component: join it as is (independent of this one)
            hit = next(i for i, c in enumerate(cliques) if a in c)
            prev = {hit: None}
        u: int | None = hit
        while u is not None and u not in chosen:
            chosen.add(u)
            u = prev.get(u)
        chosen.add(hit)
        missing = [x for x in attrs if not any(x in cliques[c] for c in chosen)]
    return sorted(chosen)


def marginal(beliefs: Sequence[np.ndarray], tree: JunctionTree, attrs: Idx) -> np.ndarray:
    """Probability table of ``attrs`` (ascending indices) under the calibrated ``beliefs``: a projection
    when one clique holds them, else one contraction over the covering subtree, its top clique's belief times
    every other clique's conditional given its separator, each first summed over what only it holds and the
    query does not need; the contraction's path (einsum's greedy order) picks the elimination order, so the
    intermediate tables stay near the query's size instead of carrying it through every separator."""
    attrs = tuple(attrs)
    for c, b in zip(tree.cliques, beliefs):
        if set(attrs) <= set(c):
            return project_idx(b, c, attrs)
    cover = _cover(tree, attrs)
    sub = JunctionTree([tree.cliques[i] for i in cover],
                       [(cover.index(i), cover.index(j)) for i, j in tree.edges if i in cover and j in cover])
    order = TreeOrder(sub)
    held: dict[int, int] = {}
    for vars_c in sub.cliques:
        for a in vars_c:
            held[a] = held.get(a, 0) + 1
    parts: list[tuple[Idx, np.ndarray]] = []
    for c in order.order:
        vars_c = sub.cliques[c]
        keep = tuple(a for a in vars_c if a in attrs or held[a] > 1)
        table = project_idx(beliefs[cover[c]], vars_c, keep)
        if order.parent[c] is not None:
            sep = order.separator(c)
            s = expand_idx(project_idx(table, keep, sep), sep, keep)
            table = np.divide(table, s, out=np.zeros_like(table), where=s > 0)
        parts.append((keep, table))
    table = _contract(parts, attrs)
    return table / max(float(table.sum()), 1e-300)


def _contract(parts: Sequence[tuple[Idx, np.ndarray]], out: Idx) -> np.ndarray:
    """Σ over every attribute not in ``out`` of the product of the tables ``parts`` (scope, table), without
    forming the product over the union of their scopes (einsum picks the order of the pairwise steps)."""
    if len(parts) == 1:
        scope, table = parts[0]
        return project_idx(table, scope, out) if tuple(scope) != tuple(out) else table
    letters = {a: k for k, a in enumerate(sorted(set().union(*[set(s) for s, _ in parts])))}
    operands: list = []
    for s, t in parts:
        operands += [t, [letters[a] for a in s]]
    return np.einsum(*operands, [letters[a] for a in out], optimize=True)


__all__ = ["TreeOrder", "calibrate", "entropy", "marginal", "min_sum"]
