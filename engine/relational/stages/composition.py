"""Budget composition of a relational run: the tables' budgets and the links budget add up (zCDP).

Each table's stage-1 synthesis spends its own budget under a prefixed ledger label and a namespaced
noise stream; the links stage spends ``privacy.links``. ρ and δ add (sequential composition); the
run's ledger enforces the total.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from privcube.core.errors import BudgetError, CheckpointError
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.noise import NoiseSource
from privcube.privacy.zcdp import cdp_epsilon


def as_budget(b: Any, what: str) -> PrivacyBudget:
    """A PrivacyBudget from a budget or a ``{epsilon, delta}`` / ``{rho}`` mapping (BudgetError naming ``what``)."""
    if isinstance(b, PrivacyBudget):
        return b
    if isinstance(b, Mapping):
        try:
            return PrivacyBudget.from_config(b)
        except BudgetError as e:
            raise BudgetError(f"{what}: {e}") from None
    raise BudgetError(f"{what}: expected a budget {{epsilon, delta}} or {{rho}}, got {b!r}")


def compose_budgets(budgets: Mapping[str, Any], tables: list[str] | None = None) -> PrivacyBudget:
    """Sequential zCDP composition of the tables' budgets and the links budget (ρ and δ add)."""
    if not isinstance(budgets, Mapping) or "links" not in budgets:
        raise BudgetError("privacy budgets must be {tables: {name: budget}, links: budget}")
    parts = [as_budget(budgets["links"], "privacy.links")]
    tb = budgets.get("tables") or {}
    for name in (tables if tables is not None else list(tb)):
        if name not in tb:
            raise BudgetError(f"privacy.tables: no budget for table {name!r}")
        parts.append(as_budget(tb[name], f"privacy.tables.{name}"))
    rho = sum(p.rho for p in parts)
    delta = sum(p.delta for p in parts)
    if delta <= 0:
        delta = 1e-9
        return PrivacyBudget(rho, cdp_epsilon(rho, delta), delta, False)
    # basic (ε, δ) composition: each part is (ε_i, δ_i)-DP, so the whole is (Σε_i, Σδ_i)-DP; the ρ's add
    # too (zCDP composition), and the ledger enforces ρ. The tighter reading cdp_epsilon(Σρ, Σδ) ≤ Σε_i.
    eps = sum(p.epsilon if p.delta > 0 else cdp_epsilon(p.rho, delta) for p in parts)
    return PrivacyBudget(rho, float(eps), min(delta, 0.5), False)


class PrefixLedger:
    """Forwards charges to the run's ledger with a prefixed label."""

    def __init__(self, ledger: Any, prefix: str) -> None:
        self.ledger, self.prefix = ledger, prefix

    def charge(self, label: str, **kw: Any) -> None:
        """Charge ``prefix:label``."""
        self.ledger.charge(f"{self.prefix}:{label}", **kw)


class PrefixNoise:
    """A view of the noise source whose keys are namespaced (distinct tables never share noise).

    Every draw of the source (generator, gaussian/laplace/gumbel, add_gaussian/add_laplace releases)
    is forwarded with the prefixed key; other attributes (``seeded``, ``to_dict``, …) are the source's.
    """

    def __init__(self, noise: NoiseSource, prefix: tuple) -> None:
        self.noise, self.prefix = noise, prefix

    def _key(self, key: Any) -> tuple:
        return (*self.prefix, *(tuple(key) if isinstance(key, (tuple, list)) else (key,)))

    def generator(self, *key: Any) -> np.random.Generator:
        """Stream (*prefix, *key)."""
        return self.noise.generator(*self.prefix, *key)

    def gaussian(self, key: Any, shape: Any, sigma: float) -> np.ndarray:
        """Gaussian noise on the namespaced key."""
        return self.noise.gaussian(self._key(key), shape, sigma)

    def laplace(self, key: Any, shape: Any, scale: float) -> np.ndarray:
        """Laplace noise on the namespaced key."""
        return self.noise.laplace(self._key(key), shape, scale)

    def gumbel(self, key: Any, shape: Any) -> np.ndarray:
        """Gumbel draws on the namespaced key."""
        return self.noise.gumbel(self._key(key), shape)

    def add_gaussian(self, key: Any, values: Any, sigma: float) -> np.ndarray:
        """A Gaussian release of ``values`` on the namespaced key (the source's own checks apply)."""
        return self.noise.add_gaussian(self._key(key), values, sigma)

    def add_laplace(self, key: Any, values: Any, scale: float) -> np.ndarray:
        """A Laplace release of ``values`` on the namespaced key."""
        return self.noise.add_laplace(self._key(key), values, scale)

    def __getattr__(self, name: str) -> Any:
        """Anything else (``seeded``, ``to_dict``, …) from the wrapped source."""
        if name in ("noise", "prefix"):
            raise AttributeError(name)
        return getattr(self.noise, name)


def restore_ledger(ledger: Any, saved: Mapping[str, Any] | None) -> None:
    """Bring a fresh ledger to a checkpoint's charges (replayed in order; nothing is charged twice)."""
    if not isinstance(saved, Mapping):
        raise CheckpointError("relational checkpoint has no ledger record")
    if ledger.charges:
        raise CheckpointError("resume: the ledger already holds charges; it must start empty")
    ledger.replay(saved.get("charges", []))


__all__ = ["as_budget", "compose_budgets", "PrefixLedger", "PrefixNoise", "restore_ledger"]
