"""One privacy budget per dataset, across runs: ``privacy.budget_file: PATH`` in a job config.

``privcube budget init PATH --epsilon E --delta D`` creates the file (:mod:`privcube.storage.budget_store`:
append-only, checksummed records under an OS lock). A run naming it:

1. **reserves** its whole budget before any data is read: under the file's lock it reads every record, and
   refuses in one line (exit 2, nothing written) when the runs already charged plus this one would exceed
   (E, D); otherwise it appends a ``reserve`` record. Two processes cannot both pass when only one fits:
   the second takes the lock after the first has appended.
2. **settles** once its measurements are made (the spend is a fact then): a ``settle`` record holds what the
   run's ledger spent (per person under a privacy unit), never more than it reserved.
3. is **released** (charged nothing) when it fails before measuring anything: no measurement returned and
   no checkpoint committed. A run that fails after measuring keeps its reservation, charged in full, and
   ``--resume`` of it (same ``--out``, config and seed) reuses that reservation: nothing is charged twice.
   A run killed outright also keeps its reservation until it is resumed.

Composition. The ledger's currency is zCDP: charges add their ρ, and ρ-zCDP reads as (ε(ρ, δ), δ)-DP
(:func:`privcube.privacy.zcdp.cdp_epsilon`). The dataset budget composes runs the same way: the runs' ρ add
up and the sum is read at the dataset's δ = D. That is tighter than adding the runs' (ε, δ) pairs (basic
composition) for Gaussian runs: ten runs of (1, 1e-9) are (3.4, 1e-9)-DP together, not (10, 1e-8). A run
with a pure ε budget (Laplace) is ε²/2-zCDP, but for few such runs adding their ε is tighter, so they count
both ways and the smaller total is used: ε_total = min(ε(Σρ + Σ ε_pure²/2, D), ε(Σρ, D) + Σ ε_pure), each
a valid bound of the composition. A run is admitted when ε_total, with the run at its full budget, is at most
E. Runs composed in one file must protect the same unit: all row-level, or all per person with the same id
column (``privacy_unit.max_rows`` may differ). An (ε, δ)-only release (``calibration: analytic``) has no
ρ and is refused here.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcube.core.errors import BudgetError, ConfigError
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.zcdp import cdp_epsilon

#: relative slack for float round-off when comparing a total with the dataset's ε, and no more
REL_TOL = 1e-9
KEY = "budget_file"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _store(path: str | os.PathLike[str]) -> Any:
    from privcube.storage.budget_store import BudgetStore

    return BudgetStore(Path(os.path.expanduser(os.fspath(path))).absolute())


# ------------------------------------------------------------------------------------------- the file
def init_budget(path: str | os.PathLike[str], epsilon: float, delta: float) -> dict[str, Any]:
    """Create the budget file of a dataset with total (``epsilon``, ``delta``); an existing file is refused."""
    try:
        budget = PrivacyBudget.from_epsilon_delta(epsilon, delta)
    except BudgetError as e:
        raise BudgetError(f"budget init: {e}") from None
    store = _store(path)
    header = {"type": "budget", "version": 1, "epsilon": budget.epsilon, "delta": budget.delta, "rho": budget.rho,
              "id": uuid.uuid4().hex, "created": _now(),
              "composition": "zCDP: the runs' rho add up, read at this delta; pure-epsilon runs also by adding "
                             "their epsilon, the smaller total counts"}
    store.create(header)
    return {"path": str(store.path), **{k: header[k] for k in ("epsilon", "delta", "rho")}}


@dataclass
class Charge:
    """One run's entry: what it reserved, and (once settled) what it spent; released runs charge nothing."""

    id: str
    key: str
    out: str
    mechanism: str
    unit: str | None
    reserved: dict[str, Any]
    created: str
    state: str = "reserved"  # reserved | settled | released
    spent: dict[str, Any] | None = None
    resumed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def amount(self) -> dict[str, Any]:
        """What counts against the dataset: the spend once settled, the reservation while open, nothing once
        released."""
        if self.state == "released":
            return {"rho": 0.0, "epsilon": 0.0, "pure": False}
        return self.spent if self.state == "settled" and self.spent is not None else self.reserved


@dataclass
class Ledger:
    """The dataset budget as its records say: total (ε, δ, ρ) and every run's charge, in order."""

    epsilon: float
    delta: float
    rho: float
    id: str
    charges: list[Charge]

    @classmethod
    def of(cls, records: list[dict[str, Any]], where: str) -> Ledger:
        head = records[0]
        try:
            out = cls(float(head["epsilon"]), float(head["delta"]), float(head["rho"]), str(head["id"]), [])
        except (KeyError, TypeError, ValueError):
            raise BudgetError(f"{where}: its first record is not a budget; refused") from None
        by_id: dict[str, Charge] = {}
        for n, r in enumerate(records[1:], start=2):
            kind, rid = r.get("type"), r.get("run")
            if kind == "reserve":
                c = Charge(rid, r["key"], r["out"], r["mechanism"], r.get("unit"), dict(r["amount"]), r["time"])
                by_id[rid] = c
                out.charges.append(c)
            elif kind in ("settle", "release", "resume") and rid in by_id:
                c = by_id[rid]
                if kind == "settle":
                    c.state, c.spent = "settled", dict(r["amount"])
                elif kind == "release":
                    c.state = "released"
                    c.notes.append(str(r.get("reason", "")))
                else:
                    c.resumed += 1
            else:
                raise BudgetError(f"{where}: record {n} refers to no run reserved before it; refused")
        return out

    def total(self, extra: Mapping[str, Any] | None = None) -> float:
        """ε of every charge composed at the dataset's δ (module docstring), with ``extra`` added."""
        amounts = [c.amount for c in self.charges] + ([dict(extra)] if extra is not None else [])
        return composed_epsilon(amounts, self.delta)

    def spent_rho(self) -> float:
        return math.fsum(float(c.amount["rho"]) for c in self.charges)


def composed_epsilon(amounts: list[Mapping[str, Any]], delta: float) -> float:
    """min(ε(Σρ_zcdp + Σε_pure²/2, δ), ε(Σρ_zcdp, δ) + Σε_pure): both bound the runs' composition."""
    z = math.fsum(float(a["rho"]) for a in amounts if not a.get("pure"))
    pure = [float(a["epsilon"]) for a in amounts if a.get("pure")]
    p, q = math.fsum(pure), math.fsum(e * e / 2.0 for e in pure)

    def eps(rho: float) -> float:
        return cdp_epsilon(rho, delta) if rho > 0 else 0.0

    return min(eps(z + q), eps(z) + p)


# ----------------------------------------------------------------------------------------- a run's hold
def budget_file_of(cfg: Any) -> Path | None:
    """The ``privacy.budget_file`` of a loaded single-table config, resolved against the config's folder (and
    written back resolved, so the run folder's config.yaml names the same file); None when not given."""
    raw = getattr(cfg, "raw", None)
    privacy = raw.get("privacy") if isinstance(raw, Mapping) else None
    if not isinstance(privacy, Mapping) or KEY not in privacy:
        return None
    value = privacy[KEY]
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip():
        raise ConfigError(f"privacy.{KEY} must be the path of a budget file (privcube budget init), got "
                          f"{type(value).__name__}")
    path = Path(os.path.expanduser(os.fspath(value)))
    if not path.is_absolute():
        path = Path(getattr(cfg, "base_dir", ".")) / path
    path = path.absolute()
    if isinstance(privacy, dict):
        privacy[KEY] = str(path)
    return path


def _amount_of_budget(budget: PrivacyBudget) -> dict[str, Any]:
    if budget.pure:
        return {"rho": budget.rho, "epsilon": budget.epsilon, "pure": True}
    return {"rho": budget.rho, "epsilon": budget.epsilon, "pure": False}


def _amount_of_ledger(ledger: Any) -> dict[str, Any]:
    """What a run's (person-level) PrivacyLedger spent: ε alone when its guarantee is pure, else ρ."""
    spent = ledger.spent
    if getattr(ledger, "guarantee", "zcdp") == "pure":
        return {"rho": float(spent["rho"]), "epsilon": float(spent["epsilon"]), "pure": True}
    if any(float(c.get("delta") or 0.0) > 0 for c in ledger.charges):
        raise BudgetError("privacy.budget_file: the run made an (epsilon, delta) release, which has no rho to "
                          "compose (calibration: analytic); use calibration: zcdp")
    return {"rho": float(ledger.spent_rho), "epsilon": float(spent["epsilon"]), "pure": False}


def run_key(out: str | os.PathLike[str], identity: Mapping[str, Any]) -> str:
    """What a resumed run shares with the run it continues: its folder, mechanism, seed and config."""
    text = json.dumps({"out": str(Path(out).absolute()), "identity": dict(identity)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _unit_of(cfg: Any) -> str | None:
    unit = getattr(cfg, "privacy_unit", None)
    return None if unit is None else str(unit.id)


def _show_unit(unit: str | None) -> str:
    return "one row (no privacy_unit)" if unit is None else f"one person (privacy_unit.id {unit!r})"


class Hold:
    """A run's reservation on a dataset budget: ``settle`` once measured, ``abandon`` when it fails."""

    def __init__(self, path: Path, run: str, reserved: dict[str, Any]) -> None:
        self.path, self.run, self.reserved = path, run, reserved
        self.measured = False  # once set, a failure never releases the reservation
        self.settled = False

    def settle(self, ledger: Any) -> None:
        """Record what the run spent (its person-level ledger; at most what it reserved, which its ledger
        enforces)."""
        self.measured = True
        amount = _amount_of_ledger(ledger)
        with _store(self.path).locked() as s:
            s.append({"type": "settle", "run": self.run, "amount": amount, "time": _now()})
        self.settled = True

    def abandon(self, committed: bool) -> None:
        """The run failed: released (nothing charged) when it measured nothing and committed no checkpoint,
        else kept, charged in full, for ``--resume``."""
        if self.measured or self.settled or committed:
            return
        with contextlib.suppress(BudgetError, OSError):  # the run's own error is what the user must see
            with _store(self.path).locked() as s:
                s.append({"type": "release", "run": self.run, "reason": "failed before measuring", "time": _now()})


def spent_ledger(cfg: Any, measured: Any) -> Any:
    """The ledger a single-table run's ``ledger.json`` holds: per person under a privacy unit."""
    ledger = measured[1]
    unit = getattr(cfg, "privacy_unit", None)
    return ledger if unit is None else unit.person_ledger(ledger, cfg.budget)


def _laplace_only(cfg: Any) -> bool:
    """Whether a pure-ε run spends ε alone: hdmm / eigen-design with Laplace noise (every other mechanism refuses
    a pure budget, or could charge ρ against it)."""
    params = getattr(cfg, "mechanism_params", {}) or {}
    return getattr(cfg, "mechanism", None) in ("hdmm", "eigen-design") and params.get("noise", "auto") in ("auto",
                                                                                                        "laplace")


def reserve(cfg: Any, out: str | os.PathLike[str], identity: Mapping[str, Any], *, resume: bool) -> Hold | None:
    """Reserve the run's whole budget on its ``privacy.budget_file`` (None when the config names none); a run
    that would exceed what is left is refused in one line (BudgetError), before any data is read."""
    path = budget_file_of(cfg)
    if path is None:
        return None
    budget = cfg.budget  # the person-level budget under a privacy unit: what the ledger.json charges
    if getattr(cfg, "mechanism_params", {}).get("calibration") == "analytic":
        raise ConfigError("privacy.budget_file: calibration: analytic spends an (epsilon, delta) pair, which "
                          "does not compose with the dataset's other runs in rho; use calibration: zcdp")
    amount = _amount_of_budget(budget)
    key = run_key(out, identity)
    unit = _unit_of(cfg)
    store = _store(path)
    where = f"privacy.budget_file {str(path)!r}"
    with store.locked() as s:
        book = Ledger.of(s.records, where)
        if resume:
            prior = [c for c in book.charges if c.key == key and c.state != "released"]
            if prior:  # the interrupted run's reservation (or settled spend) carries over: no new charge
                s.append({"type": "resume", "run": prior[-1].id, "time": _now()})
                hold = Hold(path, prior[-1].id, prior[-1].reserved)
                hold.settled = prior[-1].state == "settled"
                hold.measured = True  # the interrupted attempt may have measured: never released from here on
                return hold
        units = {c.unit for c in book.charges if c.state != "released"}
        if units and units != {unit}:
            raise BudgetError(f"{where} was charged by runs that protect {_show_unit(next(iter(units)))}; this run "
                              f"protects {_show_unit(unit)}, and the two guarantees do not compose: use one "
                              "privacy unit for every run on a dataset")
        worst = [dict(amount)]
        if amount["pure"] and not _laplace_only(cfg):  # it might settle in ρ: admitted only if either way fits
            worst.append({**amount, "pure": False})
        after = max(book.total(w) for w in worst)
        if after > book.epsilon * (1 + REL_TOL):
            left = book.epsilon - book.total()
            raise BudgetError(
                f"{where}: this run's budget (epsilon={budget.epsilon:.6g}"
                + (f", delta={budget.delta:.3g}" if not budget.pure else "")
                + f") does not fit what is left of the dataset's (epsilon={book.epsilon:.6g}, delta={book.delta:.3g}): "
                f"{len([c for c in book.charges if c.state != 'released'])} run(s) spent epsilon={book.total():.6g}"
                f", {max(left, 0.0):.6g} is left, and with this run it would be {after:.6g}; nothing was read or written")
        run = uuid.uuid4().hex
        s.append({"type": "reserve", "run": run, "key": key, "out": str(Path(out).absolute()),
                  "mechanism": str(getattr(cfg, "mechanism", "?")), "unit": unit, "amount": amount,
                  "budget": {"epsilon": budget.epsilon, "delta": budget.delta}, "time": _now()})
    return Hold(path, run, amount)


@contextlib.contextmanager
def held(hold: Hold | None, checkpoint: Any) -> Iterator[None]:
    """Around a run: on failure, release the reservation unless something was measured or a checkpoint
    committed (``checkpoint()`` returns the run's checkpoint, or None before it exists); then ``--resume``
    continues the run on the same reservation."""
    try:
        yield
    except BaseException:
        if hold is not None:
            committed = False
            with contextlib.suppress(Exception):
                ck = checkpoint()
                committed = bool(ck is not None and ck.exists())
            hold.abandon(committed)
        raise


# ------------------------------------------------------------------------------------------------ show
def show_budget(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The budget and every run's charge, as data (``privcube budget show --json``)."""
    store = _store(path)
    records = store.read()
    book = Ledger.of(records, f"budget file {str(store.path)!r}")
    spent = book.total()
    runs = []
    for c in book.charges:
        a = c.amount
        runs.append({"run": c.id, "time": c.created, "out": c.out, "mechanism": c.mechanism, "state": c.state,
                     "unit": c.unit, "rho": float(a["rho"]), "epsilon": float(a["epsilon"]), "pure": bool(a["pure"]),
                     "reserved": c.reserved, "resumed": c.resumed})
    return {"path": str(store.path), "budget": {"epsilon": book.epsilon, "delta": book.delta, "rho": book.rho},
            "spent": {"epsilon": spent, "rho": book.spent_rho()}, "remaining_epsilon": max(book.epsilon - spent, 0.0),
            "runs": runs}


def format_status(status: Mapping[str, Any]) -> str:
    """``privcube budget show``: the budget, one line per run, the total spent and what is left."""
    b, s = status["budget"], status["spent"]
    lines = [f"budget: {status['path']}",
             f"dataset budget: epsilon={b['epsilon']:.6g} delta={b['delta']:.3g} (rho={b['rho']:.6g})",
             "runs:" if status["runs"] else "runs: none yet"]
    for r in status["runs"]:
        what = {"reserved": "reserved (running, or interrupted: --resume continues it)", "settled": "spent",
                "released": "released (failed before measuring: nothing spent)"}[r["state"]]
        cost = f"epsilon={r['epsilon']:.6g}" if r["pure"] else f"rho={r['rho']:.6g} (epsilon={r['epsilon']:.6g} alone)"
        lines.append(f"  {r['time']}  {r['run'][:8]}  {r['mechanism']}  {cost}  {what}"
                     + (f"  resumed {r['resumed']}x" if r["resumed"] else "") + f"  {r['out']}")
    lines.append(f"spent: epsilon={s['epsilon']:.6g} at delta={b['delta']:.3g} (runs composed; rho={s['rho']:.6g})")
    lines.append(f"left: epsilon={status['remaining_epsilon']:.6g}")
    return "\n".join(lines)


__all__ = ["Hold", "KEY", "Ledger", "budget_file_of", "composed_epsilon", "format_status", "held", "init_budget",
           "reserve", "run_key", "show_budget", "spent_ledger"]
