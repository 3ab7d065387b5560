"""Checkpointable loop state of AIM+GReM: round counter, next budget, trace, residuals, estimates.

All noise is keyed by (round, clique), so the round number is the whole RNG position. A checkpoint is
``{"meta": JSON, "arrays": {name: ndarray}}``: residual estimates ``z.<i>`` (i indexes the tracked
residual list), the precision vector ``lam``, and the kept marginal estimates ``mu.<j>`` (stored so a
resumed run continues from bit-identical estimates instead of a re-summed reconstruction).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.errors import CheckpointError
from privcube.mechanisms.aim_grem.annealing import RoundBudget
from privcube.mechanisms.aim_grem.grem import GReMState


def normalise(obj: Any) -> Any:
    """JSON round trip (tuples become lists) so identities compare equal after a reload."""
    return json.loads(json.dumps(obj, default=lambda o: o.item() if isinstance(o, np.generic) else list(o)))


@dataclass
class AIMState:
    """Loop bookkeeping of a run: last completed round (0 = initialisation) and the next round's budget."""

    round: int
    budget: RoundBudget
    done: bool = False
    rho_used: float = 0.0
    rho_total: float = 0.0
    trace: list[dict[str, Any]] = field(default_factory=list)
    init: dict[str, Any] = field(default_factory=dict)

    def to_checkpoint(self, grem: GReMState, ledger: Any, identity: Mapping[str, Any]) -> dict[str, Any]:
        """The checkpoint payload of this state plus the GReM arrays and the ledger record."""
        arrays: dict[str, np.ndarray] = {f"z.{i}": grem.z[t] for i, t in enumerate(grem.residuals)}
        arrays["lam"] = np.array([grem.lam[t] for t in grem.residuals], dtype=float)
        mu = grem.table.snapshot()
        for j, c in enumerate(grem.table.cliques):
            arrays[f"mu.{j}"] = mu[c]
        meta = {
            "round": self.round,
            "budget": {"rho_select": self.budget.rho_select, "rho_measure": self.budget.rho_measure,
                       "final": self.budget.final},
            "done": self.done, "rho_used": self.rho_used, "rho_total": self.rho_total,
            "trace": self.trace, "init": self.init,
            "identity": normalise(identity),
            "residuals": [list(t) for t in grem.residuals],
            "kept": [list(c) for c in grem.table.cliques],
            "ledger": ledger.to_dict() if ledger is not None else None,
        }
        return {"meta": normalise(meta), "arrays": arrays}

    @classmethod
    def from_checkpoint(cls, payload: Mapping[str, Any], grem: GReMState, identity: Mapping[str, Any]) -> AIMState:
        """Restore ``grem`` (residuals, precisions, estimates) and return the loop state; validates identity."""
        meta, arrays = payload["meta"], payload["arrays"]
        try:
            if meta["identity"] != normalise(identity):
                raise CheckpointError(
                    "checkpoint does not match this run (domain, workload, budget, options or seed differ)")
            if meta["residuals"] != [list(t) for t in grem.residuals] or meta["kept"] != [list(c) for c in grem.table.cliques]:
                raise CheckpointError("checkpoint tracks different residuals or cliques than this run")
            lam = np.asarray(arrays["lam"], dtype=float)
            if lam.shape != (len(grem.residuals),):
                raise CheckpointError(f"checkpoint precision vector has shape {lam.shape}")
            for i, t in enumerate(grem.residuals):
                z = np.asarray(arrays[f"z.{i}"], dtype=float)
                if z.shape != grem.z[t].shape:
                    raise CheckpointError(f"checkpoint residual {list(t)} has shape {z.shape}, expected {grem.z[t].shape}")
                grem.z[t] = z.copy()
                grem.lam[t] = float(lam[i])
            grem.table.load({c: arrays[f"mu.{j}"] for j, c in enumerate(grem.table.cliques)})
            b = meta["budget"]
            return cls(round=int(meta["round"]),
                       budget=RoundBudget(float(b["rho_select"]), float(b["rho_measure"]), bool(b["final"])),
                       done=bool(meta["done"]), rho_used=float(meta["rho_used"]), rho_total=float(meta["rho_total"]),
                       trace=list(meta["trace"]), init=dict(meta["init"]))
        except KeyError as e:
            raise CheckpointError(f"checkpoint lacks entry {e}") from None


__all__ = ["AIMState", "normalise"]
