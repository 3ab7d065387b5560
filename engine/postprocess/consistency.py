"""Weighted least-squares projection onto consistent marginals, in the residual basis (closed form).

The residual components of a clique's marginal are orthogonal (‖Recon(z, τ, c)‖² = ‖center(z)‖²/∏_{c∖τ}n),
so minimising Σ_c w_c ‖μ_c − x_c‖² over consistent μ splits into one weighted average per τ:
``z_τ = Decomp(Σ_c a_cτ·x_c↓τ / Σ_c a_cτ)`` with ``a_cτ = w_c/∏_{c∖τ}n`` and ``x_c↓τ`` the τ-marginal
of ``x_c`` (Decomp only sees the τ-component). ``μ_c = Σ_{τ⊆c} Recon(z_τ, τ, c)``. One pass, O(cells·2^k).

Per-clique work is grouped into chunks and run through a ``map``-like callable (in process by default;
a caller may pass one that runs the chunks as cluster tasks).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.postprocess.problem import Clique, MarginalProblem, project
from privcube.core.residuals import decomp, recon_add

Mapper = Callable[[Callable[[Any], Any], Sequence[Any]], Sequence[Any]]


def serial_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """The default ``map``: every chunk in this process, in order."""
    return [fn(x) for x in items]


def chunks(prob: MarginalProblem, target_cells: int = 2_000_000) -> list[list[Clique]]:
    """Cliques grouped into chunks of about ``target_cells`` cells (the unit of work given to ``map``)."""
    out: list[list[Clique]] = [[]]
    size = 0
    for c in prob.cliques:
        if out[-1] and size + prob.y[c].size > target_cells:
            out.append([])
            size = 0
        out[-1].append(c)
        size += prob.y[c].size
    return out


def tau_marginals(arrays: Mapping[Clique, np.ndarray], subs: Mapping[Clique, Sequence[Clique]],
                  coef: Mapping[tuple[Clique, Clique], float]) -> dict[Clique, np.ndarray]:
    """Σ_c coef[c, τ]·(x_c summed to τ), for every τ ⊆ c of the given cliques (τ-marginals of each
    clique are summed from the smallest superset already computed)."""
    out: dict[Clique, np.ndarray] = {}
    for c, x in arrays.items():
        margs: dict[Clique, np.ndarray] = {c: np.asarray(x, dtype=float)}
        for t in sorted(subs[c], key=len, reverse=True):
            if t not in margs:
                parent = min((p for p in margs if set(t) <= set(p)), key=len)
                margs[t] = project(margs[parent], parent, t)
            w = coef[(c, t)]
            out[t] = out[t] + w * margs[t] if t in out else w * margs[t]
    return out


def residuals(sums: Mapping[Clique, np.ndarray], mass: Mapping[Clique, float]) -> dict[Clique, np.ndarray]:
    """z_τ = Decomp(sums_τ / mass_τ): the weighted-average τ-marginal's residual."""
    return {t: decomp(np.asarray(m / mass[t]), t, t) for t, m in sums.items()}


def reconstruct(z: Mapping[Clique, np.ndarray], cliques: Sequence[Clique], subs: Mapping[Clique, Sequence[Clique]],
                domain: Domain) -> dict[Clique, np.ndarray]:
    """μ_c = Σ_{τ⊆c} Recon(z_τ, τ, c) for each clique (consistent by construction)."""
    out = {}
    for c in cliques:
        mu = np.zeros(domain.shape_of(c), dtype=float)
        for t in subs[c]:
            recon_add(mu, z[t], t, c, domain)
        out[c] = mu
    return out


def merge_sums(parts: Sequence[Mapping[Clique, np.ndarray]]) -> dict[Clique, np.ndarray]:
    """Add up per-chunk τ-marginal sums."""
    out: dict[Clique, np.ndarray] = {}
    for p in parts:
        for t, m in p.items():
            out[t] = out[t] + m if t in out else m
    return out


def coefficients(prob: MarginalProblem, weight: Mapping[Clique, float] | None = None) -> dict[tuple[Clique, Clique], float]:
    """a_cτ = w_c / ∏_{c∖τ} n for every clique and measurable τ ⊆ c."""
    w = prob.weight if weight is None else weight
    return {(c, t): w[c] / prob.ratio[(c, t)] for c in prob.cliques for t in prob.subs[c]}


def mass(prob: MarginalProblem, coef: Mapping[tuple[Clique, Clique], float]) -> dict[Clique, float]:
    """Σ_c a_cτ per τ of the closure."""
    out: dict[Clique, float] = {}
    for (c, t), a in coef.items():
        out[t] = out.get(t, 0.0) + a
    return out


def _chunk_sums(args: tuple) -> dict[Clique, np.ndarray]:
    arrays, subs, coef = args
    return tau_marginals(arrays, subs, coef)


def _chunk_recon(args: tuple) -> dict[Clique, np.ndarray]:
    z, cliques, subs, domain = args
    return reconstruct(z, cliques, subs, domain)


def project_consistent(prob: MarginalProblem, x: Mapping[Clique, np.ndarray] | None = None,
                       weight: Mapping[Clique, float] | None = None, map: Mapper = serial_map,
                       total: float | None = None) -> dict[Clique, np.ndarray]:
    """argmin over consistent μ of Σ_c w_c‖μ_c − x_c‖² (x defaults to the noisy marginals): the
    weighted least-squares estimate, which keeps every marginal in agreement but not non-negative.
    ``total`` fixes the common total (the empty set's component) instead of estimating it."""
    x = prob.y if x is None else x
    coef = coefficients(prob, weight)
    parts = chunks(prob)
    sums = merge_sums(map(_chunk_sums, [({c: x[c] for c in ch}, {c: prob.subs[c] for c in ch},
                                         {k: v for k, v in coef.items() if k[0] in ch}) for ch in parts]))
    z = residuals(sums, mass(prob, coef))
    if total is not None:
        z[()] = np.asarray(float(total))
    return recon_chunks(prob, z, parts, map)


def recon_chunks(prob: MarginalProblem, z: Mapping[Clique, np.ndarray], parts: Sequence[Sequence[Clique]],
                 map: Mapper = serial_map) -> dict[Clique, np.ndarray]:
    """:func:`reconstruct` chunk by chunk through ``map``."""
    out: dict[Clique, np.ndarray] = {}
    items = []
    for ch in parts:
        need = {t for c in ch for t in prob.subs[c]}
        items.append(({t: z[t] for t in need}, list(ch), {c: prob.subs[c] for c in ch}, prob.domain))
    for part in map(_chunk_recon, items):
        out.update(part)
    return out


__all__ = ["Mapper", "serial_map", "chunks", "tau_marginals", "residuals", "reconstruct", "merge_sums",
           "coefficients", "mass", "project_consistent", "recon_chunks"]
