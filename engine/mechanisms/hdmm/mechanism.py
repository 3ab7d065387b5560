"""HDMM mechanism: select a strategy (OPT_0/⊗/+/M, best expected error), measure, reconstruct, answer.

RMSE convention: overall rmse = sqrt(Σ_g w_g² · E‖Ŵ_g − W_g x‖² / Σ_g m_g) (the optimised objective,
the paper's RMSE when all weights are 1); per-group rmse = sqrt(E‖Ŵ_g − W_g x‖² / m_g), unweighted.
Noise: Laplace (pure budgets; ε = budget.epsilon) or Gaussian (σ = Δ₂/√(2ρ) under zCDP, or the analytic
Gaussian σ(ε, δ) with ``calibration: analytic``).
Data vectors above ``chunk_cells`` cells are measured as one task graph over the chunked exact marginal when
the oracle is a ``LazyMarginalOracle`` and the run context offers the ``chunked-release`` kernel (which gets
the strategy as a ``privcube.linalg`` operator);
otherwise the release runs through ``oracle.measure`` next to the data.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from privcube.core.context import RunContext
from privcube.core.errors import BudgetError, ConfigError, MemoryLimitError
from privcube.linalg.marginals import SPECTRAL_MAX_DIMS as MAX_DIMS
from privcube.mechanisms.base import GroupAnswer, Mechanism, MechanismResult, PlanSummary
from privcube.mechanisms.hdmm.implicit import ImplicitWorkload, from_workload
from privcube.mechanisms.hdmm.lower_bound import svd_bound
from privcube.mechanisms.hdmm.strategy import Strategy
from privcube.mechanisms.hdmm.subproblems import Mapper, solve_candidates, task_mapper
from privcube.core.oracle import LazyMarginalOracle, MarginalOracle, measure
from privcube.privacy.budget import PrivacyBudget, refuse_pure_for_gaussian
from privcube.privacy.discrete import is_discrete
from privcube.core.workload import Workload

OPTIMIZERS = ("auto", "opt0", "kron", "plus", "marginals")
OPT0_LIMIT = 4096  # cells: OPT_0 on the explicit merged domain


def candidate_optimizers(iw: ImplicitWorkload, optimizer: str) -> list[str]:
    """Optimisers HDMM runs for ``optimizer`` (``auto`` = every one that fits)."""
    if optimizer != "auto":
        if optimizer == "opt0" and iw.size > OPT0_LIMIT:
            raise ConfigError(f"hdmm: optimizer 'opt0' needs at most {OPT0_LIMIT} cells, the workload has {iw.size}")
        if optimizer == "marginals" and len(iw.shape) > MAX_DIMS:
            raise ConfigError(f"hdmm: optimizer 'marginals' supports at most {MAX_DIMS} attributes")
        return [optimizer]
    out = ["kron"]
    if len(iw.terms) > 1:
        out.append("plus")
    if len(iw.shape) <= MAX_DIMS and len(iw.shape) > 1:
        out.append("marginals")
    if len(iw.shape) > 1 and iw.size <= 1024:
        out.append("opt0")
    return out


def select_strategy(iw: ImplicitWorkload, noise: str, optimizer: str = "auto", restarts: int = 3, seed: int = 0,
                    mapper: Mapper | None = None) -> tuple[Strategy, dict[str, float]]:
    """Run the candidate optimisers and keep the lowest loss.

    Their independent subproblems (restarts, per-factor and per-product OPT_0 problems, OPT_M starts; see
    ``subproblems``) go through ``mapper`` as one batch: over a cluster run context's ``map`` each is a
    task on the cluster (``subproblems.task_mapper``); without a mapper they run here in order. The result does not depend on the mapper.
    """
    names = candidate_optimizers(iw, optimizer)
    strategies = solve_candidates(iw, noise, names, restarts, seed, mapper)
    losses = {n: float(s.loss) for n, s in strategies.items()}
    return min(strategies.values(), key=lambda s: s.loss), losses


class HDMM(Mechanism):
    """High-Dimensional Matrix Mechanism (McKenna et al.)."""

    name = "hdmm"
    PARAMS = {"noise": "auto", "calibration": "zcdp", "restarts": 3, "optimizer": "auto", "seed": 0,
              "max_cells": 2**27, "chunk_cells": 2**24}
    PARAM_HELP = {
        "noise": "auto | laplace | gaussian: auto is Laplace for a pure {epsilon} budget, Gaussian otherwise",
        "calibration": "zcdp | analytic: Gaussian noise calibrated to the budget's rho (zCDP), or to (epsilon, "
                       "delta) by the analytic Gaussian mechanism",
        "restarts": "random restarts of each strategy optimisation (the lowest loss is kept)",
        "optimizer": "auto | opt0 | kron | plus | marginals: the strategy optimisers run (OPT_0, OPT_x, OPT_+, "
                     "OPT_M; auto: every one that fits the workload), the lowest loss kept",
        "seed": "seed of the strategy search's random starts (public: it is not the noise seed)",
        "max_cells": "largest data vector (cells) the mechanism measures; a larger one stops the run with an error",
        "chunk_cells": "data vectors above this many cells are released chunk by chunk as one task graph",
    }

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        p = self.params
        if p["noise"] not in ("auto", "laplace", "gaussian"):
            raise ConfigError(f"hdmm: noise must be auto, laplace or gaussian, got {p['noise']!r}")
        if p["calibration"] not in ("zcdp", "analytic"):
            raise ConfigError(f"hdmm: calibration must be zcdp or analytic, got {p['calibration']!r}")
        if p["optimizer"] not in OPTIMIZERS:
            raise ConfigError(f"hdmm: optimizer must be one of {', '.join(OPTIMIZERS)}, got {p['optimizer']!r}")
        for key in ("restarts", "seed", "max_cells", "chunk_cells"):
            v = p[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key != "seed" else 0):
                raise ConfigError(f"hdmm: {key} must be a {'non-negative' if key == 'seed' else 'positive'} integer, got {v!r}")

    @classmethod
    def check_budget(cls, params: Mapping[str, Any], privacy: Any, budget: PrivacyBudget) -> None:
        """Refuse ``noise: laplace`` with a budget given as ``{epsilon, delta}``.

        Laplace noise gives pure epsilon-DP and has no use for a delta; the only way to spend an (epsilon, delta)
        budget with it is through its zCDP reading rho(epsilon, delta) = eps'^2 / 2, i.e. Laplace at eps' (0.17 for
        epsilon 1, delta 1e-9): far noisier than the epsilon asked for, with nothing said. The user meant one of
        the two ways out the message names. ``{rho}`` budgets (Laplace at sqrt(2 rho), charged in rho) stay
        accepted."""
        if params.get("noise") != "laplace":
            return
        if not (isinstance(privacy, Mapping) and "epsilon" in privacy and "delta" in privacy):
            return
        eps = budget.epsilon
        raise ConfigError(f"{cls.name}: noise: laplace gives pure epsilon-DP and has no use for privacy.delta; with "
                          f"{{epsilon: {eps:g}, delta: {budget.delta:g}}} it would be calibrated to the zCDP reading "
                          f"of (epsilon, delta), i.e. Laplace noise at epsilon {math.sqrt(2.0 * budget.rho):.2g}, not "
                          f"{eps:g}: give privacy: {{epsilon: {eps:g}}} alone (Laplace at epsilon {eps:g}, pure DP), "
                          "or remove noise: laplace (Gaussian noise uses the delta)")

    # ------------------------------------------------------------------ noise calibration
    def noise_kind(self, budget: PrivacyBudget) -> str:
        """laplace or gaussian for this budget."""
        if self.params["noise"] != "auto":
            return self.params["noise"]
        return "laplace" if budget.pure else "gaussian"

    def unit_scale(self, budget: PrivacyBudget) -> tuple[str, float, float]:
        """(noise, per-row noise variance per unit sensitivity², the scale parameter per unit sensitivity)."""
        kind = self.noise_kind(budget)
        if not isinstance(budget, PrivacyBudget):
            raise BudgetError(f"hdmm: budget must be a PrivacyBudget, got {type(budget).__name__}")
        if kind == "laplace":
            eps = budget.epsilon if budget.pure else math.sqrt(2.0 * budget.rho)
            return kind, 2.0 / eps**2, 1.0 / eps
        how = " with calibration 'analytic'" if self.params["calibration"] == "analytic" else ""
        refuse_pure_for_gaussian(budget, f"{self.name} (noise 'gaussian'{how})", "use noise: laplace, or ")
        if self.params["calibration"] == "analytic":
            from privcube.privacy.primitives import analytic_gaussian_sigma
            s = analytic_gaussian_sigma(budget.epsilon, budget.delta, 1.0)
        else:
            from privcube.privacy.primitives import gaussian_sigma
            s = gaussian_sigma(budget.rho, 1.0)
        return kind, s**2, s

    # ------------------------------------------------------------------ plan
    def _select(self, workload: Workload, budget: PrivacyBudget, mapper: Mapper | None = None
                ) -> tuple[ImplicitWorkload, Strategy, dict[str, float], str]:
        iw = from_workload(workload)
        kind = self.noise_kind(budget)
        strat, losses = select_strategy(iw, kind, self.params["optimizer"], self.params["restarts"],
                                        self.params["seed"], mapper)
        if strat.kind == "opt0":
            iw = iw.merged()
        return iw, strat, losses, kind

    def _summary(self, iw: ImplicitWorkload, strat: Strategy, losses: dict[str, float], budget: PrivacyBudget,
                 extra: dict[str, Any] | None = None) -> PlanSummary:
        kind, var, _ = self.unit_scale(budget)
        p = 1 if kind == "laplace" else 2
        sens = strat.sensitivity(p)
        row_var = var * sens**2
        variances = strat.variances(iw.terms)
        m = iw.num_queries()
        groups, weighted = [], 0.0
        for g, (c, _), v, mg in zip(iw.groups, iw.terms, variances, m):
            tse = row_var * float(np.sum(v))
            weighted += c**2 * tse
            groups.append({"attributes": list(g.attributes), "queries": g.query_types(), "weight": g.weight,
                           "rows": mg, "rmse": math.sqrt(tse / mg)})
        rmse = math.sqrt(weighted / sum(m))
        lb = svd_bound(iw.terms, iw.shape)
        privacy = {"rho": budget.rho, "epsilon": budget.epsilon, "delta": budget.delta, "noise": kind,
                   "calibration": "laplace" if kind == "laplace" else self.params["calibration"]}
        details = {"optimizer": strat.kind, "losses": losses, "sensitivity": sens, "cells": iw.size,
                   "blocks": [list(b) for b in iw.blocks],
                   "rmse_convention": "sqrt(sum_g w_g^2 E||err_g||^2 / sum_g m_g)",
                   "svd_bound_rmse": None if lb is None else math.sqrt(var * lb / sum(m)), **(extra or {})}
        return PlanSummary(self.name, rmse, privacy, groups, [strat.describe()], details)

    def plan(self, workload: Workload, budget: PrivacyBudget) -> PlanSummary:
        """Select the strategy and report expected errors (no data)."""
        iw, strat, losses, _ = self._cached_select(workload, budget)
        return self._summary(iw, strat, losses, budget)

    def plan_noise(self, workload: Workload, budget: PrivacyBudget) -> list[dict[str, Any]]:
        """Noise fields of each group's answers: Laplace coefficients (exact intervals) when small."""
        iw, strat, _, kind = self._cached_select(workload, budget)
        if kind != "laplace":
            return [{"noise": kind} for _ in iw.groups]
        _, _, unit = self.unit_scale(budget)
        coefs = laplace_coefficients(strat, iw.terms, unit * strat.sensitivity(1))
        return [{"noise": kind, "noise_coefficients": None if coefs is None else c}
                for c in (coefs or [None] * len(iw.groups))]

    def _cached_select(self, workload: Workload, budget: PrivacyBudget, mapper: Mapper | None = None
                       ) -> tuple[ImplicitWorkload, Strategy, dict[str, float], str]:
        """Strategy selection is data-independent: plan and repeated runs reuse one result. ``mapper`` runs
        the independent subproblems (None: in order, here)."""
        key = (workload, self.noise_kind(budget))
        cache = self.__dict__.setdefault("_strategy_cache", {})
        try:
            hit = cache.get(key)
        except TypeError:  # unhashable workload parameters
            return self._select(workload, budget, mapper)
        if hit is None:
            hit = cache[key] = self._select(workload, budget, mapper)
        return hit

    # ------------------------------------------------------------------ run
    def run(self, oracle: MarginalOracle, workload: Workload, budget: PrivacyBudget, ledger: Any, noise: Any,
            context: RunContext | None = None) -> MechanismResult:
        """Measure A x + noise once (charging the whole budget), reconstruct, answer every group."""
        if is_discrete(noise):  # A x is real-valued: integer noise would not hide it (ConfigError)
            self.use_noise_sampler("discrete")
        context = context or RunContext()
        iw = from_workload(workload)
        if iw.size > self.params["max_cells"]:
            raise MemoryLimitError(f"hdmm: the data vector over {list(iw.attributes)} has {iw.size} cells, "
                                   f"above max_cells={self.params['max_cells']}")
        iw, strat, losses, kind = self._cached_select(workload, budget, task_mapper(context.map))
        _, _, unit = self.unit_scale(budget)
        if context.progress:
            context.progress("hdmm: strategy selected", 0.3)
        if kind == "laplace":
            sens = strat.sensitivity(1)
            if budget.pure:
                ledger.charge(self.name, epsilon=budget.epsilon, strategy=strat.kind, rows=strat.rows())
            else:
                ledger.charge(self.name, rho=budget.rho, strategy=strat.kind, rows=strat.rows())
        else:
            sens = strat.sensitivity(2)
            if self.params["calibration"] == "analytic":
                ledger.charge(self.name, epsilon=budget.epsilon, delta=budget.delta, strategy=strat.kind,
                              rows=strat.rows())
            else:
                ledger.charge(self.name, rho=budget.rho, strategy=strat.kind, rows=strat.rows())
        # The release A x + noise runs where the data vector is counted (on a worker when there is a
        # client): only y, never the exact x, reaches this process.
        key = (self.name, "measure")
        chunked_release = context.kernel("chunked-release")
        if (isinstance(oracle, LazyMarginalOracle) and chunked_release is not None
                and iw.size > self.params.get("chunk_cells", math.inf)):
            # a data vector too large for one process: the oracle hands the exact marginal as a lazy chunked
            # array (counted on the workers) and A x + noise runs as one task graph next to its chunks
            x = oracle.marginal_dask(tuple(iw.attributes))
            y = chunked_release(x, strat.operator(), kind, unit * sens, key, noise)
        else:
            release = StrategyRelease(strat, kind, unit * sens, key, noise)
            y = measure(oracle, [tuple(iw.attributes)], release)[tuple(iw.attributes)]
        estimates = strat.answer(y, iw.terms)
        summary = self._summary(iw, strat, losses, budget)
        row_var = (2.0 * (unit * sens) ** 2) if kind == "laplace" else (unit * sens) ** 2
        coefs = laplace_coefficients(strat, iw.terms, unit * sens) if kind == "laplace" else None
        answers = [GroupAnswer(g, est, row_var * v, noise=kind, noise_coefficients=None if coefs is None else c)
                   for g, est, v, c in zip(iw.groups, estimates, strat.variances(iw.terms), coefs or iw.groups)]
        if context.progress:
            context.progress("hdmm: answered", 1.0)
        return MechanismResult(answers, report={"plan": summary.to_dict()}, tensors={f"{self.name}.measurements": y})



#: Laplace answers get their exact noise coefficients when the strategy has at most this many rows and
#: (rows × answers) stays below this many entries (else intervals use a conservative bound)
COEFFICIENT_ROWS, COEFFICIENT_ENTRIES = 4096, 4_000_000


def laplace_coefficients(strat: Any, terms: Any, scale: float) -> list[np.ndarray] | None:
    """Per group, the (answers × strategy rows) matrix whose column j is the answer to ``scale · e_j``: the
    answers' noise is this matrix times iid standard Laplace draws (answers are linear in y = A x + noise).
    Data-independent; None when too large (see COEFFICIENT_ROWS / COEFFICIENT_ENTRIES)."""
    rows = strat.rows()
    if rows > COEFFICIENT_ROWS:
        return None
    unit = np.zeros(rows)
    unit[0] = scale
    first = strat.answer(unit, terms)
    if rows * sum(np.asarray(a).size for a in first) > COEFFICIENT_ENTRIES:
        return None
    cols = [first]
    for j in range(1, rows):
        unit[:] = 0.0
        unit[j] = scale
        cols.append(strat.answer(unit, terms))
    return [np.stack([np.asarray(c[i], dtype=float).ravel() for c in cols], axis=1) for i in range(len(first))]


class StrategyRelease:
    """The measurement ``A x + noise`` as a picklable function of the exact data vector."""

    def __init__(self, strategy: Any, kind: str, scale: float, key: tuple, noise: Any) -> None:
        self.strategy, self.kind, self.scale, self.key, self.noise = strategy, kind, scale, key, noise

    def __call__(self, clique: tuple, mu: np.ndarray) -> np.ndarray:
        x = np.asarray(mu, dtype=float).reshape(-1)
        y = self.strategy.measure(x)
        add = self.noise.add_laplace if self.kind == "laplace" else self.noise.add_gaussian
        return add(self.key, y, self.scale)
