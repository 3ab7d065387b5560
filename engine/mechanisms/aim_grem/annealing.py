"""Budget annealing (App. F.1, Alg. 7, with the privacy erratum fixed).

The test compares the estimate of the selected clique *after* the round's update with the estimate
*before* it: ‖μ̂_γ(after) − μ̂_γ(before)‖₁ ≤ √(2/π)·σ_t·n_γ. The paper's listing uses the true marginal
there, which would leak private data into the budget schedule; this module never sees true data.
Budgets are tracked as zCDP amounts: selection ρ_sel = ε²/8 and measurement ρ_meas = 1/(2σ²).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privcube.core.errors import BudgetError


@dataclass(frozen=True)
class RoundBudget:
    """Per-round zCDP amounts: ρ_sel (exponential mechanism) and ρ_meas (Gaussian measurements)."""

    rho_select: float
    rho_measure: float
    final: bool = False

    @property
    def epsilon(self) -> float:
        """ε_t of the exponential mechanism (ρ_sel = ε²/8)."""
        return math.sqrt(8.0 * self.rho_select)

    @property
    def sigma2(self) -> float:
        """σ_t² of the round (ρ_meas = 1/(2σ²))."""
        return 1.0 / (2.0 * self.rho_measure)

    @property
    def total(self) -> float:
        """ρ of the whole round."""
        return self.rho_select + self.rho_measure


def initial_budget(rho: float, k: int) -> RoundBudget:
    """First-round amounts: ε = √(0.4ρ/K) and σ² = K/(0.9ρ), i.e. ρ_sel = 0.05ρ/K, ρ_meas = 0.45ρ/K."""
    if k < 1:
        raise BudgetError(f"the number of candidates K must be positive, got {k}")
    return RoundBudget(0.05 * rho / k, 0.45 * rho / k)


def should_anneal(before: np.ndarray, after: np.ndarray, sigma: float) -> bool:
    """True when the selected estimate moved by at most the expected noise L1, √(2/π)·σ·n_γ."""
    before = np.asarray(before, dtype=float)
    after = np.asarray(after, dtype=float)
    if before.shape != after.shape:
        raise BudgetError(f"annealing: estimates before {before.shape} and after {after.shape} differ in shape")
    change = float(np.abs(after - before).sum())
    return change <= math.sqrt(2.0 / math.pi) * sigma * before.size


def next_budget(current: RoundBudget, annealed: bool, remaining: float) -> RoundBudget:
    """Alg. 7: ×4 both amounts when annealed; if fewer than two rounds fit, spend all that remains."""
    nxt = RoundBudget(current.rho_select * 4.0, current.rho_measure * 4.0) if annealed else \
        RoundBudget(current.rho_select, current.rho_measure)
    return final_check(nxt, remaining)


def final_check(budget: RoundBudget, remaining: float) -> RoundBudget:
    """If remaining ≤ 2·(round total), the next round is the last: 10% selection, the rest measurement."""
    if remaining <= 2.0 * budget.total:
        sel = 0.1 * remaining
        return RoundBudget(sel, remaining - sel, final=True)
    return budget


__all__ = ["RoundBudget", "final_check", "initial_budget", "next_budget", "should_anneal"]
