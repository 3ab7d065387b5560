"""A tree-structured graphical model fitted to estimated marginals (Chow–Liu on the estimates).

Edge weights are the mutual information of the estimated pairwise marginals; a maximum spanning
forest (Kruskal) picks the edges; each attribute is then sampled given its parent from
P(child | parent) = P̂(parent, child) / P̂(parent). Attributes no estimate covers are uniform.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from privcube.core.domain import Domain
from privcube.synth.consistency import project

Clique = tuple[str, ...]


def mutual_information(p_ab: np.ndarray) -> float:
    """I(A;B) in nats of a (non-negative) joint table, normalised internally."""
    p = np.maximum(np.asarray(p_ab, dtype=float), 0.0)
    s = p.sum()
    if s <= 0:
        return 0.0
    p = p / s
    pa = p.sum(axis=1, keepdims=True)
    pb = p.sum(axis=0, keepdims=True)
    nz = p > 0
    return float(np.sum(p[nz] * np.log(p[nz] / (pa @ pb)[nz])))


def max_spanning_forest(n: int, edges: list[tuple[float, int, int]]) -> list[tuple[int, int]]:
    """Kruskal on (weight, u, v): the maximum-weight spanning forest's edges."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    out = []
    for w, u, v in sorted(edges, key=lambda e: (-e[0], e[1], e[2])):
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[ru] = rv
            out.append((u, v))
    return out


@dataclass
class TreeModel:
    """Sampling order, parent of each attribute, root marginals and child-given-parent tables."""

    domain: Domain
    order: list[int]
    parent: dict[int, int | None]
    prob: dict[int, np.ndarray] = field(default_factory=dict)  # root: (k,), child: (k_parent, k_child)
    edges: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def fit(cls, marginals: Mapping[Clique, np.ndarray], domain: Domain) -> TreeModel:
        """Chow–Liu tree over the pairwise projections of (non-negative, consistent) marginals."""
        d = len(domain)
        attrs = domain.attributes
        one: dict[int, list[np.ndarray]] = {k: [] for k in range(d)}
        pair: dict[tuple[int, int], list[np.ndarray]] = {}
        for c, arr in marginals.items():
            cc = domain.canonical(c)
            a = np.asarray(arr, dtype=float).reshape(domain.shape_of(cc))
            for x in cc:
                one[domain.index(x)].append(project(a, cc, (x,)))
            for x, y in itertools.combinations(cc, 2):
                pair.setdefault((domain.index(x), domain.index(y)), []).append(project(a, cc, (x, y)))
        p1 = {}
        for k in range(d):
            if one[k]:
                v = np.maximum(np.mean([u / max(u.sum(), 1e-300) for u in one[k]], axis=0), 0.0)
            else:
                v = np.ones(domain.shape[k])
            p1[k] = v / v.sum() if v.sum() > 0 else np.full(domain.shape[k], 1.0 / domain.shape[k])
        p2 = {e: np.maximum(np.mean([t / max(t.sum(), 1e-300) for t in ts], axis=0), 0.0) for e, ts in pair.items()}
        weighted = [(mutual_information(t), u, v) for (u, v), t in p2.items()]
        tree = max_spanning_forest(d, weighted)
        adj: dict[int, list[int]] = {k: [] for k in range(d)}
        for u, v in tree:
            adj[u].append(v)
            adj[v].append(u)
        order: list[int] = []
        parent: dict[int, int | None] = {}
        for root in range(d):
            if root in parent:
                continue
            parent[root] = None
            queue = [root]
            while queue:
                u = queue.pop(0)
                order.append(u)
                for v in sorted(adj[u]):
                    if v not in parent:
                        parent[v] = u
                        queue.append(v)
        prob: dict[int, np.ndarray] = {}
        for k in order:
            pk = parent[k]
            if pk is None:
                prob[k] = p1[k]
                continue
            t = p2[(pk, k)] if (pk, k) in p2 else p2[(k, pk)].T
            rows = t.sum(axis=1, keepdims=True)
            cond = np.where(rows > 0, t / np.where(rows > 0, rows, 1.0), p1[k][None, :])
            prob[k] = cond
        edges = [(attrs[parent[k]], attrs[k]) for k in order if parent[k] is not None]  # type: ignore[index]
        return cls(domain, order, parent, prob, edges)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n records (n × d codes, domain column order), attribute by attribute in tree order."""
        out = np.zeros((n, len(self.domain)), dtype=np.int64)
        for k in self.order:
            pk = self.parent[k]
            u = rng.random(n)
            if pk is None:
                cdf = np.cumsum(self.prob[k])
                out[:, k] = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), self.domain.shape[k] - 1)
            else:
                cdf = np.cumsum(self.prob[k], axis=1)
                cdf = cdf / cdf[:, -1:]
                rows = cdf[out[:, pk]]
                out[:, k] = np.minimum((rows <= u[:, None]).sum(axis=1), self.domain.shape[k] - 1)
        return out

    def marginal(self, attrs: tuple[str, ...]) -> np.ndarray:
        """The model's exact probability table on one or two attributes (tests, diagnostics)."""
        if len(attrs) == 1:
            return self._one(self.domain.index(attrs[0]))
        a, b = (self.domain.index(x) for x in attrs)
        path_ab = self._joint_path(a, b)
        return path_ab

    def _one(self, k: int) -> np.ndarray:
        pk = self.parent[k]
        if pk is None:
            return self.prob[k]
        return self._one(pk) @ self.prob[k]

    def _joint_path(self, a: int, b: int) -> np.ndarray:
        """P(a, b) by propagating along the tree (ancestor chains through the common ancestor)."""
        def chain(k: int) -> list[int]:
            out = [k]
            while self.parent[out[-1]] is not None:
                out.append(self.parent[out[-1]])  # type: ignore[arg-type]
            return out
        ca, cb = chain(a), chain(b)
        common = next((x for x in ca if x in cb), None)
        if common is None:
            return np.outer(self._one(a), self._one(b))

        def down(frm: int, to: int) -> np.ndarray:
            """Transition matrix P(to | frm) for `frm` an ancestor of `to`."""
            path = chain(to)
            path = path[:path.index(frm) + 1][::-1]
            T = np.eye(self.domain.shape[frm])
            for u in path[1:]:
                T = T @ self.prob[u]
            return T
        pc = self._one(common)
        Ta, Tb = down(common, a), down(common, b)
        return (Ta.T * pc) @ Tb


__all__ = ["TreeModel", "mutual_information", "max_spanning_forest"]
