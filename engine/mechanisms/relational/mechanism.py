"""Relational synthesis (Alimohammadi et al., Alg. 4): two synthetic tables plus a synthetic link table.

Stage 1: each table is synthesized on its own budget (ResidualPlanner on all 2-way marginals, then the
single-table synthesizer), unless DP synthetic tables are supplied. Stage 2 learns the links: each of T
iterations draws K cross-table k-way workloads with the exponential mechanism (TV score, sensitivity
d_max/m), releases their marginals with the Gaussian mechanism (L2 sensitivity √2·d_max/m), then
solves the relaxed least-squares problem by PGD on random disjoint slices and rounds with UBS
(many-to-many: exactly m_syn links) or per-child categorical draws (one-to-many: one parent per child).
One table linked to itself (self-referential link table: directed, no self-loops by default, doubled
sensitivity) and checkpoint/resume are described at ``run_relational``.

Privacy (zCDP, Thm 1): ρ_total = Σ_tables ρ_table + ρ_links; ρ_links = Σ_t k_t·ε0²/2 with
ε0 = √(2ρ_links / Σ_t k_t), split α (selection) / 1 − α (measurement). Bounded DP (the paper's Def. 1:
a neighbour changes one row's values and all its links): n1, n2 and m are public, and each table's
ResidualPlanner is accounted for substitution neighbours (``neighbours: substitution``, 2–4× the
add/remove cost), not for adding or removing a row. ``report['dp_cross_error']`` compares the synthetic links with the noisy releases (DP,
post-processing). ``report['nonprivate_evaluation']`` compares with the real data and is NOT
differentially private: it is computed only with ``evaluate_nonprivate: true`` (off by default; the old
name ``evaluate`` is accepted); without it, data-dependent degree statistics are withheld as well.
Defaults that differ from the paper (each a documented, data-independent choice; the paper's
schedule is ``candidate_orders: k, max_noise: null, noise_penalty: false, shrinkage: false``):
- ``candidate_orders: closure``: candidates are the cross workloads of every order 2..k (AIM's
  downward closure), not only order k; the error is still evaluated on order k. Low-order marginals
  have fewer cells, hence far less total noise for the same ρ.
- ``noise_penalty: true``: the exponential mechanism's score is AIM's, TV error minus the expected TV
  of the measurement noise (½·√(2/π)·σ·cells); the penalty is public, the sensitivity unchanged.
- ``max_noise: 0.25``: the number of measurements is min(T·K, cap) with cap chosen so the expected L2
  noise on the smallest candidate is ≤ 0.25 (``selection_count``; uses only the public m, d_max, ρ and
  domain sizes), at least one. Iterations beyond the measured ones only re-optimise other slices
  against the releases (post-processing, no budget).
- ``shrinkage: auto``: each release whose expected noise norm σ·√cells exceeds ``max_noise`` is shrunk
  (Wiener, ``shrink``) before fitting, so noise is not fitted; the others are fitted as they are (as
  in the paper). When even one measurement would exceed ``max_noise`` (the cap is below 1) that is
  every release. ``true`` / ``false`` shrink all / none. Shrinkage is post-processing.
- ``shrink_towards: initial``: the shrinkage prior is the marginal of the data-independent random start
  (fixed), not the current synthetic marginal (``current``, the earlier default): re-shrinking towards
  the current state every iteration let the targets creep towards the noisy releases until the noise
  was fitted after all (measured on the MovieLens-like data: worse than random links at ε_rel 0.5/1).
- ``refit: true``: iterations after the last measurement re-optimise other slices against the
  releases; ``false`` stops at the last measuring iteration.
- ``slices_per_iteration: 8`` (the paper's MovieLens setting; at most as many disjoint slices as fit):
  with one slice per iteration a large one-to-many job re-links only ~2 % of the children per iteration
  (Airbnb: 1082 of 47217), and the learned links stay far from the error floor.
Measured effect (average % L1 over all cross 3-way marginals, table ε 1 each, seed 0, NON-private
evaluation; benchmarks/relational_airbnb.py). Airbnb users → sessions with the shipped schemas
(benchmarks/configs/airbnb; 9 user and 3 session attributes, 10000 users, 47217 sessions, d_max 50),
random links 67.55, real links transplanted onto the same synthetic tables (the tables' error floor)
28.90: ε_rel 0.1/0.5/1/2/10 → 59.69/59.60/56.50/34.79/29.48 with the defaults (42–74 s each on 2 shared
cores); with one slice per iteration (the former default) 60.05 / 54.68 at ε_rel 1 / 10 (12 s each);
with 43 slices (every parent, every iteration) 56.17 at ε_rel 1, at 6× the time of 8 slices.
MovieLens-like data (600 × 400, m = 3053, d_max 10, many-to-many; one slice holds everything) is too
small to beat random links at ε_rel ≤ 1: d_max/m = 1/305 makes even ONE measurement with the whole
links budget noisier (σ 0.040 at ε_rel 0.5, 0.021 at 1) than the random-links error on 78 % (0.5) /
44 % (1) of the 2-way cross marginals; the shrinkage keeps the links near random there.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcube.domain import Domain
from privcube.errors import BudgetError, ConfigError, DataError, WorkloadError
from privcube.mechanisms.base import Mechanism, MechanismResult, RunContext
from privcube.mechanisms.relational.degree import check_d_max, enforce_degree
from privcube.mechanisms.relational.slicing import (
    SliceTask,
    choose_slices_m2m,
    choose_slices_o2m,
    edges_in,
    map_slices,
    slice_shape,
    sparse_block,
)
from privcube.mechanisms.relational.workloads import CrossTables, CrossWorkload, average_error, cross_workloads
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.privacy.primitives import exponential_mechanism, exponential_rho, gaussian_sigma
from privcube.privacy.zcdp import cdp_epsilon

KINDS = ("one_to_many", "many_to_many")


# ------------------------------------------------------------------------------------ inputs
@dataclass
class Links:
    """Real links as row positions: ``i`` into table ``left`` (rows of B), ``j`` into ``right``.

    one_to_many: ``left`` is the child table (one parent each), ``right`` the parent table.
    """

    left: str
    right: str
    i: np.ndarray
    j: np.ndarray
    kind: str = "many_to_many"
    left_key: str = "id"
    right_key: str = "id"
    fk: str | None = None  # child's foreign-key column (one_to_many)
    report: dict[str, Any] = field(default_factory=dict)
    columns: tuple[str, str] | None = None  # output link columns (self-referential links: the input's names)

    @property
    def self_ref(self) -> bool:
        """Whether both ends are the same table (a self-referential link table, B is n × n)."""
        return self.left == self.right


@dataclass
class RelationalResult:
    """Synthetic tables (codes + key column; child also carries the FK), the link table and a report."""

    tables: dict[str, pd.DataFrame]
    links: pd.DataFrame
    report: dict[str, Any]

    def to_mechanism_result(self) -> MechanismResult:
        """As a MechanismResult: tables and the link table under ``synthetic``."""
        return MechanismResult([], report=self.report, synthetic={**self.tables, "links": self.links})


@dataclass
class RelationalData:
    """The private input of the mechanism: ``{name: (codes or DataFrame, Domain)}`` and a links spec."""

    tables: Mapping[str, tuple[Any, Domain]]
    links: Any


def _split_ref(ref: Any, what: str) -> tuple[str, str]:
    if not isinstance(ref, str) or ref.count(".") != 1:
        raise ConfigError(f"links: {what} must look like 'table.column', got {ref!r}")
    t, c = ref.split(".")
    return t, c


def _key_positions(frame: Any, table: str, key: str) -> tuple[np.ndarray, dict[Any, int]]:
    """Key values of a table (its key column, or row positions when it has none) and value → row."""
    if isinstance(frame, pd.DataFrame) and key in frame.columns:
        vals = frame[key].to_numpy()
        if pd.isna(vals).any():
            raise DataError(f"table {table!r}: key column {key!r} has missing values")
        pos = {v: k for k, v in enumerate(vals.tolist())}
        if len(pos) != len(vals):  # the repeated id itself is private: name the column only
            r = int(np.flatnonzero(pd.Series(vals).duplicated().to_numpy())[0])
            raise DataError(f"table {table!r}: key column {key!r} repeats a value (row {r}); keys must be unique")
        return vals, pos
    n = len(frame)
    return np.arange(n), {k: k for k in range(n)}


def _lookup(values: np.ndarray, pos: dict[Any, int], where: str, target: str) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for r, v in enumerate(values.tolist()):
        k = pos.get(v)
        if k is None:
            raise DataError(f"links: the {where} value in row {r} is not a key of {target}")
        out[r] = k
    return out


def parse_links(spec: Any, tables: Mapping[str, tuple[Any, Domain]]) -> Links:
    """A ``Links`` from a spec: {from: child.fk, to: parent.key} (one-to-many) or
    {pairs, left: t1.key, right: t2.key[, columns]} (many-to-many), or a ``Links`` as is."""
    if isinstance(spec, Links):
        for t in (spec.left, spec.right):
            if t not in tables:
                raise ConfigError(f"links: unknown table {t!r}; tables are {sorted(tables)}")
        if spec.kind not in KINDS:
            raise ConfigError(f"links: kind must be one of {KINDS}, got {spec.kind!r}")
        n1, n2 = len(tables[spec.left][0]), len(tables[spec.right][0])
        for arr, n, t in ((spec.i, n1, spec.left), (spec.j, n2, spec.right)):
            arr = np.asarray(arr)
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                bad = arr[(arr < 0) | (arr >= n)][0]
                raise DataError(f"links: row {int(bad)} is not a record of table {t!r}")
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"links must be a mapping or a Links object, got {type(spec).__name__}")
    if "from" in spec:
        child, fk = _split_ref(spec["from"], "links.from")
        parent, key = _split_ref(spec.get("to"), "links.to")
        for t in (child, parent):
            if t not in tables:
                raise ConfigError(f"links: unknown table {t!r}; tables are {sorted(tables)}")
        if child == parent:
            raise ConfigError(f"links: a foreign key into the same table ({child}.{fk} -> {parent}.{key}) is not "
                              "supported; give the self-referential links as a link table "
                              "{pairs|path, left: t.key, right: t.key}")
        cframe = tables[child][0]
        if not isinstance(cframe, pd.DataFrame) or fk not in cframe.columns:
            raise DataError(f"table {child!r} has no foreign-key column {fk!r}")
        fkv = cframe[fk].to_numpy()
        if pd.isna(fkv).any():
            r = int(np.flatnonzero(pd.isna(fkv))[0])
            raise DataError(f"links: {child}.{fk} is missing in row {r}; every child needs a parent")
        _, pos = _key_positions(tables[parent][0], parent, key)
        j = _lookup(fkv, pos, f"{child}.{fk}", f"{parent}.{key}")
        ckey = spec.get("child_key", "id")
        return Links(child, parent, np.arange(len(fkv), dtype=np.int64), j, "one_to_many", ckey, key, fk)
    if "pairs" in spec:
        lt, lk = _split_ref(spec.get("left"), "links.left")
        rt, rk = _split_ref(spec.get("right"), "links.right")
        for t in (lt, rt):
            if t not in tables:
                raise ConfigError(f"links: unknown table {t!r}; tables are {sorted(tables)}")
        pairs = spec["pairs"]
        if isinstance(pairs, pd.DataFrame):
            cols = list(spec.get("columns") or pairs.columns[:2])
            for c in cols:
                if c not in pairs.columns:
                    raise DataError(f"links: pairs have no column {c!r}")
            a, b = pairs[cols[0]].to_numpy(), pairs[cols[1]].to_numpy()
            out_cols = (str(cols[0]), str(cols[1])) if lt == rt and cols[0] != cols[1] else None
        else:
            out_cols = None
            arr = np.asarray(pairs)
            if arr.ndim != 2 or arr.shape[1] != 2:
                raise DataError(f"links: pairs must have shape (m, 2), got {arr.shape}")
            a, b = arr[:, 0], arr[:, 1]
        _, p1 = _key_positions(tables[lt][0], lt, lk)
        _, p2 = _key_positions(tables[rt][0], rt, rk)
        i = _lookup(a, p1, f"pairs.{lt}", f"{lt}.{lk}")
        j = _lookup(b, p2, f"pairs.{rt}", f"{rt}.{rk}")
        flat = i * len(tables[rt][0]) + j
        _, first = np.unique(flat, return_index=True)
        first.sort()
        rep = {"duplicate_pairs_dropped": int(len(flat) - len(first))}
        if lt == rt and out_cols is None:
            out_cols = ("source", "target")
        return Links(lt, rt, i[first], j[first], "many_to_many", lk, rk, None, rep, out_cols)
    raise ConfigError("links: give {from: child.fk, to: parent.key} or {pairs, left: t.key, right: t.key}")


def _codes(data: Any, domain: Domain, name: str) -> np.ndarray:
    """The (n × d) code array of a table given as ndarray or DataFrame (domain columns)."""
    if isinstance(data, pd.DataFrame):
        missing = [a for a in domain.attributes if a not in data.columns]
        if missing:
            raise DataError(f"table {name!r} is missing column(s) {missing}")
        arr = data[list(domain.attributes)].to_numpy()
    else:
        arr = np.asarray(data)
    if arr.ndim != 2 or arr.shape[1] != len(domain):
        raise DataError(f"table {name!r}: codes must have shape (n, {len(domain)}), got {arr.shape}")
    if arr.size and (not np.issubdtype(arr.dtype, np.integer)):
        if np.isnan(arr.astype(float)).any():
            raise DataError(f"table {name!r} has missing values; encode them as a category first")
        arr = arr.astype(np.int64)
    for k, a in enumerate(domain.attributes):
        col = arr[:, k]
        bad = (col < 0) | (col >= domain.shape[k])
        if bad.any():
            raise DataError(f"table {name!r}: column {a!r} has a value outside [0, {domain.shape[k]})")
    return arr.astype(np.int64)




def _budget(b: Any, what: str) -> PrivacyBudget:
    if isinstance(b, PrivacyBudget):
        return b
    if isinstance(b, Mapping):
        try:
            return PrivacyBudget.from_config(b)
        except BudgetError as e:
            raise BudgetError(f"{what}: {e}") from None
    raise BudgetError(f"{what}: expected a budget {{epsilon, delta}} or {{rho}}, got {b!r}")


def compose_budgets(budgets: Mapping[str, Any], tables: list[str] | None = None) -> PrivacyBudget:
    """Sequential zCDP composition of the tables' budgets and the links budget (ρ and δ add)."""
    if not isinstance(budgets, Mapping) or "links" not in budgets:
        raise BudgetError("privacy budgets must be {tables: {name: budget}, links: budget}")
    parts = [_budget(budgets["links"], "privacy.links")]
    tb = budgets.get("tables") or {}
    for name in (tables if tables is not None else list(tb)):
        if name not in tb:
            raise BudgetError(f"privacy.tables: no budget for table {name!r}")
        parts.append(_budget(tb[name], f"privacy.tables.{name}"))
    rho = sum(p.rho for p in parts)
    delta = sum(p.delta for p in parts)
    if delta <= 0:
        delta = 1e-9
        return PrivacyBudget(rho, cdp_epsilon(rho, delta), delta, False)
    # basic (ε, δ) composition: each part is (ε_i, δ_i)-DP, so the whole is (Σε_i, Σδ_i)-DP; the ρ's add
    # too (zCDP composition), and the ledger enforces ρ. The tighter reading cdp_epsilon(Σρ, Σδ) ≤ Σε_i.
    eps = sum(p.epsilon if p.delta > 0 else cdp_epsilon(p.rho, delta) for p in parts)
    return PrivacyBudget(rho, float(eps), min(delta, 0.5), False)


class _PrefixLedger:
    """Forwards charges to the run's ledger with a prefixed label."""

    def __init__(self, ledger: Any, prefix: str) -> None:
        self.ledger, self.prefix = ledger, prefix

    def charge(self, label: str, **kw: Any) -> None:
        """Charge ``prefix:label``."""
        self.ledger.charge(f"{self.prefix}:{label}", **kw)


class _PrefixNoise:
    """A view of the noise source whose keys are namespaced (distinct tables never share noise).

    Every draw of the source (generator, gaussian/laplace/gumbel, add_gaussian/add_laplace releases)
    is forwarded with the prefixed key; other attributes (``seeded``, ``to_dict``, …) are the source's.
    """

    def __init__(self, noise: NoiseSource, prefix: tuple) -> None:
        self.noise, self.prefix = noise, prefix

    def _key(self, key: Any) -> tuple:
        return (*self.prefix, *(tuple(key) if isinstance(key, (tuple, list)) else (key,)))

    def generator(self, *key: Any) -> np.random.Generator:
        """Stream (*prefix, *key)."""
        return self.noise.generator(*self.prefix, *key)

    def gaussian(self, key: Any, shape: Any, sigma: float) -> np.ndarray:
        """Gaussian noise on the namespaced key."""
        return self.noise.gaussian(self._key(key), shape, sigma)

    def laplace(self, key: Any, shape: Any, scale: float) -> np.ndarray:
        """Laplace noise on the namespaced key."""
        return self.noise.laplace(self._key(key), shape, scale)

    def gumbel(self, key: Any, shape: Any) -> np.ndarray:
        """Gumbel draws on the namespaced key."""
        return self.noise.gumbel(self._key(key), shape)

    def add_gaussian(self, key: Any, values: Any, sigma: float) -> np.ndarray:
        """A Gaussian release of ``values`` on the namespaced key (the source's own checks apply)."""
        return self.noise.add_gaussian(self._key(key), values, sigma)

    def add_laplace(self, key: Any, values: Any, scale: float) -> np.ndarray:
        """A Laplace release of ``values`` on the namespaced key."""
        return self.noise.add_laplace(self._key(key), values, scale)

    def __getattr__(self, name: str) -> Any:
        """Anything else (``seeded``, ``to_dict``, …) from the wrapped source."""
        if name in ("noise", "prefix"):
            raise AttributeError(name)
        return getattr(self.noise, name)


# ----------------------------------------------------------------------------------- params
PARAMS: dict[str, Any] = {
    "d_max": 10, "truncate": False, "k": 3, "iterations": 10, "workloads_per_iteration": 3, "alpha": 0.2,
    "candidates": 300, "pgd_iters": 100, "slice_fraction": None, "slice_cells": 250_000,
    "slices_per_iteration": 8, "guaranteed": 0.2, "m_syn": None, "synthetic_rows": None,
    "objective": "global", "workloads_per_slice": None, "estimator": "tree", "table_marginals": 2,
    "chunk_size": 1_000_000, "evaluate_nonprivate": False, "evaluate": None, "shrinkage": "auto",
    "shrinkage_margin": 2.0, "candidate_orders": "closure", "noise_penalty": True, "max_noise": 0.25,
    "self_loops": False, "shrink_towards": "initial", "refit": True,
}


def _check_params(p: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(p) - set(PARAMS) - {"name"}
    if unknown:
        raise ConfigError(f"mechanism 'relational': unknown parameter(s) {sorted(unknown)}; known: {sorted(PARAMS)}")
    q = {**PARAMS, **{k: v for k, v in p.items() if k != "name"}}
    check_d_max(q["d_max"])
    for key in ("iterations", "workloads_per_iteration", "candidates", "pgd_iters", "slices_per_iteration", "k",
                "table_marginals", "chunk_size"):
        v = q[key]
        lo = 0 if key == "iterations" else 1
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"mechanism 'relational': parameter {key!r} must be an integer >= {lo}, got {v!r}")
    if not isinstance(q["alpha"], (int, float)) or not (0 < q["alpha"] < 1):
        raise ConfigError(f"mechanism 'relational': parameter 'alpha' must lie strictly in (0, 1), got {q['alpha']!r}")
    if not isinstance(q["guaranteed"], (int, float)) or not (0 <= q["guaranteed"] <= 1):
        raise ConfigError(f"mechanism 'relational': parameter 'guaranteed' must lie in [0, 1], got {q['guaranteed']!r}")
    if q["objective"] not in ("global", "paper"):
        raise ConfigError(f"mechanism 'relational': parameter 'objective' must be 'global' or 'paper', got {q['objective']!r}")
    co = q["candidate_orders"]
    if not (co in ("k", "closure") or (isinstance(co, (list, tuple)) and co and all(
            isinstance(o, (int, np.integer)) and not isinstance(o, bool) and o >= 2 for o in co))):
        raise ConfigError(f"mechanism 'relational': parameter 'candidate_orders' must be 'k', 'closure' or a list of "
                          f"integers >= 2, got {co!r}")
    mn = q["max_noise"]
    if mn is not None and (isinstance(mn, bool) or not isinstance(mn, (int, float)) or not mn > 0):
        raise ConfigError(f"mechanism 'relational': parameter 'max_noise' must be a positive number or null, got {mn!r}")
    if q["shrink_towards"] not in ("current", "initial"):
        raise ConfigError(f"mechanism 'relational': parameter 'shrink_towards' must be 'current' or 'initial', "
                          f"got {q['shrink_towards']!r}")
    if q["shrinkage"] not in (True, False, "auto"):
        raise ConfigError(f"mechanism 'relational': parameter 'shrinkage' must be true, false or 'auto', got {q['shrinkage']!r}")
    for key in ("noise_penalty", "truncate", "evaluate_nonprivate", "self_loops", "refit"):
        if not isinstance(q[key], bool):
            raise ConfigError(f"mechanism 'relational': parameter {key!r} must be true or false, got {q[key]!r}")
    # the remaining parameters are used late (after data is read and budget spent): check them here
    if q["evaluate"] is not None and not isinstance(q["evaluate"], bool):
        raise ConfigError(f"mechanism 'relational': parameter 'evaluate' must be true or false, got {q['evaluate']!r}")
    sf = q["slice_fraction"]
    if sf is not None and (not _is_number(sf) or not (0 < sf <= 1)):
        raise ConfigError(f"mechanism 'relational': parameter 'slice_fraction' must lie in (0, 1] (or be null), got {sf!r}")
    if not _is_number(q["slice_cells"]) or not q["slice_cells"] >= 1:
        raise ConfigError(f"mechanism 'relational': parameter 'slice_cells' must be a number >= 1, got {q['slice_cells']!r}")
    if not _is_number(q["shrinkage_margin"]) or not q["shrinkage_margin"] >= 0:
        raise ConfigError(f"mechanism 'relational': parameter 'shrinkage_margin' must be a number >= 0, "
                          f"got {q['shrinkage_margin']!r}")
    for key in ("m_syn", "workloads_per_slice"):
        v = q[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
            raise ConfigError(f"mechanism 'relational': parameter {key!r} must be an integer >= 1 (or null), got {v!r}")
    rows = q["synthetic_rows"]
    if rows is not None:
        if not isinstance(rows, Mapping) or not all(
                isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1 for n in rows.values()):
            raise ConfigError("mechanism 'relational': parameter 'synthetic_rows' must map table names to integers "
                              f">= 1, got {rows!r}")
    from privcube.synth.estimator import get_estimator

    get_estimator(q["estimator"])  # unknown names, or 'mbi' without the package: ConfigError before any release
    return q


def _is_number(v: Any) -> bool:
    """A real number (not a bool), finite."""
    return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(v)


# ------------------------------------------------------------------------------------ stage 1
def _synth_table(name: str, codes: np.ndarray, domain: Domain, n_syn: int, budget: PrivacyBudget, ledger: Any,
                 noise: NoiseSource, params: Mapping[str, Any], client: Any = None) -> np.ndarray:
    """ResidualPlanner on all k-way marginals (k = table_marginals), then the single-table synthesizer
    (records generated in parallel chunks on ``client`` when one is given; the same rows either way)."""
    import itertools

    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.oracle import ArrayOracle
    from privcube.synth.sampler import synthesize_from_answers
    from privcube.workload import Workload

    k = min(int(params["table_marginals"]), len(domain))
    cliques = list(itertools.combinations(domain.attributes, k))
    # the paper's adjacency changes one row's values (bounded DP): tables are accounted for substitution
    res = ResidualPlanner({"neighbours": "substitution"}).run(ArrayOracle(domain, codes), Workload.marginals(domain, cliques), budget,
                                _PrefixLedger(ledger, f"table:{name}"), _PrefixNoise(noise, ("relational", "table", name)))
    df = synthesize_from_answers(res.answers, domain, n_syn, noise=noise, key=("relational", "synth", name),
                                 chunk_size=int(params["chunk_size"]), estimator=params["estimator"],
                                 total=float(len(codes)), client=client)
    return df[list(domain.attributes)].to_numpy().astype(np.int64)


# ------------------------------------------------------------------------------------ stage 2
def _restore_ledger(ledger: Any, saved: Mapping[str, Any] | None) -> None:
    """Bring a fresh ledger to a checkpoint's charges (replayed in order; nothing is charged twice)."""
    from privcube.errors import CheckpointError

    if not isinstance(saved, Mapping):
        raise CheckpointError("relational checkpoint has no ledger record")
    if ledger.charges:
        raise CheckpointError("resume: the ledger already holds charges; it must start empty")
    for c in saved.get("charges", []):
        c = dict(c)
        label, r, e, d = c.pop("label"), c.pop("rho"), c.pop("epsilon", None), c.pop("delta", 0.0) or 0.0
        if d:
            ledger.charge(label, epsilon=e, delta=d, **c)
        elif e is not None:
            ledger.charge(label, epsilon=e, **c)
        else:
            ledger.charge(label, rho=r, **c)


def _random_links(rng: np.random.Generator, n1: int, n2: int, m: int, no_diagonal: bool) -> tuple[np.ndarray, np.ndarray]:
    """m distinct uniformly random pairs of [n1] × [n2] (off the diagonal i = j when ``no_diagonal``)."""
    if not no_diagonal:
        flat = rng.choice(n1 * n2, size=m, replace=False)
        i, j = np.divmod(flat, n2)
        return i.astype(np.int64), j.astype(np.int64)
    # n × n without the diagonal: enumerate the n·(n−1) off-diagonal cells row by row
    flat = rng.choice(n1 * (n2 - 1), size=m, replace=False)
    i, r = np.divmod(flat, n2 - 1)
    j = r + (r >= i)
    return i.astype(np.int64), j.astype(np.int64)


def run_relational(tables: Mapping[str, tuple[Any, Domain]], links: Any, params: Mapping[str, Any] | None,
                   budgets: Mapping[str, Any], ledger: PrivacyLedger | None = None, noise: NoiseSource | None = None,
                   client: Any = None, *, synthetic_tables: Mapping[str, Any] | None = None,
                   progress: Any = None, checkpoint: Any = None, resume: bool = False) -> RelationalResult:
    """Synthesize two linked tables (or one table linked to itself) and the links (see the module docstring).

    ``tables``: name -> (codes ndarray or DataFrame with the domain columns [+ key / FK columns], Domain).
    ``links``: ``{from: child.fk, to: parent.key}``, ``{pairs, left: t.key, right: t.key}`` or ``Links``;
    ``left`` and ``right`` may name the same table (self-referential links, see below).
    ``budgets``: ``{tables: {name: {epsilon, delta}|PrivacyBudget}, links: ...}``; ``ledger`` defaults
    to one over their composition. ``synthetic_tables``: name -> already-DP synthetic codes (that table
    then spends nothing here).

    Self-referential links (one table T, a link table of (source, target) pairs of T's keys): the links
    are DIRECTED: the cross workload (S1, S2) reads S1 on the source and S2 on the target, so (S1, S2)
    and (S2, S1) are different workloads and both are candidates. T is synthesized once (one table
    budget). d_max bounds both the out-degree and the in-degree of every record. A record sits on both
    sides, so changing it changes up to 2·d_max linked pairs: the sensitivities are doubled (TV
    2·d_max/m, L2 2√2·d_max/m). Self-loops (i → i) are excluded unless ``self_loops: true``: the
    synthetic diagonal is fixed at 0 (PGD box upper bound 0, never sampled by UBS, never in the initial
    links), and a real self-loop is then a DataError naming the record (nothing is released).

    ``checkpoint`` (optional, an object with ``save(round, {"meta", "arrays"})`` and ``load()``): the state
    is committed after each synthetic table (rounds 0, 1) and after each link iteration t (round
    n_tables + t) with the ledger's charges; with ``resume`` the run continues from the last committed
    round: finished tables are reused, the ledger is replayed (nothing is charged twice) and the loop
    restarts at the next iteration. With a seeded noise source the result equals the uninterrupted run.
    All input checks run before the first charge and the first save.
    """
    from privcube.errors import CheckpointError

    p = _check_params(params or {})
    if noise is None:
        noise = NoiseSource()
    synthetic_tables = dict(synthetic_tables or {})
    lk = parse_links(links, tables)
    self_ref = lk.self_ref
    names = (lk.left, lk.right)
    unique = list(dict.fromkeys(names))
    doms = (tables[lk.left][1], tables[lk.right][1])
    codes = [_codes(tables[n][0], d, n) for n, d in zip(names, doms)]
    need = [n for n in unique if n not in synthetic_tables]
    total = compose_budgets(budgets, need)
    b_links = _budget(budgets["links"], "privacy.links")
    tbud = {n: _budget(budgets["tables"][n], f"privacy.tables.{n}") for n in need}
    if ledger is None:
        ledger = PrivacyLedger(total, noise=noise)
    d_max = int(p["d_max"])
    no_diag = self_ref and not p["self_loops"]

    # ---- degree bound (public rule, before anything else)
    ri, rj = np.asarray(lk.i, dtype=np.int64), np.asarray(lk.j, dtype=np.int64)
    keys = tuple(_key_positions(tables[n][0], n, k)[0] for n, k in zip(names, (lk.left_key, lk.right_key)))
    if no_diag and np.any(ri == rj):
        raise DataError(f"links: a record of table {names[0]!r} links to itself; self-loops are excluded "
                        "by default: remove them or set mechanism parameter 'self_loops: true'")
    side = (f"{names[0]} (source)", f"{names[1]} (target)") if self_ref else names
    keep, deg_report = enforce_degree(ri, rj, d_max, truncate=bool(p["truncate"]), names=side, keys=keys)  # type: ignore[arg-type]
    if lk.kind == "one_to_many":
        # a child losing its only link is dropped with it (no orphans)
        codes[0] = codes[0][ri[keep]]
        ri, rj = np.arange(int(keep.sum()), dtype=np.int64), rj[keep]
    else:
        ri, rj = ri[keep], rj[keep]
    m = int(ri.size)
    if m == 0:
        raise DataError(f"links: no relationships between {names[0]!r} and {names[1]!r} (after d_max truncation)")
    n_real = (codes[0].shape[0], codes[1].shape[0])

    # ---- synthetic sizes and m_syn (public; checked before anything is spent)
    rows = dict(p["synthetic_rows"] or {})
    if set(rows) - set(unique):
        raise ConfigError(f"mechanism 'relational': parameter 'synthetic_rows' names unknown table(s) "
                          f"{sorted(map(str, set(rows) - set(unique)))}; tables are {sorted(unique)}")
    n_syn: dict[str, int] = {}
    given: dict[str, np.ndarray] = {}
    for s, (name, dom) in enumerate(zip(names, doms)):
        if name in n_syn:
            continue
        if name in synthetic_tables:
            given[name] = _codes(synthetic_tables[name], dom, f"synthetic {name}")
            n_syn[name] = int(given[name].shape[0])
        else:
            n_syn[name] = int(rows.get(name, n_real[s]))
    n1s, n2s = n_syn[names[0]], n_syn[names[1]]
    if n1s <= 0 or n2s <= 0:
        raise DataError("synthetic tables must have at least one row each")
    cells = n1s * (n2s - 1) if no_diag else n1s * n2s
    if lk.kind == "one_to_many":
        m_syn = n1s
    else:
        m_syn = p["m_syn"]
        if m_syn is None:
            m_syn = int(round(m * math.sqrt(n1s * n2s / (n_real[0] * n_real[1]))))
        if isinstance(m_syn, bool) or int(m_syn) != m_syn or not (1 <= int(m_syn) <= cells):
            raise ConfigError(f"mechanism 'relational': parameter 'm_syn' must be an integer in [1, {cells}], got {m_syn!r}")
        m_syn = int(m_syn)

    # ---- resume: the last committed state (identity is checked by the checkpoint itself)
    state: dict[str, Any] | None = None
    if resume and checkpoint is not None:
        loaded = checkpoint.load()
        if loaded is not None:
            state = loaded[1]
            _restore_ledger(ledger, state["meta"].get("ledger"))
    n_stage1 = len(need)

    def save(round_: int, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if checkpoint is not None:
            done = {n: c for n, c in syn_by_name.items() if n in need}  # supplied tables are not state
            meta = {**meta, "ledger": ledger.to_dict(), "tables_done": sorted(done)}
            arrays = {**arrays, **{f"syn.{n}": c for n, c in done.items()}}
            checkpoint.save(round_, {"meta": meta, "arrays": arrays})

    # ---- stage 1: synthetic tables (a self-referential table once)
    syn_by_name: dict[str, np.ndarray] = {}
    if state is not None:
        for n in state["meta"].get("tables_done", []):
            if n not in need:
                raise CheckpointError(f"relational checkpoint holds table {n!r}, which this run does not synthesize")
            arr = np.asarray(state["arrays"][f"syn.{n}"], dtype=np.int64)
            syn_by_name[n] = _codes(arr, tables[n][1], f"checkpointed synthetic {n}")
            if syn_by_name[n].shape[0] != n_syn[n]:
                raise CheckpointError(f"relational checkpoint: table {n!r} has {arr.shape[0]} rows, expected {n_syn[n]}")
    for s, name in enumerate(need):
        if name in syn_by_name:
            continue
        pos = names.index(name)
        syn_by_name[name] = _synth_table(name, codes[pos], doms[pos], n_syn[name], tbud[name], ledger, noise, p, client)
        save(s, {"stage": "tables"}, {})
        if progress is not None:
            progress(f"synthesize table {name}", 1.0)
    syn_by_name.update(given)
    syn_codes = [syn_by_name[names[0]], syn_by_name[names[1]]]

    real = CrossTables(codes[0], doms[0], codes[1], doms[1])
    syn = CrossTables(syn_codes[0], doms[0], syn_codes[1], doms[1])
    all_w = cross_workloads(doms[0], doms[1], int(p["k"]))

    # ---- initial links (data-independent)
    rng0 = noise.generator("relational", "init")
    if lk.kind == "one_to_many":
        si = np.arange(n1s, dtype=np.int64)
        sj = rng0.integers(0, n2s, size=n1s).astype(np.int64)
    else:
        si, sj = _random_links(rng0, n1s, n2s, m_syn, no_diag)
    si0, sj0 = si.copy(), sj.copy()  # the data-independent start (the shrinkage prior with 'initial')

    report: dict[str, Any] = {
        "mechanism": "relational", "kind": lk.kind, "tables": list(unique), "m": m, "m_syn": m_syn,
        "rows_real": list(n_real), "rows_synthetic": [n1s, n2s], "degree": deg_report, "links_input": lk.report,
        "cross_workloads": len(all_w), "k": int(p["k"]),
    }
    if self_ref:
        report["self_referential"] = {"directed": True, "self_loops": bool(p["self_loops"]),
                                      "sensitivity_degree": 2 * d_max}
    evaluate = bool(p["evaluate_nonprivate"]) or bool(p["evaluate"])
    if not evaluate:
        # max degrees and dropped-link counts are read off the private links: not released by default
        nonpriv_degree = {k: v for k, v in deg_report.items() if k not in ("d_max", "truncated", "links_kept")}
        report["degree"] = {"d_max": deg_report["d_max"], "truncated": deg_report["truncated"], "links_kept": m}
        report["links_input"] = {}
        report["nonprivate_withheld"] = sorted([*nonpriv_degree, *lk.report])
    init_err = None
    if evaluate:
        init_err = average_error(real, ri, rj, syn, si, sj, all_w)

    # ---- candidates and privacy schedule
    cand_w = candidate_workloads(doms[0], doms[1], int(p["k"]), p["candidate_orders"])
    by_label = {w.label(): w for w in cand_w}
    T, K, alpha = int(p["iterations"]), int(p["workloads_per_iteration"]), float(p["alpha"])
    rho_links = b_links.rho
    # a record of a self-referential table is on both ends of the links: up to 2·d_max linked pairs change
    d_sens = 2 * d_max if self_ref else d_max
    min_cells = min(int(np.prod(w.sizes(doms[0], doms[1]))) for w in cand_w)
    n_sel = selection_count(T, K, len(cand_w), rho_links, m, d_sens, alpha, p["max_noise"], min_cells)
    cap_one = selection_count(1, 1, 1, rho_links, m, d_sens, alpha, p["max_noise"], min_cells, floor_one=False)
    # 'auto' decides per release: shrink it when its expected noise norm σ·√cells exceeds max_noise
    # (public: σ, the cell count and max_noise only); when even one measurement of the smallest candidate
    # would exceed it (cap below 1), that holds for every release
    per_release = p["shrinkage"] == "auto" and p["max_noise"] is not None
    shrinkage: Any = bool(p["shrinkage"]) if p["shrinkage"] != "auto" else True if cap_one < 1 else (
        "per_release" if per_release else False)
    ks = [min(K, max(n_sel - K * t, 0)) for t in range(T)]
    eps0 = math.sqrt(2.0 * rho_links / n_sel) if n_sel else 0.0
    sens_tv = d_sens / m
    l2 = math.sqrt(2.0) * d_sens / m
    sigma = gaussian_sigma((1 - alpha) * eps0 ** 2 / 2, l2) if n_sel else math.inf
    eps_em = 2.0 * math.sqrt(alpha) * eps0 if n_sel else 0.0
    report["privacy"] = {"rho_links": rho_links, "epsilon0": eps0, "em_epsilon": eps_em, "noise_std": sigma,
                         "selections": n_sel, "shrinkage": shrinkage, "measuring_iterations": sum(1 for k_ in ks if k_),
                         "candidates": len(cand_w), "alpha": alpha,
                         "rho_tables": {n: tbud[n].rho for n in need}}

    selected: list[CrossWorkload] = []
    answers: list[np.ndarray] = []
    released: list[np.ndarray] = []  # the raw Gaussian releases (before any shrinkage)
    chosen_set: set[CrossWorkload] = set()
    history: list[dict[str, Any]] = []
    t_start = 0
    if state is not None and state["meta"].get("stage") == "links":
        meta, arrs = state["meta"], state["arrays"]
        try:
            selected = [by_label[lab] for lab in meta["selected"]]
            released = [np.asarray(arrs[f"released.{q}"], dtype=float) for q in range(len(selected))]
            si = np.asarray(arrs["si"], dtype=np.int64)
            sj = np.asarray(arrs["sj"], dtype=np.int64)
            si0 = np.asarray(arrs["si0"], dtype=np.int64)
            sj0 = np.asarray(arrs["sj0"], dtype=np.int64)
            history = list(meta["history"])
            t_start = int(meta["iteration"]) + 1
            init_err = meta.get("init_err", init_err)
        except KeyError as e:
            raise CheckpointError(f"relational checkpoint lacks entry {e}") from None
        if si.size != m_syn or sj.size != m_syn:
            raise CheckpointError(f"relational checkpoint holds {si.size} links, expected {m_syn}")
        chosen_set = set(selected)
    for t in range(t_start, T):
        kt = ks[t]
        picked: list[CrossWorkload] = []
        if kt > 0:
            rng = noise.generator("relational", "iteration", t)
            remaining = [w for w in cand_w if w not in chosen_set]
            pool_idx = rng.choice(len(remaining), size=min(int(p["candidates"]), len(remaining)), replace=False)
            pool = [remaining[q] for q in sorted(pool_idx)]
            # selection: charge first, then read the private scores
            ledger.charge("links:select", rho=kt * exponential_rho(eps_em), iteration=t, draws=kt)
            scores = np.array([0.5 * np.abs(real.marginal(w, ri, rj) - syn.marginal(w, si, sj)).sum() for w in pool])
            if p["noise_penalty"]:
                # AIM's penalty (data-independent): the expected TV noise of measuring w, ½·√(2/π)·σ·|cells|
                scores = scores - np.array([0.5 * math.sqrt(2 / math.pi) * sigma * np.prod(w.sizes(doms[0], doms[1]))
                                            for w in pool])
            for d in range(kt):
                # Gumbel-max draws from the noise source (keyed; CSPRNG when unseeded), like every release
                q = exponential_mechanism(scores, eps_em, sens_tv,
                                          lambda n, d=d: noise.gumbel(("relational", "select", t, d), n))
                picked.append(pool[q])
                scores[q] = -np.inf
            ledger.charge("links:measure", rho=kt * (1 - alpha) * eps0 ** 2 / 2, iteration=t,
                          workloads=[w.label() for w in picked], sigma=sigma)
            for w in picked:
                # the release is of the integer count table (L2 sensitivity √2·d_sens, noise σ·m), read as a
                # distribution after the noise: P_w + N(0, σ²) exactly, and a discrete sampler gets integers
                c = real.counts(w, ri, rj)
                noisy = noise.add_gaussian(("relational", "measure", t, w.label()), c, sigma * m) / m
                del c
                released.append(noisy)
                selected.append(w)
                chosen_set.add(w)
            del scores
        if not selected or (kt == 0 and not p["refit"]):
            break  # nothing measured yet, or (refit: false) no new measurement to fit
        # targets: the releases, or (shrinkage) each (noisy enough) release shrunk towards a prior
        if shrinkage:
            # prior: ('initial', the default) the random start's marginal, fixed and data-independent
            # (≈ the product of the synthetic tables' marginals), or ('current') the current synthetic
            # marginal, which lets the targets creep towards the noisy release iteration after iteration
            pi, pj = (si0, sj0) if p["shrink_towards"] == "initial" else (si, sj)
            tau = float(p["max_noise"]) if shrinkage == "per_release" else -1.0
            answers = [shrink(y, syn.marginal(w, pi, pj), sigma, float(p["shrinkage_margin"]))
                       if sigma * math.sqrt(y.size) > tau else y for w, y in zip(selected, released)]
        else:
            answers = list(released)
        # ---- optimisation on slices (post-processing from here on; iterations without a new
        # measurement re-optimise other slices against the answers already released)
        si, sj = _optimise(p, lk.kind, syn, si, sj, n1s, n2s, m_syn, selected, answers, noise, t, client,
                           no_diagonal=no_diag)
        history.append({"iteration": t, "selected": [w.label() for w in picked]})
        save(n_stage1 + t, {"stage": "links", "iteration": t, "selected": [w.label() for w in selected],
                            "history": history, "init_err": init_err},
             {"si": si, "sj": sj, "si0": si0, "sj0": sj0, **{f"released.{q}": y for q, y in enumerate(released)}})
        if progress is not None:
            progress("relational iterations", (t + 1) / max(T, 1))
    report["iterations"] = history
    report["dp_cross_error"] = dp_fit_report(syn, si, sj, selected, released, sigma)
    if evaluate:
        report["nonprivate_evaluation"] = {
            "note": "computed from the real data; NOT differentially private",
            "average_cross_error_pct": average_error(real, ri, rj, syn, si, sj, all_w),
            "initial_random_links_error_pct": init_err,
        }

    # ---- outputs
    key1 = lk.left_key or "id"
    key2 = lk.right_key or "id"
    t1 = pd.DataFrame(syn_codes[0], columns=list(doms[0].attributes))
    t1.insert(0, key1, np.arange(n1s, dtype=np.int64))
    t2 = pd.DataFrame(syn_codes[1], columns=list(doms[1].attributes))
    t2.insert(0, key2, np.arange(n2s, dtype=np.int64))
    order = np.lexsort((sj, si))
    si, sj = si[order], sj[order]
    if no_diag and np.any(si == sj):
        raise DataError("internal: a self-loop was drawn although self_loops is false")
    if lk.kind == "one_to_many":
        fk = np.empty(n1s, dtype=np.int64)
        fk[si] = sj
        t1[lk.fk or f"{names[1]}_{key2}"] = fk
    if self_ref:
        c1, c2 = lk.columns or ("source", "target")
        links_df = pd.DataFrame({c1: si, c2: sj})
        out_tables = {names[0]: t1}
    else:
        links_df = pd.DataFrame({f"{names[0]}.{key1}": si, f"{names[1]}.{key2}": sj})
        out_tables = {names[0]: t1, names[1]: t2}
    report["ledger_rho_spent"] = ledger.spent_rho
    return RelationalResult(out_tables, links_df, report)


def candidate_workloads(dom1: Domain, dom2: Domain, k: int, orders: Any) -> list[CrossWorkload]:
    """Candidate cross workloads: order k only (``orders: 'k'``, the paper), every order 2..k
    (``'closure'``, AIM's downward closure: the default), or an explicit list of orders."""
    if orders == "k":
        return cross_workloads(dom1, dom2, k)
    if orders in (None, "closure"):
        orders = list(range(2, k + 1))
    out: list[CrossWorkload] = []
    for o in orders:
        try:
            out.extend(cross_workloads(dom1, dom2, int(o)))
        except WorkloadError:
            continue  # an order the two tables cannot form
    if not out:
        raise ConfigError(f"mechanism 'relational': no cross workloads of order(s) {orders}")
    return out


def selection_count(T: int, K: int, n_candidates: int, rho: float, m: int, d_max: int, alpha: float,
                    max_noise: float | None, min_cells: int, floor_one: bool = True) -> int:
    """How many workloads to measure: T·K (the paper), capped so each measurement stays informative.

    With n measurements, σ² = d_max²·n / (m²·(1−α)·ρ). ``max_noise`` = τ caps n so that the expected
    L2 norm of the noise on the smallest candidate, σ·√cells_min, is at most τ:
    n ≤ τ²·m²·(1−α)·ρ / (d_max²·cells_min) (at least 1). Public inputs only (m is public, as in the paper).
    """
    n = min(T * K, n_candidates)
    if max_noise is not None and n > 0:
        cap = float(max_noise) ** 2 * m * m * (1 - alpha) * rho / (d_max * d_max * max(min_cells, 1))
        n = max(1 if floor_one else 0, min(n, int(math.floor(cap))))
    return n


def dp_fit_report(syn: CrossTables, si: np.ndarray, sj: np.ndarray, selected: list[CrossWorkload],
                  released: list[np.ndarray], sigma: float) -> dict[str, Any]:
    """Differentially private error summary: final synthetic marginals against the noisy releases.

    Only DP outputs enter (synthetic links/tables and the Gaussian releases), so this is post-processing.
    ``average_l1_vs_noisy_pct`` = 100·mean_w ‖P_w(syn) − y_w‖₁ includes the measurement noise, whose own
    expected L1 is ``expected_noise_l1_pct`` = 100·mean_w d_w·σ·√(2/π); ``debiased_l1_pct`` subtracts it
    (clipped at 0), a rough DP estimate of the error on the measured workloads.
    """
    if not selected:
        return {"workloads": 0, "note": "no workloads were measured (iterations: 0)"}
    l1 = [float(np.abs(syn.marginal(w, si, sj) - y).sum()) for w, y in zip(selected, released)]
    noise_l1 = [y.size * sigma * math.sqrt(2.0 / math.pi) for y in released]
    avg, nz = 100.0 * float(np.mean(l1)), 100.0 * float(np.mean(noise_l1))
    return {"workloads": len(selected), "average_l1_vs_noisy_pct": avg, "expected_noise_l1_pct": nz,
            "debiased_l1_pct": max(avg - nz, 0.0),
            "note": "differentially private (computed from the noisy releases and the synthetic data only); "
                    "measured workloads only, in the paper's % L1 units"}


def shrink(noisy: np.ndarray, prior: np.ndarray, sigma: float, margin: float = 2.0) -> np.ndarray:
    """Linear (Wiener) shrinkage of a noisy marginal towards ``prior``, then onto the simplex.

    With d cells and noise variance σ², the signal power s² = ‖p − prior‖² is estimated as
    ‖y − prior‖² − dσ² − 2σ²√(2d) (conservative: two noise standard deviations below the unbiased
    estimate), clipped to [0, 2] (two distributions are at most √2 apart in L2), and
    y is replaced by prior + λ(y − prior), λ = s²/(s² + dσ²). At low budgets λ → 0 keeps the links
    near the prior instead of fitting noise; at high budgets λ → 1. The Euclidean projection onto the
    probability simplex (a marginal is a distribution) only brings it closer to the true marginal.
    Both steps are post-processing of the release.
    """
    from privcube.mechanisms.relational.projection import project_rows_simplex

    d = noisy.size
    if math.isfinite(sigma):
        noise_pow = d * sigma * sigma
        # subtract two standard deviations of the noise power (σ²√(2d)): only a detected signal counts
        excess = float(np.sum((noisy - prior) ** 2)) - noise_pow - margin * sigma * sigma * math.sqrt(2.0 * d)
        s2 = min(max(excess, 0.0), 2.0)
        lam = s2 / (s2 + noise_pow) if s2 + noise_pow > 0 else 1.0
        noisy = prior + lam * (noisy - prior)
    else:
        noisy = prior.copy()
    return project_rows_simplex(noisy[None, :])[0]


def _optimise(p: Mapping[str, Any], kind: str, syn: CrossTables, si: np.ndarray, sj: np.ndarray, n1s: int, n2s: int,
              m_syn: int, selected: list[CrossWorkload], answers: list[np.ndarray], noise: NoiseSource, t: int,
              client: Any, *, no_diagonal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One iteration's slices: PGD + rounding per disjoint slice, then re-insertion.

    ``no_diagonal`` (self-referential links without self-loops): the cells (r, r) of each slice are
    fixed at 0 (box upper bound 0), so they are never optimised towards nor sampled.
    """
    rng = noise.generator("relational", "slices", t)
    use = list(range(len(selected)))
    wps = p["workloads_per_slice"]
    if wps is not None and len(use) > int(wps):
        err = [np.abs(syn.marginal(w, si, sj) - a).sum() for w, a in zip(selected, answers)]
        use = sorted(np.argsort(err)[::-1][: int(wps)].tolist())
    ws = [selected[q] for q in use]
    ans = [answers[q] for q in use]
    s1, s2 = slice_shape(n1s, n2s, fraction=p["slice_fraction"], cells=float(p["slice_cells"]))
    if kind == "one_to_many":
        parent_of = np.empty(n1s, dtype=np.int64)
        parent_of[si] = sj
        slices = choose_slices_o2m(parent_of, n2s, rng, s2, max(1, int(float(p["slice_cells"]) // s2)),
                                   int(p["slices_per_iteration"]))
    else:
        slices = choose_slices_m2m(n1s, n2s, si, sj, rng, s1, s2, int(p["slices_per_iteration"]), float(p["guaranteed"]))
    S = len(slices)
    full = [syn.counts(w, si, sj) for w in ws]
    tasks, masks = [], []
    for k, sl in enumerate(slices):
        inside = edges_in(sl, si, sj, n1s, n2s)
        masks.append(inside)
        B0 = sparse_block(sl, si[inside], sj[inside])  # shipped sparse; densified inside the task
        m_slice = float(inside.sum())
        rows = [syn.index(1, w.left)[sl.rows] for w in ws]
        cols = [syn.index(2, w.right)[sl.cols] for w in ws]
        sizes = [w.sizes(syn.dom1, syn.dom2) for w in ws]
        if p["objective"] == "paper":
            targets = [m_slice * a for a in ans]
            scale = max(m_slice, 1.0)
        else:
            cur = [syn.counts(w, si[inside], sj[inside]) for w in ws]
            targets = [c + (m_syn * a - f) / S for c, a, f in zip(cur, ans, full)]
            scale = float(m_syn)
        forbidden = None
        if no_diagonal:
            _, fr, fc = np.intersect1d(sl.rows, sl.cols, assume_unique=True, return_indices=True)
            forbidden = (fr.astype(np.int64), fc.astype(np.int64))
        tasks.append(SliceTask(rows, cols, sizes, targets, scale, B0, kind, int(p["pgd_iters"]), noise,
                               ("relational", "slice", t, k), forbidden))
    results = map_slices(tasks, client, label=f"relational-slice-t{t}")
    inside_any = np.zeros(si.size, dtype=bool)
    new_i, new_j = [], []
    for sl, inside, (r, c) in zip(slices, masks, results):
        inside_any |= inside
        new_i.append(sl.rows[r])
        new_j.append(sl.cols[c])
    si = np.concatenate([si[~inside_any], *new_i]).astype(np.int64)
    sj = np.concatenate([sj[~inside_any], *new_j]).astype(np.int64)
    if si.size != m_syn:
        raise DataError(f"internal: link count changed from {m_syn} to {si.size} during slice re-insertion")
    return si, sj


# --------------------------------------------------------------------------------- mechanism
class Relational(Mechanism):
    """Registry entry: ``run(RelationalData, None, budgets, ledger, noise, context)`` → MechanismResult."""

    name = "relational"
    PARAMS = PARAMS

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        """Validate the parameters (ConfigError names the key)."""
        super().__init__(params)
        _check_params(self.params)

    def run(self, oracle: Any, workload: Any, budget: Any, ledger: Any, noise: Any,
            context: RunContext | None = None) -> MechanismResult:
        """``oracle`` is a ``RelationalData``; ``budget`` is ``{tables: {...}, links: ...}``."""
        if not isinstance(oracle, RelationalData):
            raise ConfigError("mechanism 'relational' needs RelationalData (two tables and links), not a single-table oracle")
        client = context.client if context is not None else None
        progress = context.progress if context is not None else None
        res = run_relational(oracle.tables, oracle.links, self.params, budget, ledger, noise, client, progress=progress)
        return res.to_mechanism_result()


__all__ = ["Links", "RelationalData", "RelationalResult", "Relational", "run_relational", "parse_links", "shrink",
           "compose_budgets"]
