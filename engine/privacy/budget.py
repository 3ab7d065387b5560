"""A privacy budget: pure ε-DP, or zCDP ρ (given directly or from (ε, δ))."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privcube.core.errors import BudgetError, ConfigError
from privcube.core.params import Param

#: the keys of a single-table job's ``privacy`` section
PRIVACY_PARAMS: dict[str, Param] = {
    "epsilon": Param(None, "number > 0", "epsilon of (epsilon, delta)-DP; alone: pure epsilon-DP (Laplace)"),
    "delta": Param(None, "number in [0, 0.1)", "delta of (epsilon, delta)-DP (above 1e-3 a run warns); with rho: "
                                               "the delta at which rho is read (default 1e-9)"),
    "rho": Param(None, "number > 0", "the budget as zCDP rho, instead of epsilon"),
    "budget_file": Param(None, "path", "a dataset budget file (privcube budget init) this run is charged to"),
}


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

        epsilon, delta = _check_epsilon(epsilon), _check_delta(delta)
        return cls(cdp_rho(epsilon, delta), epsilon, delta, False)

    @classmethod
    def from_rho(cls, rho: float, delta: float = 1e-9) -> PrivacyBudget:
        from privcube.privacy.zcdp import cdp_epsilon

        if not _is_real(rho) or not math.isfinite(float(rho)) or float(rho) <= 0:
            raise BudgetError(f"privacy parameter rho must be a positive number, got {_show(rho)}")
        rho, delta = float(rho), _check_delta(delta)
        if rho > MAX_RHO:  # ρ -> ε overflows; far beyond any privacy (huge ρ is used for noiseless checks)
            raise BudgetError(f"privacy parameter rho = {rho:g} is too large (at most {MAX_RHO:g}): it gives no "
                              "meaningful privacy and cannot be converted to (epsilon, delta)")
        return cls(rho, cdp_epsilon(rho, delta), delta, False)

    @classmethod
    def pure_epsilon(cls, epsilon: float) -> PrivacyBudget:
        epsilon = _check_epsilon(epsilon)
        return cls(epsilon**2 / 2.0, epsilon, 0.0, True)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> PrivacyBudget:
        """Read ``privacy:`` — ``{epsilon}`` (pure), ``{epsilon, delta}`` or ``{rho[, delta]}``."""
        if not isinstance(cfg, Mapping):
            raise BudgetError("privacy must be a mapping with epsilon/delta or rho, got "
                              f"{type(cfg).__name__}")
        unknown = set(cfg) - set(PRIVACY_PARAMS)  # budget_file: read by privcube.dataset_budget
        if unknown:
            raise BudgetError(f"privacy: unknown key(s) {sorted(unknown)}; use epsilon, delta or rho (and "
                              "budget_file)")
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


def rho_of(budget: Any, mechanism: str) -> float:
    """The zCDP ρ a Gaussian ``mechanism`` spends from ``budget`` (a :class:`PrivacyBudget`, or a bare ρ):
    the one budget -> ρ conversion of the batch mechanisms. A pure-ε budget is refused
    (:func:`refuse_pure_for_gaussian`); a ρ that is not a positive finite number is a BudgetError."""
    refuse_pure_for_gaussian(budget, mechanism)
    rho = getattr(budget, "rho", budget)
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not math.isfinite(rho) or rho <= 0:
        raise BudgetError(f"{mechanism}: budget rho must be a positive number, got {rho!r}")
    return float(rho)


#: largest ε accepted with a δ: beyond it (ε, δ) -> ρ conversion overflows and no privacy is left anyway
MAX_EPSILON = 1e6
#: largest ρ accepted: the ρ -> (ε, δ) reading overflows beyond about 1e300
MAX_RHO = 1e15


def _is_real(x: Any) -> bool:
    """A real number that is not a bool: Python int/float and numpy integer/floating scalars (0-d)."""
    import numbers

    import numpy as np

    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, np.ndarray):
        return x.ndim == 0 and x.dtype.kind in "iuf"
    return isinstance(x, numbers.Real)


def _show(x: Any) -> str:
    """A parameter for an error line: its value if it is a short scalar, else its type only."""
    if isinstance(x, (int, float, str, bool)) or _is_real(x):
        text = repr(x.item() if hasattr(x, "item") else x)
        if len(text) <= 40:
            return text
    return f"a {type(x).__name__}"


def _check_epsilon(epsilon: Any) -> float:
    if not _is_real(epsilon) or not math.isfinite(float(epsilon)) or float(epsilon) <= 0:
        raise BudgetError(f"privacy parameter epsilon must be a positive number, got {_show(epsilon)}")
    if float(epsilon) > MAX_EPSILON:  # the zCDP conversion overflows long before; name the parameter at fault
        raise BudgetError(f"privacy parameter epsilon = {float(epsilon):g} is too large (at most {MAX_EPSILON:g}): "
                          "it gives no meaningful privacy and cannot be converted to zCDP")
    return float(epsilon)


#: δ at or above this is refused: δ is the probability that the guarantee fails outright (a δ of 1/n allows
#: releasing one whole record), and a public rule cannot know n, so any δ this large is a mistake
MAX_DELTA = 0.1
#: δ above this is accepted with a warning (it should be far below 1 / the number of records)
WARN_DELTA = 1e-3


def _check_delta(delta: Any) -> float:
    if not _is_real(delta) or not (0 < float(delta) < 1):
        raise BudgetError(f"privacy parameter delta must lie strictly between 0 and 1, got {_show(delta)}")
    if float(delta) >= MAX_DELTA:
        raise BudgetError(f"privacy parameter delta = {float(delta):g} is not small: delta is the probability that "
                          f"the guarantee fails outright, and must be far below 1 / the number of records "
                          f"(e.g. 1e-9); privcube refuses delta >= {MAX_DELTA:g}")
    return float(delta)


def budget_warnings(budget: Any, where: str = "privacy") -> list[str]:
    """One-line warnings about a budget that is valid but weak (public rules only): a δ above ``WARN_DELTA``."""
    delta = float(getattr(budget, "delta", 0.0) or 0.0)
    if delta > WARN_DELTA:
        return [f"{where}.delta = {delta:g} is large: delta is the probability that the guarantee fails outright "
                f"and should be far below 1 / the number of records (a delta of 1/n allows releasing one record "
                f"whole); privcube warns above {WARN_DELTA:g} and refuses {MAX_DELTA:g} or more"]
    return []
