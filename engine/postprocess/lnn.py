"""GReM-LNN-style reconstruction (Mullins et al. 2024, "Efficient and private marginal reconstruction
with local non-negativity"): weighted least squares in the residual basis subject to non-negativity of
every workload marginal, solved by ADMM.

    minimise ½ Σ_c Σ_{τ⊆c} q_cτ ‖P_τ(μ_c − y_c)‖²   subject to μ consistent, ν = μ, ν ≥ 0,

where P_τ is the τ-component (residual) of a clique's marginal and q_cτ its precision (default: the
clique's per-cell precision for every τ, i.e. Σ_c w_c‖μ_c − y_c‖²). The μ-step is the closed-form
per-τ weighted average of :mod:`privcube.postprocess.consistency` (penalty ρ·w_c per clique keeps it
closed form), the ν-step clips at zero, u is the scaled dual; ρ is balanced every few iterations
(Boyd et al. 2011, §3.4.1). The consistent iterate is finally lifted to exact non-negativity.

Problems up to :data:`FLAT_MAX_CELLS` cells run :func:`lnn_flat`: every iteration is two sparse products
on one flat vector (:mod:`privcube.postprocess.flat`), over-relaxed, with a stopping test that also asks
the final lift to be small (mixing ≤ ``lift_tol`` of the uniform collection); larger problems run
:func:`lnn_admm`'s per-clique chunks through ``map`` (cluster tasks).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.postprocess.consistency import (
    Mapper, chunks, coefficients, mass, merge_sums, reconstruct, residuals, serial_map, tau_marginals,
)
from privcube.postprocess.problem import Clique, MarginalProblem


@dataclass
class SolveInfo:
    """How an iterative solve went: iterations, whether the tolerance was met, the last residuals."""

    iterations: int
    converged: bool
    primal_residual: float
    dual_residual: float
    rho: float = 1.0


def _admm_chunk(args: tuple) -> dict[str, Any]:
    """One ADMM step for a chunk of cliques: μ from z, ν = max(μ+u, 0), u += μ−ν, and the chunk's
    τ-marginal sums of the new ν and u (the next μ-step's input) plus residual norms."""
    z, cliques, subs, domain, nu, u, w, coef = args
    mu = reconstruct(z, cliques, subs, domain)
    new_nu, new_u, r2, s2, n2, u2 = {}, {}, 0.0, 0.0, 0.0, 0.0
    for c in cliques:
        v = mu[c] + u[c]
        new_nu[c] = np.maximum(v, 0.0)
        new_u[c] = v - new_nu[c]
        r2 += w[c] * float(np.sum((mu[c] - new_nu[c]) ** 2))
        s2 += w[c] * float(np.sum((new_nu[c] - nu[c]) ** 2))
        n2 += w[c] * float(np.sum(new_nu[c] ** 2))
        u2 += w[c] * float(np.sum(new_u[c] ** 2))
    return {"mu": mu, "nu": new_nu, "u": new_u, "r2": r2, "s2": s2, "n2": n2, "u2": u2,
            "sum_nu": tau_marginals(new_nu, subs, coef), "sum_u": tau_marginals(new_u, subs, coef)}


def _items(prob: MarginalProblem, parts: Sequence[Sequence[Clique]], z: Mapping[Clique, np.ndarray],
           nu: Mapping[Clique, np.ndarray], u: Mapping[Clique, np.ndarray], coef: Mapping) -> list[tuple]:
    out = []
    for ch in parts:
        need = {t for c in ch for t in prob.subs[c]}
        out.append(({t: z[t] for t in need}, list(ch), {c: prob.subs[c] for c in ch}, prob.domain,
                    {c: nu[c] for c in ch}, {c: u[c] for c in ch}, {c: prob.weight[c] for c in ch},
                    {k: v for k, v in coef.items() if k[0] in ch}))
    return out


#: problems up to this many cells run the vectorised solver in this process; larger ones go chunk by
#: chunk through ``map`` (cluster tasks)
FLAT_MAX_CELLS = 20_000_000


def lnn_flat(prob: MarginalProblem, *, component_weight: Mapping[tuple[Clique, Clique], float] | None = None,
             rho: float = 2.0, tol: float = 1e-6, max_iterations: int = 2000, total: float | None = None,
             alpha: float = 1.8, check_every: int = 5, balance: float = 1.5,
             lift_tol: float = 1e-2, warm: Mapping[Clique, np.ndarray] | None = None) -> tuple[dict[Clique, np.ndarray], SolveInfo]:
    """:func:`lnn_admm` on flat vectors (:class:`~privcube.postprocess.flat.FlatOperator`): the same
    problem, every iteration two sparse products and elementwise work; over-relaxation ``alpha``
    (Boyd et al. 2011, §3.4.3) and the same stopping test. Starts from the least-squares solution."""
    from privcube.postprocess.flat import FlatOperator

    op = FlatOperator(prob)
    coef_w = coefficients(prob)
    coef_y = coef_w if component_weight is None else {k: component_weight[k] / prob.ratio[k] for k in coef_w}
    down_w = op.down(coef_w)
    y_sums = (op.down(coef_y) if component_weight is not None else down_w) @ op.pack(prob.y)
    mass_y, mass_w = op.mass(coef_y), op.mass(coef_w)
    w = op.cell_weight
    mu = op.up @ op.center(y_sums / mass_y, total)  # weighted least squares: the default warm start
    nu = np.maximum(mu if warm is None else op.pack(warm), 0.0)
    u = np.zeros_like(nu)
    size = max(1.0, abs(float(total))) if total is not None else max(1.0, abs(float(mu.sum())) / len(op.cliques))
    uniform = size / np.concatenate([np.full(prob.y[c].size, float(prob.y[c].size)) for c in op.cliques])
    info = SolveInfo(0, False, math.inf, math.inf, rho)
    inv = 1.0 / (mass_y + rho * mass_w)
    rho_inv, y_inv = rho * inv, y_sums * inv
    for it in range(1, max_iterations + 1):
        t = down_w @ (nu - u)
        t *= rho_inv
        t += y_inv
        mu = op.up @ op.center(t, total, copy=False)
        check = it % check_every == 0 or it == max_iterations
        old = nu.copy() if check else None
        if alpha != 1.0:  # over-relaxation: u += α·μ + (1−α)·ν
            u += (1.0 - alpha) * nu
            u += alpha * mu
        else:
            u += mu
        nu = np.maximum(u, 0.0)
        u -= nu
        if not check:
            continue
        r = math.sqrt(float(np.dot(w, (mu - nu) ** 2)))
        s = rho * math.sqrt(float(np.dot(w, (nu - old) ** 2)))
        info = SolveInfo(it, False, r, s, rho)
        n_norm = math.sqrt(float(np.dot(w, nu * nu)))
        u_norm = rho * math.sqrt(float(np.dot(w, u * u)))
        lift = float(np.max(-mu / uniform))  # the mix with the uniform collection that would lift μ to ≥ 0
        if r <= tol * max(1.0, n_norm) and s <= tol * max(1.0, u_norm) and lift <= lift_tol:
            info.converged = True
            break
        if r > balance * s or s > balance * r:  # residual balancing; u is scaled by 1/ρ
            f = 2.0 if r > balance * s else 0.5
            rho *= f
            u /= f
            inv = 1.0 / (mass_y + rho * mass_w)
            rho_inv, y_inv = rho * inv, y_sums * inv
    return op.unpack(mu), info


def lnn_admm(prob: MarginalProblem, *, component_weight: Mapping[tuple[Clique, Clique], float] | None = None,
             rho: float = 1.0, tol: float = 1e-6, max_iterations: int = 2000, map: Mapper = serial_map,
             start: Mapping[Clique, np.ndarray] | None = None, total: float | None = None,
             warm: Mapping[Clique, np.ndarray] | None = None) -> tuple[dict[Clique, np.ndarray], SolveInfo]:
    """Consistent marginals (non-negative up to the tolerance) minimising the weighted distance to the
    noisy ones; ``component_weight[(c, τ)]`` overrides q_cτ (precision of the τ-component of clique c);
    ``total`` fixes the common total (a hard constraint: without it, clipping noise inflates the total);
    ``warm``: a non-negative starting point for the flat solver (default: the clipped least squares).
    Problems up to :data:`FLAT_MAX_CELLS` cells (and no ``start``) run :func:`lnn_flat` in this process."""
    if start is None and prob.cells <= FLAT_MAX_CELLS:
        return lnn_flat(prob, component_weight=component_weight, tol=tol,
                        max_iterations=max_iterations, total=total, warm=warm)
    q = dict(prob.weight) if component_weight is None else None
    coef_w = coefficients(prob)  # w_c / ∏_{c∖τ} n: the penalty's metric
    coef_y = coef_w if q is not None else {k: component_weight[k] / prob.ratio[k] for k in coef_w}
    parts = chunks(prob)
    y_sums = merge_sums([tau_marginals({c: prob.y[c] for c in ch}, prob.subs, coef_y) for ch in parts])
    mass_y, mass_w = mass(prob, coef_y), mass(prob, coef_w)
    if start is None:
        from privcube.postprocess.consistency import project_consistent

        start = project_consistent(prob, map=map, total=total)
    nu = {c: np.maximum(a, 0.0) for c, a in start.items()}
    u = {c: np.zeros_like(a) for c, a in nu.items()}
    sum_nu = merge_sums([tau_marginals({c: nu[c] for c in ch}, prob.subs, coef_w) for ch in parts])
    sum_u: dict[Clique, np.ndarray] = {t: np.zeros_like(m) for t, m in sum_nu.items()}
    mu: dict[Clique, np.ndarray] = dict(start)
    info = SolveInfo(0, False, math.inf, math.inf, rho)
    for it in range(1, max_iterations + 1):
        sums = {t: y_sums[t] + rho * (sum_nu[t] - sum_u[t]) for t in prob.closure}
        z = residuals(sums, {t: mass_y[t] + rho * mass_w[t] for t in prob.closure})
        if total is not None:
            z[()] = np.asarray(float(total))
        out = map(_admm_chunk, _items(prob, parts, z, nu, u, coef_w))
        r2 = s2 = n2 = u2 = 0.0
        for part in out:
            mu.update(part["mu"])
            nu.update(part["nu"])
            u.update(part["u"])
            r2, s2, n2, u2 = r2 + part["r2"], s2 + part["s2"], n2 + part["n2"], u2 + part["u2"]
        sum_nu = merge_sums([p["sum_nu"] for p in out])
        sum_u = merge_sums([p["sum_u"] for p in out])
        r, s = math.sqrt(r2), rho * math.sqrt(s2)
        info = SolveInfo(it, False, r, s, rho)
        low = min(float(np.min(a)) for a in mu.values())  # the final lift is small only if this is
        size = max(1.0, abs(float(np.sum(next(iter(mu.values()))))))
        if r <= tol * max(1.0, math.sqrt(n2)) and s <= tol * max(1.0, rho * math.sqrt(u2)) and low >= -1e-2 * tol * size:
            info.converged = True
            break
        if it % 10 == 0 and (r > 10 * s or s > 10 * r):  # residual balancing; u is scaled by 1/ρ
            f = 2.0 if r > 10 * s else 0.5
            rho *= f
            u = {c: a / f for c, a in u.items()}
            sum_u = {t: m / f for t, m in sum_u.items()}
    return mu, info


__all__ = ["FLAT_MAX_CELLS", "SolveInfo", "lnn_admm", "lnn_flat"]
