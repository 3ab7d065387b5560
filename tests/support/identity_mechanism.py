"""A test plug-in mechanism: each marginal of the workload measured once with Gaussian noise.

The Gaussian mechanism on a marginal (L2 sensitivity 1 under add/remove-one-row) at ρ_g = ρ / groups is
ρ_g-zCDP with σ² = 1 / (2 ρ_g); the groups compose to ρ. It is a whole mechanism in one module, registered
by one line (``privcube.mechanisms.REGISTRY["gaussian-identity"] = "identity_mechanism:GaussianIdentity"``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcube.core.context import RunContext
from privcube.core.errors import ConfigError
from privcube.core.oracle import MarginalOracle
from privcube.core.workload import Workload
from privcube.mechanisms.base import GroupAnswer, Mechanism, MechanismResult, PlanSummary


class GaussianIdentity(Mechanism):
    """Every marginal group measured directly, the budget split evenly over the groups."""

    name = "gaussian-identity"
    PARAMS = {}
    INTEGER_MEASUREMENTS = True

    def _sigma(self, workload: Workload, budget: Any) -> float:
        if any(not g.is_marginal for g in workload):
            raise ConfigError(f"mechanism {self.name!r} answers marginal groups only")
        return math.sqrt(len(workload) / (2.0 * budget.rho))

    def plan(self, workload: Workload, budget: Any) -> PlanSummary:
        sigma = self._sigma(workload, budget)
        groups = [{"attributes": list(g.attributes), "rmse": sigma} for g in workload]
        return PlanSummary(self.name, sigma, {"rho": budget.rho}, groups)

    def run(self, oracle: MarginalOracle, workload: Workload, budget: Any, ledger: Any, noise: Any,
            context: RunContext | None = None) -> MechanismResult:
        sigma = self._sigma(workload, budget)
        exact = oracle.marginals([tuple(g.attributes) for g in workload])
        answers = []
        for i, g in enumerate(workload):
            ledger.charge(f"{self.name}:{'-'.join(g.attributes)}", rho=budget.rho / len(workload))
            y = noise.add_gaussian((self.name, i), np.asarray(exact[tuple(g.attributes)], dtype=float), sigma)
            answers.append(GroupAnswer(g, y.reshape(-1), np.full(y.size, sigma**2), noise="gaussian"))
        return MechanismResult(answers, report={"sigma": sigma})
