"""The result of a run, for notebooks: answers as pandas tables, the ledger, the synthetic records.

``privcube.run(...)`` returns a :class:`Result`. It is a :class:`RunSummary` (``out_dir``, ``ledger``,
``report``, ``result``; also importable as ``privcube.api.RunSummary``) whose tables are read back from the
run directory, so what Python shows is exactly what the CLI wrote: ``marginal("age", "sex")`` is the answer
file of that marginal. Reading a result is post-processing of released answers: it spends no privacy budget.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from privcube.core.errors import ConfigError, WorkloadError

if TYPE_CHECKING:
    from privcube.mechanisms.base import MechanismResult


@dataclass
class RunSummary:
    """Where a run wrote its outputs and what it spent."""

    out_dir: Path
    ledger: dict[str, Any]
    report: dict[str, Any]
    result: MechanismResult


@dataclass
class Result(RunSummary):
    """A finished run: ``marginal(*attrs)`` and ``answers(i)`` as DataFrames, ``ledger``, ``synthetic()``."""

    @classmethod
    def of(cls, summary: RunSummary) -> Result:
        """The Result view of a RunSummary (e.g. from the relational job)."""
        if isinstance(summary, cls):
            return summary
        return cls(summary.out_dir, summary.ledger, summary.report, summary.result)

    @property
    def groups(self) -> list[dict[str, Any]]:
        """The answer files' index: one entry per query group (attributes, queries, weight, file, rows)."""
        path = Path(self.out_dir) / "answers" / "index.json"
        if not path.exists():
            return []
        return list(json.loads(path.read_text())["groups"])

    def answers(self, group: int) -> pd.DataFrame:
        """The answer table of query group number ``group`` (workload order), as written in ``answers/``."""
        groups = self.groups
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < len(groups):
            raise WorkloadError(f"answers: group must be an integer in [0, {len(groups)}), got {group!r}")
        return pd.read_parquet(Path(self.out_dir) / "answers" / groups[group]["file"])

    def marginal(self, *attributes: str) -> pd.DataFrame:
        """The released marginal over ``attributes``: one row per cell, the attribute codes (in the order
        asked, each followed by ``<attr>_label`` with a rich schema), ``estimate``, ``published`` (when the
        run wrote it), ``variance``, ``ci_low``, ``ci_high``. ``marginal()`` is the total. The workload must hold
        that marginal (any order of its attributes)."""
        if len(attributes) == 1 and isinstance(attributes[0], (list, tuple)):
            attributes = tuple(attributes[0])
        want = list(attributes)
        if len(set(want)) != len(want):
            raise WorkloadError(f"marginal: an attribute is repeated in {want}")
        groups = self.groups
        for i, g in enumerate(groups):
            if g.get("marginal") and sorted(g["attributes"]) == sorted(want) and _is_identity(g):
                frame = self.answers(i)
                return _reordered(frame, g["attributes"], want)
        have = [tuple(g["attributes"]) for g in groups if g.get("marginal")]
        raise WorkloadError(f"marginal: the run released no marginal over {tuple(want)}; its marginals are "
                            f"{have[:20]}{' ...' if len(have) > 20 else ''}")

    def synthetic(self, table: str | None = None) -> pd.DataFrame:
        """The synthetic records the run made (``synthesize:`` records, or a relational run's ``table``)."""
        root = Path(self.out_dir) / "synthetic"
        records = root / "records"
        if table is None and records.is_dir():
            return pd.read_parquet(records)
        files = {p.stem: p for p in root.glob("*.parquet")} if root.is_dir() else {}
        files.update({f"links/{p.stem}": p for p in (root / "links").glob("*.parquet")})  # a schema graph's links
        if table is not None and table in files:
            return pd.read_parquet(files[table])
        if table is None and len(files) == 1:
            return pd.read_parquet(next(iter(files.values())))
        if files:
            raise ConfigError(f"synthetic: name the table, one of {sorted(files)}")
        raise ConfigError("synthetic: this run made no synthetic records; add `synthesize: true` to the config "
                          "(post-processing, no extra budget) and run again")

    def plan(self) -> dict[str, Any] | None:
        """The expected error the plan gave for this run (``report.json``'s ``expected_error``)."""
        return self.report.get("expected_error") if isinstance(self.report, Mapping) else None

    def __repr__(self) -> str:
        spent = self.ledger.get("spent", {}) if isinstance(self.ledger, Mapping) else {}
        return (f"Result(out_dir={str(self.out_dir)!r}, groups={len(self.groups)}, "
                f"spent={ {k: spent[k] for k in ('rho', 'epsilon', 'delta') if k in spent} })")


def _is_identity(group: Mapping[str, Any]) -> bool:
    """A plain marginal (identity queries on every attribute)."""
    queries = group.get("queries") or {}
    return all(q == "identity" for q in queries.values()) if isinstance(queries, Mapping) else True


#: the order of a marginal's value columns in ``Result.marginal`` (any others follow)
VALUE_COLUMNS = ("estimate", "published", "variance", "ci_low", "ci_high")


def _reordered(frame: pd.DataFrame, stored: list[str], want: list[str]) -> pd.DataFrame:
    """The marginal with columns code, label per attribute (in the order asked), then the value columns;
    rows sorted by the codes in that order."""
    front = [c for a in want for c in (a, f"{a}_label") if c in frame.columns]
    front += [c for c in VALUE_COLUMNS if c in frame.columns]
    rest = [c for c in frame.columns if c not in front]
    out = frame[front + rest]
    if stored != want:
        out = out.sort_values(want, kind="stable").reset_index(drop=True)
    return out


__all__ = ["Result", "RunSummary"]
