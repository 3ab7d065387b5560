"""The privacy unit: one person, identified by a column, contributing at most ``max_rows`` rows.

``privacy_unit: {id: COLUMN, max_rows: K}`` makes a job private for neighbouring datasets that add or
remove one *person* (all rows sharing an id), not one row. The data are first truncated to at most K rows
per person (``privcube.storage.contribution``), so a person changes at most K rows: every query vector
Q x then changes by at most K times its one-row sensitivity (L1 and L2, by the triangle inequality, with
equality when the K rows fall in one cell). Hence, for the same noise, a Gaussian or exponential-mechanism
release costs K² times its one-row ρ and a Laplace release K times its one-row ε.

Mechanisms are unchanged: they run against the *row-level* budget (ρ/K², or ε/K for pure ε-DP), which
calibrates every noise scale to sensitivity K at the person-level budget, and the ledger they charge is
translated charge by charge into the person-level ledger written to ``ledger.json`` (ρ × K², ε × K).
This is the semantics of Tumult Analytics' ``MaxRowsPerID(K)`` and OpenDP's ``truncate_per_group``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privcube.core.errors import BudgetError, ConfigError
from privcube.core.params import REQUIRED, Param
from privcube.privacy.budget import PrivacyBudget

#: the keys of the ``privacy_unit`` section
UNIT_PARAMS: dict[str, Param] = {
    "id": Param(REQUIRED, "column name", "the column whose equal values are one person (not a schema attribute)"),
    "max_rows": Param(REQUIRED, "int in [1, 1000000]", "rows kept per person (a keyed random choice); the noise "
                                                       "is calibrated to a person changing this many rows"),
}
UNIT_KEYS = set(UNIT_PARAMS)
#: max_rows above this is refused (noise K times that of one row swamps any count); above WARN_MAX_ROWS a run warns
MAX_ROWS_LIMIT = 1_000_000
WARN_MAX_ROWS = 100


@dataclass(frozen=True)
class PrivacyUnit:
    """A person identified by column ``id``, contributing at most ``max_rows`` rows after truncation."""

    id: str
    max_rows: int

    def row_budget(self, budget: PrivacyBudget) -> PrivacyBudget:
        """The budget mechanisms calibrate to: ρ/K² (zCDP budgets) or ε/K (pure ε-DP budgets)."""
        k = self.max_rows
        if budget.pure:
            return PrivacyBudget.pure_epsilon(budget.epsilon / k)
        return PrivacyBudget.from_rho(budget.rho / (k * k), budget.delta)

    def person_ledger(self, row_ledger: Any, budget: PrivacyBudget) -> Any:
        """The person-level PrivacyLedger for ``budget``: every row-level charge replayed at K² ρ (or K ε for
        a pure-ε charge), with the row-level amount kept in the charge's details."""
        from privcube.privacy.ledger import PrivacyLedger

        k = self.max_rows
        out = PrivacyLedger(budget)
        out.noise = row_ledger.noise
        for c in row_ledger.charges:
            details = {key: v for key, v in c.items() if key not in ("label", "rho", "epsilon", "delta")}
            if float(c.get("delta") or 0.0) != 0.0:
                raise BudgetError(f"privacy_unit: charge {c['label']!r} is an (epsilon, delta) release, which "
                                  "cannot be rescaled to a person; use a zCDP calibration")
            if c.get("epsilon") is not None and budget.pure:
                out.charge(c["label"], epsilon=k * float(c["epsilon"]), row_level_epsilon=c["epsilon"], **details)
            else:
                out.charge(c["label"], rho=k * k * float(c["rho"]), row_level_rho=c["rho"], **details)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "max_rows": self.max_rows,
                "neighbours": "add or remove one person (all rows sharing an id)",
                "truncation": "at most max_rows rows per id, chosen by a keyed hash (the run's noise key)",
                "scaling": f"rho x {self.max_rows ** 2}, pure epsilon x {self.max_rows}"}


def parse_privacy_unit(spec: Any, mechanism: str, params: Mapping[str, Any]) -> PrivacyUnit | None:
    """``privacy_unit: {id: COLUMN, max_rows: K}`` (top level of the job config), checked."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ConfigError(f"privacy_unit: expected {{id: COLUMN, max_rows: K}}, got a {type(spec).__name__}")
    bad = set(spec) - UNIT_KEYS
    if bad:
        raise ConfigError(f"privacy_unit: unknown key(s) {sorted(bad)}; known: {sorted(UNIT_KEYS)}")
    col, k = spec.get("id"), spec.get("max_rows")
    if not isinstance(col, str) or not col.strip():
        raise ConfigError(f"privacy_unit.id must name the column identifying a person, got {col!r}")
    import numpy as np

    if isinstance(k, (float, np.floating)) and not isinstance(k, bool) and float(k).is_integer() and 1 <= k:
        raise ConfigError(f"privacy_unit.max_rows must be a whole number written as an integer, got {float(k):g} (a "
                          f"float); write {int(k)}" + (f" or, better, a bound people really reach (at most "
                                                       f"{MAX_ROWS_LIMIT:,})" if k > MAX_ROWS_LIMIT else ""))
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"privacy_unit.max_rows must be a positive integer, got "
                          f"{k.item() if isinstance(k, np.generic) else k!r}")
    k = int(k)
    if k > MAX_ROWS_LIMIT:
        raise ConfigError(f"privacy_unit.max_rows = {k:,} is beyond any useful bound (at most {MAX_ROWS_LIMIT:,}): "
                          f"the noise is calibrated to one person changing {k:,} rows, so every answer's noise is "
                          f"{k:,} times that of one row; set it to the number of rows people really contribute "
                          "(rows beyond it are dropped)")
    if mechanism == "relational":
        raise ConfigError("privacy_unit is not supported by mechanism 'relational' (its neighbours change one "
                          "row and its links); remove privacy_unit or use a single-table mechanism")
    if params.get("calibration") == "analytic":
        raise ConfigError(f"privacy_unit: mechanism {mechanism!r} with calibration: analytic spends an "
                          "(epsilon, delta) pair that does not rescale to K rows; use calibration: zcdp")
    if params.get("neighbours") == "substitution":
        raise ConfigError(f"privacy_unit: its neighbours add or remove one person; mechanism {mechanism!r} with "
                          "neighbours: substitution accounts for changing one row; remove one of the two")
    return PrivacyUnit(col, k)


def unit_warning(unit: PrivacyUnit | None, rmse: Any = None) -> list[str]:
    """A one-line warning when ``max_rows`` is large (above ``WARN_MAX_ROWS``): the noise is ``max_rows`` times
    that of one row; ``rmse`` is the plan's expected RMSE (data-independent), stated when known."""
    if unit is None or unit.max_rows <= WARN_MAX_ROWS:
        return []
    k = unit.max_rows
    shown = f"; the plan's expected RMSE per answer is {float(rmse):.3g}" if isinstance(rmse, (int, float)) else ""
    return [f"privacy_unit.max_rows = {k:,} is large: the noise is calibrated to one person changing {k:,} rows "
            f"({k:,} times the noise of one row){shown}; set it to the number of rows people really contribute "
            "(rows beyond it are dropped)"]


__all__ = ["MAX_ROWS_LIMIT", "PrivacyUnit", "WARN_MAX_ROWS", "parse_privacy_unit", "unit_warning"]
