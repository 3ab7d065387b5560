"""The reconstruction problem: noisy marginals on overlapping cliques, their weights, and the
downward closure of residuals (AIM+GReM Sec. 3) over which consistent marginals are parameterised.

A collection of marginals is *consistent* exactly when it is ``μ_c = Σ_{τ⊆c} Recon(z_τ, τ, c)`` for one
set of residuals ``z_τ`` (τ in the downward closure, the empty set being the total). Cliques are kept in
domain order, so every τ ⊆ c is a subsequence of c and axes line up without transposes.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DataError

Clique = tuple[str, ...]


def project(arr: np.ndarray, clique: Clique, sub: Clique) -> np.ndarray:
    """Sum the clique-shaped ``arr`` down to ``sub`` (a subsequence of ``clique``; axes in clique order)."""
    axes = tuple(k for k, a in enumerate(clique) if a not in sub)
    return np.asarray(arr.sum(axis=axes)) if axes else arr


def measurable_subsets(clique: Clique, domain: Domain) -> list[Clique]:
    """Subsets τ ⊆ clique (clique order, by size) with a non-empty residual: every attribute of size ≥ 2."""
    keep = [a for a in clique if domain[a] >= 2]
    return [t for k in range(len(keep) + 1) for t in itertools.combinations(keep, k)]


@dataclass
class MarginalProblem:
    """Noisy marginals ``y[c]`` (clique-shaped, canonical cliques) with per-cell precision ``weight[c]``.

    ``subs[c]`` lists the measurable τ ⊆ c; ``closure`` is their union (always holding the total ``()``);
    ``ratio[(c, τ)]`` is ∏_{c∖τ} n, the number of cells of c summed into one cell of τ.
    """

    domain: Domain
    y: dict[Clique, np.ndarray]
    weight: dict[Clique, float]
    cliques: list[Clique] = field(init=False)
    subs: dict[Clique, list[Clique]] = field(init=False)
    closure: list[Clique] = field(init=False)
    ratio: dict[tuple[Clique, Clique], float] = field(init=False)

    def __post_init__(self) -> None:
        self.cliques = list(self.y)
        self.subs = {c: measurable_subsets(c, self.domain) for c in self.cliques}
        seen: dict[Clique, None] = {}
        for c in self.cliques:
            seen.update(dict.fromkeys(self.subs[c]))
        self.closure = sorted(seen, key=len)
        self.ratio = {(c, t): float(math.prod(self.domain.shape_of(c))) / float(math.prod(self.domain.shape_of(t)))
                      for c in self.cliques for t in self.subs[c]}

    @property
    def cells(self) -> int:
        """Total number of cells over all cliques."""
        return int(sum(a.size for a in self.y.values()))

    def shape(self, c: Clique) -> tuple[int, ...]:
        return self.domain.shape_of(c)


def build_problem(marginals: Mapping[Clique, np.ndarray], domain: Domain,
                  variances: Mapping[Clique, float] | None = None) -> MarginalProblem:
    """A problem from clique -> noisy counts (any attribute order) and clique -> per-cell variance.

    Several entries on the same attribute set are fused by inverse-variance averaging; missing or
    non-positive variances count as the median known one (1 when none is known). Weights are scaled
    so that their median is 1 (the solution does not depend on the scale).
    """
    ys: dict[Clique, list[tuple[np.ndarray, float | None]]] = {}
    for c, arr in marginals.items():
        cc = domain.canonical(c)
        a = np.asarray(arr, dtype=float)
        if a.size != domain.size(c):
            raise DataError(f"marginal on {list(c)} has {a.size} cells; the domain needs {domain.size(c)}")
        a = a.reshape(domain.shape_of(tuple(c)))
        if tuple(c) != cc:
            a = np.transpose(a, [tuple(c).index(x) for x in cc])
        if not np.all(np.isfinite(a)):
            raise DataError(f"marginal on {list(c)} holds non-finite estimates")
        v = None if variances is None else variances.get(tuple(c), variances.get(cc))
        ys.setdefault(cc, []).append((a, float(v) if v is not None and np.isfinite(v) and v > 0 else None))
    if not ys:
        raise DataError("reconstruction needs at least one marginal")
    known = [v for entries in ys.values() for _, v in entries if v is not None]
    default = float(np.median(known)) if known else 1.0
    y: dict[Clique, np.ndarray] = {}
    weight: dict[Clique, float] = {}
    for cc, entries in ys.items():
        ws = [1.0 / (v if v is not None else default) for _, v in entries]
        y[cc] = sum(w * a for w, (a, _) in zip(ws, entries)) / sum(ws)
        weight[cc] = float(sum(ws))
    scale = float(np.median(list(weight.values())))
    return MarginalProblem(domain, y, {c: w / scale for c, w in weight.items()})


__all__ = ["Clique", "MarginalProblem", "build_problem", "measurable_subsets", "project"]
