"""What a report shows, read from a finished run folder: config, ledger, report.json, answers, records.

The data-free plan is taken from ``report.json['expected_error']``; when a run did not store it, it is
recomputed from the saved config (domain from ``config.yaml``'s ``resolved`` section; no data is read) by
the planner the driver hands in (the report sits below the driver and does not import it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import yaml

from privcube.core.errors import PrivcubeError, RunDirectoryError

COMPLETE_MARKER = ".complete"
#: the driver's data-free plan of a config mapping, as ``PlanSummary.to_dict()`` (``privcube.api.plan``)
Planner = Callable[[dict[str, Any]], dict[str, Any]]


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
    def mechanism_report(self) -> dict[str, Any]:
        mr = self.report.get("mechanism_report")
        return mr if isinstance(mr, dict) else {}

    def answers(self, entry: dict[str, Any]) -> pd.DataFrame:
        """One answers file (``answers/<file>``) as a DataFrame."""
        return pd.read_parquet(self.path / "answers" / str(entry["file"]))

    def record_files(self) -> list[Path]:
        """The synthetic records written by ``synthesize`` (``synthetic/records/part-*.parquet``)."""
        return sorted((self.path / "synthetic" / "records").glob("*.parquet"))


def load_run(path: str | Path, planner: Planner | None = None) -> RunData:
    """Read a finished run folder; a missing or unfinished one is a one-line ``RunDirectoryError``."""
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
        plan, note = recompute_plan(config, planner)
    return RunData(p, config, ledger, report, plan, note, list(index.get("groups") or []))


def recompute_plan(config: dict[str, Any], planner: Planner | None = None) -> tuple[dict[str, Any] | None, str]:
    """The data-free plan of a batch run from its saved config, or ``None`` and why there is none."""
    name = _mechanism_name(config)
    if name == "relational":
        return None, ("relational: the links are learned adaptively, so their error depends on the data; the "
                      "tables' data-free plan (expected RMSE per table and marginal) is what `privcube plan "
                      "RUN/config.yaml` prints")
    if name == "aim-grem":
        return None, f"{name} is adaptive: its error depends on the data, so there is no data-free plan"
    resolved = config.get("resolved") if isinstance(config.get("resolved"), dict) else {}
    if not resolved.get("domain"):
        return None, "the saved config has no resolved domain, so the plan cannot be recomputed"
    raw = {k: v for k, v in config.items() if k not in ("resolved", "cluster", "output", "synthesize", "data")}
    raw["data"] = {"domain": resolved["domain"]}
    if planner is None:
        return None, "the run did not store its plan and this report was drawn without a planner (`privcube report` recomputes it)"
    try:
        return planner(raw), "recomputed from the saved config (not stored by the run)"
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
