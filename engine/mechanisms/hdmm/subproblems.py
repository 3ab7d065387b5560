"""HDMM's strategy search as a flat list of independent subproblems, so a mapper can scatter them.

The meta-choice min(OPT_⊗, OPT_+, OPT_M[, OPT_0]) decomposes into problems that share nothing:
* OPT_⊗ on one Kronecker product: one OPT_0 per factor (Thm 4) and per random restart;
* OPT_⊗ on a union: one block-coordinate-descent run per restart (sequential over factors inside);
* OPT_+: one OPT_0 per (product, factor, restart) — every product's OPT_⊗ is a single product;
* OPT_M: one L-BFGS-B run per start point;
* OPT_0 on the merged domain: one p-Identity run per restart.
Identical OPT_0 problems (same Gram, noise and seed: e.g. the I and T factors repeated across marginal
products) are solved once; deterministic problems (Gaussian OPT_0, Grams that Identity/Total solve
exactly) get one task whatever ``restarts`` is. :func:`plan_tasks` builds the tasks, ``mapper`` runs
them (in order here, or as cluster tasks through a run context's ``map``), and
:func:`combine` assembles every candidate strategy. Pure numpy: nothing here imports dask.
"""
from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.errors import ConfigError
from privcube.linalg.marginals import marginal_approximation
from privcube.mechanisms.hdmm.implicit import ImplicitWorkload
from privcube.mechanisms.hdmm.opt_0 import Opt0Result, check_gram, opt0, template_is_optimal
from privcube.mechanisms.hdmm.opt_kron import KronResult, opt_kron
from privcube.mechanisms.hdmm.opt_marginals import MarginalsResult, marginal_starts, opt_marginals_from
from privcube.mechanisms.hdmm.union_budget import budget_split
from privcube.mechanisms.hdmm.strategy import KronStrategy, MarginalStrategy, Strategy, UnionStrategy

Mapper = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


def serial_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``[fn(x) for x in items]``: the mapper used without a cluster."""
    return [fn(x) for x in items]


@dataclass(frozen=True)
class Opt0Task:
    """OPT_0 with one restart on a (normalised) Gram."""

    gram: np.ndarray
    noise: str
    seed: int


@dataclass(frozen=True)
class KronTask:
    """One restart of the block coordinate descent of OPT_⊗ on a union of products."""

    terms: list
    noise: str
    seed: int


@dataclass(frozen=True)
class MarginalsTask:
    """One OPT_M L-BFGS-B run from ``start`` on the workload's marginal approximation w (2^d numbers)."""

    w: np.ndarray
    shape: tuple[int, ...]
    noise: str
    start: np.ndarray


def run_task(task: Opt0Task | KronTask | MarginalsTask) -> Opt0Result | KronResult | MarginalsResult:
    """Solve one subproblem (the function the mapper applies; picklable)."""
    if isinstance(task, Opt0Task):
        return opt0(task.gram, task.noise, restarts=1, seed=task.seed)
    if isinstance(task, KronTask):
        return opt_kron(task.terms, task.noise, restarts=1, seed=task.seed)
    if isinstance(task, MarginalsTask):
        return opt_marginals_from(task.w, task.shape, task.noise, [task.start])
    raise TypeError(f"unknown HDMM subproblem {type(task).__name__}")


@dataclass
class TaskPlan:
    """The tasks, and per candidate optimiser the recipe that turns their results into a strategy."""

    tasks: list[Any] = field(default_factory=list)
    recipes: dict[str, tuple] = field(default_factory=dict)
    _index: dict[tuple, int] = field(default_factory=dict, repr=False)

    def add(self, task: Any, key: tuple | None = None) -> int:
        """Append ``task`` (or reuse the identical one with the same ``key``); return its index."""
        if key is not None and key in self._index:
            return self._index[key]
        self.tasks.append(task)
        if key is not None:
            self._index[key] = len(self.tasks) - 1
        return len(self.tasks) - 1

    def labels(self) -> list[str]:
        """A short kind per task (for progress and tests)."""
        return [type(t).__name__ for t in self.tasks]


def _factor_problem(plan: TaskPlan, gram: np.ndarray, noise: str, restarts: int, seed: int) -> tuple[float, list[int]]:
    """Tasks for one OPT_0 problem on V / mean|V|: ``restarts`` seeds, or one when the answer is deterministic.

    Returns the normalising factor (losses scale back by it) and the task indices."""
    g = check_gram(gram)
    mean = float(np.mean(np.abs(g))) or 1.0
    g = g / mean
    deterministic = noise == "gaussian" or g.shape[0] == 1 or template_is_optimal(g)
    digest = hashlib.blake2b(np.ascontiguousarray(g).tobytes(), digest_size=16).hexdigest()
    seeds = [seed] if deterministic else [seed + r for r in range(restarts)]
    return mean, [plan.add(Opt0Task(g, noise, s), ("opt0", digest, g.shape, noise, s)) for s in seeds]


def _single_product(plan: TaskPlan, factors: Sequence[np.ndarray], noise: str, restarts: int,
                    seed: int) -> list[tuple[float, list[int]]]:
    """Per factor: the Gram's normalising factor and the task indices of its OPT_0 restarts."""
    return [_factor_problem(plan, np.atleast_2d(f).T @ np.atleast_2d(f), noise, restarts, seed) for f in factors]


def _share_identical(terms: list[tuple[float, list[np.ndarray]]]) -> list[tuple[float, list[np.ndarray]]]:
    """The same terms with equal factor matrices as one object, so pickling a task stores each once."""
    seen: dict[tuple, np.ndarray] = {}
    out = []
    for c, fs in terms:
        row = []
        for f in fs:
            key = (f.shape, hashlib.blake2b(np.ascontiguousarray(f).tobytes(), digest_size=16).hexdigest())
            row.append(seen.setdefault(key, f))
        out.append((c, row))
    return out


def _plus_recipe(plan: TaskPlan, terms: list, noise: str, restarts: int, seed: int) -> list:
    return [(c, _single_product(plan, f, noise, restarts, seed)) for c, f in terms]


def plus_parts(terms: Sequence[tuple[float, Sequence[np.ndarray]]], noise: str, restarts: int = 1,
               seed: int = 0) -> tuple[TaskPlan, list]:
    """OPT_+'s subproblems alone: the task plan and, per term, (weight, per-factor task indices)."""
    plan = TaskPlan()
    terms = _share_identical([(float(c), [np.atleast_2d(np.asarray(x, dtype=float)) for x in f]) for c, f in terms])
    return plan, _plus_recipe(plan, terms, noise, max(int(restarts), 1), seed)


def solved_products(parts: list, results: list[Any]) -> list[KronResult]:
    """Each term's Kronecker strategy and loss w² ∏ tr[(A_iᵀA_i)⁺V_i] from the solved factor problems."""
    return [_product(c, p, results) for c, p in parts]


def plan_tasks(iw: ImplicitWorkload, noise: str, names: Sequence[str], restarts: int, seed: int) -> TaskPlan:
    """Independent subproblems of the candidate optimisers ``names`` (kron, plus, marginals, opt0)."""
    if noise not in ("laplace", "gaussian"):
        raise ConfigError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
    restarts = max(int(restarts), 1)
    plan = TaskPlan()
    terms = _share_identical([(float(c), [np.atleast_2d(np.asarray(x, dtype=float)) for x in f]) for c, f in iw.terms])
    for name in names:
        if name == "kron":
            if len(terms) == 1:
                plan.recipes[name] = ("product", terms[0][0], _single_product(plan, terms[0][1], noise, restarts, seed))
            else:
                n_runs = 1 if noise == "gaussian" else restarts   # every restart starts from Identity factors
                plan.recipes[name] = ("union", [plan.add(KronTask(terms, noise, seed + r)) for r in range(n_runs)])
        elif name == "plus":
            plan.recipes[name] = ("plus", _plus_recipe(plan, terms, noise, restarts, seed))
        elif name == "marginals":
            w = marginal_approximation(terms, iw.shape)
            starts = marginal_starts(terms, iw.shape, noise, restarts, seed)
            plan.recipes[name] = ("marginals", w, tuple(iw.shape),
                                  [plan.add(MarginalsTask(w, tuple(iw.shape), noise, z)) for z in starts])
        elif name == "opt0":
            merged = iw.merged()
            v = sum(c**2 * (f[0].T @ f[0]) for c, f in merged.terms)
            plan.recipes[name] = ("opt0", _factor_problem(plan, v, noise, restarts, seed))
        else:
            raise ConfigError(f"hdmm: unknown optimizer {name!r}")
    return plan


def _best_factor(part: tuple[float, list[int]], results: list[Any]) -> tuple[np.ndarray, float]:
    """The restart with the lowest tr[(AᵀA)⁺ V], scaled back to the unnormalised Gram."""
    mean, idx = part
    best = min((results[i] for i in idx), key=lambda r: r.loss)
    return best.matrix, best.loss * mean


def _product(weight: float, parts: list[tuple[float, list[int]]], results: list[Any]) -> KronResult:
    factors, loss = [], weight**2
    for part in parts:
        a, f = _best_factor(part, results)
        factors.append(a)
        loss *= f
    return KronResult(factors, loss)


def combine(plan: TaskPlan, results: list[Any], noise: str) -> dict[str, Strategy]:
    """Assemble each candidate optimiser's strategy from the solved subproblems."""
    out: dict[str, Strategy] = {}
    for name, recipe in plan.recipes.items():
        kind = recipe[0]
        if kind == "product":
            res = _product(recipe[1], recipe[2], results)
            out[name] = KronStrategy(res.factors, res.loss)
        elif kind == "union":
            res = min((results[i] for i in recipe[1]), key=lambda r: r.loss)
            out[name] = KronStrategy(res.factors, res.loss)
        elif kind == "plus":
            prods = solved_products(recipe[1], results)
            weights, loss = budget_split([p.loss for p in prods], noise)
            out[name] = UnionStrategy(weights, [KronStrategy(p.factors, p.loss) for p in prods], loss)
        elif kind == "marginals":
            cands = [results[i] for i in recipe[3]]
            best = min((r for r in cands if r is not None and math.isfinite(r.loss)), key=lambda r: r.loss,
                       default=None)
            if best is None:
                best = opt_marginals_from(recipe[1], recipe[2], noise, [])
            out[name] = MarginalStrategy(recipe[2], best.theta, best.loss)
        elif kind == "opt0":
            a, loss = _best_factor(recipe[1], results)
            out[name] = KronStrategy([a], loss, kind="opt0")
    return out


def solve_candidates(iw: ImplicitWorkload, noise: str, names: Sequence[str], restarts: int, seed: int,
                     mapper: Mapper | None = None) -> dict[str, Strategy]:
    """Plan, solve (through ``mapper``, default in order here) and combine: one strategy per optimiser."""
    plan = plan_tasks(iw, noise, names, restarts, seed)
    results = (mapper or serial_map)(run_task, plan.tasks)
    return combine(plan, list(results), noise)


def task_cost(task: Opt0Task | KronTask | MarginalsTask) -> float:
    """Rough relative cost of a subproblem (cubic in the Gram size; marginals d·2^d), to start long poles first."""
    if isinstance(task, Opt0Task):
        return float(task.gram.shape[0]) ** 3
    if isinstance(task, KronTask):
        return 10.0 * sum(float(np.atleast_2d(f).shape[1]) ** 3 for f in task.terms[0][1]) * len(task.terms)
    return 100.0 * len(task.shape) * 2.0 ** len(task.shape)


#: task-key prefix of HDMM's scattered subproblems
LABEL = "hdmm-opt"


def task_mapper(map_fn: Callable[..., list[Any]], label: str = LABEL) -> Mapper:
    """A :data:`Mapper` over a run context's ``map(fn, items, *, cost=, label=)``: every subproblem one task
    (longest first); task keys are ``{label}-{token}-{i}`` with a fresh token per batch, so batches never
    share keys."""
    def mapper(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        token = uuid.uuid4().hex[:8]
        cost = task_cost if fn.__name__ == "run_task" else None
        return map_fn(fn, items, cost=cost, label=f"{label}-{token}")
    return mapper
