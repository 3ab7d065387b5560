"""Exact feasibility: from consistent marginals with a few small negatives to consistent, non-negative ones.

A convex combination of two consistent collections with the same total is consistent. We mix the
iterate with a strictly positive consistent *anchor* (the product of its clipped one-way marginals: the
marginals of an independence model, which agree everywhere) using the smallest weight t that lifts
every cell to ≥ 0. When the iterate has converged, t is tiny; when it has not, t says how far it was.
Also: the constraint-violation measures every report states.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from privcube.core.domain import Domain
from privcube.postprocess.problem import Clique, project

#: smoothing of the independence anchors tried by :func:`lift_to_nonnegative` (1e-3: close to the
#: 1-way marginals; 10: close to uniform, larger in the sparse cells where negatives tend to be)
ANCHOR_SMOOTHING = (1e-3, 0.1, 1.0, 10.0)


def total_of(mu: Mapping[Clique, np.ndarray]) -> float:
    """The common total (mean over cliques; equal for consistent input)."""
    return float(np.mean([float(np.sum(a)) for a in mu.values()]))


def one_way(mu: Mapping[Clique, np.ndarray], domain: Domain) -> dict[str, np.ndarray]:
    """Each attribute's 1-way marginal, averaged over the cliques that hold it."""
    acc: dict[str, list[np.ndarray]] = {}
    for c, a in mu.items():
        for x in c:
            acc.setdefault(x, []).append(project(a, c, (x,)))
    return {x: np.mean(v, axis=0) for x, v in acc.items()}


def independence_anchor(mu: Mapping[Clique, np.ndarray], domain: Domain, total: float,
                        smoothing: float = 1e-3) -> dict[Clique, np.ndarray]:
    """Strictly positive, consistent marginals with sum ``total``: products of 1-way distributions, each
    mixed with ``smoothing`` times the uniform one (large smoothing: nearly uniform)."""
    probs = {}
    for x, m in one_way(mu, domain).items():
        m = np.maximum(m, 0.0)
        m = m + max(float(m.sum()), 1.0) * smoothing / m.size  # every level gets a little mass
        probs[x] = m / m.sum()
    out = {}
    for c in mu:
        arr = np.asarray(total, dtype=float)
        for x in c:
            arr = np.multiply.outer(arr, probs[x])
        out[c] = np.asarray(arr)
    return out


def lift_to_nonnegative(mu: Mapping[Clique, np.ndarray], domain: Domain) -> tuple[dict[Clique, np.ndarray], float]:
    """(consistent non-negative marginals, mixing weight t): ``(1−t)·mu + t·anchor`` with the least t.

    ``mu`` must be consistent. A non-positive total gives all zeros (the only non-negative option).
    """
    total = total_of(mu)
    if not total > 0:
        return {c: np.zeros_like(a, dtype=float) for c, a in mu.items()}, 1.0
    if all(float(np.min(a)) >= 0 for a in mu.values()):
        return {c: np.asarray(a, dtype=float).copy() for c, a in mu.items()}, 0.0
    best = None
    for smoothing in ANCHOR_SMOOTHING:  # the anchor that moves the estimate least (L1) wins
        anchor = independence_anchor(mu, domain, total, smoothing)
        t = _mix_weight(mu, anchor)
        change = t * sum(float(np.abs(anchor[c] - a).sum()) for c, a in mu.items())
        if best is None or change < best[0]:
            best = (change, t, anchor)
    _, t, anchor = best
    t = min(1.0, t * (1 + 1e-12) + 1e-15)
    return {c: np.maximum((1 - t) * a + t * anchor[c], 0.0) for c, a in mu.items()}, t


def _mix_weight(mu: Mapping[Clique, np.ndarray], anchor: Mapping[Clique, np.ndarray]) -> float:
    """The least t with (1−t)·mu + t·anchor ≥ 0 everywhere."""
    t = 0.0
    for c, a in mu.items():
        neg = a < 0
        if neg.any():
            t = max(t, float(np.max(-a[neg] / (anchor[c][neg] - a[neg]))))
    return t


def consistency_violation(mu: Mapping[Clique, np.ndarray]) -> float:
    """max over shared attribute sets (pairwise intersections of cliques, and the total) of the spread of
    that sub-marginal across the cliques holding it, relative to max(1, total) (0 = consistent)."""
    total = max(1.0, abs(total_of(mu)))
    sums = [float(np.sum(a)) for a in mu.values()]
    worst = (max(sums) - min(sums)) / total
    shared = {tuple(x for x in c1 if x in c2) for c1, c2 in itertools.combinations(mu, 2)} - {()}
    for s in shared:
        want = set(s)
        projs = []
        for c, a in mu.items():
            if want <= set(c):
                order = tuple(x for x in c if x in want)
                projs.append(np.transpose(project(a, c, order), [order.index(x) for x in s]))
        stack = np.stack(projs)
        worst = max(worst, float(np.max(stack.max(axis=0) - stack.min(axis=0))) / total)
    return worst


def negativity(mu: Mapping[Clique, np.ndarray]) -> float:
    """The most negative cell, as a positive number relative to max(1, total) (0 = non-negative)."""
    low = min(float(np.min(a)) for a in mu.values())
    return max(0.0, -low) / max(1.0, abs(total_of(mu)))


__all__ = ["consistency_violation", "independence_anchor", "lift_to_nonnegative", "negativity", "one_way", "total_of"]
