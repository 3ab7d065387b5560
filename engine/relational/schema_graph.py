"""The schema graph of a relational job whose ``data.links`` is a list (several tables, several links).

Each item is a foreign key ``{from: CHILD.fk, to: PARENT.key[, within: OTHER.fk]}`` (one-to-many; ``within``
names an earlier foreign key into the same parent whose parents include this one's) or a many-to-many link table
with the keys of the two-table form, ``{path: ratings.parquet, left: users.id, right: movies.id[, columns:
[user_id, movie_id]]}``. ``privacy.links`` then maps each link's name to its own budget: a foreign key is
named by its ``from`` (``sessions.user_id``), a link table by ``LEFT.key-RIGHT.key`` (``users.id-movies.id``,
its ``left`` and ``right`` joined by ``-``); ``privacy.tables`` gives each table a budget or ``public``
(released as it is, no budget). Checked here, before any data is read: known tables, one link per FK
column and per pair of tables, one key per table, no cycle among the foreign keys. Errors name the config
key at fault; nothing here reads private data.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from privcube.core.errors import BudgetError, ConfigError
from privcube.privacy.budget import PrivacyBudget
from privcube.relational.spec import (
    FK_KEYS,
    LINK_TABLE_KEYS,
    LinkSpec,
    TableSpec,
    link_table_spec,
    parse_budget,
    parse_link_budget,
    parse_ref,
    table_budgets,
)

PUBLIC = "public"


def link_name(f: LinkSpec) -> str:
    """The link's name, its key under ``privacy.links`` and in the ledger: a foreign key's ``from``
    (``CHILD.fk``), a link table's ``LEFT.key-RIGHT.key``."""
    if f.kind == "many_to_many":
        return f"{f.left}.{f.left_col}-{f.right}.{f.right_col}"
    return f"{f.left}.{f.left_col}"


def parse_link_table(item: Mapping[str, Any], tables: Mapping[str, TableSpec], base: Any, what: str) -> LinkSpec:
    """One many-to-many item ``{path, left: T.key, right: U.key[, columns: [l, r]]}`` of the list form (the
    keys of the two-table form; a self-referential link table is taken only in the two-table form)."""
    bad = set(item) - LINK_TABLE_KEYS
    if bad:
        raise ConfigError(f"{what}: unknown key(s) {sorted(map(str, bad))} for a link table; known: "
                          f"{sorted(LINK_TABLE_KEYS)}")
    spec = link_table_spec(item, tables, base, what)
    if spec.left == spec.right:
        raise ConfigError(f"{what}: a self-referential link table ({spec.left}.{spec.left_col} to itself) is "
                          "supported only as the single data.links of a one-table job, not in a list of links")
    return spec


def parse_fk_list(items: list[Any], tables: Mapping[str, TableSpec], base: Any = ".") -> list[LinkSpec]:
    """``data.links`` as a list of foreign keys ``{from: CHILD.fk, to: PARENT.key}`` (one-to-many) and link
    tables ``{path, left: T.key, right: U.key[, columns]}`` (many-to-many); ``base`` resolves their paths."""
    if not items:
        raise ConfigError("data.links: the list of links is empty; give [{from: child.fk, to: parent.key}, ...] "
                          "and/or link tables {path, left: t.key, right: u.key}")
    fks: list[LinkSpec] = []
    seen: dict[str, int] = {}
    for n, item in enumerate(items):
        what = f"data.links[{n}]"
        if isinstance(item, Mapping) and "path" in item:
            spec = parse_link_table(item, tables, base, what)
            name = link_name(spec)
            pair = {spec.left, spec.right}
            for m, other in enumerate(fks):
                if other.kind == "many_to_many" and {other.left, other.right} == pair:
                    raise ConfigError(f"{what}: tables {sorted(pair)} already have a link table in data.links[{m}]; "
                                      "one link table per pair of tables")
            seen[name] = n
            fks.append(spec)
            continue
        if not isinstance(item, Mapping) or not FK_KEYS <= set(item) or set(item) - FK_KEYS - {"within"}:
            got = sorted(map(str, item)) if isinstance(item, Mapping) else item
            raise ConfigError(f"{what}: expected {{from: child.fk, to: parent.key[, within: other.fk]}} (a foreign "
                              f"key takes 'from', 'to' and optionally 'within') or a link table {{path, left: t.key, "
                              f"right: u.key}}, got {got!r}")
        child, fk = parse_ref(item["from"], f"{what}.from")
        parent, key = parse_ref(item["to"], f"{what}.to")
        for t, side in ((child, "from"), (parent, "to")):
            if t not in tables:
                raise ConfigError(f"{what}.{side}: unknown table {t!r}; tables are {sorted(tables)}")
        if child == parent:
            raise ConfigError(f"{what}: a foreign key into the same table ({child}.{fk} -> {parent}.{key}) is not "
                              "supported in a list of links")
        pk = tables[parent].key
        if pk is not None and pk != key:
            raise ConfigError(f"{what}.to names {parent}.{key}, which is not the key of table {parent!r} "
                              f"(data.tables.{parent}.key is {pk!r})")
        if tables[child].key is not None and tables[child].key == fk:
            raise ConfigError(f"{what}.from: {child}.{fk} is the key of table {child!r}, not a foreign key")
        name = f"{child}.{fk}"
        if name in seen:
            raise ConfigError(f"{what}.from: {name} is already the foreign key of data.links[{seen[name]}]; "
                              "one link per column")
        seen[name] = n
        fks.append(LinkSpec("one_to_many", child, fk, parent, key, within=_within(item, fks, parent, what)))
    return fks


def _within(item: Mapping[str, Any], earlier: list[LinkSpec], parent: str, what: str) -> str | None:
    """A foreign key's ``within: OTHER.fk``: every parent with children through this key has children through
    OTHER.fk, an earlier foreign key into the same parent table (public schema knowledge, e.g. each user's
    devices appear among the devices of their sessions, so a user with devices has sessions)."""
    if "within" not in item:
        return None
    t, c = parse_ref(item["within"], f"{what}.within")
    for f in earlier:
        if f.kind == "one_to_many" and (f.left, f.left_col) == (t, c):
            if f.right != parent:
                raise ConfigError(f"{what}.within: {t}.{c} links to {f.right!r}, not to {parent!r}; within names "
                                  "an earlier foreign key into the same parent table")
            return f"{t}.{c}"
    raise ConfigError(f"{what}.within: {t}.{c} is not a foreign key listed before this one; within names an "
                      f"earlier foreign key into {parent!r}")


def _check_acyclic(fks: list[LinkSpec]) -> None:
    """No cycle among child -> parent edges (ConfigError naming the tables on the cycle)."""
    edges: dict[str, list[str]] = {}
    for f in fks:
        if f.kind == "one_to_many":  # a link table is no child -> parent edge
            edges.setdefault(f.left, []).append(f.right)
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(t: str, path: list[str]) -> None:
        state[t] = 1
        for u in edges.get(t, []):
            if state.get(u) == 1:
                cyc = path[path.index(u):] + [u] if u in path else [t, u]
                raise ConfigError(f"data.links: the schema graph has a cycle ({' -> '.join(cyc)}); foreign keys "
                                  "must form a graph without cycles")
            if u not in state:
                visit(u, [*path, u])
        state[t] = 2

    for t in list(edges):
        if t not in state:
            visit(t, [t])


def check_graph(tables: Mapping[str, TableSpec], fks: list[LinkSpec]) -> dict[str, str]:
    """Every table linked, identifiers not schema attributes, one key per parent, no cycle; returns each
    table's key column (declared, else the one links point at, else a free default)."""
    _check_acyclic(fks)
    linked = {f.left for f in fks} | {f.right for f in fks}
    if set(tables) - linked:
        raise ConfigError(f"data.links: table(s) {sorted(set(tables) - linked)} are in no link")
    keys: dict[str, str] = {n: t.key for n, t in tables.items() if t.key is not None}
    for n, f in enumerate(fks):
        ends = ((f.left, f.left_col, "left"), (f.right, f.right_col, "right")) if f.kind == "many_to_many" else \
            ((f.right, f.right_col, "to"),)
        for t, col, side in ends:
            if keys.setdefault(t, col) != col:
                raise ConfigError(f"data.links[{n}].{side} names {t}.{col}, but another link points at "
                                  f"{t}.{keys[t]}; a table has one key")
    for n, f in enumerate(fks):
        sides = ("left", "right") if f.kind == "many_to_many" else ("from", "to")
        for t, col, side in ((f.left, f.left_col, sides[0]), (f.right, f.right_col, sides[1])):
            if col in tables[t].schema:
                raise ConfigError(f"data.links[{n}].{side}: column {col!r} of table {t!r} is an identifier; it cannot "
                                  "also be a schema attribute")
        if f.kind == "one_to_many" and keys.get(f.left) == f.left_col:
            raise ConfigError(f"data.links[{n}].from: {f.left}.{f.left_col} is the key of table {f.left!r}, "
                              "not a foreign key")
    for t in tables.values():
        if t.key is not None and t.key in t.schema:
            raise ConfigError(f"data.tables.{t.name}.key: column {t.key!r} cannot also be a schema attribute")
    for name, t in tables.items():
        if name not in keys:
            taken = set(t.schema.names) | {f.left_col for f in fks if f.left == name and f.kind == "one_to_many"}
            keys[name] = next(k for k in ("id", "row_id", "_id", "record_id") if k not in taken)
    return keys


def graph_parts(privacy: Any, tables: Mapping[str, TableSpec],
                fks: list[LinkSpec]) -> tuple[dict[str, PrivacyBudget], list[str], dict[str, dict[str, Any]]]:
    """``privacy``: a budget (or ``public``) per table, a budget per link's ``from`` (with, optionally, the
    link's own ``d_max`` / ``truncate``); returns (parts, public, each link's bound keys given)."""
    ptab = table_budgets(privacy, tables, "{child.fk: {epsilon, delta}, left.key-right.key: {epsilon, delta}}")
    parts: dict[str, PrivacyBudget] = {}
    public: list[str] = []
    for name in tables:
        if name not in ptab:
            raise BudgetError(f"privacy.tables: no budget for table {name!r}")
        if ptab[name] == PUBLIC:
            public.append(name)
        else:
            parts[name] = parse_budget(ptab[name], f"privacy.tables.{name}")
    plinks = privacy.get("links")
    names = [link_name(f) for f in fks]
    if not isinstance(plinks, Mapping) or set(plinks) & {"epsilon", "rho", "delta"}:
        raise BudgetError(f"privacy.links: with a list under data.links, give one budget per link: "
                          f"{{{names[0]}: {{epsilon, delta}}, ...}} for {names}")
    extra = set(plinks) - set(names)
    if extra:
        raise ConfigError(f"privacy.links: unknown link(s) {sorted(map(str, extra))}; links (a foreign key's 'from', a link table's "
                          f"'left-right') are {names}")
    bounds: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in plinks:
            raise BudgetError(f"privacy.links: no budget for link {name!r}")
        parts[name], bound = parse_link_budget(plinks[name], f"privacy.links.{name}")
        if bound:
            bounds[name] = bound
    return parts, public, bounds


__all__ = ["PUBLIC", "check_graph", "graph_parts", "link_name", "parse_fk_list", "parse_link_table"]
