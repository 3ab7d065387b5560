"""Workloads: lists of weighted query groups, each a Kronecker product of per-attribute query types.

Config syntax (a list of entries)::

    - {attributes: [age, sex], queries: identity, weight: 1}
    - {kway: 2, queries: {age: prefix, default: identity}}
    - {kway: 2, queries: affine}          # joint over the two attributes
    - {kway: 0}                           # the total

A group's attributes are kept in domain order, so its marginal is the clique in canonical order.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DomainError, WorkloadError
from privcube.core.params import Param
from privcube.core.query_types import (QueryType, attribute_matrix, check_size, joint_matrix, parse_query_type,
                                  row_descriptions)

IDENTITY = QueryType("identity")


@dataclass(frozen=True)
class Factor:
    """One Kronecker factor of a query group: one attribute, or two for a joint query type."""

    attributes: tuple[str, ...]
    query: QueryType

    def matrix(self, domain: Domain) -> np.ndarray:
        if self.query.joint and len(self.attributes) == 2:
            return joint_matrix(self.query, domain[self.attributes[0]], domain[self.attributes[1]])
        return attribute_matrix(self.query, domain[self.attributes[0]])


@dataclass(frozen=True)
class QueryGroup:
    """Weighted queries over one attribute set: the Kronecker product of ``factors``."""

    attributes: tuple[str, ...]
    factors: tuple[Factor, ...]
    weight: float = 1.0

    @property
    def is_marginal(self) -> bool:
        """True when every factor is ``identity``: the group is the marginal on ``attributes``."""
        return all(f.query.name == "identity" for f in self.factors)

    def query_types(self) -> dict[str, str]:
        """Attribute -> query-type label (a joint type is listed under each of its attributes)."""
        return {a: str(f.query) for f in self.factors for a in f.attributes}

    def matrix(self, domain: Domain) -> np.ndarray:
        """Explicit query matrix over the group's marginal cells (C order); small groups only."""
        mats = [f.matrix(domain) for f in self.factors]
        return reduce(np.kron, mats, np.ones((1, 1)))

    def factor_matrices(self, domain: Domain) -> list[np.ndarray]:
        return [f.matrix(domain) for f in self.factors]

    def num_queries(self, domain: Domain) -> int:
        return int(np.prod([f.matrix(domain).shape[0] for f in self.factors])) if self.factors else 1

    def label(self) -> str:
        return "-".join(self.attributes) if self.attributes else "total"

    def row_descriptions(self, domain: Domain, values: Mapping[str, list[str]] | None = None) -> list[str]:
        """A readable description of every query (row of :meth:`matrix`), e.g. ``age <= 30 & sex = F``;
        ``values`` maps attributes to code labels (schema categories or bins)."""
        values = values or {}
        per = [row_descriptions(f.query, f.attributes, tuple(domain[a] for a in f.attributes),
                                tuple(values.get(a) for a in f.attributes)) for f in self.factors]
        if not per:
            return ["total"]
        return [" & ".join(t) for t in itertools.product(*per)]  # first factor slowest, as np.kron


@dataclass(frozen=True)
class Workload:
    """An ordered list of query groups over one domain."""

    domain: Domain
    groups: tuple[QueryGroup, ...]

    def __iter__(self) -> Iterator[QueryGroup]:
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    @property
    def is_marginal(self) -> bool:
        return all(g.is_marginal for g in self.groups)

    def cliques(self) -> list[tuple[str, ...]]:
        """Distinct attribute sets of the groups, in first-seen order."""
        return list(dict.fromkeys(g.attributes for g in self.groups))

    def weights(self) -> dict[tuple[str, ...], float]:
        """Clique -> total weight (summed over groups on the same attribute set)."""
        out: dict[tuple[str, ...], float] = {}
        for g in self.groups:
            out[g.attributes] = out.get(g.attributes, 0.0) + g.weight
        return out

    def attributes(self) -> tuple[str, ...]:
        """All attributes the workload touches, in domain order."""
        used = {a for g in self.groups for a in g.attributes}
        return tuple(a for a in self.domain.attributes if a in used)

    @classmethod
    def marginals(cls, domain: Domain, cliques: Iterable[Sequence[str]], weight: float = 1.0) -> Workload:
        groups = [group(domain, c, "identity", weight) for c in cliques]
        return cls(domain, tuple(groups))

    @classmethod
    def kway(cls, domain: Domain, k: int, queries: Any = "identity", weight: float = 1.0) -> Workload:
        return cls(domain, tuple(group(domain, c, queries, weight) for c in itertools.combinations(domain.attributes, k)))

    @classmethod
    def from_config(cls, entries: Any, domain: Domain) -> Workload:
        return parse_workload(entries, domain)

    def to_config(self) -> list[dict[str, Any]]:
        out = []
        for g in self.groups:
            q: dict[str, Any] = {}
            for f in g.factors:
                for a in f.attributes:
                    q[a] = f.query.to_config()
            out.append({"attributes": list(g.attributes), "queries": q, "weight": g.weight})
        return out


def group(domain: Domain, attributes: Sequence[str], queries: Any = "identity", weight: float = 1.0,
          where: str = "workload") -> QueryGroup:
    """Build one query group; ``queries`` is a type (for every attribute) or a per-attribute mapping."""
    try:
        attrs = domain.canonical(attributes)
    except DomainError as e:
        raise WorkloadError(f"{where}: {e}") from None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not np.isfinite(weight) or weight <= 0:
        raise WorkloadError(f"{where}: weight must be a positive number, got {weight!r}")
    per_attr = _per_attribute_types(queries, attrs, where)
    factors: list[Factor] = []
    # ``random`` on a single attribute is a per-attribute type (K = n cells)
    joint = {qt for qt in per_attr.values() if qt.joint and not (qt.name == "random" and len(attrs) == 1)}
    if joint:
        if len(joint) > 1 or len(attrs) != 2 or len(set(per_attr.values())) != 1:
            raise WorkloadError(
                f"{where}: joint query type {sorted(q.name for q in joint)} applies to exactly two "
                f"attributes with the same type; got {dict((a, str(q)) for a, q in per_attr.items())}"
            )
        factors.append(Factor(attrs, next(iter(joint))))
    else:
        factors = [Factor((a,), per_attr[a]) for a in attrs]
        for a in attrs:
            check_size(per_attr[a], domain[a], f"{where}, attribute {a!r}")
    return QueryGroup(attrs, tuple(factors), float(weight))


def _per_attribute_types(queries: Any, attrs: tuple[str, ...], where: str) -> dict[str, QueryType]:
    if queries is None:
        queries = "identity"
    if isinstance(queries, Mapping) and "type" not in queries:
        default = queries.get("default", "identity")
        # attributes named in the mapping but not in this group are fine for kway entries
        out = {}
        for a in attrs:
            out[a] = parse_query_type(queries.get(a, default), f"{where}, attribute {a!r}")
        return out
    qt = parse_query_type(queries, where)
    return {a: qt for a in attrs}


#: the keys of one ``workload`` entry (exactly one of ``attributes`` and ``kway``)
ENTRY_PARAMS: dict[str, Param] = {
    "attributes": Param(None, "list of names | 'a,b'", "one query group over these attributes"),
    "kway": Param(None, "int >= 0", "one query group per set of k attributes (kway: 2 = all 2-way marginals; "
                                    "0 = the total)"),
    "queries": Param("identity", "query type | {attribute: type, default: type}",
                     "the query type of every attribute, or per attribute (Query types)"),
    "weight": Param(1.0, "number > 0", "the group's weight in the mechanisms' error objective"),
}


def parse_workload(entries: Any, domain: Domain) -> Workload:
    """Parse the config's ``workload`` section (see module docstring)."""
    if isinstance(entries, Mapping):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise WorkloadError("workload must be a non-empty list of entries")
    groups: list[QueryGroup] = []
    for i, e in enumerate(entries):
        where = f"workload entry {i}"
        if not isinstance(e, Mapping):
            raise WorkloadError(f"{where}: expected a mapping, got {e!r}")
        unknown = set(e) - set(ENTRY_PARAMS)
        if unknown:
            raise WorkloadError(f"{where}: unknown key(s) {sorted(unknown)}")
        if ("attributes" in e) == ("kway" in e):
            raise WorkloadError(f"{where}: give exactly one of 'attributes' or 'kway'")
        queries = e.get("queries", "identity")
        weight = e.get("weight", 1.0)
        if isinstance(queries, Mapping) and "type" not in queries:
            bad = [k for k in queries if k != "default" and k not in domain]
            if bad:
                raise WorkloadError(f"{where}: queries name unknown attribute(s) {bad}; domain has {list(domain)}")
        if "attributes" in e:
            attrs = e["attributes"]
            if isinstance(attrs, str):
                attrs = [a.strip() for a in attrs.split(",") if a.strip()]
            if not isinstance(attrs, list):
                raise WorkloadError(f"{where}: 'attributes' must be a list of names")
            if isinstance(queries, Mapping) and "type" not in queries:  # a type for an attribute not in the group
                stray = [k for k in queries if k != "default" and k not in attrs]
                if stray:
                    raise WorkloadError(f"{where}: queries name attribute(s) {stray} that are not in this entry's "
                                        f"attributes {attrs}")
            groups.append(group(domain, attrs, queries, weight, where))
        else:
            k = e["kway"]
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= len(domain):
                raise WorkloadError(f"{where}: kway must be an integer in [0, {len(domain)}], got {k!r}")
            for c in itertools.combinations(domain.attributes, k):
                groups.append(group(domain, c, queries, weight, where))
    return Workload(domain, tuple(groups))


# -------------------------------------------------------------------------------------------------
# helpers for the QuerySmasher paper's workloads (Sec. 8)
# -------------------------------------------------------------------------------------------------
def all_kway(domain: Domain, k: int, queries: Any = "identity", weight: float = 1.0) -> Workload:
    """All k-way groups with one query type (``identity`` gives all k-way marginals)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= len(domain):
        raise WorkloadError(f"k must be an integer in [0, {len(domain)}], got {k!r}")
    return Workload.kway(domain, k, queries, weight)


def hybrid(domain: Domain, ks: Iterable[int], numeric: Iterable[str], weight: float = 1.0) -> Workload:
    """Hybrid marginal/prefix workload (QS Table 2): prefix on ``numeric`` attributes, identity elsewhere."""
    numeric = list(numeric)
    for a in numeric:
        if a not in domain:
            raise WorkloadError(f"hybrid workload: numeric attribute {a!r} is not in the domain {list(domain)}")
    queries = {a: "prefix" for a in numeric}
    return parse_workload([{"kway": int(k), "queries": queries, "weight": weight} for k in ks], domain)


def mixed(domain: Domain) -> Workload:
    """QS Table 5 mixed workload: all 1-way allrange + all 2-way affine + all 3-way prefix."""
    return parse_workload([{"kway": 1, "queries": "allrange"}, {"kway": 2, "queries": "affine"},
                           {"kway": 3, "queries": "prefix"}], domain)


def hybrid_joint(domain: Domain, numeric: Iterable[str], query: str = "affine", limit: int | None = 5000,
                 weight: float = 1.0) -> Workload:
    """QS Table 3 workload: all 1-way groups (prefix on ``numeric`` attributes, identity elsewhere)
    and all 2-way groups of the joint type ``query`` (``affine`` or ``abs-diff``, on every pair,
    categorical ones included); a pair whose residual dimension (d_i − 1)(d_j − 1) exceeds ``limit``
    gets the Kronecker hybrid prefix/identity instead (the authors' experiment code, digest §2;
    ``limit=None`` keeps the joint type on every pair)."""
    numeric = set(numeric)
    for a in numeric:
        if a not in domain:
            raise WorkloadError(f"hybrid_joint workload: numeric attribute {a!r} is not in the domain {list(domain)}")
    qt = parse_query_type(query, "hybrid_joint workload")
    if not qt.joint:
        raise WorkloadError(f"hybrid_joint workload: query type must be joint over two attributes, got {query!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise WorkloadError(f"hybrid_joint workload: limit must be a non-negative integer or None, got {limit!r}")

    def per_attr(a: str) -> str:
        return "prefix" if a in numeric else "identity"

    groups = [group(domain, [a], per_attr(a), weight) for a in domain.attributes]
    for a, b in itertools.combinations(domain.attributes, 2):
        if limit is None or (domain[a] - 1) * (domain[b] - 1) <= limit:
            groups.append(group(domain, [a, b], qt, weight))
        else:
            groups.append(group(domain, [a, b], {a: per_attr(a), b: per_attr(b)}, weight))
    return Workload(domain, tuple(groups))
