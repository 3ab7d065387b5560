"""The privacy ledger: every release is charged here, and nothing may spend past the budget.

Its ``to_dict`` is the content of ``ledger.json`` in every run directory::

    {"budget": {"rho", "epsilon", "delta"}, "spent": {"rho", "epsilon", "delta"},
     "charges": [{"label", "rho", "epsilon", "delta", ...details}], "noise": {"seeded", "seed"}}

zCDP budgets are spent in ρ (fully adaptive composition adds ρ's); a pure ε charge there costs ε²/2.
Pure budgets are spent in ε (basic composition); they also accept ρ charges against ``budget.rho``
(= ε²/2), in which case the run's guarantee weakens to ρ-zCDP (see :attr:`PrivacyLedger.guarantee`).
"""
from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privcube.core.errors import BudgetError
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.noise import NoiseSource
from privcube.privacy.zcdp import cdp_epsilon, is_number

#: Relative slack for float round-off when comparing spent against the budget, and no more.
REL_TOL = 1e-9

_RESERVED = {"label", "rho", "epsilon", "delta"}


def _jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and paths in charge details to plain JSON types."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [_jsonable(v) for v in items]
    if isinstance(value, Path):
        return str(value)
    return value


def _amount(value: Any, name: str, label: str) -> float:
    """Validate a charged amount (finite, non-negative), naming the parameter and the charge."""
    if not is_number(value) or not math.isfinite(float(value)) or float(value) < 0:
        raise BudgetError(f"charge {label!r}: {name} must be a non-negative finite number, got {value!r}")
    return float(value)


class PrivacyLedger:
    """Accountant of one run: records each release and refuses any that would exceed the budget."""

    def __init__(self, budget: PrivacyBudget, *, noise: NoiseSource | Mapping[str, Any] | None = None) -> None:
        """Start an empty ledger for ``budget``; ``noise`` (source or its public record) is reported too."""
        if not isinstance(budget, PrivacyBudget):
            raise BudgetError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        self.budget = budget
        self._charges: list[dict[str, Any]] = []
        self._rho = 0.0
        self._eps = 0.0  # pure-DP epsilon spent (pure budgets only)
        self._n_rho_on_pure = 0
        self._approx: tuple[float, float] | None = None  # a one-shot (epsilon, delta) release
        self._lock = threading.Lock()
        self.noise: dict[str, Any] | None = None
        self.set_noise(noise)

    def set_noise(self, noise: NoiseSource | Mapping[str, Any] | None) -> None:
        """Record the run's noise source (only its public part: seeded flag and seed)."""
        if noise is None:
            self.noise = None
        elif isinstance(noise, NoiseSource):
            self.noise = noise.to_dict()
        elif isinstance(noise, Mapping):
            self.noise = {"seeded": bool(noise.get("seeded", False)), "seed": noise.get("seed")}
        else:
            raise BudgetError(f"noise must be a NoiseSource or its to_dict() record, got {type(noise).__name__}")

    # ----------------------------------------------------------------------------------- charging
    def charge(
        self,
        label: str,
        *,
        rho: float | None = None,
        epsilon: float | None = None,
        delta: float = 0.0,
        **details: Any,
    ) -> None:
        """Record one release costing ``rho`` (zCDP) or ``epsilon`` (pure DP); refuse and record nothing if over budget."""
        if not isinstance(label, str) or not label:
            raise BudgetError(f"charge label must be a non-empty string, got {label!r}")
        if (rho is None) == (epsilon is None):
            raise BudgetError(f"charge {label!r}: give exactly one of rho or epsilon")
        d = _amount(delta, "delta", label)
        b = self.budget
        if d != 0.0:
            self._charge_approx(label, rho, epsilon, d, details)
            return
        with self._lock:
            if rho is not None:
                r = _amount(rho, "rho", label)
                e_pure = 0.0
                entry: dict[str, Any] = {"label": label, "rho": r, "epsilon": None, "delta": 0.0}
            else:
                e = _amount(epsilon, "epsilon", label)
                r = e * e / 2.0
                e_pure = e if b.pure else 0.0
                entry = {"label": label, "rho": r, "epsilon": e, "delta": 0.0}
            new_rho = self._rho + r
            new_eps = self._eps + e_pure
            if b.pure and new_eps > b.epsilon * (1.0 + REL_TOL):
                raise BudgetError(
                    f"charge {label!r} of epsilon={e_pure:.6g} exceeds the budget: "
                    f"remaining epsilon={max(b.epsilon - self._eps, 0.0):.6g} of {b.epsilon:.6g}"
                )
            if new_rho > b.rho * (1.0 + REL_TOL):
                raise BudgetError(
                    f"charge {label!r} of rho={r:.6g} exceeds the budget: "
                    f"remaining rho={max(b.rho - self._rho, 0.0):.6g} of {b.rho:.6g}"
                )
            for k in details:
                if k in _RESERVED:  # pragma: no cover - Python already forbids these as kwargs
                    raise BudgetError(f"charge {label!r}: detail key {k!r} is reserved")
            entry.update({k: _jsonable(v) for k, v in details.items()})
            self._rho = new_rho
            self._eps = new_eps
            if b.pure and rho is not None:
                self._n_rho_on_pure += 1
            self._charges.append(entry)

    def _charge_approx(self, label: str, rho: Any, epsilon: Any, d: float, details: dict[str, Any]) -> None:
        """A one-shot (ε, δ) release (e.g. the analytic Gaussian mechanism) that uses the whole budget.

        (ε, δ) guarantees do not compose tightly with zCDP, so such a charge is accepted only as the
        run's single release, within the budget's (ε, δ); it consumes all of ρ, so nothing else fits.
        """
        b = self.budget
        if epsilon is None or rho is not None:
            raise BudgetError(f"charge {label!r}: an (epsilon, delta) charge needs epsilon (not rho)")
        e = _amount(epsilon, "epsilon", label)
        with self._lock:
            if b.pure:
                raise BudgetError(f"charge {label!r}: delta={d:.3g} > 0 but the budget is pure epsilon-DP")
            if self._charges:
                raise BudgetError(f"charge {label!r}: an (epsilon, delta) release must be the run's only "
                                  f"charge; {len(self._charges)} already recorded")
            if e > b.epsilon * (1.0 + REL_TOL) or d > b.delta * (1.0 + REL_TOL):
                raise BudgetError(f"charge {label!r} of (epsilon={e:.6g}, delta={d:.3g}) exceeds the budget "
                                  f"(epsilon={b.epsilon:.6g}, delta={b.delta:.3g})")
            entry: dict[str, Any] = {"label": label, "rho": b.rho, "epsilon": e, "delta": d}
            entry.update({k: _jsonable(v) for k, v in details.items()})
            self._rho = b.rho
            self._approx = (e, d)
            self._charges.append(entry)

    # ---------------------------------------------------------------------------------- reading
    @property
    def guarantee(self) -> str:
        """'pure' while a pure budget has only ε charges, else 'zcdp'."""
        return "pure" if self.budget.pure and self._n_rho_on_pure == 0 else "zcdp"

    @property
    def spent_rho(self) -> float:
        """Total ρ spent (pure ε charges counted as ε²/2)."""
        return self._rho

    @property
    def spent(self) -> dict[str, float]:
        """Spent budget as {rho, epsilon, delta}; for zCDP budgets ε is the tight reading at budget δ."""
        b = self.budget
        if b.pure:
            return {"rho": self._rho, "epsilon": self._eps, "delta": 0.0}
        if self._approx is not None:
            return {"rho": self._rho, "epsilon": self._approx[0], "delta": self._approx[1]}
        if self._rho == 0.0:
            return {"rho": 0.0, "epsilon": 0.0, "delta": 0.0}
        eps = cdp_epsilon(self._rho, b.delta)
        if eps > b.epsilon and math.fsum([*(c["rho"] for c in self._charges), -b.rho]) <= 0.0:  # exact sign
            # ρ spent ≤ the budget's ρ, which is (ε, δ)-DP at the budget's ε by construction (cdp_rho rounds
            # down, cdp_epsilon rounds up): the excess is the bisection's tolerance, not privacy spent
            eps = b.epsilon
        return {"rho": self._rho, "epsilon": eps, "delta": b.delta}

    @property
    def remaining_rho(self) -> float:
        """ρ still available (never negative)."""
        return max(self.budget.rho - self._rho, 0.0)

    @property
    def remaining_epsilon(self) -> float:
        """ε still available: pure ε left, or budget ε minus the (ε, δ) reading of ρ spent."""
        if self.budget.pure:
            return max(self.budget.epsilon - self._eps, 0.0)
        return max(self.budget.epsilon - self.spent["epsilon"], 0.0)

    @property
    def charges(self) -> list[dict[str, Any]]:
        """Copies of the recorded charges, in order."""
        return [dict(c) for c in self._charges]

    # ------------------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """The ledger.json layout: budget, spent, charges and (if known) the noise record."""
        b = self.budget
        out: dict[str, Any] = {
            "budget": {"rho": b.rho, "epsilon": b.epsilon, "delta": b.delta},
            "spent": self.spent,
            "charges": self.charges,
        }
        if self.noise is not None:
            out["noise"] = dict(self.noise)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyLedger:
        """Rebuild a ledger from :meth:`to_dict` output (a pure budget is the one with delta = 0)."""
        try:
            bd = data["budget"]
            rho, eps, delta = float(bd["rho"]), float(bd["epsilon"]), float(bd["delta"])
            charges = list(data.get("charges", []))
        except (KeyError, TypeError, ValueError) as exc:
            raise BudgetError(f"ledger: malformed record, missing or bad key {exc}") from exc
        budget = PrivacyBudget(rho, eps, delta, pure=(delta == 0.0))
        ledger = cls(budget, noise=data.get("noise"))
        ledger.replay(charges)
        return ledger

    def replay(self, charges: Any) -> None:
        """Charge again, in order, the charges a saved ledger records (``to_dict()["charges"]``): each in the
        unit it was made in ((ε, δ), pure ε, or ρ), so the replayed ledger reads exactly as the saved one."""
        for c in charges:
            c = dict(c)
            label = c.pop("label")
            r, e = c.pop("rho"), c.pop("epsilon", None)
            d = c.pop("delta", 0.0) or 0.0
            if d:
                self.charge(label, epsilon=e, delta=d, **c)
            elif e is not None:
                self.charge(label, epsilon=e, **c)
            else:
                self.charge(label, rho=r, **c)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ledger.json atomically: a temp file in the same directory, then os.replace."""
        from privcube.core.atomic import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PrivacyLedger:
        """Read a ledger.json written by :meth:`save`."""
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise BudgetError(f"ledger file {str(path)!r} cannot be read: {exc}") from exc
        return cls.from_dict(data)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the lock."""
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore and recreate the lock."""
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """Budget and spent ρ at a glance."""
        return f"PrivacyLedger(rho {self._rho:.6g}/{self.budget.rho:.6g}, {len(self._charges)} charges)"


__all__ = ["PrivacyLedger", "REL_TOL"]
