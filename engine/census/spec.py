"""The census job's config: a geography hierarchy, tables by level, invariants, structural zeros, integer output.

A config with a ``geography`` section is a census job (``privcube.jobs.load_job``). Its keys (issue 35; checks and
users rely on them)::

    data: {path: persons.parquet, domain: domain.json}   # the finest unit is an attribute of the data (tract)
    geography: {attribute: tract, map: geo-map.parquet, levels: [state, county, tract]}
    workload: [{kway: 1, by: tract}, {kway: 2, by: county}, {kway: 2, by: state}]
    invariants: [{by: state}]                  # or `total`: published exactly, stated as public facts
    structural_zeros: [{age: [0, 1], marital: 1}]   # impossible cells: zero in every output
    output: {integer: true}
    privacy: {epsilon: 1, delta: 1e-9, levels: {state: 0.2, county: 0.3, tract: 0.5}}   # levels: optional split

Everything here is public (the domain, the map's location, the levels): nothing reads private data.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privcube.core.config_files import resolve_path
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.core.params import REQUIRED, Param

#: the top-level keys of a census job
CENSUS_PARAMS: dict[str, Param] = {
    "data": Param(REQUIRED, "mapping", "the persons: path, format and domain (the finest geographic unit is one "
                                       "of its attributes)"),
    "geography": Param(REQUIRED, "{attribute, map, levels}", "the finest unit's attribute, the public map (one row "
                                                             "per finest unit, one column per level) and the levels, "
                                                             "coarse to fine"),
    "workload": Param(REQUIRED, "list of {kway | marginals | attributes, by}", "the tables published within every "
                                                                               "unit of a level (at most 2-way)"),
    "privacy": Param(REQUIRED, "{epsilon, delta, levels} | {rho, levels}", "the budget and, optionally, its split "
                                                                           "over levels (default: chosen by the "
                                                                           "planner)"),
    "mechanism": Param("residual-planner", "name | {name, parameters}", "what measures each level's tables "
                                                                        "(residual-planner)"),
    "invariants": Param(None, "list of total | {by: level}", "totals published exactly: not protected, stated as "
                                                              "public facts in the ledger and the report"),
    "structural_zeros": Param(None, "list of {attribute: value | [low, high]}", "cells known impossible: zero in "
                                                                                "every output"),
    "output": Param(None, "{integer, ci_level, bootstrap, labels}", "integer tables, the interval level and the "
                                                                    "bootstrap size of the intervals"),
    "cluster": Param(None, "name | mapping", "where the work runs (Cluster kinds; without it: in this process)"),
    "noise_sampler": Param("continuous", "continuous | discrete", "discrete: exact discrete Gaussian samplers"),
}
#: keys of a census job's ``output`` section
CENSUS_OUTPUT_PARAMS: dict[str, Param] = {
    "integer": Param(False, "bool", "whole non-negative counts by controlled rounding that keeps the hierarchy and "
                                    "the invariants"),
    "ci_level": Param(0.95, "number in (0, 1)", "level of every published answer's ci_low / ci_high"),
    "bootstrap": Param(50, "int >= 10", "replicates of the parametric bootstrap behind ci_low / ci_high (no budget: "
                                        "noise drawn from the public noise distribution)"),
    "labels": Param(True, "bool", "write each attribute's decoded <attr>_label column beside its codes"),
}
#: keys of the ``geography`` section
GEOGRAPHY_PARAMS: dict[str, Param] = {
    "attribute": Param(REQUIRED, "attribute name", "the finest geographic unit: an attribute of the data and of "
                                                   "the domain (integer codes, one per unit)"),
    "map": Param(REQUIRED, "path", "the public map: Parquet or CSV, one row per finest unit, one integer column per "
                                   "level (a tree: every unit has one parent)"),
    "levels": Param(REQUIRED, "list of names", "the levels, coarse to fine; the last is `attribute`"),
}
GEOGRAPHY_KEYS = tuple(GEOGRAPHY_PARAMS)
#: keys of one census ``workload`` entry
WORKLOAD_ENTRY_PARAMS: dict[str, Param] = {
    "by": Param(REQUIRED, "level", "the level whose every unit gets the tables"),
    "kway": Param(None, "0 | 1 | 2", "every k-way table of the non-geographic attributes (0: the unit totals)"),
    "marginals": Param(None, "list of attribute lists", "a chosen set of tables, e.g. [[age, sex], [race]]"),
    "attributes": Param(None, "list of attribute names", "with kway: only these attributes"),
}
#: what ``privacy`` takes in a census job besides the budget
CENSUS_PRIVACY_PARAMS: dict[str, Param] = {
    "levels": Param(None, "{level: share}", "each measured level's share of the budget, summing to 1 (default: the "
                                            "planner's split, minimising the geometric mean of the levels' expected "
                                            "cell variances after the hierarchical fit)"),
}
MAX_WAY = 2
TOTAL = ""  # the root level (the nation): `invariants: [total]`


@dataclass(frozen=True)
class CensusGroup:
    """One published table family: the marginal on ``attributes`` within every unit of ``level``."""

    level: str
    attributes: tuple[str, ...]

    def label(self) -> str:
        """``county`` + ``age-sex`` style label for file names."""
        return "-".join((self.level, *self.attributes)) if self.attributes else f"{self.level}-total"


@dataclass(frozen=True)
class ZeroRule:
    """Cells known impossible: every combination of the listed codes (attribute -> allowed codes)."""

    codes: dict[str, tuple[int, ...]]

    def mask(self, attributes: Sequence[str], sizes: Mapping[str, int]) -> np.ndarray | None:
        """Boolean mask (True = impossible) over the table on ``attributes``, or None when the rule does not
        restrict that table (a rule on attributes the table lacks says nothing about its cells)."""
        if not set(self.codes) <= set(attributes):
            return None
        mask = np.ones(tuple(sizes[a] for a in attributes), dtype=bool)
        for axis, a in enumerate(attributes):
            if a in self.codes:
                hit = np.zeros(sizes[a], dtype=bool)
                hit[list(self.codes[a])] = True
                mask &= hit.reshape([-1 if i == axis else 1 for i in range(len(attributes))])
        return mask


@dataclass
class CensusSpec:
    """A validated census job: everything a run needs except the data."""

    raw: dict[str, Any]
    base_dir: Path
    domain: Domain            # every data attribute, the finest unit included
    schema: Any
    data_path: str | None
    data_format: str | None
    attribute: str            # the finest unit's attribute
    map_path: str
    levels: tuple[str, ...]   # coarse to fine; the last is ``attribute``
    groups: list[CensusGroup]
    budget: Any               # privcube.privacy.budget.PrivacyBudget
    split: dict[str, float] | None   # the budget share of each level, or None: chosen by the planner
    invariants: tuple[str, ...]      # levels whose unit totals are exact; TOTAL for the grand total
    zeros: list[ZeroRule]
    output: dict[str, Any]
    mechanism: str = "residual-planner"
    mechanism_params: dict[str, Any] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)
    noise_sampler: str = "continuous"

    @property
    def attributes(self) -> tuple[str, ...]:
        """The non-geographic attributes, in domain order."""
        return tuple(a for a in self.domain.attributes if a != self.attribute)

    @property
    def sizes(self) -> dict[str, int]:
        """Public domain size of each non-geographic attribute."""
        return {a: int(self.domain[a]) for a in self.attributes}

    def level_sets(self, level: str) -> list[tuple[str, ...]]:
        """The attribute sets published by ``level`` (in workload order, each once)."""
        return list(dict.fromkeys(g.attributes for g in self.groups if g.level == level))

    def measured_levels(self) -> list[str]:
        """Levels with at least one published table (coarse to fine)."""
        return [lv for lv in self.levels if self.level_sets(lv)]

    def zero_mask(self, attributes: Sequence[str]) -> np.ndarray | None:
        """Union of the structural zeros over the table on ``attributes`` (None when none applies)."""
        masks = [m for m in (r.mask(attributes, self.sizes) for r in self.zeros) if m is not None]
        return np.logical_or.reduce(masks) if masks else None


def is_census(raw: Mapping[str, Any]) -> bool:
    """A config is a census job when it has a ``geography`` section."""
    return "geography" in raw


def parse_census(raw: Mapping[str, Any], base: Path, *, need_data: bool = True) -> CensusSpec:
    """Check a census job's config (one ConfigError line per problem, naming the key) and resolve its paths."""
    from privcube.privacy.budget import PrivacyBudget
    from privcube.storage.data_spec import parse_data

    raw = dict(raw)
    unknown = set(raw) - set(CENSUS_PARAMS) - {"resolved"}
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(unknown)} for a census job (it has a geography "
                          f"section); known: {sorted(CENSUS_PARAMS)}")
    data = parse_data(raw, base, need_data=need_data)
    attribute, map_path, levels = _geography(raw.get("geography"), data.domain, base)
    groups = _workload(raw.get("workload"), levels, data.domain, attribute)
    privacy = raw.get("privacy")
    if not isinstance(privacy, Mapping):
        raise ConfigError("privacy is missing (epsilon + delta, or rho; levels: optional split)")
    split = _split(privacy.get("levels"), levels, groups)
    budget = PrivacyBudget.from_config({k: v for k, v in privacy.items() if k != "levels"})
    if budget.pure:
        raise ConfigError("privacy: a census job measures with Gaussian noise; give epsilon with delta, or rho")
    mech, params = _mechanism(raw.get("mechanism", "residual-planner"))
    return CensusSpec(raw=raw, base_dir=base, domain=data.domain, schema=data.schema, data_path=data.path,
                      data_format=data.format, attribute=attribute, map_path=map_path, levels=levels,
                      groups=groups, budget=budget, split=split,
                      invariants=_invariants(raw.get("invariants"), levels),
                      zeros=_zeros(raw.get("structural_zeros"), data.domain, attribute, data.schema),
                      output=_output(raw.get("output")), mechanism=mech, mechanism_params=params)


def _geography(geo: Any, domain: Domain, base: Path) -> tuple[str, str, tuple[str, ...]]:
    """``(attribute, map path, levels)`` of the ``geography`` section."""
    if not isinstance(geo, Mapping):
        raise ConfigError("geography: expected a mapping with attribute, map and levels")
    bad = set(geo) - set(GEOGRAPHY_KEYS)
    if bad:
        raise ConfigError(f"geography: unknown key(s) {sorted(bad)}; known: {list(GEOGRAPHY_KEYS)}")
    for key in GEOGRAPHY_KEYS:
        if key not in geo:
            raise ConfigError(f"geography.{key} is missing")
    attribute = geo["attribute"]
    if attribute not in domain.attributes:
        raise ConfigError(f"geography.attribute: {attribute!r} is not an attribute of the data's domain")
    levels = geo["levels"]
    if not isinstance(levels, Sequence) or isinstance(levels, str) or not levels \
            or not all(isinstance(v, str) and v for v in levels):
        raise ConfigError("geography.levels: expected a list of level names, coarse to fine (e.g. [state, county, "
                          "tract])")
    if len(set(levels)) != len(levels):
        raise ConfigError(f"geography.levels: a level is listed twice in {list(levels)}")
    if levels[-1] != attribute:
        raise ConfigError(f"geography.levels: the finest level (the last) must be geography.attribute "
                          f"{attribute!r}, got {levels[-1]!r}")
    clash = [v for v in levels[:-1] if v in domain.attributes]
    if clash:
        raise ConfigError(f"geography.levels: {clash[0]!r} is also an attribute of the data; coarser levels come "
                          "from the map")
    if not isinstance(geo["map"], str):
        raise ConfigError("geography.map: expected the path of the public map (Parquet or CSV)")
    return attribute, resolve_path(geo["map"], base), tuple(levels)


def _workload(entries: Any, levels: tuple[str, ...], domain: Domain, geo_attr: str) -> list[CensusGroup]:
    """The published table families, in config order (each once)."""
    if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
        raise ConfigError("workload: expected a list of {kway: k, by: level} entries")
    attrs = tuple(a for a in domain.attributes if a != geo_attr)
    out: list[CensusGroup] = []
    for i, e in enumerate(entries):
        where = f"workload[{i}]"
        if not isinstance(e, Mapping):
            raise ConfigError(f"{where}: expected a mapping such as {{kway: 2, by: county}}")
        bad = set(e) - set(WORKLOAD_ENTRY_PARAMS)
        if bad:
            raise ConfigError(f"{where}: unknown key(s) {sorted(bad)}; known: {', '.join(sorted(WORKLOAD_ENTRY_PARAMS))}")
        level = e.get("by")
        if level is None:
            raise ConfigError(f"{where}.by is missing: name the level whose units the tables are within "
                              f"({', '.join(levels)})")
        if level not in levels:
            raise ConfigError(f"{where}.by: level {level!r} does not exist; geography.levels: {', '.join(levels)}")
        for s in _entry_sets(e, where, attrs, domain):
            g = CensusGroup(level, s)
            if g not in out:
                out.append(g)
    return out


def _entry_sets(e: Mapping[str, Any], where: str, attrs: tuple[str, ...], domain: Domain) -> list[tuple[str, ...]]:
    """The attribute sets of one workload entry (canonical domain order)."""
    given = [k for k in ("kway", "marginals") if k in e]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of kway or marginals")
    pool = attrs
    if "attributes" in e:
        pool = tuple(_known(e["attributes"], f"{where}.attributes", attrs))
    if "kway" in e:
        k = e["kway"]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_WAY:
            raise ConfigError(f"{where}.kway: census tables are 0-, 1- or 2-way within a unit, got {k!r}")
        return [tuple(c) for c in itertools.combinations(pool, k)]
    sets = e["marginals"]
    if not isinstance(sets, Sequence) or isinstance(sets, str) or not sets:
        raise ConfigError(f"{where}.marginals: expected a list of attribute lists, e.g. [[age, sex], [race]]")
    out = []
    for j, s in enumerate(sets):
        names = _known(s, f"{where}.marginals[{j}]", pool)
        if len(names) > MAX_WAY:
            raise ConfigError(f"{where}.marginals[{j}]: census tables are at most {MAX_WAY}-way within a unit, "
                              f"got {len(names)} attributes")
        out.append(domain.canonical(names))
    return out


def _known(names: Any, where: str, pool: tuple[str, ...]) -> list[str]:
    """``names`` as a list of distinct attributes from ``pool``."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ConfigError(f"{where}: expected a list of attribute names")
    for n in names:
        if n not in pool:
            raise ConfigError(f"{where}: {n!r} is not a non-geographic attribute here; known: {', '.join(pool)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: an attribute is listed twice")
    return list(names)


def _split(levels_share: Any, levels: tuple[str, ...], groups: list[CensusGroup]) -> dict[str, float] | None:
    """``privacy.levels``: each measured level's share of the budget (summing to 1), or None (planner)."""
    if levels_share is None:
        return None
    if not isinstance(levels_share, Mapping):
        raise ConfigError("privacy.levels: expected {level: share}, e.g. {state: 0.2, county: 0.3, tract: 0.5}")
    measured = list(dict.fromkeys(g.level for g in groups))
    for lv, share in levels_share.items():
        if lv not in levels:
            raise ConfigError(f"privacy.levels: level {lv!r} does not exist; geography.levels: {', '.join(levels)}")
        if lv not in measured:
            raise ConfigError(f"privacy.levels.{lv}: no workload entry is by {lv}, so it measures nothing")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share > 0:
            raise ConfigError(f"privacy.levels.{lv}: expected a positive share, got {share!r}")
    missing = [lv for lv in measured if lv not in levels_share]
    if missing:
        raise ConfigError(f"privacy.levels: no share for level {missing[0]!r}, which the workload measures")
    total = float(sum(levels_share.values()))
    if abs(total - 1.0) > 1e-9:
        raise ConfigError(f"privacy.levels: the shares must sum to 1, got {total:g}")
    return {lv: float(levels_share[lv]) for lv in measured}


def _invariants(entries: Any, levels: tuple[str, ...]) -> tuple[str, ...]:
    """``invariants``: TOTAL for ``total``, else the level of each ``{by: level}`` entry."""
    if entries is None:
        return ()
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise ConfigError("invariants: expected a list such as [total, {by: state}]")
    out: list[str] = []
    for i, e in enumerate(entries):
        if e == "total" or (isinstance(e, Mapping) and set(e) == {"total"} and e["total"] is True):
            lv = TOTAL
        elif isinstance(e, Mapping) and set(e) == {"by"}:
            lv = e["by"]
            if lv not in levels:
                raise ConfigError(f"invariants[{i}].by: level {lv!r} does not exist; geography.levels: "
                                  f"{', '.join(levels)}")
        else:
            raise ConfigError(f"invariants[{i}]: expected `total` or {{by: level}}, got {e!r}")
        if lv in out:
            raise ConfigError(f"invariants[{i}]: {'total' if lv == TOTAL else 'by: ' + lv} is listed twice")
        out.append(lv)
    return tuple(out)


def _zeros(entries: Any, domain: Domain, geo_attr: str, schema: Any) -> list[ZeroRule]:
    """``structural_zeros``: each rule's codes per attribute (a code, [low, high] inclusive, or a label)."""
    if entries is None:
        return []
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise ConfigError("structural_zeros: expected a list such as [{age: [0, 14], marital: 1}]")
    rules = []
    for i, e in enumerate(entries):
        where = f"structural_zeros[{i}]"
        if not isinstance(e, Mapping) or not e:
            raise ConfigError(f"{where}: expected a mapping {{attribute: value | [low, high]}}")
        if len(e) > MAX_WAY:
            raise ConfigError(f"{where}: names {len(e)} attributes; census tables are at most {MAX_WAY}-way, so it "
                              "would zero no published cell")
        codes = {}
        for a, v in e.items():
            if a == geo_attr or a not in domain.attributes:
                raise ConfigError(f"{where}: {a!r} is not a non-geographic attribute of the domain")
            codes[a] = _codes(v, int(domain[a]), f"{where}.{a}", _labels(schema, a))
        if any(len(c) == int(domain[a]) for a, c in codes.items()) and len(codes) == 1:
            a = next(iter(codes))
            raise ConfigError(f"{where}: makes every value of {a!r} impossible, so every table would be zero")
        rules.append(ZeroRule(codes))
    return rules


def _labels(schema: Any, attr: str) -> list[str] | None:
    """The attribute's category labels when the schema has them."""
    if schema is None or not hasattr(schema, "labels"):
        return None
    return [str(v) for v in schema.labels(attr)]


def _codes(v: Any, size: int, where: str, labels: list[str] | None) -> tuple[int, ...]:
    """Codes of one zero-rule entry: an integer code, ``[low, high]`` inclusive, or a category label."""
    if isinstance(v, str):
        if labels is None or v not in labels:
            raise ConfigError(f"{where}: {v!r} is not a category label of this attribute")
        return (labels.index(v),)
    if isinstance(v, Sequence) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        lo, hi = v
        if not 0 <= lo <= hi < size:
            raise ConfigError(f"{where}: range [{lo}, {hi}] is outside the domain's codes 0..{size - 1}")
        return tuple(range(lo, hi + 1))
    if isinstance(v, int) and not isinstance(v, bool):
        if not 0 <= v < size:
            raise ConfigError(f"{where}: code {v} is outside the domain's codes 0..{size - 1}")
        return (v,)
    raise ConfigError(f"{where}: expected a code, [low, high] (inclusive) or a category label, got {v!r}")


def _mechanism(mech: Any) -> tuple[str, dict[str, Any]]:
    """The measuring mechanism (residual-planner) and its parameters."""
    if isinstance(mech, str):
        mech = {"name": mech}
    if not isinstance(mech, Mapping) or "name" not in mech:
        raise ConfigError("mechanism: expected a name or {name: residual-planner, ...}")
    if mech["name"] != "residual-planner":
        raise ConfigError(f"mechanism: a census job measures each level with residual-planner; {mech['name']!r} "
                          "is not supported for census jobs yet")
    params = {k: v for k, v in mech.items() if k != "name"}
    bad = set(params) - {"objective"}
    if bad:
        raise ConfigError(f"mechanism: unknown parameter(s) {sorted(bad)} for a census job; known: objective")
    return "residual-planner", params


def _output(output: Any) -> dict[str, Any]:
    """The ``output`` section with defaults (integer, ci_level, bootstrap, labels)."""
    from privcube.privacy.intervals import check_level

    output = dict(output or {})
    bad = set(output) - set(CENSUS_OUTPUT_PARAMS)
    if bad:
        raise ConfigError(f"output: unknown key(s) {sorted(bad)} for a census job; known: "
                          f"{sorted(CENSUS_OUTPUT_PARAMS)}")
    out = {k: output.get(k, p.default) for k, p in CENSUS_OUTPUT_PARAMS.items()}
    for key in ("integer", "labels"):
        if not isinstance(out[key], bool):
            raise ConfigError(f"output.{key}: expected true or false, got {out[key]!r}")
    check_level(out["ci_level"])
    b = out["bootstrap"]
    if isinstance(b, bool) or not isinstance(b, int) or b < 10:
        raise ConfigError(f"output.bootstrap: expected an integer >= 10 (replicates), got {b!r}")
    return out


__all__ = ["CENSUS_OUTPUT_PARAMS", "CENSUS_PARAMS", "CENSUS_PRIVACY_PARAMS", "GEOGRAPHY_PARAMS", "WORKLOAD_ENTRY_PARAMS", "CensusGroup", "CensusSpec", "TOTAL", "ZeroRule", "is_census",
           "parse_census"]
