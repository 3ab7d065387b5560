"""Config of a relational job (mechanism ``relational``): two tables (or one self-linked table, or several
tables linked by a list of foreign keys: ``privcube.relational.schema_graph``), their links, budgets.

```yaml
data:
  tables:
    users:    {path: users.parquet, schema: users.schema.yaml, key: id}   # or domain: {col: size} / path
    sessions: {path: sessions.parquet, schema: sessions.schema.yaml}      # key optional for a child
  links: {from: sessions.user_id, to: users.id}                           # one-to-many through a FK
  # several links (a schema graph, no cycle of foreign keys; privacy.links then maps each link's name to its
  # budget: a foreign key's `from`, a link table's `LEFT.key-RIGHT.key`):
  #   links: [{from: sessions.user_id, to: users.id}, {from: bookings.user_id, to: users.id},
  #           {path: ratings.parquet, left: users.id, right: movies.id[, columns: [user_id, movie_id]]}]
  # many-to-many: links: {path: ratings.parquet, left: users.id, right: movies.id[, columns: [user_id, movie_id]]}
  # self-referential (ONE table under data.tables, one table budget):
  #   links: {path: friends.parquet, left: users.id, right: users.id[, columns: [user_id, friend_id]]}
mechanism: {name: relational, d_max: 50, iterations: 10, ..., evaluate_nonprivate: false}
privacy:
  tables: {users: {epsilon: 1, delta: 1e-6}, sessions: {epsilon: 1, delta: 1e-6}}
  links: {epsilon: 1, delta: 1e-6}       # list form: {sessions.user_id: {...}, users.id-movies.id: {...}, ...}
  # a link may carry its own degree bound beside its budget, {epsilon, delta, d_max: 3, truncate: false};
  # a key left out takes mechanism.d_max / mechanism.truncate (every form; the two-table form's one link too)
  # list form only: a table may be `public` (released as it is, no budget): tables: {users: public, ...}
cluster: {type: local, n_workers: 2}      # optional
noise_sampler: continuous                 # optional
output: {labels: true}                    # optional: decoded <attr>_label columns
```
Key and foreign-key columns are identifiers: they are read as they are (never encoded) and must not be
schema attributes. A link file's id columns default to ``<table>.<key>`` (the layout privcube writes),
else the file's only two columns; otherwise give ``columns``. Self-referential links (``left`` and
``right`` name the same table, the only one under ``data.tables``) are directed (source = ``left``
column, target = ``right`` column), exclude self-loops unless the mechanism sets ``self_loops: true``,
and are written to ``synthetic/links.parquet`` under the input's two column names; a foreign key into
the same table is refused (give it as a link table). Every budget needs (epsilon, delta) or
(rho[, delta]): the links and the table synthesizer use Gaussian noise. Nothing here reads private data.
The ``cluster`` and ``noise_sampler`` sections are every job kind's: the driver parses them
(``privcube.jobs.load_job``), this module only accepts them.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcube.core.config_files import check_recorded, resolve_path
from privcube.core.domain import Domain
from privcube.core.errors import BudgetError, ConfigError, PrivcubeError
from privcube.core.params import REQUIRED, Param
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

#: the top-level keys of a relational job config
TOP_PARAMS: dict[str, Param] = {
    "data": Param(REQUIRED, "{tables, links}", "the tables (data.tables.NAME) and the links between them"),
    "mechanism": Param(REQUIRED, "{name: relational, parameters}", "the relational mechanism's parameters"),
    "privacy": Param(REQUIRED, "{tables, links}", "a budget per table ({epsilon, delta}, or public in a list of "
                                                  "links) and per link (privacy.links, optionally with its own "
                                                  "d_max and truncate)"),
    "cluster": Param(None, "name | mapping", "where the work runs (Cluster kinds)"),
    "output": Param(None, "{labels}", "labels: decoded <attr>_label columns in the synthetic tables (default true)"),
    "noise_sampler": Param("continuous", "continuous | discrete", "discrete: exact discrete Gaussian samplers"),
}
TOP_KEYS = set(TOP_PARAMS)
DATA_KEYS = {"tables", "links"}
#: the keys of one table, ``data.tables.NAME``
TABLE_PARAMS: dict[str, Param] = {
    "path": Param(REQUIRED, "path", "the table's file or partitioned folder (Parquet, CSV)"),
    "schema": Param(None, "mapping | path", "the table's rich schema (or domain)"),
    "domain": Param(None, "{column: size} | path", "integer-coded columns and their sizes (instead of a schema)"),
    "key": Param(None, "column", "the table's key column (an identifier, never encoded; optional for a child)"),
}
TABLE_KEYS = set(TABLE_PARAMS)
OUTPUT_KEYS = {"labels"}


@dataclass
class RelationalJob:
    """A validated relational job."""

    raw: dict[str, Any]
    base_dir: Path
    tables: dict[str, TableSpec]
    links: LinkSpec
    params: dict[str, Any]
    budgets: dict[str, Any]  # {tables: {name: PrivacyBudget}, links: PrivacyBudget}
    parts: dict[str, PrivacyBudget]  # name -> budget, links under "links"
    total: PrivacyBudget
    output: dict[str, Any] = field(default_factory=dict)
    fks: list[LinkSpec] = field(default_factory=list)  # list form of data.links (a schema graph); else empty
    public: list[str] = field(default_factory=list)  # list form: tables released as they are (no budget)
    keys: dict[str, str] = field(default_factory=dict)  # list form: each table's (output) key column
    bounds: dict[str, dict[str, Any]] = field(default_factory=dict)  # link name -> its own d_max / truncate

    def link_params(self, name: str = "links") -> dict[str, Any]:
        """The mechanism parameters of one link (``name`` as under ``privacy.links``; ``links`` in the
        two-table forms): the job's, with the link's own ``d_max`` / ``truncate`` where given."""
        return {**self.params, **self.bounds.get(name, {})}

    def link_specs(self) -> dict[str, LinkSpec]:
        """Each link by its name under ``privacy.links`` (``links`` in the two-table forms)."""
        from privcube.relational.schema_graph import link_name

        return {link_name(f): f for f in self.fks} if self.multi else {"links": self.links}

    def bound_notes(self) -> dict[str, str]:
        """Per foreign key whose degree bound exceeds what its child's domain holds (d_max > the number of
        distinct child rows, the product of the child schema's sizes), a note saying so: if a parent's
        children are distinct rows (one per device type, say), no parent can have more, and a bound of that
        size says so with proportionally less noise on every link measurement. Public (schemas, config)."""
        from privcube.relational.stages.parameters import PARAMS

        out = {}
        for name, f in self.link_specs().items():
            if f.kind != "one_to_many":
                continue
            d_max = int(self.link_params(name).get("d_max", PARAMS["d_max"]))
            cells = 1
            for size in self.tables[f.left].domain.shape:
                cells *= int(size)
            if d_max > cells:
                shown = name if self.multi else f"{f.left}.{f.left_col}"
                key = f"privacy.links.{name}.d_max" if self.multi else "privacy.links.d_max"
                out[name] = (f"link {shown}: d_max {d_max} is larger than the {cells} distinct rows the domain of "
                             f"table {f.left!r} holds; if a parent's {f.left} rows are distinct, no parent has more "
                             f"than {cells}, and {key}: {cells} says so with {d_max / cells:.3g}x less noise on "
                             "every measurement of this link")
        return out

    @property
    def multi(self) -> bool:
        """Whether ``data.links`` was a list of foreign keys (schema graph)."""
        return bool(self.fks)

    def resolved(self) -> dict[str, Any]:
        """The config as written to ``config.yaml`` (paths resolved, schemas and budgets spelled out)."""
        out = copy.deepcopy(self.raw)
        data = out.setdefault("data", {})
        for name, t in self.tables.items():
            spec = data.setdefault("tables", {}).setdefault(name, {})
            spec["path"] = t.path
            for key in ("schema", "domain"):  # paths absolute: the file can be passed back as it is
                if isinstance(spec.get(key), str):
                    spec[key] = _resolve_path(spec[key], self.base_dir, f"data.tables.{name}.{key}")
        if self.links.path is not None and not self.multi:
            data["links"]["path"] = self.links.path
        out["mechanism"] = {"name": "relational", **self.params}
        links: Any = {"kind": self.links.kind, "left": f"{self.links.left}.{self.links.left_col}",
                      "right": f"{self.links.right}.{self.links.right_col}",
                      **({"columns": list(self.links.columns)} if self.links.columns else {})}
        if self.multi:
            links = [{"kind": f.kind, "from": f"{f.left}.{f.left_col}", "to": f"{f.right}.{f.right_col}",
                      **({"within": f.within} if f.within else {})}
                     if f.kind == "one_to_many" else
                     {"kind": f.kind, "left": f"{f.left}.{f.left_col}", "right": f"{f.right}.{f.right_col}",
                      "path": f.path, **({"columns": list(f.columns)} if f.columns else {})} for f in self.fks]
            for item, f in zip(data.get("links") or [], self.fks):
                if isinstance(item, dict) and f.path is not None:
                    item["path"] = f.path
        out["resolved"] = {
            "schemas": {n: t.schema.to_dict() for n, t in self.tables.items()},
            "links": links,
            "privacy": {"parts": {n: b.to_dict() for n, b in self.parts.items()}, "total": self.total.to_dict(),
                        "composition": COMPOSITION_NOTE, **({"public_tables": self.public} if self.public else {})},
        }
        if self.multi:
            out["resolved"]["keys"] = dict(self.keys)
        from privcube.relational.stages.parameters import PARAMS
        from privcube.relational.schema_graph import link_name

        names = [link_name(f) for f in self.fks] if self.multi else ["links"]
        out["resolved"]["degree_bounds"] = {n: {k: self.link_params(n).get(k, PARAMS[k])
                                                for k in ("d_max", "truncate")} for n in names}
        return out


COMPOSITION_NOTE = ("basic sequential composition of the parts' (epsilon, delta) guarantees: each table and the "
                    "links are zCDP mechanisms with rho_i = cdp_rho(epsilon_i, delta_i), hence (epsilon_i, delta_i)-DP, "
                    "and the run is (sum epsilon_i, sum delta_i)-DP; rho also adds (zCDP composition), giving the "
                    "tighter reading under 'zcdp'")


def _resolve_path(p: Any, base: Path, what: str) -> str:
    """A path of the config resolved against its folder; a ConfigError naming ``what`` if it is no string."""
    if not isinstance(p, str) or not p:
        raise ConfigError(f"{what}: expected a path string, got {p!r}")
    return resolve_path(p, base)


def _schema(name: str, spec: Mapping[str, Any], base: Path) -> Any:
    from privcube.storage.schema import Schema, load_schema

    given = [k for k in ("schema", "domain") if k in spec]
    if len(given) != 1:
        raise ConfigError(f"data.tables.{name}: give exactly one of 'schema' or 'domain'")
    src = spec[given[0]]
    try:
        if isinstance(src, str):
            path = _resolve_path(src, base, f"data.tables.{name}.{given[0]}")
            if given[0] == "domain":
                return Schema.from_domain(Domain.load(path))
            return load_schema(path)
        if isinstance(src, Mapping):
            return load_schema(src)
    except PrivcubeError as e:
        raise type(e)(f"data.tables.{name}.{given[0]}: {e}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"data.tables.{name}.{given[0]}: cannot read it: {e}") from None
    raise ConfigError(f"data.tables.{name}.{given[0]}: expected a path or a mapping, got {src!r}")


def load_relational_config(raw: Mapping[str, Any], base: str | Path = ".") -> RelationalJob:
    """Validate a relational job config (reads schemas, never data); errors name the key at fault. A run
    folder's ``config.yaml`` is accepted as it is (its ``resolved`` record is verified)."""

    raw = copy.deepcopy(dict(raw))
    base = Path(base).resolve()
    recorded = raw.pop("resolved", None)  # a run folder's config.yaml: verified below, not read as input
    job = _load_relational(raw, base)
    check_recorded(recorded, {"schemas": {n: t.schema.to_dict() for n, t in job.tables.items()}})
    check_recorded(recorded.get("privacy") if isinstance(recorded, Mapping) else recorded,
                   {"total": job.total.to_dict()})
    return job


def _load_relational(raw: dict[str, Any], base: Path) -> RelationalJob:
    """The body of :func:`load_relational_config` (``raw`` without its ``resolved`` record)."""
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(unknown)} for mechanism 'relational'; "
                          f"known: {sorted(TOP_KEYS)}")
    data = raw.get("data")
    if not isinstance(data, Mapping):
        raise ConfigError("data: expected a mapping with 'tables' and 'links'")
    bad = set(data) - DATA_KEYS
    if bad:
        raise ConfigError(f"data: unknown key(s) {sorted(bad)} for mechanism 'relational'; known: {sorted(DATA_KEYS)}")
    multi = isinstance(data.get("links"), list)
    tables = _tables(data.get("tables"), base, multi)
    fks: list[LinkSpec] = []
    public: list[str] = []
    keys: dict[str, str] = {}
    if multi:
        from privcube.relational.schema_graph import check_graph, graph_parts, link_name, parse_fk_list

        fks = parse_fk_list(data["links"], tables, base)
        keys = check_graph(tables, fks)
        links = fks[0]
        params = _params(raw.get("mechanism"), tables)
        parts, public, bounds = graph_parts(raw.get("privacy"), tables, fks)
        resized = sorted(set(params.get("synthetic_rows") or {}) & set(public))
        if resized:
            raise ConfigError(f"mechanism.synthetic_rows: table(s) {resized} are public (released as given); "
                              "remove them from synthetic_rows")
    else:
        links = _links(data.get("links"), tables, base)
        _check_identifiers(tables, links)
        params = _params(raw.get("mechanism"), tables)
        parts, bounds = _parts(raw.get("privacy"), tables)
    rho = sum(b.rho for b in parts.values())
    eps = sum(b.epsilon for b in parts.values())
    delta = sum(b.delta for b in parts.values())
    if delta >= 1:
        raise BudgetError(f"privacy: the deltas add up to {delta:g} >= 1")
    total = PrivacyBudget(rho, eps, delta, False)
    if multi:
        budgets = {"tables": {n: parts[n] for n in tables if n not in public},
                   "links": {link_name(f): parts[link_name(f)] for f in fks}}
    else:
        budgets = {"tables": {n: parts[n] for n in tables}, "links": parts["links"]}
    output = raw.get("output") or {}
    if not isinstance(output, Mapping) or set(output) - OUTPUT_KEYS:
        raise ConfigError(f"output: expected a mapping with key(s) {sorted(OUTPUT_KEYS)}, got {output!r}")
    if not isinstance(output.get("labels", True), bool):
        raise ConfigError(f"output.labels must be true or false, got {output.get('labels')!r}")
    return RelationalJob(raw, base, tables, links, params, budgets, parts, total, dict(output), fks, public, keys,
                         bounds)


def _tables(tables_raw: Any, base: Path, multi: bool = False) -> dict[str, TableSpec]:
    """``data.tables``: one or two tables (two or more with a list of links), each {path, schema|domain, key}."""
    if not isinstance(tables_raw, Mapping) or not tables_raw:
        raise ConfigError("data.tables: expected a mapping {name: {path, schema|domain, key}}")
    if multi and len(tables_raw) < 2:
        raise ConfigError(f"data.tables: a list of links needs at least two tables, got {len(tables_raw)}")
    if not multi and len(tables_raw) not in (1, 2):
        raise ConfigError(f"data.tables: relational synthesis takes two tables (or one table with self-referential "
                          f"links), got {len(tables_raw)} ({sorted(map(str, tables_raw))}); for more tables give "
                          "data.links as a list of foreign keys [{from: child.fk, to: parent.key}, ...]")
    tables: dict[str, TableSpec] = {}
    for name, spec in tables_raw.items():
        if not isinstance(name, str) or not name or "." in name:
            raise ConfigError(f"data.tables: table name {name!r} must be a non-empty string without '.'")
        if not isinstance(spec, Mapping):
            raise ConfigError(f"data.tables.{name}: expected {{path, schema|domain, key}}, got {spec!r}")
        bad = set(spec) - TABLE_KEYS
        if bad:
            raise ConfigError(f"data.tables.{name}: unknown key(s) {sorted(bad)}; known: {sorted(TABLE_KEYS)}")
        if "path" not in spec:
            raise ConfigError(f"data.tables.{name}.path is missing")
        path = _resolve_path(spec["path"], base, f"data.tables.{name}.path")
        schema = _schema(name, spec, base)
        key = spec.get("key")
        if key is not None and (not isinstance(key, str) or not key):
            raise ConfigError(f"data.tables.{name}.key: expected a column name, got {key!r}")
        has_labels = "schema" in spec and any(a.kind != "integer" or a.labels_ is not None for a in schema)
        tables[name] = TableSpec(name, path, schema, key, has_labels)
    return tables


def _check_identifiers(tables: Mapping[str, TableSpec], links: LinkSpec) -> None:
    """Every table is linked, and key / link columns are identifiers, not schema attributes."""
    linked = {links.left, links.right}
    if linked != set(tables):
        if len(tables) == 1:
            raise ConfigError(f"data.links: with one table ({next(iter(tables))!r}) the links must be self-referential "
                              "{path, left: t.key, right: t.key} with t that table")
        raise ConfigError(f"data.links: links between {sorted(linked)} leave table(s) "
                          f"{sorted(set(tables) - linked)} unlinked; self-referential links take one table")
    for t, col, role in ((links.left, links.left_col, "links"), (links.right, links.right_col, "links")):
        if col in tables[t].schema:
            raise ConfigError(f"data.tables.{t}: column {col!r} is an identifier used by {role}; it cannot also be "
                              "a schema attribute")
    for t in tables.values():
        if t.key is not None and t.key in t.schema:
            raise ConfigError(f"data.tables.{t.name}.key: column {t.key!r} cannot also be a schema attribute")


def _params(mech: Any, tables: Mapping[str, TableSpec]) -> dict[str, Any]:
    """``mechanism``: {name: relational, ...}, its parameters checked by the stages' own rules."""
    from privcube.relational.stages.parameters import check_params

    if not isinstance(mech, Mapping) or mech.get("name") != "relational":
        raise ConfigError("mechanism: expected {name: relational, ...}")
    params = {k: v for k, v in mech.items() if k != "name"}
    check_params(params)  # ConfigError naming the parameter
    extra_rows = set(params.get("synthetic_rows") or {}) - set(tables)
    if extra_rows:
        raise ConfigError(f"mechanism.synthetic_rows: unknown table(s) {sorted(map(str, extra_rows))}; "
                          f"tables are {sorted(tables)}")
    return params


def _parts(privacy: Any, tables: Mapping[str, TableSpec]) -> tuple[dict[str, PrivacyBudget], dict[str, dict[str, Any]]]:
    """``privacy``: a budget per table and one for the links (name -> budget, links under "links"), and the
    links' own degree bound where ``privacy.links`` gives one (``{"links": {d_max, truncate}}``)."""
    ptab = table_budgets(privacy, tables, "{epsilon, delta}")
    if "links" not in privacy:
        raise BudgetError("privacy.links is missing: give the links budget {epsilon, delta}")
    parts: dict[str, PrivacyBudget] = {}
    for name in tables:
        if name not in ptab:
            raise BudgetError(f"privacy.tables: no budget for table {name!r}")
        if ptab[name] == "public":
            raise ConfigError(f"privacy.tables.{name}: 'public' tables are taken only with a list of foreign keys "
                              "under data.links; give a budget {epsilon, delta}")
        parts[name] = parse_budget(ptab[name], f"privacy.tables.{name}")
    parts["links"], bound = parse_link_budget(privacy["links"], "privacy.links")
    return parts, ({"links": bound} if bound else {})


def _links(spec: Any, tables: Mapping[str, TableSpec], base: Path) -> LinkSpec:
    if not isinstance(spec, Mapping):
        raise ConfigError("data.links: give {from: child.fk, to: parent.key} or {path, left: t.key, right: t.key}")

    def known(t: str, what: str) -> None:
        if t not in tables:
            raise ConfigError(f"{what}: unknown table {t!r}; tables are {sorted(tables)}")

    if "from" in spec or "to" in spec:
        bad = set(spec) - FK_KEYS
        if bad:
            raise ConfigError(f"data.links: unknown key(s) {sorted(bad)} for a foreign key; known: {sorted(FK_KEYS)}")
        child, fk = parse_ref(spec.get("from"), "data.links.from")
        parent, key = parse_ref(spec.get("to"), "data.links.to")
        known(child, "data.links.from")
        known(parent, "data.links.to")
        if child == parent:
            raise ConfigError(f"data.links: a foreign key into the same table ({child}.{fk} -> {parent}.{key}) is not "
                              "supported; give self-referential links as a link table {path, left: "
                              f"{parent}.{key}, right: {parent}.{key}, columns: [source_col, target_col]}}")
        pk = tables[parent].key
        if pk is not None and pk != key:
            raise ConfigError(f"data.links.to names {parent}.{key} but data.tables.{parent}.key is {pk!r}")
        ck = tables[child].key
        if ck is not None and ck == fk:
            raise ConfigError(f"data.tables.{child}.key {ck!r} is also the foreign key in data.links.from")
        return LinkSpec("one_to_many", child, fk, parent, key)
    if "path" in spec:
        bad = set(spec) - LINK_TABLE_KEYS
        if bad:
            raise ConfigError(f"data.links: unknown key(s) {sorted(bad)} for a link table; known: {sorted(LINK_TABLE_KEYS)}")
        return link_table_spec(spec, tables, base, "data.links")
    raise ConfigError("data.links: give {from: child.fk, to: parent.key} or {path, left: t.key, right: t.key}")


__all__ = ["COMPOSITION_NOTE", "LinkSpec", "RelationalJob", "TableSpec", "load_relational_config"]
