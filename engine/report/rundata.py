"""What a report shows, read from a finished run folder: config, ledger, report.json, answers, records.

The data-free plan is taken from ``report.json['expected_error']``; when a run did not store it, it is
recomputed from the saved config (domain from ``config.yaml``'s ``resolved`` section; no data is read) by
the planner the driver passes in (``replan``) or registers (:func:`register_planner`). What a mechanism's
runs show (a plan or why none, which budget section) is asked of the mechanism
(``Mechanism.report_sections``), never decided by its name here.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from privcube.core.errors import PrivcubeError, RunDirectoryError

COMPLETE_MARKER = ".complete"
#: what the report shows for a run whose mechanism is not known here (see ``Mechanism.report_sections``)
#: (``draw``: ``run -> {anchor: html}`` for the "privacy-split", "dp-error", "iterations", "degrees" sections)
DEFAULT_SECTIONS: dict[str, Any] = {"plan_note": None, "budget": "budget", "residual_rho": "sigma", "draw": None}
#: the data-free planner ``config mapping -> PlanSummary`` the driver registers (privcube.api.plan)
_PLANNER: list[Callable[[dict[str, Any]], Any]] = []


def register_planner(planner: Callable[[dict[str, Any]], Any]) -> None:
    """Set the planner that recomputes a plan a run did not store (the driver's ``plan``; the report cannot
    import the driver, which sits above it)."""
    _PLANNER[:] = [planner]


#: what job kinds above the report declare for their runs (``mechanism`` name -> sections), registered by
#: the driver (privcube.relational's plan note and the sections it draws)
_KINDS: dict[str, dict[str, Any]] = {}


def register_kind(name: str, sections: dict[str, Any]) -> None:
    """Declare the report sections of runs whose ``mechanism`` is ``name`` but which no mechanism class runs."""
    _KINDS[name] = dict(sections)


def mechanism_sections(name: Any) -> dict[str, Any]:
    """What the report shows for runs of mechanism ``name``, as the mechanism (or its job kind) declares it."""
    from privcube.core.errors import ConfigError
    from privcube.mechanisms import REGISTRY, get_mechanism

    if isinstance(name, str) and name in _KINDS:
        return {**DEFAULT_SECTIONS, **_KINDS[name]}

    if not isinstance(name, str) or name not in REGISTRY:
        return dict(DEFAULT_SECTIONS)
    try:
        return {**DEFAULT_SECTIONS, **get_mechanism(name).report_sections()}
    except ConfigError:  # a mechanism not available in this build
        return dict(DEFAULT_SECTIONS)


@dataclass
class RunData:
    """The parts of a run folder a report uses (missing parts are ``None`` / empty)."""

    path: Path
    config: dict[str, Any]
    ledger: dict[str, Any]
    report: dict[str, Any]
    plan: dict[str, Any] | None
    plan_note: str = ""
    groups: list[dict[str, Any]] = field(default_factory=list)  # answers/index.json entries

    @property
    def mechanism(self) -> str:
        return str(self.report.get("mechanism") or _mechanism_name(self.config) or "unknown")

    @property
    def sections(self) -> dict[str, Any]:
        """What the mechanism says its runs show (``Mechanism.report_sections``)."""
        return mechanism_sections(self.mechanism)

    @property
    def mechanism_report(self) -> dict[str, Any]:
        mr = self.report.get("mechanism_report")
        return mr if isinstance(mr, dict) else {}

    def answers(self, entry: dict[str, Any]) -> pd.DataFrame:
        """One answers file (``answers/<file>``) as a DataFrame."""
        return pd.read_parquet(self.path / "answers" / str(entry["file"]))

    def record_files(self) -> list[Path]:
        """The synthetic records written by ``synthesize`` (``synthetic/records/part-*.parquet``)."""
        return sorted((self.path / "synthetic" / "records").glob("*.parquet"))


def load_run(path: str | Path, replan: Callable[[dict[str, Any]], Any] | None = None) -> RunData:
    """Read a finished run folder; a missing or unfinished one is a one-line ``RunDirectoryError``. ``replan``
    recomputes a plan the run did not store (default: the registered planner)."""
    p = Path(path)
    if not p.is_dir():
        raise RunDirectoryError(f"run directory {str(p)!r} does not exist")
    if not (p / COMPLETE_MARKER).exists():
        raise RunDirectoryError(f"{str(p)!r} is not a finished run (no {COMPLETE_MARKER} marker): "
                                "finish it (privcube run ... --resume) before writing its report")
    config = _read_yaml(p / "config.yaml")
    ledger = _read_json(p / "ledger.json")
    report = _read_json(p / "report.json")
    index = _read_json(p / "answers" / "index.json") if (p / "answers" / "index.json").exists() else {}
    plan, note = report.get("expected_error"), ""
    if not isinstance(plan, dict):
        plan, note = recompute_plan(config, replan)
    return RunData(p, config, ledger, report, plan, note, list(index.get("groups") or []))


def recompute_plan(config: dict[str, Any], replan: Callable[[dict[str, Any]], Any] | None = None
                   ) -> tuple[dict[str, Any] | None, str]:
    """The data-free plan of a batch run from its saved config (by ``replan``, default: the registered
    planner), or ``None`` and why there is none (the mechanism says when it has none)."""
    note = mechanism_sections(_mechanism_name(config))["plan_note"]
    if note:
        return None, note
    resolved = config.get("resolved") if isinstance(config.get("resolved"), dict) else {}
    if not resolved.get("domain"):
        return None, "the saved config has no resolved domain, so the plan cannot be recomputed"
    raw = {k: v for k, v in config.items() if k not in ("resolved", "cluster", "output", "synthesize", "data")}
    raw["data"] = {"domain": resolved["domain"]}
    replan = replan or (_PLANNER[0] if _PLANNER else None)
    if replan is None:
        return None, "the plan could not be recomputed: no planner was given (privcube.api registers one)"
    try:
        return replan(raw).to_dict(), "recomputed from the saved config (not stored by the run)"
    except PrivcubeError as e:
        return None, f"the plan could not be recomputed: {e}"


def synthetic_marginal(files: list[Path], attrs: list[str], shape: tuple[int, ...]) -> np.ndarray:
    """Counts of the synthetic records over ``attrs`` (codes), shaped like the marginal; reads those columns only."""
    import pyarrow.parquet as pq

    counts = np.zeros(int(np.prod(shape)), dtype=np.float64)
    for f in files:
        table = pq.read_table(f, columns=attrs)
        codes = [np.asarray(table.column(a).to_numpy(), dtype=np.int64) for a in attrs]
        flat = np.ravel_multi_index(codes, shape, mode="clip") if codes else np.zeros(table.num_rows, dtype=np.int64)
        counts += np.bincount(flat, minlength=counts.size)[: counts.size]
    return counts.reshape(shape)


def _mechanism_name(config: dict[str, Any]) -> Any:
    mech = config.get("mechanism")
    return mech.get("name") if isinstance(mech, dict) else mech


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirectoryError(f"the run folder has no {path.name} ({str(path)!r})") from None
    except (OSError, ValueError) as e:
        raise RunDirectoryError(f"cannot read {str(path)!r}: {type(e).__name__}") from None
    return value if isinstance(value, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        value = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as e:
        raise RunDirectoryError(f"cannot read {str(path)!r}: {type(e).__name__}") from None
    return value if isinstance(value, dict) else {}
