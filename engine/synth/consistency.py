"""Post-process noisy marginals: one common total, agreement on shared attributes, non-negativity.

Rounds of (a) consistency: for every attribute set shared by two or more cliques (the empty set, i.e.
the total, first; then by size), replace each clique's projection by the inverse-variance weighted
average of all projections and spread the correction evenly over the clique's other cells (the
least-squares adjustment); (b) non-negativity by "norm-sub": clip negatives to zero and take the
deficit off the positive cells so the total is kept. Pure post-processing: spends no budget.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DataError

Clique = tuple[str, ...]


def project(arr: np.ndarray, clique: Clique, sub: Clique) -> np.ndarray:
    """Sum the clique-shaped array down to ``sub`` (axes in ``sub``'s order)."""
    axes = tuple(k for k, a in enumerate(clique) if a not in sub)
    out = arr.sum(axis=axes) if axes else arr
    kept = [a for a in clique if a in sub]
    return np.transpose(out, [kept.index(a) for a in sub]) if len(sub) > 1 else out


def _expand(delta: np.ndarray, sub: Clique, clique: Clique, domain: Domain) -> np.ndarray:
    """Broadcast a ``sub``-shaped correction to the clique's shape, spread evenly over the other axes."""
    kept = [a for a in clique if a in sub]
    d = np.transpose(delta, [sub.index(a) for a in kept]) if len(sub) > 1 else delta
    shape = [domain[a] if a in sub else 1 for a in clique]
    spread = np.prod([domain[a] for a in clique if a not in sub], dtype=float)
    return np.reshape(d, shape) / spread


def norm_sub(arr: np.ndarray, total: float | None = None, iters: int = 50) -> np.ndarray:
    """Non-negative array with sum ``total`` (default: the input's sum, floored at 0) closest in norm-sub sense."""
    a = np.asarray(arr, dtype=float).copy()
    t = float(a.sum()) if total is None else float(total)
    t = max(t, 0.0)
    if a.size == 0:
        return a
    for _ in range(iters):
        a = np.maximum(a, 0.0)
        pos = a > 0
        diff = t - a.sum()
        if abs(diff) <= 1e-9 * max(1.0, t) or not pos.any():
            break
        a[pos] += diff / pos.sum()
    a = np.maximum(a, 0.0)
    if a.sum() <= 0 and t > 0:
        a[...] = t / a.size
    return a


def make_consistent(marginals: Mapping[Clique, np.ndarray], domain: Domain, *, total: float | None = None,
                    variances: Mapping[Clique, float] | None = None, rounds: int = 10) -> dict[Clique, np.ndarray]:
    """Non-negative, (nearly) mutually consistent copies of the noisy marginals, keyed by canonical clique."""
    est: dict[Clique, np.ndarray] = {}
    var: dict[Clique, float] = {}
    for c, arr in marginals.items():
        cc = domain.canonical(c)
        a = np.asarray(arr, dtype=float)
        want = domain.shape_of(tuple(c))
        if a.size != int(np.prod(want, dtype=np.int64)):
            raise DataError(f"marginal on {list(c)} has {a.size} cells; the domain needs {int(np.prod(want))}")
        a = a.reshape(want)
        if tuple(c) != cc:
            a = np.transpose(a, [tuple(c).index(x) for x in cc])
        est[cc] = a.copy()
        v = (variances.get(tuple(c), variances.get(cc)) if variances else None)
        var[cc] = float(v) if v is not None and v > 0 else 1.0
    if not est:
        raise DataError("make_consistent needs at least one marginal")
    cliques = list(est)
    shared: set[Clique] = {()}
    for a, b in itertools.combinations(cliques, 2):
        inter = tuple(x for x in a if x in b)
        shared.add(inter)
    order = {x: i for i, x in enumerate(domain.attributes)}
    shared_sorted = sorted(shared, key=lambda s: (len(s), [order[x] for x in s]))
    for _ in range(max(1, rounds)):
        for s in shared_sorted:
            holders = [c for c in cliques if all(x in c for x in s)]
            if not s and total is not None:
                target = np.asarray(float(total))
            elif len(holders) < 2:
                continue
            else:
                # variance of a projected cell = cell variance × number of cells summed
                w = np.array([1.0 / (var[c] * domain.size(c) / max(domain.size(s), 1)) for c in holders])
                projs = [project(est[c], c, s) for c in holders]
                target = sum(wi * p for wi, p in zip(w, projs)) / w.sum()
            for c in holders:
                est[c] = est[c] + _expand(np.asarray(target - project(est[c], c, s)), s, c, domain)
        tot = float(total) if total is not None else float(np.mean([e.sum() for e in est.values()]))
        for c in cliques:
            est[c] = norm_sub(est[c], tot)
    return est


__all__ = ["make_consistent", "norm_sub", "project"]
