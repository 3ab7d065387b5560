"""The checked inputs of a relational run: links, codes, degree bound, budgets and synthetic sizes.

Everything here runs before the first charge: a bad link, degree, budget or size raises (an error that
names the table, column or key, never a private value) while nothing is spent and nothing is written.
The real links and codes are checked where they live (``real_side``); this process keeps only public sizes
and reports.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, DataError
from privcube.core.context import RunContext
from privcube.privacy.budget import PrivacyBudget
from privcube.relational.stages.composition import as_budget, compose_budgets
from privcube.relational.stages.degree_bound import check_d_max
from privcube.relational.stages.real_side import RealSide
from privcube.relational.stages.resolved_links import Links, parse_links, table_codes


@dataclass
class Problem:
    """A relational run's inputs after every check: the real side (on the cluster), sizes, budgets."""

    p: dict[str, Any]
    lk: Links
    names: tuple[str, str]
    unique: list[str]
    doms: tuple[Domain, Domain]
    real: RealSide  # codes and links where they live; sizes, degree reports and histograms here
    deg_report: dict[str, Any]
    need: list[str]  # tables synthesized here (not supplied)
    total: PrivacyBudget
    b_links: PrivacyBudget
    tbud: dict[str, PrivacyBudget]
    given: dict[str, np.ndarray] = field(default_factory=dict)  # supplied synthetic tables
    n_syn: dict[str, int] = field(default_factory=dict)
    m_syn: int = 0
    sibling: Any = None  # siblings.Sibling: an earlier foreign key into the same parent (schema graphs)

    @property
    def m(self) -> int:
        """Number of real links (public, as in the paper)."""
        return self.real.m

    @property
    def self_ref(self) -> bool:
        """One table linked to itself."""
        return self.lk.self_ref

    @property
    def no_diag(self) -> bool:
        """Self-referential without self-loops: the diagonal i = j is excluded."""
        return self.self_ref and not self.p["self_loops"]

    @property
    def kind(self) -> str:
        """``one_to_many`` or ``many_to_many``."""
        return self.lk.kind

    @property
    def n_real(self) -> tuple[int, int]:
        """Real row counts of (left, right) (public); a one-to-many child counts only linked rows."""
        return self.real.n_real

    @property
    def n_syn_pair(self) -> tuple[int, int]:
        """Synthetic row counts of (left, right)."""
        return self.n_syn[self.names[0]], self.n_syn[self.names[1]]


def _synthetic_sizes(pr: Problem, synthetic_tables: Mapping[str, Any]) -> None:
    """Synthetic row counts (public: ``synthetic_rows``, a supplied table's size, or the real size) and m_syn."""
    p, names = pr.p, pr.names
    rows = dict(p["synthetic_rows"] or {})
    if set(rows) - set(pr.unique):
        raise ConfigError(f"mechanism 'relational': parameter 'synthetic_rows' names unknown table(s) "
                          f"{sorted(map(str, set(rows) - set(pr.unique)))}; tables are {sorted(pr.unique)}")
    for s, (name, dom) in enumerate(zip(names, pr.doms)):
        if name in pr.n_syn:
            continue
        if name in synthetic_tables:
            pr.given[name] = table_codes(synthetic_tables[name], dom, f"synthetic {name}")
            pr.n_syn[name] = int(pr.given[name].shape[0])
        else:
            pr.n_syn[name] = int(rows.get(name, pr.n_real[s]))
    n1s, n2s = pr.n_syn_pair
    if n1s <= 0 or n2s <= 0:
        raise DataError("synthetic tables must have at least one row each")
    cells = n1s * (n2s - 1) if pr.no_diag else n1s * n2s
    if pr.kind == "one_to_many":
        pr.m_syn = n1s
        _check_room(pr, n1s, n2s)
        return
    m_syn = p["m_syn"]
    if m_syn is None:
        m_syn = int(round(pr.m * math.sqrt(n1s * n2s / (pr.n_real[0] * pr.n_real[1]))))
    if isinstance(m_syn, bool) or int(m_syn) != m_syn or not (1 <= int(m_syn) <= cells):
        raise ConfigError(f"mechanism 'relational': parameter 'm_syn' must be an integer in [1, {cells}], got {m_syn!r}")
    pr.m_syn = int(m_syn)
    _check_room(pr, n1s, n2s)


def _check_room(pr: Problem, n1s: int, n2s: int) -> None:
    """``degrees: preserve`` promises ≤ d_max links a synthetic record: refuse, from the public sizes alone, a
    job whose synthetic links cannot fit, instead of releasing links above d_max."""
    if pr.p["degrees"] == "preserve":
        msg = room_error(pr.kind, pr.names, n1s, n2s, pr.m_syn, int(pr.p["d_max"]))
        if msg:
            raise ConfigError(msg)


def room_error(kind: str, names: tuple[str, str], n1s: int, n2s: int, m_syn: int, d_max: int) -> str | None:
    """The one-line refusal when ``m_syn`` links cannot fit on ``n1s`` × ``n2s`` synthetic records with ≤ d_max
    links each (one-to-many: every child row keeps its foreign key, so children ≤ parents × d_max), else None.
    Public sizes only."""
    if kind == "one_to_many":
        if n1s > n2s * d_max:
            return (f"links: the {n1s} synthetic rows of {names[0]!r} each need a parent in {names[1]!r}, but {n2s} "
                    f"parents with at most d_max {d_max} children hold {n2s * d_max}: raise d_max to at least "
                    f"{math.ceil(n1s / n2s)}, change synthetic_rows, or set degrees: free")
        return None
    for name, n in ((names[0], n1s), (names[1], n2s)):
        if m_syn > n * d_max:
            return (f"links: {m_syn} synthetic links do not fit on the {n} synthetic rows of {name!r} with at most "
                    f"d_max {d_max} links each ({n * d_max}): raise d_max to at least {math.ceil(m_syn / n)}, change "
                    "synthetic_rows or m_syn, or set degrees: free")
    return None


def prepare(tables: Mapping[str, tuple[Any, Domain]], links: Any, p: dict[str, Any], budgets: Mapping[str, Any],
            synthetic_tables: Mapping[str, Any], context: RunContext | None = None) -> Problem:
    """Check and resolve every input of ``run_relational`` (see there) into a :class:`Problem`: budgets first
    (no data read), then the real side's checks as tasks where the data is (``RealSide``)."""
    lk = parse_links(links, tables)
    names = (lk.left, lk.right)
    unique = list(dict.fromkeys(names))
    doms = (tables[lk.left][1], tables[lk.right][1])
    need = [n for n in unique if n not in synthetic_tables]
    total = compose_budgets(budgets, need)
    b_links = as_budget(budgets["links"], "privacy.links")
    tbud = {n: as_budget(budgets["tables"][n], f"privacy.tables.{n}") for n in need}
    check_d_max(p["d_max"])
    real = RealSide(lk, tables, p, context)
    lk.report = real.links_report
    pr = Problem(p, lk, names, unique, doms, real, real.degree_report, need, total, b_links, tbud)
    _synthetic_sizes(pr, synthetic_tables)
    return pr


__all__ = ["Problem", "prepare", "room_error"]
