"""The parts of a relational job's config both of its forms share: tables, links, references, budgets.

Used by ``privcube.relational.config`` (the two-table forms) and ``privcube.relational.schema_graph`` (a list
of foreign keys); nothing here reads private data.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privcube.core.config_files import resolve_path
from privcube.core.domain import Domain
from privcube.core.errors import BudgetError, ConfigError
from privcube.core.params import REQUIRED, Param
from privcube.privacy.budget import PrivacyBudget

#: a relational job's ``privacy`` section (``table_budgets`` refuses any other key)
PRIVACY_PARAMS: dict[str, Param] = {
    "tables": Param(REQUIRED, "{NAME: budget | public}", "one budget per table of data.tables "
                                                         "(privacy.tables.NAME); in a list of links a table may be "
                                                         "public instead: its rows released as they are, unlinkable, "
                                                         "nothing spent"),
    "links": Param(REQUIRED, "budget | {LINK: budget}", "the links' budget (two-table forms), or one per link named "
                                                        "as a foreign key's from or a link table's left-right (a list "
                                                        "of links), each optionally with its own d_max and truncate"),
}
#: one part's Gaussian budget: ``privacy.tables.NAME`` and the links' (beside ``LINK_BOUND_PARAMS``); no other key
PART_BUDGET_PARAMS: dict[str, Param] = {
    "epsilon": Param(None, "number > 0", "epsilon of this part's (epsilon, delta)-DP guarantee (or give rho)"),
    "delta": Param(None, "number in (0, 0.1)", "delta of this part's guarantee, needed with epsilon (Gaussian "
                                               "noise); with rho, the delta at which rho is read (default 1e-9)"),
    "rho": Param(None, "number > 0", "this part's budget as zCDP rho, instead of epsilon"),
}
#: a one-to-many link through a foreign key (``data.links`` item); ``within`` only in a list of links
FK_PARAMS: dict[str, Param] = {
    "from": Param(REQUIRED, "CHILD.fk", "the child table and its foreign-key column"),
    "to": Param(REQUIRED, "PARENT.key", "the parent table and its key column"),
    "within": Param(None, "OTHER.fk", "in a list of links: every parent with children through this key has "
                                      "children through OTHER.fk too (public knowledge, no budget)"),
}
FK_KEYS = {"from", "to"}
#: a many-to-many link table (``data.links`` item)
LINK_TABLE_PARAMS: dict[str, Param] = {
    "path": Param(REQUIRED, "path", "the link table's file: one row per link"),
    "left": Param(REQUIRED, "TABLE.key", "the table and key the first id column points at"),
    "right": Param(REQUIRED, "TABLE.key", "the table and key the second id column points at (the same table: "
                                          "self-referential links)"),
    "columns": Param(None, "[left_col, right_col]", "the file's two id columns (default: <table>.<key>, else the "
                                                    "file's only two columns)"),
}
LINK_TABLE_KEYS = set(LINK_TABLE_PARAMS)
#: a link's own degree bound beside its budget (``privacy.links.<name>: {epsilon, delta, d_max, truncate}``);
#: a key left out takes the mechanism's value
LINK_BOUND_PARAMS: dict[str, Param] = {
    "d_max": Param(None, "int >= 1", "this link's public bound on links per record (default: mechanism.d_max)"),
    "truncate": Param(None, "bool", "drop this link's links beyond its d_max (default: mechanism.truncate)"),
}
LINK_BOUND_KEYS = tuple(LINK_BOUND_PARAMS)


@dataclass
class TableSpec:
    """One input table: where it is, its public schema and its key column (if any)."""

    name: str
    path: str
    schema: Any  # privcube.storage.schema.Schema
    key: str | None = None
    has_labels: bool = False

    @property
    def domain(self) -> Domain:
        """The code domain of the schema's attributes."""
        return self.schema.domain


@dataclass
class LinkSpec:
    """The links: a foreign key (one_to_many) or a link table (many_to_many)."""

    kind: str
    left: str  # one_to_many: child table; many_to_many: left table
    left_col: str  # one_to_many: FK column of the child; many_to_many: key column of the left table
    right: str  # parent / right table
    right_col: str  # key column of the right table
    path: str | None = None
    columns: tuple[str, str] | None = None
    within: str | None = None  # a graph's foreign key: every parent with children here has children in that link


def parse_ref(ref: Any, what: str) -> tuple[str, str]:
    """``"table.column"`` split in two; a ConfigError naming ``what`` otherwise."""
    if not isinstance(ref, str) or ref.count(".") != 1 or not all(ref.split(".")):
        raise ConfigError(f"{what} must look like 'table.column', got {ref!r}")
    t, c = ref.split(".")
    return t, c


def parse_budget(b: Any, what: str) -> PrivacyBudget:
    """One part's Gaussian budget, (epsilon, delta) or (rho, delta); a BudgetError naming ``what`` otherwise."""
    if not isinstance(b, Mapping):
        raise BudgetError(f"{what}: expected {{epsilon, delta}} or {{rho, delta}}, got {b!r}")
    unknown = set(b) - set(PART_BUDGET_PARAMS)
    if unknown:  # e.g. budget_file, which only a single-table job takes: refused, not silently ignored
        raise BudgetError(f"{what}: unknown key(s) {sorted(map(str, unknown))}; a part's budget takes "
                          f"{', '.join(PART_BUDGET_PARAMS)}")
    try:
        out = PrivacyBudget.from_config(b)
    except BudgetError as e:
        raise BudgetError(f"{what}: {e}") from None
    if out.pure or out.delta <= 0:
        raise BudgetError(f"{what}: give delta as well (the Gaussian mechanism needs (epsilon, delta) or rho)")
    return out


def parse_link_budget(b: Any, what: str) -> tuple[PrivacyBudget, dict[str, Any]]:
    """One link's budget and its own degree bound: ``{epsilon, delta[, d_max][, truncate]}`` (or ``rho``);
    returns (budget, the bound keys given). ``d_max`` a positive integer, ``truncate`` true or false; errors
    name ``what`` and the key."""
    if not isinstance(b, Mapping):
        return parse_budget(b, what), {}
    unknown = set(b) - {*PART_BUDGET_PARAMS, *LINK_BOUND_KEYS}
    if unknown:
        raise BudgetError(f"{what}: unknown key(s) {sorted(map(str, unknown))}; a link takes epsilon, delta or rho, "
                          "and optionally its own d_max and truncate")
    bound = {k: b[k] for k in LINK_BOUND_KEYS if k in b}
    if "d_max" in bound:
        d = bound["d_max"]
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ConfigError(f"{what}.d_max: the link's degree bound must be a positive integer, got {d!r}")
    if "truncate" in bound and not isinstance(bound["truncate"], bool):
        raise ConfigError(f"{what}.truncate: must be true or false, got {bound['truncate']!r}")
    return parse_budget({k: v for k, v in b.items() if k not in LINK_BOUND_KEYS}, what), bound


def table_budgets(privacy: Any, tables: Mapping[str, Any], links_form: str) -> Mapping[str, Any]:
    """The ``privacy.tables`` mapping after the checks both config forms share (``privacy`` a mapping
    of ``tables`` and ``links`` only, no unknown table); ``links_form`` shows the expected links budget."""
    if not isinstance(privacy, Mapping):
        raise ConfigError(f"privacy is missing: give {{tables: {{name: {{epsilon, delta}}}}, links: {links_form}}}")
    bad = set(privacy) - set(PRIVACY_PARAMS)
    if bad:
        raise ConfigError(f"privacy: unknown key(s) {sorted(bad)}; a relational job takes 'tables' and 'links'")
    ptab = privacy.get("tables")
    if not isinstance(ptab, Mapping):
        raise BudgetError("privacy.tables is missing: give a budget {epsilon, delta} for each table")
    extra = set(ptab) - set(tables)
    if extra:
        raise ConfigError(f"privacy.tables: unknown table(s) {sorted(map(str, extra))}; tables are {sorted(tables)}")
    return ptab


def link_table_spec(spec: Mapping[str, Any], tables: Mapping[str, TableSpec], base: Any, what: str) -> LinkSpec:
    """A many-to-many link table ``{path, left: T.key, right: U.key[, columns: [l, r]]}`` (keys already
    checked); errors name ``what`` (``data.links`` or ``data.links[i]``)."""
    lt, lk = parse_ref(spec.get("left"), f"{what}.left")
    rt, rk = parse_ref(spec.get("right"), f"{what}.right")
    for t, side in ((lt, "left"), (rt, "right")):
        if t not in tables:
            raise ConfigError(f"{what}.{side}: unknown table {t!r}; tables are {sorted(tables)}")
    for t, k, side in ((lt, lk, "left"), (rt, rk, "right")):
        if tables[t].key is not None and tables[t].key != k:
            raise ConfigError(f"{what}.{side} names {t}.{k} but data.tables.{t}.key is {tables[t].key!r}")
    cols = spec.get("columns")
    if cols is not None:
        if (isinstance(cols, (str, bytes)) or not isinstance(cols, (list, tuple)) or len(cols) != 2
                or not all(isinstance(c, str) and c for c in cols) or cols[0] == cols[1]):
            raise ConfigError(f"{what}.columns: expected two distinct column names [left, right], got {cols!r}")
        cols = (cols[0], cols[1])
    path = spec.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{what}.path: expected a path string, got {path!r}")
    path = resolve_path(path, Path(base))
    return LinkSpec("many_to_many", lt, lk, rt, rk, path, cols)


__all__ = ["FK_KEYS", "LINK_BOUND_KEYS", "LINK_TABLE_KEYS", "LinkSpec", "TableSpec", "link_table_spec", "parse_budget",
           "parse_link_budget", "parse_ref", "table_budgets"]
