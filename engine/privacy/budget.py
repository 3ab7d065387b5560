"""A privacy budget: pure ε-DP, or zCDP ρ (given directly or from (ε, δ))."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privcube.errors import BudgetError, ConfigError


@dataclass(frozen=True)
class PrivacyBudget:
    """Total privacy budget of a run.

    ``pure`` budgets (ε alone) are spent by Laplace-type mechanisms in ε; otherwise zCDP ``rho`` is
    the currency and ``epsilon``/``delta`` are its tight (ε, δ) reading. For a pure budget ``rho``
    is ε²/2 (ε-DP implies ε²/2-zCDP) so that Gaussian mechanisms may still spend it.
    """

    rho: float
    epsilon: float
    delta: float
    pure: bool = False

    @classmethod
    def from_epsilon_delta(cls, epsilon: float, delta: float) -> PrivacyBudget:
        from privcube.privacy.zcdp import cdp_rho

        _check_epsilon(epsilon)
        _check_delta(delta)
        return cls(cdp_rho(epsilon, delta), float(epsilon), float(delta), False)

    @classmethod
    def from_rho(cls, rho: float, delta: float = 1e-9) -> PrivacyBudget:
        from privcube.privacy.zcdp import cdp_epsilon

        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not math.isfinite(rho) or rho <= 0:
            raise BudgetError(f"privacy parameter rho must be a positive number, got {rho!r}")
        _check_delta(delta)
        return cls(float(rho), cdp_epsilon(rho, delta), float(delta), False)

    @classmethod
    def pure_epsilon(cls, epsilon: float) -> PrivacyBudget:
        _check_epsilon(epsilon)
        return cls(epsilon**2 / 2.0, float(epsilon), 0.0, True)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> PrivacyBudget:
        """Read ``privacy:`` — ``{epsilon}`` (pure), ``{epsilon, delta}`` or ``{rho[, delta]}``."""
        if not isinstance(cfg, Mapping):
            raise BudgetError(f"privacy must be a mapping with epsilon/delta or rho, got {cfg!r}")
        unknown = set(cfg) - {"epsilon", "delta", "rho"}
        if unknown:
            raise BudgetError(f"privacy: unknown key(s) {sorted(unknown)}; use epsilon, delta or rho")
        if "rho" in cfg:
            if "epsilon" in cfg:
                raise BudgetError("privacy: give either rho or epsilon, not both")
            return cls.from_rho(cfg["rho"], cfg.get("delta", 1e-9))
        if "epsilon" not in cfg:
            raise BudgetError("privacy: missing 'epsilon' (or 'rho')")
        if "delta" in cfg:
            return cls.from_epsilon_delta(cfg["epsilon"], cfg["delta"])
        return cls.pure_epsilon(cfg["epsilon"])

    def to_dict(self) -> dict[str, Any]:
        return {"rho": self.rho, "epsilon": self.epsilon, "delta": self.delta, "pure": self.pure}


def refuse_pure_for_gaussian(budget: Any, mechanism: str, alternative: str = "") -> None:
    """ConfigError when ``budget`` asks for pure ε-DP (``privacy: {epsilon}`` alone) from ``mechanism``,
    whose noise is Gaussian: ε-DP implies ε²/2-zCDP, not the converse, so spending ρ = ε²/2 would
    release a weaker guarantee than the one asked for (and report δ = 0). ``alternative`` names another
    way out (e.g. "use noise: laplace, or ")."""
    if getattr(budget, "pure", False):
        eps = budget.epsilon
        raise ConfigError(f"{mechanism}: privacy: {{epsilon: {eps:g}}} alone asks for pure epsilon-DP, which its "
                          f"Gaussian noise cannot give; {alternative}add privacy.delta (e.g. {{epsilon: {eps:g}, "
                          "delta: 1.0e-9}) or give privacy.rho")


def _check_epsilon(epsilon: Any) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon <= 0:
        raise BudgetError(f"privacy parameter epsilon must be a positive number, got {epsilon!r}")


def _check_delta(delta: Any) -> None:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 < delta < 1):
        raise BudgetError(f"privacy parameter delta must lie strictly between 0 and 1, got {delta!r}")
