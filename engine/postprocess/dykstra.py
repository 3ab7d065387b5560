"""Dykstra's alternating projections (Boyle & Dykstra 1986) between the consistent subspace (weighted
least squares, closed form in the residual basis) and the non-negative orthant (clip), in the metric
Σ_c w_c‖·‖². Converges to the weighted projection of the noisy marginals onto their intersection;
the consistent iterate is finally lifted to exact non-negativity."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from privcube.postprocess.consistency import Mapper, project_consistent, serial_map
from privcube.postprocess.lnn import SolveInfo
from privcube.postprocess.problem import Clique, MarginalProblem


def _wnorm2(prob: MarginalProblem, a: Mapping[Clique, np.ndarray], b: Mapping[Clique, np.ndarray] | None = None) -> float:
    return sum(prob.weight[c] * float(np.sum((a[c] - (0 if b is None else b[c])) ** 2)) for c in prob.cliques)


def dykstra(prob: MarginalProblem, *, tol: float = 1e-6, max_iterations: int = 2000,
            map: Mapper = serial_map, total: float | None = None) -> tuple[dict[Clique, np.ndarray], SolveInfo]:
    """Consistent marginals (non-negative up to ``tol``) nearest to the noisy ones in the weighted norm;
    ``total`` fixes their common total."""
    x = {c: a.copy() for c, a in prob.y.items()}
    p = {c: np.zeros_like(a) for c, a in x.items()}
    q = {c: np.zeros_like(a) for c, a in x.items()}
    info = SolveInfo(0, False, math.inf, math.inf)
    y = x
    for it in range(1, max_iterations + 1):
        y = project_consistent(prob, {c: x[c] + p[c] for c in prob.cliques}, map=map, total=total)
        p = {c: x[c] + p[c] - y[c] for c in prob.cliques}
        new_x = {c: np.maximum(y[c] + q[c], 0.0) for c in prob.cliques}
        q = {c: y[c] + q[c] - new_x[c] for c in prob.cliques}
        gap = math.sqrt(_wnorm2(prob, y, new_x))
        step = math.sqrt(_wnorm2(prob, new_x, x))
        scale = max(1.0, math.sqrt(_wnorm2(prob, new_x)))
        x = new_x
        info = SolveInfo(it, False, gap, step)
        low = min(float(np.min(a)) for a in y.values())  # the final lift is small only if this is
        size = float(np.sum(next(iter(y.values()))))
        if gap <= tol * scale and step <= tol * scale and low >= -1e-2 * tol * max(1.0, abs(size)):
            info.converged = True
            break
    return y, info


__all__ = ["dykstra"]
