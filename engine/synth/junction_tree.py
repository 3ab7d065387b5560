"""The graph of a synthesis model: which attribute pairs interact, triangulated into a junction tree.

Edges come from the published cliques, strongest first by the mutual information of their published
pair marginals; an edge is kept only while the junction tree of the min-fill triangulation still fits
a public cell budget (sum over the tree's cliques of their table sizes). The maximum-MI spanning
forest (the Chow–Liu tree) goes in first, so the model is never poorer than the tree model.
Everything here is post-processing of public quantities and published estimates.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from privcube.synth.tree_model import max_spanning_forest

Edge = tuple[int, int]


def min_fill_cliques(n: int, edges: Sequence[Edge], sizes: Sequence[int]) -> list[frozenset[int]]:
    """Maximal cliques of the min-fill triangulation (ties: smaller table, then lower index)."""
    adj: dict[int, set[int]] = {v: set() for v in range(n)}
    for u, v in edges:
        adj[u].add(v)
        adj[v].add(u)
    alive = set(range(n))
    cliques: list[frozenset[int]] = []
    while alive:
        best, best_key = -1, None
        for v in alive:
            nb = adj[v]
            fill = sum(1 for a, b in itertools.combinations(nb, 2) if b not in adj[a])
            key = (fill, math.prod(sizes[x] for x in nb) * sizes[v], v)
            if best_key is None or key < best_key:
                best, best_key = v, key
        nb = adj[best]
        for a, b in itertools.combinations(nb, 2):
            adj[a].add(b)
            adj[b].add(a)
        cliques.append(frozenset(nb | {best}))
        for x in nb:
            adj[x].discard(best)
        del adj[best]
        alive.discard(best)
    return [c for c in cliques if not any(c < o for o in cliques)]


def clique_cells(cliques: Sequence[frozenset[int]], sizes: Sequence[int]) -> float:
    """Total cells of the cliques' tables."""
    return float(sum(np.prod([sizes[x] for x in c], dtype=float) for c in cliques))


def tree_edges(cliques: Sequence[frozenset[int]]) -> list[Edge]:
    """Junction tree (forest) of a chordal graph's maximal cliques: max spanning tree on separator size."""
    weighted = [(float(len(a & b)), i, j) for (i, a), (j, b) in itertools.combinations(enumerate(cliques), 2)
                if a & b]
    return max_spanning_forest(len(cliques), weighted)


@dataclass
class JunctionTree:
    """Cliques (tuples of attribute indices, ascending), tree edges between them, and the graph kept."""

    cliques: list[tuple[int, ...]]
    edges: list[Edge]
    kept: list[Edge] = field(default_factory=list)
    dropped: list[Edge] = field(default_factory=list)
    cells: float = 0.0
    unsupported: list[Edge] = field(default_factory=list)  # MI no larger than noise alone gives

    def neighbours(self) -> dict[int, list[int]]:
        """Adjacency of the tree."""
        adj: dict[int, list[int]] = {i: [] for i in range(len(self.cliques))}
        for i, j in self.edges:
            adj[i].append(j)
            adj[j].append(i)
        return adj


def select_junction_tree(n: int, sizes: Sequence[int], weights: Mapping[Edge, float],
                         max_cells: float) -> JunctionTree:
    """Greedy graph under a cell budget: the max-weight spanning forest first, then the other candidate
    edges by decreasing weight, each kept only if the triangulated junction tree still fits (the rest
    are ``dropped``); edges of weight ≤ 0 (noise-level MI) are not candidates (``unsupported``)."""
    def fits(es: list[Edge]) -> tuple[bool, list[frozenset[int]]]:
        cl = min_fill_cliques(n, es, sizes)
        return clique_cells(cl, sizes) <= max_cells, cl

    unsupported = sorted(e for e, w in weights.items() if w <= 0)
    weights = {e: w for e, w in weights.items() if w > 0}  # edges noise explains are left out
    forest = max_spanning_forest(n, [(w, u, v) for (u, v), w in weights.items()])
    kept: list[Edge] = []
    dropped: list[Edge] = []
    ok, cl = fits([])
    order = [e for e in forest] + sorted((e for e in weights if e not in set(forest) and (e[1], e[0]) not in
                                          set(forest)), key=lambda e: (-weights[e], e))
    covered: set[Edge] = set()
    for u, v in order:
        e = (min(u, v), max(u, v))
        if e in covered:  # already inside a clique of the triangulation: free
            kept.append(e)
            continue
        ok, trial = fits(kept + [e])
        if ok:
            kept.append(e)
            cl = trial
            covered = {(a, b) for c in cl for a, b in itertools.combinations(sorted(c), 2)}
        else:
            dropped.append(e)
    cliques = [tuple(sorted(c)) for c in cl]
    return JunctionTree(cliques, tree_edges([frozenset(c) for c in cliques]), kept, dropped, clique_cells(cl, sizes),
                        unsupported)


__all__ = ["JunctionTree", "select_junction_tree", "min_fill_cliques", "clique_cells", "tree_edges"]
