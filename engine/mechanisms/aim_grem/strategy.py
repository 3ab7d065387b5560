"""Adaptive or measure-all: a data-independent test from public quantities only.

Measuring the whole workload once with ResidualPlanner (RP) has a known expected error: per workload
marginal γ, E‖noise‖₁ = √(2/π)·σ_γ·n_γ with σ_γ² RP's planned cell variance. Divided by the released
(noisy) total N̂, the mean over the workload, ``e_rp``, is the error RP will have whatever the data.
Adaptivity can only win by leaving marginals unmeasured (or measuring them with more noise each) and
estimating them from the others; when RP's own error is already small against the total
(``e_rp ≤ threshold``) there is little to gain and the model bias of unmeasured marginals can only
lose, so measure-all is suggested. The test reads domain sizes, the budget, the workload and N̂ (a
release that was paid for): never the private data. It is reported, and only acted on when the user
sets ``strategy: measure-all``; ``auto-suggest`` runs adaptively and says which it would choose.
"""
from __future__ import annotations

import math
from typing import Any

from privcube.core.workload import Workload

STRATEGIES = ("adaptive", "measure-all", "auto-suggest")
SELECTION_THRESHOLD = 0.02  # selection_on: auto scores measured estimates at or below this (nltcs eps >= 1)
THRESHOLD = 0.1  # calibrated on nltcs/adult15 (benchmarks/aim_vs_pgm.py); see README aim-grem lines


def measure_all_test(workload: Workload, rho: float, total: float, threshold: float = THRESHOLD) -> dict[str, Any]:
    """RP's expected mean L1 error / N̂ over the workload at budget ρ, and the suggestion it implies."""
    from privcube.mechanisms.residual_planner import ResidualPlanner

    plan = ResidualPlanner().optimize(workload, float(rho))
    domain = workload.domain
    errs = []
    for g in workload.groups:
        gamma = domain.canonical(g.attributes)
        errs.append(math.sqrt(2.0 / math.pi) * math.sqrt(plan.cell_variance(gamma)) * domain.size(gamma))
    n_hat = max(float(total), 1.0)
    e_rp = sum(errs) / max(len(errs), 1) / n_hat
    return {
        "measure_all_expected_error": e_rp,
        "released_total": float(total),
        "threshold": float(threshold),
        "suggestion": "measure-all" if e_rp <= threshold else "adaptive",
        "basis": "public quantities only: domain sizes, workload, budget rho and the released (noisy) total; "
                 "expected error = mean over workload marginals of sqrt(2/pi)*sigma_cell*cells / total "
                 "for ResidualPlanner measuring the whole workload",
    }


__all__ = ["SELECTION_THRESHOLD", "STRATEGIES", "THRESHOLD", "measure_all_test"]
