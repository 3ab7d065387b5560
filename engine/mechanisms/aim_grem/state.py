"""Checkpointable loop state of AIM+GReM: round counter, next budget, trace, residuals, estimates.

All noise is keyed by (round, clique), so the round number is the whole RNG position. A checkpoint is
a *base* ``{"meta": JSON, "arrays": {name: ndarray}}`` -- residual estimates ``z.<i>`` (i indexes the
tracked residual list), the precision vector ``lam``, and the kept marginal estimates ``mu.<j>``
(stored so a resumed run continues from bit-identical estimates instead of a re-summed
reconstruction); a run's first base holds instead its initial measurements to replay, packed with the
residual estimates into ``ys`` / ``zs`` (few stored arrays; bases written before hold ``y.<k>``, ``z.<i>``) --
plus a log of per-round *records* (:meth:`AIMState.to_record`): the round's noisy
measurements ``y.<i>`` with their residual and variance, its trace row, its ledger charges and the
next round's budget. Restoring replays the records' measurements through the same inverse-variance
combine and lazy update, so the state equals the uninterrupted run's bit for bit. Nothing exact
(pre-noise) is ever part of either.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.errors import CheckpointError
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
    saved_trace: int = field(default=0, compare=False)    # trace rows already in a checkpoint
    saved_charges: int = field(default=0, compare=False)  # ledger charges already in a checkpoint

    def _budget_meta(self) -> dict[str, Any]:
        return {"rho_select": self.budget.rho_select, "rho_measure": self.budget.rho_measure,
                "final": self.budget.final}

    def to_record(self, journal: list[tuple[tuple[str, ...], np.ndarray, float]], ledger: Any) -> dict[str, Any]:
        """A log record of what changed since the last checkpoint: noisy measurements (residual, variance,
        value) in combine order, new trace rows, new ledger charges, and the loop state for the next round."""
        charges = ledger.charges if ledger is not None else []
        meta = {
            "round": self.round, "budget": self._budget_meta(), "done": self.done, "rho_used": self.rho_used,
            "trace": self.trace[self.saved_trace:], "charges": charges[self.saved_charges:],
            "measurements": [[list(t), float(s2)] for t, _, s2 in journal],
        }
        arrays = {f"y.{i}": np.asarray(y, dtype=float) for i, (_, y, _) in enumerate(journal)}
        return {"meta": normalise(meta), "arrays": arrays}

    def mark_saved(self, ledger: Any) -> None:
        """Everything so far is in a checkpoint: the next record starts after it."""
        self.saved_trace = len(self.trace)
        self.saved_charges = len(ledger.charges) if ledger is not None else 0

    def to_checkpoint(self, grem: GReMState, ledger: Any, identity: Mapping[str, Any],
                      journal: list[tuple[tuple[str, ...], np.ndarray, float]] | None = None) -> dict[str, Any]:
        """The checkpoint payload (a base) of this state plus the GReM arrays and the ledger record.

        Residual estimates are stored for measured residuals only (λ_τ > 0; the others are zero). With
        ``journal`` -- every measurement combined since the start, i.e. at the first checkpoint of a
        run -- the marginal estimates are not stored but rebuilt on restore by replaying the journal
        from zero (far smaller than W↓'s estimates), and the stored z_τ, λ_τ are checked against it;
        the many small arrays of that base are packed into two (``zs``, ``ys``: raveled, concatenated in
        residual / journal order; their shapes are the tracked residuals'), one stored array each.
        """
        measured = [t for t in grem.residuals if grem.lam[t] > 0]
        arrays: dict[str, np.ndarray] = {}
        if journal is None:
            arrays.update({f"z.{i}": grem.z[t] for i, t in enumerate(grem.residuals) if grem.lam[t] > 0})
            mu = grem.table.snapshot()
            for j, c in enumerate(grem.table.cliques):
                arrays[f"mu.{j}"] = mu[c]
        else:
            arrays["zs"] = _pack([grem.z[t] for t in measured])
            arrays["ys"] = _pack([y for _, y, _ in journal])
        arrays["lam"] = np.array([grem.lam[t] for t in grem.residuals], dtype=float)
        meta = {
            "round": self.round,
            "budget": self._budget_meta(),
            "done": self.done, "rho_used": self.rho_used, "rho_total": self.rho_total,
            "trace": self.trace, "init": self.init,
            "identity": normalise(identity),
            "residuals": [list(t) for t in grem.residuals],
            "kept": [list(c) for c in grem.table.cliques],
            "ledger": ledger.to_dict() if ledger is not None else None,
        }
        if journal is not None:
            meta["replay"] = [[list(t), float(s2)] for t, _, s2 in journal]
        return {"meta": normalise(meta), "arrays": arrays}

    @classmethod
    def from_checkpoint(cls, payload: Mapping[str, Any], grem: GReMState, identity: Mapping[str, Any]) -> AIMState:
        """Restore ``grem`` (residuals, precisions, estimates) and return the loop state; validates identity."""
        return cls.restore(payload, grem, identity)[0]

    @classmethod
    def restore(cls, payload: Mapping[str, Any], grem: GReMState, identity: Mapping[str, Any],
                after_base: Callable[[Mapping[str, Any], bool], None] | None = None) -> tuple[AIMState, dict[str, Any]]:
        """Restore ``grem`` from the base and replay the log; return (loop state, ledger record {"charges"}).

        ``after_base(init, snapshot)`` runs once the base is restored and before the log is replayed (the
        point where a run decides things from its initial measurements, e.g. ``selection_on: auto``).

        CheckpointError if the checkpoint belongs to another run or is malformed.
        """
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
            if "zs" in arrays:  # a packed first base: the same arrays, raveled and concatenated
                arrays = _unpacked(arrays, meta, lam, grem)
            zs: dict[tuple[str, ...], np.ndarray] = {}
            for i, t in enumerate(grem.residuals):
                name = f"z.{i}"
                if name not in arrays:
                    if lam[i] != 0:
                        raise CheckpointError(f"checkpoint lacks the estimate of measured residual {list(t)}")
                    zs[t] = np.zeros(grem.z[t].shape)
                    continue
                z = np.asarray(arrays[name], dtype=float)
                if z.shape != grem.z[t].shape:
                    raise CheckpointError(f"checkpoint residual {list(t)} has shape {z.shape}, expected {grem.z[t].shape}")
                zs[t] = z
            if "replay" in meta:  # the first checkpoint: rebuild everything from zero by replaying it
                grem.replay([_entries(meta["replay"], arrays, grem, "the base")])
                for i, t in enumerate(grem.residuals):
                    if grem.lam[t] != float(lam[i]) or not np.array_equal(grem.z[t], zs[t]):
                        raise CheckpointError(f"checkpoint is corrupt: replaying its measurements does not give "
                                              f"the stored estimate of residual {list(t)}")
            else:
                for i, t in enumerate(grem.residuals):
                    grem.z[t] = zs[t].copy()
                    grem.lam[t] = float(lam[i])
                grem.table.load({c: arrays[f"mu.{j}"] for j, c in enumerate(grem.table.cliques)})
                grem.recomplete()  # the stored estimates already hold the completed values; rebuild them
            if after_base is not None:
                after_base(dict(meta["init"]), "replay" not in meta)
            b = meta["budget"]
            st = cls(round=int(meta["round"]),
                     budget=RoundBudget(float(b["rho_select"]), float(b["rho_measure"]), bool(b["final"])),
                     done=bool(meta["done"]), rho_used=float(meta["rho_used"]), rho_total=float(meta["rho_total"]),
                     trace=list(meta["trace"]), init=dict(meta["init"]))
            ledger_meta = meta.get("ledger")
            if ledger_meta is None:
                raise CheckpointError("checkpoint has no ledger record")
            charges = list(ledger_meta.get("charges", []))
            log = list(payload.get("log", []))
            batches = []
            for rec in log:
                rm, ra = rec["meta"], rec["arrays"]
                if int(rm["round"]) != int(rec["round"]) or int(rec["round"]) <= st.round:
                    raise CheckpointError(f"checkpoint log record for round {rec['round']} is out of order")
                batches.append(_entries(rm["measurements"], ra, grem, f"log record {rec['round']}"))
                st.trace.extend(rm["trace"])
                charges.extend(rm["charges"])
                b = rm["budget"]
                st.round = int(rm["round"])
                st.budget = RoundBudget(float(b["rho_select"]), float(b["rho_measure"]), bool(b["final"]))
                st.done, st.rho_used = bool(rm["done"]), float(rm["rho_used"])
            grem.replay(batches)
            st.saved_trace = len(st.trace)
            st.saved_charges = len(charges)
            return st, {"charges": charges}
        except KeyError as e:
            raise CheckpointError(f"checkpoint lacks entry {e}") from None
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"checkpoint is malformed: {e}") from None


def _pack(arrays: list[np.ndarray]) -> np.ndarray:
    """Raveled float arrays, concatenated (an empty list gives an empty array)."""
    return np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays]) if arrays else np.zeros(0)


def _unpacked(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any], lam: np.ndarray,
              grem: GReMState) -> dict[str, np.ndarray]:
    """A packed first base's ``zs`` / ``ys`` split back into ``z.<i>`` (measured residuals) and ``y.<k>``."""
    measured = [(i, t) for i, t in enumerate(grem.residuals) if lam[i] > 0]
    taus = [tuple(t) for t, _ in meta.get("replay", [])]
    out = dict(arrays)
    out.update(_unpack(arrays["zs"], [f"z.{i}" for i, _ in measured], [grem.z[t].shape for _, t in measured],
                       "residual estimates"))
    out.update(_unpack(arrays["ys"], [f"y.{k}" for k in range(len(taus))],
                       [grem.z[t].shape if t in grem.z else (0,) for t in taus], "measurements"))
    return out


def _unpack(flat: np.ndarray, names: list[str], shapes: list[tuple[int, ...]], what: str) -> dict[str, np.ndarray]:
    """Inverse of :func:`_pack` given the names and shapes (CheckpointError if the sizes disagree)."""
    flat = np.asarray(flat, dtype=float)
    sizes = [int(np.prod(sh, dtype=np.int64)) for sh in shapes]
    if flat.ndim != 1 or flat.size != sum(sizes):
        raise CheckpointError(f"checkpoint packed {what} hold {flat.size} values, this run expects {sum(sizes)}")
    out, off = {}, 0
    for name, sh, n in zip(names, shapes, sizes):
        out[name] = flat[off:off + n].reshape(sh).copy()
        off += n
    return out


def _entries(spec: Any, arrays: Mapping[str, np.ndarray], grem: GReMState,
             where: str) -> list[tuple[tuple[str, ...], np.ndarray, float]]:
    """Journal entries (τ, noisy measurement ``y.<k>``, σ²) of a checkpoint part, checked against ``grem``."""
    out = []
    for k, (tau, s2) in enumerate(spec):
        tau = tuple(tau)
        y = np.asarray(arrays[f"y.{k}"], dtype=float)
        if tau not in grem.z or y.shape != grem.z[tau].shape:
            raise CheckpointError(f"checkpoint {where} measures {list(tau)} with shape {y.shape}, "
                                  "which this run does not track")
        out.append((tau, y, float(s2)))
    return out


__all__ = ["AIMState", "normalise"]
