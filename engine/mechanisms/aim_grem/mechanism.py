"""AIM+GReM (Alg. 4 with Algs. 5-7): select (exp. mech.) → CRP → measure residuals → lazy GReM update.

Privacy: initialisation measures every 1-way marginal in W↓ (as its residual and the total) with
σ0² = K/(0.9ρ) (K = |W↓ \\ {∅}|); each round charges ε_t²/8 for the selection and 1/(2σ_t²) for the
measurement (CRP never spends more than that; dropped residuals are not reallocated). When fewer than
two rounds of budget remain (of ρ less the ``final_share`` reserve), the next round spends exactly what is
left and the loop ends: with ``final_round: select`` (the paper) 10% selection and the rest on one marginal,
with ``spread`` (default, :mod:`.final_round`) no selection and the workload-optimal allocation over the
residuals of the cliques already selected. Annealing compares the selected clique's estimate before and after the update, never the true
marginal. Every noise draw is keyed by ("aim-grem", round, ...) so a seed reproduces the run bit for
bit and a resumed run continues identically. True marginals of all of W↓ are read once, in batches.
With a dask client and a large problem they never reach the driver: the data pass leaves them on the
workers, next to the sharded estimates, where selection scores (L1 errors) and the noisy measurements
are computed; the driver receives only noisy arrays, scores and estimates (noise keyed as above, so
the result equals the in-memory path's bit for bit).

Completion (:mod:`.completion`, no budget): unmeasured residuals get the maximum-entropy values implied by
the measured ones instead of zero, in the answers and, per ``selection_on``, in the selection scores;
``strategy`` offers measuring the whole workload with ResidualPlanner, with a public test in the report.

Checkpoints: the first is a small base (the initial measurements); each later round appends an
O(change) record (its noisy measurements, trace row, ledger charges, next budget), with a full
snapshot only when the log outgrows the state. A resume replays the records through the same
combine and lazy update, so it continues bit-identically and never charges a round twice. Under a
``RunCheckpoint`` the commits are written by its writer thread (``background()``) while the next rounds
run, and the run waits for them before it returns: a crash leaves the last commit written, from which a
resume repeats the later rounds with the same keyed noise.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privcube.core.context import RunContext
from privcube.core.domain import Domain
from privcube.core.errors import BudgetError, CheckpointError, ConfigError, MemoryLimitError, WorkloadError
from privcube.mechanisms.aim_grem import annealing, crp, final_round, selection, strategy
from privcube.mechanisms.aim_grem.completion import LocalCompletion, global_values
from privcube.mechanisms.aim_grem.grem import (GReMState, LocalMarginals, MarginalTable, measurable, reconstruct,
                                              residual_subsets)
from privcube.mechanisms.aim_grem.state import AIMState, normalise
from privcube.mechanisms.base import GroupAnswer, Mechanism, MechanismResult
from privcube.core.oracle import MarginalOracle, marginal_futures
from privcube.privacy.budget import refuse_pure_for_gaussian
from privcube.privacy.discrete import is_discrete
from privcube.core.residuals import decomp
from privcube.core.workload import Workload

Clique = tuple[str, ...]
TAG = "aim-grem"


@dataclass
class Problem:
    """Validated inputs: domain, workload cliques and weights, W↓, candidates and their constants."""

    domain: Domain
    cliques: list[Clique]
    weights: dict[Clique, float]
    closure: list[Clique]
    candidates: list[Clique]
    cand_weights: np.ndarray
    cand_cells: np.ndarray
    sensitivity: float
    kept: list[Clique]
    cells_kept: int


def _cells(domain: Domain, c: Clique) -> int:
    """n_γ."""
    return math.prod(domain[a] for a in c)


SNAPSHOT_ARRAY_COST = 1 << 16  # a stored array costs about as much as writing 64 KiB (zarr metadata, files)


def _snapshot_cost(grem: GReMState) -> int:
    """What a full snapshot costs, in bytes written: estimates and residuals plus a per-array overhead.

    The checkpoint compacts once its log outgrows this, so compaction stays a small share of the
    per-round appends however many (small) arrays the state has.
    """
    arrays = len(grem.table.cliques) + len(grem.residuals)
    return 8 * (grem.table_cells + sum(z.size for z in grem.z.values())) + SNAPSHOT_ARRAY_COST * arrays


def _is_real(v: Any) -> bool:
    """An int or float parameter value (a bool is not a number here)."""
    return not isinstance(v, bool) and isinstance(v, (int, float))


class AIMGReM(Mechanism):
    """AIM with residual measurements (CRP or IID), GReM-MLE reconstruction and lazy/full updates."""

    name: ClassVar[str] = TAG
    INTEGER_MEASUREMENTS: ClassVar[bool] = True  # every release is μ_c + noise on an exact marginal
    PARAMS: ClassVar[Mapping[str, Any]] = {
        "measure": "crp",            # crp | iid
        "update": "lazy",            # lazy | full
        "max_rounds": None,          # stop after this many rounds (leaves budget unspent; for checkpoint tests)
        "memory_limit_bytes": None,  # None: 80% of the memory available when the run starts
        "crp_solver": "exact",       # exact (water-filling) | cvxpy (Clarabel, the paper's fallback)
        "eta": crp.ETA,              # drop residuals whose budget share p_τ x_τ is below eta
        "oracle_batch_cells": 50_000_000,   # true marginals are requested in batches of at most this many cells
        "distribute_min_cells": 20_000_000,  # with a client, keep estimates on workers from this many cells
        "completion": "maxent",      # maxent: unmeasured residuals implied by the measured ones | zero (paper)
        "completion_max_cells": 1 << 20,  # global max-entropy pass at release when the full domain is this small
        "selection_on": "auto",      # completed: scores on completed estimates | measured: the paper's (complete at
                                     # release) | auto: measured when the public measure-all test is below
                                     # selection_threshold (after the initial measurements), else completed
        "selection_threshold": strategy.SELECTION_THRESHOLD,
        "anneal_on": "measured",     # measured: GReM-MLE of measured residuals | completed: the completed estimate
        "strategy": "adaptive",      # adaptive | measure-all (ResidualPlanner on the workload) | auto-suggest
        "measure_all_threshold": strategy.THRESHOLD,  # suggest measure-all below this expected error / total
        "final_round": "spread",     # spread: the last round measures the selected cliques' residuals, workload-
                                     # optimal given the precisions (no selection) | select: the paper's last round
        "final_share": "auto",       # share of rho reserved for the spread final round, in [0, 1); auto: SHARE when
                                     # the public measure-all test is <= selection_threshold, else 0
        "model_cells": None,         # AIM's model-size filter: candidates keep the junction tree of the measured
                                     # cliques within model_cells x rho_used / rho cells (None: no filter, the
                                     # paper's AIM+GReM); a job with postprocess pgm sets its model_cells here
    }
    PARAM_HELP: ClassVar[Mapping[str, str]] = {
        "measure": "crp | iid: each selected clique's residuals measured with CRP's optimal variances, or each "
                   "marginal measured whole",
        "update": "lazy | full: a changed residual is added into each kept marginal estimate that contains it, or "
                  "every kept estimate is rebuilt from all its residuals (the same estimates up to round-off)",
        "max_rounds": "stop after this many rounds, leaving the rest of the budget unspent (for checkpoint tests)",
        "memory_limit_bytes": "memory the exact marginals, estimates and residuals may take (default: 80% of the "
                              "memory available when the run starts); a workload that needs more is refused",
        "crp_solver": "exact | cvxpy: CRP's variances by water-filling, or by Clarabel (the paper's fallback)",
        "eta": "CRP cutoff: residuals whose budget share is below eta are not measured",
        "oracle_batch_cells": "exact marginals are requested from the data in batches of at most this many cells",
        "distribute_min_cells": "with a cluster, estimates are kept on the workers from this many cells",
        "completion": "maxent | zero: unmeasured residuals completed by maximum entropy from the measured "
                      "sub-marginals, or set to zero (the paper's GReM-MLE)",
        "completion_max_cells": "at release, one maximum-entropy fit over the full domain when it has at most this "
                                "many cells",
        "selection_on": "auto | completed | measured: selection scores on completed or on measured (zero-filled) "
                        "estimates; auto: measured when the public measure-all test is <= selection_threshold",
        "selection_threshold": "the expected error (of measuring everything) at or below which selection_on auto "
                               "and final_share auto choose measured scores and a spread final round",
        "anneal_on": "measured | completed: the estimate whose change decides annealing",
        "strategy": "adaptive | measure-all | auto-suggest: AIM's rounds, ResidualPlanner on the whole workload, "
                    "or AIM's rounds with measure-all advice in the report",
        "measure_all_threshold": "the public measure-all test suggests measure-all at or below this expected "
                                 "error / total",
        "final_round": "spread | select: the last round measures the selected cliques' residuals with "
                       "workload-optimal variances, or selects once more (the paper's)",
        "final_share": "auto | a share in [0, 1) of rho reserved for the spread final round (auto: 0.4 when the "
                       "measure-all test is <= selection_threshold, else 0)",
        "model_cells": "AIM's model-size filter: a round may select only cliques that keep the measured model's "
                       "junction tree within model_cells x the share of rho spent (None: no filter; set by "
                       "postprocess: pgm)",
    }

    @classmethod
    def configured_params(cls, params: Mapping[str, Any], postprocess: Any) -> dict[str, Any]:
        """AIM's model-size filter at the published model's size when the job post-processes with ``pgm`` and
        ``model_cells`` is not set, so the published model holds every measurement."""
        if "model_cells" not in params and postprocess is not None and postprocess.method == "pgm":
            return {**params, "model_cells": postprocess.model_cells}
        return dict(params)

    @classmethod
    def report_sections(cls) -> dict[str, Any]:
        """Adaptive (no data-free plan); the selection trace shows the budget per round."""
        return {**super().report_sections(), "budget": "trace"}

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        """Validate parameters (ConfigError naming the key)."""
        super().__init__(params)
        p = self.params
        for key, allowed, said in (
                ("measure", ("crp", "iid"), "'crp' or 'iid'"),
                ("update", ("lazy", "full"), "'lazy' or 'full'"),
                ("crp_solver", crp.SOLVERS, f"one of {crp.SOLVERS}"),
                ("completion", ("maxent", "zero"), "'maxent' or 'zero'"),
                ("selection_on", ("auto", "measured", "completed"), "'auto', 'measured' or 'completed'"),
                ("anneal_on", ("measured", "completed"), "'measured' or 'completed'"),
                ("strategy", strategy.STRATEGIES, f"one of {list(strategy.STRATEGIES)}"),
                ("final_round", final_round.MODES, f"one of {list(final_round.MODES)}")):
            if p[key] not in allowed:
                raise ConfigError(f"aim-grem: {key} must be {said}, got {p[key]!r}")
        mr = p["max_rounds"]
        if mr is not None and (isinstance(mr, bool) or not isinstance(mr, int) or mr < 0):
            raise ConfigError(f"aim-grem: max_rounds must be None or a non-negative integer, got {mr!r}")
        eta = p["eta"]
        if not _is_real(eta) or not 0 <= eta < 1:
            raise ConfigError(f"aim-grem: eta must lie in [0, 1), got {eta!r}")
        fs = p["final_share"]
        if fs != "auto" and (not _is_real(fs) or not 0 <= fs < 1):
            raise ConfigError(f"aim-grem: final_share must be 'auto' or lie in [0, 1), got {fs!r}")
        mc = p["model_cells"]
        if mc is not None and (isinstance(mc, bool) or not _is_real(mc) or mc < 2):
            raise ConfigError(f"aim-grem: model_cells must be None or a number >= 2, got {mc!r}")
        cmc = p["completion_max_cells"]
        if isinstance(cmc, bool) or not isinstance(cmc, int) or cmc < 0:
            raise ConfigError(f"aim-grem: completion_max_cells must be a non-negative integer, got {cmc!r}")
        for key in ("selection_threshold", "measure_all_threshold", "memory_limit_bytes", "oracle_batch_cells",
                    "distribute_min_cells"):
            v = p[key]
            if not (key == "memory_limit_bytes" and v is None) and (not _is_real(v) or not v > 0):
                raise ConfigError(f"aim-grem: {key} must be a positive number, got {v!r}")

    # ----------------------------------------------------------------------------- validation
    def problem(self, domain: Domain, workload: Workload, worker_memory: int | None = None) -> Problem:
        """Validate the workload against the data domain and the memory limit; build W↓ and candidates.

        On a cluster every marginal must also fit in ``worker_memory``, the smallest worker's memory limit
        in bytes (a run context's ``worker_memory()``): the data pass counts it on one worker, and a worker
        over its limit is restarted, not reported.
        """
        if not isinstance(workload, Workload) or len(workload) == 0:
            raise WorkloadError("aim-grem: workload must be a non-empty Workload")
        for g in workload.groups:
            for a in g.attributes:
                if a not in domain:
                    raise WorkloadError(f"aim-grem: workload names unknown attribute {a!r}; the data has {list(domain)}")
                if workload.domain[a] != domain[a]:
                    raise WorkloadError(f"aim-grem: attribute {a!r} has size {workload.domain[a]} in the workload "
                                        f"but {domain[a]} in the data")
        if not workload.is_marginal:
            bad = next(g for g in workload.groups if not g.is_marginal)
            raise ConfigError(f"aim-grem answers marginal workloads only; group {bad.label()!r} has query types "
                              f"{bad.query_types()}")
        cliques = [domain.canonical(c) for c in workload.cliques()]
        weights: dict[Clique, float] = {}
        for c, w in workload.weights().items():
            key = domain.canonical(c)
            weights[key] = weights.get(key, 0.0) + float(w)
        closure = selection.downward_closure(cliques, domain.attributes)
        candidates = [c for c in closure if c]
        limit = self.params["memory_limit_bytes"]
        if limit is None:
            import psutil

            limit = 0.8 * psutil.virtual_memory().available
        worker = worker_memory
        for c in closure:
            if 8 * _cells(domain, c) > limit:
                raise MemoryLimitError(f"aim-grem: the marginal on {list(c)} has {_cells(domain, c)} cells "
                                       f"({8 * _cells(domain, c)} bytes), over memory_limit_bytes={int(limit)}")
            if worker is not None and 8 * _cells(domain, c) > worker:
                raise MemoryLimitError(f"aim-grem: the marginal on {list(c)} has {_cells(domain, c)} cells "
                                       f"({8 * _cells(domain, c)} bytes), over the dask workers' memory limit "
                                       f"({worker} bytes, cluster.memory_limit)")
        cells_kept = sum(_cells(domain, c) for c in closure)
        resid = sum(math.prod(domain[a] - 1 for a in c) for c in closure if measurable(c, domain))
        total = 8 * (2 * cells_kept + resid)  # exact int64 marginals + float estimates + residuals
        if total > limit:
            raise MemoryLimitError(f"aim-grem: W↓ needs about {total} bytes (true marginals, estimates, residuals "
                                   f"over {len(closure)} cliques), over memory_limit_bytes={int(limit)}")
        cw = selection.candidate_weights(candidates, weights)
        return Problem(domain, cliques, weights, closure, candidates, cw, selection.cells(candidates, domain),
                       float(cw.max()) if cw.size else 1.0, list(closure), cells_kept)

    def use_noise_sampler(self, sampler: str) -> None:
        """Discrete noise: rounds measure the selected marginal whole (IID), because CRP's per-residual
        savings (p_τ/(2σ_τ²)) are proven for continuous Gaussian noise only; an explicit
        ``measure: crp`` is refused rather than changed behind the user's back."""
        if sampler == "discrete" and self.params["measure"] == "crp" and "measure" in self.given_params:
            raise ConfigError("aim-grem: parameter 'measure: crp' is accounted for continuous Gaussian noise only; "
                              "with noise_sampler: discrete use measure: iid (the default then)")
        super().use_noise_sampler(sampler)

    @property
    def measure_mode(self) -> str:
        """``crp`` or ``iid``: the parameter, except that discrete noise measures whole marginals (IID)."""
        return "iid" if self.noise_sampler == "discrete" else self.params["measure"]

    def _identity(self, prob: Problem, rho_total: float, noise: Any) -> dict[str, Any]:
        """What a checkpoint must match to be resumed by this run."""
        return normalise({
            "mechanism": TAG, "domain": prob.domain.to_dict(),
            "workload": [[list(c), prob.weights[c]] for c in prob.cliques], "rho": rho_total,
            "measure": self.measure_mode, "update": self.params["update"],
            "crp_solver": self.params["crp_solver"], "eta": self.params["eta"],
            "noise": noise.to_dict() if hasattr(noise, "to_dict") else None,
            "completion": self.params["completion"], "anneal_on": self.params["anneal_on"],
            "selection_on": self.params["selection_on"], "selection_threshold": self.params["selection_threshold"],
            "final_round": self.params["final_round"], "final_share": self.params["final_share"],
        })

    # ------------------------------------------------------------------------------ data access
    def _batches(self, prob: Problem) -> list[list[Clique]]:
        """W↓ in batches of at most ``oracle_batch_cells`` total cells (one data pass each)."""
        out: list[list[Clique]] = []
        batch: list[Clique] = []
        cells = 0
        cap = self.params["oracle_batch_cells"]
        for c in prob.closure:
            n = _cells(prob.domain, c)
            if batch and cells + n > cap:
                out.append(batch)
                batch, cells = [], 0
            batch.append(c)
            cells += n
        if batch:
            out.append(batch)
        return out

    def _truth(self, oracle: MarginalOracle, prob: Problem) -> dict[Clique, np.ndarray]:
        """Exact marginals of every clique in W↓, requested in batches of bounded total size."""
        out: dict[Clique, np.ndarray] = {}
        for batch in self._batches(prob):
            out.update(oracle.marginals(batch))
        for c in prob.closure:
            arr = np.asarray(out[c])
            want = prob.domain.shape_of(c)
            if arr.shape != want:
                raise ConfigError(f"aim-grem: the oracle returned shape {arr.shape} for {list(c)}, expected {want}")
            out[c] = arr
        return out

    def _distributed(self, prob: Problem, ctx: RunContext) -> bool:
        """Whether estimates (and, where the oracle allows, the true marginals) live on dask workers.

        Always on a cluster reached over the network (its scheduler is not on this machine's loopback
        interface), so exact counts never travel to the client (#8); on a loopback cluster from
        ``distribute_min_cells`` cells, below which the in-memory path is faster.
        """
        if ctx.client is None or ctx.kernel("sharded-marginals") is None:
            return False
        if prob.cells_kept >= self.params["distribute_min_cells"]:
            return True
        return ctx.remote

    def _table(self, oracle: MarginalOracle, prob: Problem, ctx: RunContext) -> MarginalTable:
        """The marginal table holding the true marginals of W↓ and their estimates.

        With a client and a large problem the table is sharded over the workers (the run context's
        ``sharded-marginals`` kernel: shards of :class:`LocalMarginals` placed by the graphs layer); when the oracle can
        leave its exact marginals on the cluster (``DataOracle`` over a dask frame) they go straight
        from the data pass into the shards and never reach this process: scores, and the noise of
        every measurement, are computed on the workers. Otherwise the exact marginals are read here.
        """
        if self._distributed(prob, ctx):
            futures: dict[Clique, Any] = {}
            for batch in self._batches(prob):
                got = marginal_futures(oracle, batch)
                if got is None:
                    futures = {}
                    break
                futures.update(got)
            sharded = ctx.kernel("sharded-marginals")
            if futures:
                return sharded(prob.domain, prob.kept, None, truth_futures=futures, shard=LocalMarginals,
                               subsets=residual_subsets)
            return sharded(prob.domain, prob.kept, self._truth(oracle, prob), shard=LocalMarginals,
                           subsets=residual_subsets)
        return LocalMarginals(prob.domain, prob.kept, self._truth(oracle, prob))

    # -------------------------------------------------------------------------------------- run
    def run(self, oracle: MarginalOracle, workload: Workload, budget: Any, ledger: Any, noise: Any,
            context: RunContext | None = None) -> MechanismResult:
        """Run AIM+GReM against ``oracle``; resumes from ``context.checkpoint`` when ``context.resume``."""
        ctx = context or RunContext()
        for b in (budget, getattr(ledger, "budget", None)):
            refuse_pure_for_gaussian(b, "aim-grem")
        if is_discrete(noise):
            self.use_noise_sampler("discrete")
        prob = self.problem(oracle.domain, workload, ctx.worker_memory())
        if ledger is None or noise is None:
            raise ConfigError("aim-grem: a PrivacyLedger and a NoiseSource are required")
        if self.params["strategy"] == "measure-all":
            return self._measure_all(oracle, workload, budget, ledger, noise, ctx)
        rho_total = float(min(budget.rho, ledger.budget.rho))
        identity = self._identity(prob, rho_total, noise)
        payload = None
        if ctx.resume and ctx.checkpoint is not None:
            loaded = ctx.checkpoint.load()
            if loaded is not None:
                payload = loaded[1]
        if payload is None and ledger.remaining_rho <= 0:
            raise BudgetError("aim-grem: the privacy ledger has no budget left")

        table = self._table(oracle, prob, ctx)
        try:
            with _background(ctx.checkpoint):
                return self._adaptive(prob, workload, table, ledger, noise, ctx, identity, payload, rho_total)
        finally:
            table.close()

    def _adaptive(self, prob: Problem, workload: Workload, table: MarginalTable, ledger: Any, noise: Any,
                  ctx: RunContext, identity: Mapping[str, Any], payload: Mapping[str, Any] | None,
                  rho_total: float) -> MechanismResult:
        """Restore or initialise, run the rounds, complete and release (the checkpoints of ``run``)."""
        grem = GReMState(prob.domain, prob.closure, table, self.params["update"])
        if self.params["completion"] == "maxent" and self.params["selection_on"] == "completed":  # from the start
            grem.use_completion(LocalCompletion(prob.domain, grem.residuals))
        if payload is not None:
            st, saved_ledger = AIMState.restore(
                payload, grem, identity,
                lambda init, snapshot: self._start_completion(prob, grem, init.get("selection_on"), snapshot))
            self._restore_ledger(ledger, saved_ledger)
        else:
            if ledger.remaining_rho < rho_total * (1 - 1e-12):
                rho_total = ledger.remaining_rho
                identity = self._identity(prob, rho_total, noise)
            if ctx.checkpoint is not None:
                grem.journal = []
            st = self._initialise(prob, grem, ledger, noise, rho_total)
            st.init["selection_on"] = self._choose_selection(workload, rho_total, grem)
            st.init["final_share"] = self._choose_final_share(workload, rho_total, grem)
            st.budget = annealing.final_check(annealing.initial_budget(rho_total, len(prob.candidates)),
                                              self._loop_budget(st) - st.rho_used) \
                if prob.candidates else st.budget
            self._start_completion(prob, grem, st.init["selection_on"], snapshot=False)
            self._save(ctx, st, grem, ledger, identity, first=True)
        if ctx.checkpoint is not None:
            grem.journal = []
        self._loop(prob, grem, st, ledger, noise, ctx, identity)
        completion = self._complete_globally(prob, grem)
        result = self._result(workload, prob, grem, st)
        result.report["completion"] = {**completion, "selection_on": st.init.get("selection_on")}
        result.report["strategy"] = self._strategy_report(workload, st.rho_total, float(grem.z[()]))
        return result

    def _choose_selection(self, workload: Workload, rho: float, grem: GReMState) -> str:
        """What the loop scores: ``completed`` or ``measured`` estimates. ``auto`` decides after the initial
        measurements from public quantities and the released total only (the measure-all test): when
        measuring everything would already be accurate (expected error ≤ ``selection_threshold``), the
        paper's scores, which keep measuring new marginals, do better; otherwise completed scores."""
        mode = self.params["selection_on"]
        if self.params["completion"] != "maxent":
            return "measured"
        if mode != "auto":
            return mode
        grem.flush()
        e_rp = self._test(workload, rho, float(grem.z[()]))["measure_all_expected_error"]
        return "measured" if e_rp <= self.params["selection_threshold"] else "completed"

    def _choose_final_share(self, workload: Workload, rho: float, grem: GReMState) -> float:
        """The share of ρ reserved for the spread final round. ``auto`` decides after the initial measurements
        from public quantities and the released total only (the measure-all test, as ``selection_on: auto``):
        where measuring everything is cheap (expected error ≤ ``selection_threshold``), AIM ends up selecting
        nearly every workload marginal and the reserve buys them a workload-optimal allocation
        (:data:`final_round.SHARE`); elsewhere the rounds keep the budget for selecting (0)."""
        share = self.params["final_share"]
        if self.params["final_round"] != "spread":
            return 0.0
        if share != "auto":
            return float(share)
        grem.flush()
        e_rp = self._test(workload, rho, float(grem.z[()]))["measure_all_expected_error"]
        return final_round.SHARE if e_rp <= self.params["selection_threshold"] else 0.0

    def _start_completion(self, prob: Problem, grem: GReMState, mode: str | None, snapshot: bool) -> None:
        """``selection_on: auto`` chose completed scores after the initial measurements: complete now
        (into the table, or, restoring a snapshot whose table already holds it, the values only)."""
        if self.params["selection_on"] != "auto" or mode != "completed" or grem.completion is not None:
            return
        grem.use_completion(LocalCompletion(prob.domain, grem.residuals))
        if snapshot:
            grem.recomplete()
            return
        local = LocalCompletion(prob.domain, grem.residuals)
        local.update(grem.z, grem.lam, [], everything=True)
        grem.set_completed(local.value)

    def _measure_all(self, oracle: MarginalOracle, workload: Workload, budget: Any, ledger: Any, noise: Any,
                     ctx: RunContext) -> MechanismResult:
        """``strategy: measure-all``: ResidualPlanner on the whole workload with the same budget (the user's
        choice, never made on private data); its report says so and carries the public test."""
        from privcube.mechanisms.residual_planner import ResidualPlanner

        rp = ResidualPlanner()
        if self.noise_sampler == "discrete":
            rp.use_noise_sampler("discrete")
        rho = float(min(budget.rho, ledger.budget.rho, ledger.remaining_rho))
        result = rp.run(oracle, workload, rho, ledger, noise, ctx)
        total = float(np.sum(result.answers[0].estimate)) if result.answers else 0.0
        result.report = {**result.report, "mechanism": TAG, "strategy": {
            "chosen": "measure-all", "measured_by": "residual-planner", **self._test(workload, rho, total)}}
        return result

    def _test(self, workload: Workload, rho: float, total: float) -> dict[str, Any]:
        return strategy.measure_all_test(workload, rho, total, float(self.params["measure_all_threshold"]))

    def _strategy_report(self, workload: Workload, rho: float, total: float) -> dict[str, Any]:
        """The data-independent measure-all test beside what was run (adaptive)."""
        out = {"chosen": "adaptive", **self._test(workload, rho, total)}
        if self.params["strategy"] == "auto-suggest" and out["suggestion"] == "measure-all":
            out["advice"] = ("the public test expects measuring the whole workload (strategy: measure-all) "
                             "to be more accurate at this budget; this run stayed adaptive as configured")
        return out

    def _complete_globally(self, prob: Problem, grem: GReMState) -> dict[str, Any]:
        """Release-time completion: one max-entropy fit over the full domain when it has at most
        ``completion_max_cells`` cells (else the per-round local completion stands)."""
        if self.params["completion"] != "maxent":
            return {"method": "zero", "note": "unmeasured residuals are estimated as zero (GReM-MLE as in the paper)"}
        grem.flush()
        attrs = [a for a in prob.domain.attributes if any(a in c for c in prob.closure)]
        cells = math.prod(prob.domain[a] for a in attrs)
        unmeasured = [t for t in grem.residuals if len(t) >= 2 and grem.lam[t] <= 0]
        out = {"method": "maxent", "unmeasured_residuals": len(unmeasured), "full_domain_cells": cells,
               "local": "per round: top residual of the max-entropy distribution on each unmeasured clique given "
                        "its estimated (clipped, renormalised) sub-marginals, bottom-up, incremental"}
        if grem.completion is None:  # selection_on: measured -- the loop ran the paper's GReM-MLE
            local = LocalCompletion(prob.domain, grem.residuals)
            local.update(grem.z, grem.lam, [], everything=True)
            grem.use_completion(LocalCompletion(prob.domain, grem.residuals))
            grem.set_completed(local.value)
            out["local"] = "at release only (selection_on: measured): " + out["local"]
        if unmeasured and 0 < cells <= self.params["completion_max_cells"]:
            grem.set_completed(global_values(attrs, grem.z, grem.lam, prob.domain, unmeasured))
            out["global"] = "IPF over the full domain fitting the maximal measured cliques (at release)"
        else:
            out["global"] = None
        return out

    def _restore_ledger(self, ledger: Any, saved: Mapping[str, Any] | None) -> None:
        """Bring the caller's ledger to the checkpoint's charges (replayed into a fresh ledger)."""
        if saved is None:
            raise CheckpointError("checkpoint has no ledger record")
        charges = list(saved.get("charges", []))
        have = normalise(ledger.charges)
        if have == normalise(charges):
            return
        if have:
            raise CheckpointError("resume: the ledger already holds charges that differ from the checkpoint's")
        for c in charges:
            c = dict(c)
            label, r = c.pop("label"), c.pop("rho")
            c.pop("epsilon", None)
            c.pop("delta", None)
            ledger.charge(label, rho=r, **c)

    def _save(self, ctx: RunContext, st: AIMState, grem: GReMState, ledger: Any, identity: Mapping[str, Any],
              first: bool = False) -> None:
        """Checkpoint after a round when the context asks for it.

        Usually an O(change) log record (the round's noisy measurements, trace row, charges and next
        budget); a full snapshot when the checkpoint asks for compaction (its log has outgrown the
        state) or cannot append. The ``first`` checkpoint of a run stores the journal instead of W↓'s
        estimates (arrays never modified afterwards: under ``background()`` it is written on the
        checkpoint's writer thread, like the records; a snapshot holds the live estimates and is not).
        """
        ck = ctx.checkpoint
        if ck is None:
            return
        grem.flush()
        journal = grem.take_journal()
        if first:  # everything since the start is in the journal: a small base, estimates rebuilt by replay
            payload = st.to_checkpoint(grem, ledger, identity, journal=journal)
            if callable(getattr(ck, "background", None)):
                ck.save(st.round, payload, frozen=True)
            else:
                ck.save(st.round, payload)
        elif callable(getattr(ck, "append", None)) and callable(getattr(ck, "should_compact", None)) \
                and not ck.should_compact(sum(np.asarray(y).nbytes for _, y, _ in journal), _snapshot_cost(grem)):
            ck.append(st.round, st.to_record(journal, ledger))
        else:
            ck.save(st.round, st.to_checkpoint(grem, ledger, identity))
        st.mark_saved(ledger)

    def _initialise(self, prob: Problem, grem: GReMState, ledger: Any, noise: Any, rho: float) -> AIMState:
        """Alg. 6: each 1-way marginal with σ0² = K/(0.9ρ), split into its residual and the total."""
        k = len(prob.candidates)
        if k == 0:  # workload is only the total: measure it with the whole budget
            sigma2 = 1.0 / (2.0 * rho)
            ledger.charge(f"{TAG} total", rho=rho, sigma=math.sqrt(sigma2), clique=[])
            (y,) = grem.table.noisy([((), (TAG, 0, "total"), math.sqrt(sigma2))], noise)
            grem.combine((), np.asarray(float(y)), sigma2)
            grem.flush()
            return AIMState(0, annealing.RoundBudget(0.0, 0.0, True), done=True, rho_used=rho, rho_total=rho,
                            init={"sigma0": math.sqrt(sigma2), "k": 0})
        sigma0_2 = k / (0.9 * rho)
        rho_init = 1.0 / (2.0 * sigma0_2)
        ones = [c for c in prob.closure if len(c) == 1]
        used = 0.0
        for c in ones:
            ledger.charge(f"{TAG} init {c[0]}", rho=rho_init, sigma=math.sqrt(sigma0_2), clique=[c[0]], round=0)
            used += rho_init
        ys = grem.table.noisy([(c, (TAG, 0, "init", c[0]), math.sqrt(sigma0_2)) for c in ones], noise)
        for c, y in zip(ones, ys):
            a = c[0]
            if measurable(c, prob.domain):
                grem.combine(c, decomp(y, c, c), sigma0_2)
            grem.combine((), np.asarray(y.sum()), prob.domain[a] * sigma0_2)
        grem.flush()
        first = annealing.final_check(annealing.initial_budget(rho, k), rho - used)  # reset once the share is chosen
        return AIMState(0, first, rho_used=used, rho_total=rho,
                        init={"sigma0": math.sqrt(sigma0_2), "rho_init": rho_init, "attributes": len(ones), "k": k})

    def _loop(self, prob: Problem, grem: GReMState, st: AIMState, ledger: Any, noise: Any, ctx: RunContext,
              identity: Mapping[str, Any]) -> None:
        """Rounds until the budget is spent (or max_rounds): select, plan, measure, update, anneal."""
        max_rounds = self.params["max_rounds"]
        rounds_here = 0
        size = None
        if self.params["model_cells"] is not None:  # rebuilt from the public trace (also after a resume)
            size = selection.ModelSize(prob.domain.attributes, prob.domain)
            for row in st.trace:
                size.add(row.get("clique") or [])
        while not st.done:
            if max_rounds is not None and rounds_here >= max_rounds:
                break
            b = st.budget
            t = st.round + 1
            if b.final and self.params["final_round"] == "spread":
                self._final_spread(prob, grem, st, ledger, noise, t)
                rounds_here += 1
                self._save(ctx, st, grem, ledger, identity)
                if ctx.progress is not None:
                    ctx.progress(TAG, min(1.0, st.rho_used / st.rho_total))
                break
            if b.rho_select <= 0 or b.rho_measure <= 0:
                st.done = True
                break
            # ---- select
            ledger.charge(f"{TAG} round {t} select", rho=b.rho_select, round=t, em_epsilon=b.epsilon)
            st.rho_used += b.rho_select
            errors = grem.table.l1_errors(prob.candidates)
            rho_meas = b.rho_measure
            if b.final:
                rho_meas = min(st.rho_total - st.rho_used, _rest(ledger.budget.rho, ledger))
            sigma2 = 1.0 / (2.0 * rho_meas)
            score = selection.scores(errors, prob.cand_weights, prob.cand_cells, math.sqrt(sigma2))
            if size is not None:  # AIM's rule: the model may grow with the budget spent, this round's included
                limit = float(self.params["model_cells"]) * min(1.0, (st.rho_used + rho_meas) / st.rho_total)
                score = np.where(size.allowed(prob.candidates, limit), score, -np.inf)
                if not np.isfinite(score).any():
                    score = np.where(prob.cand_cells == prob.cand_cells.min(), 0.0, -np.inf)
            idx = selection.select(score, b.epsilon, prob.sensitivity,
                                   lambda n, t=t: noise.gumbel((TAG, t, "select"), n))  # CSPRNG when unseeded
            gamma = prob.candidates[idx]
            if size is not None:
                size.add(gamma)
            # ---- plan and measure
            if self.measure_mode == "crp":
                plan = crp.plan_crp(gamma, prob.domain, grem.lam, sigma2, eta=self.params["eta"],
                                    solver=self.params["crp_solver"])
            else:
                plan = crp.plan_iid(gamma, prob.domain, sigma2)
            realized = plan.budget_fraction * rho_meas
            ledger.charge(f"{TAG} round {t} measure", rho=rho_meas, round=t, clique=list(gamma),
                          sigma=math.sqrt(sigma2), residuals=len(plan.sigma2), realized_rho=realized)
            st.rho_used += rho_meas
            before = self._anneal_estimate(grem, gamma)
            self._measure(gamma, plan, sigma2, grem, noise, t)
            grem.flush()
            after = self._anneal_estimate(grem, gamma)
            annealed = annealing.should_anneal(before, after, math.sqrt(sigma2))
            st.trace.append({
                "round": t, "clique": list(gamma), "rho_select": b.rho_select, "rho_measure": rho_meas,
                "epsilon": b.epsilon, "sigma": math.sqrt(sigma2), "measured": [list(x) for x in plan.sigma2],
                "dropped": len(plan.dropped), "method": plan.method, "annealed": bool(annealed), "final": b.final,
            })
            st.round = t
            rounds_here += 1
            if b.final:
                st.done = True
            else:
                remaining = min(self._loop_budget(st) - st.rho_used, ledger.remaining_rho)
                st.budget = annealing.next_budget(b, annealed, remaining)
            self._save(ctx, st, grem, ledger, identity)
            if ctx.progress is not None:
                ctx.progress(TAG, min(1.0, st.rho_used / st.rho_total))

    def _loop_budget(self, st: AIMState) -> float:
        """What the select-measure rounds may spend: ρ less the share reserved for a spread final round."""
        if self.params["final_round"] != "spread":
            return st.rho_total
        return st.rho_total * (1.0 - float(st.init.get("final_share", 0.0)))

    def _final_spread(self, prob: Problem, grem: GReMState, st: AIMState, ledger: Any, noise: Any, t: int) -> None:
        """The last round (``final_round: spread``, see :mod:`.final_round`): no selection; everything left
        measures the residuals of the cliques selected so far (and of the initial 1-way marginals), each
        μ_τ + N(0, σ_τ²) decomposed to τ (Alg. 5), with the workload-optimal σ_τ² given the precisions."""
        rest = min(st.rho_total - st.rho_used, _rest(ledger.budget.rho, ledger))
        whole = self.measure_mode == "iid"  # discrete noise: each residual is accounted as its whole marginal
        selected = [tuple(r["clique"]) for r in st.trace if r.get("clique")] + [c for c in prob.closure if len(c) <= 1]
        taus = final_round.eligible(grem.residuals, selected)
        plan = final_round.plan_final(taus, prob.domain, prob.cliques, prob.weights, grem.lam, rest, whole) \
            if rest > 0 else {}
        realized = final_round.cost(plan, prob.domain, whole)
        if rest > 0:
            ledger.charge(f"{TAG} round {t} final", rho=rest, round=t, residuals=len(plan), realized_rho=realized,
                          final_round="spread")
            st.rho_used += rest
        before = dict(grem.lam)
        reqs = [(tau, (TAG, t, "final", list(tau)), math.sqrt(s2)) for tau, s2 in plan.items()]
        for (tau, _, sd), y in zip(reqs, grem.table.noisy(reqs, noise) if reqs else []):
            grem.combine(tau, decomp(y, tau, tau), sd * sd)
        grem.flush()
        st.trace.append({
            "round": t, "clique": [], "final_round": "spread", "rho_select": 0.0, "rho_measure": rest,
            "epsilon": 0.0, "sigma": math.sqrt(1.0 / (2.0 * rest)) if rest > 0 else None,
            "measured": [list(x) for x in plan], "dropped": len(taus) - len(plan), "method": "final-spread",
            "annealed": False, "final": True, "selected_cliques": len(set(selected)),
            "new_residuals": sum(1 for x in plan if before.get(x, 0.0) <= 0),
        })
        st.round = t
        st.done = True

    def _anneal_estimate(self, grem: GReMState, gamma: Clique) -> np.ndarray:
        """The estimate the annealing test compares before and after a round: by default GReM-MLE from the
        measured residuals alone (the completion predicts well, so measured-vs-completed changes are small
        and would anneal the budget after few rounds, leaving most of the workload unmeasured)."""
        if self.params["anneal_on"] == "measured" and grem.completion is not None:
            return reconstruct(gamma, grem.z, prob_sizes(grem))
        return grem.estimate(gamma)

    def _measure(self, gamma: Clique, plan: crp.CRPPlan, sigma2: float, grem: GReMState, noise: Any, t: int) -> None:
        """Alg. 5 per residual (CRP), or one isotropic draw on μ_γ decomposed into all its residuals (IID).

        The noisy marginals come from the table (next to the true marginals, on workers when
        distributed); only they, never the exact counts, are decomposed and combined here.
        """
        if plan.method == "iid":
            (y,) = grem.table.noisy([(gamma, (TAG, t, "measure", list(gamma)), math.sqrt(sigma2))], noise)
            for tau, s2 in plan.sigma2.items():
                grem.combine(tau, decomp(y, gamma, tau), s2)
            return
        taus = list(plan.sigma2.items())
        ys = grem.table.noisy([(tau, (TAG, t, "measure", list(tau)), math.sqrt(s2)) for tau, s2 in taus], noise)
        for (tau, s2), y in zip(taus, ys):
            grem.combine(tau, decomp(y, tau, tau), s2)

    # ---------------------------------------------------------------------------------- output
    def _result(self, workload: Workload, prob: Problem, grem: GReMState, st: AIMState) -> MechanismResult:
        """Answers per workload group, the report with the selection trace, residual tensors."""
        grem.flush()
        answers = []
        cache: dict[Clique, tuple[np.ndarray, float]] = {}
        for g in workload.groups:
            c = prob.domain.canonical(g.attributes)
            if c not in cache:
                cache[c] = (grem.estimate(c), grem.variance(c))
            est, var = cache[c]
            est = np.asarray(est, dtype=float)
            answers.append(GroupAnswer(g, est.ravel().copy(), np.full(est.size, var), noise=(
                "discrete-gaussian" if self.noise_sampler == "discrete" else "gaussian")))
        tensors: dict[str, np.ndarray] = {f"aim_grem.residual.{i:05d}": grem.z[t] for i, t in enumerate(grem.residuals)}
        tensors["aim_grem.precision"] = np.array([grem.lam[t] for t in grem.residuals])
        # self-describing arrays: which residual τ each one is, and its precision λ_τ (0: never measured)
        attrs: dict[str, dict[str, Any]] = {
            f"aim_grem.residual.{i:05d}": {"kind": "residual", "attributes": list(t), "precision": float(grem.lam[t])}
            for i, t in enumerate(grem.residuals)}
        attrs["aim_grem.precision"] = {"kind": "precision", "residuals": [list(t) for t in grem.residuals]}
        report = {
            "mechanism": TAG, "measure": self.measure_mode, "update": self.params["update"],
            "rounds": st.round, "done": st.done, "rho_total": st.rho_total, "rho_used": st.rho_used,
            "init": st.init, "candidates": len(prob.candidates), "closure": len(prob.closure),
            "trace": st.trace, "residuals": [list(t) for t in grem.residuals],
            "unmeasured_residuals": {"-".join(c) or "total": len(grem.unmeasured(c)) for c in prob.cliques},
            "variance_note": "per-cell noise variance of the measured residuals only; unmeasured residuals are "
                             + ("completed from the measured ones (maximum entropy; a model bias plus propagated "
                                "noise, neither included in the variance)" if self.params["completion"] == "maxent"
                                else "estimated as zero (a bias not included in the variance)"),
        }
        return MechanismResult(answers=answers, report=report, tensors=tensors, tensor_attrs=attrs,
                               residuals={t: (grem.z[t], float(grem.lam[t])) for t in grem.residuals
                                          if grem.lam[t] > 0})


__all__ = ["AIMGReM", "Problem"]


def _background(ck: Any) -> Any:
    """The checkpoint's background-commit block (``RunCheckpoint.background``), or a no-op context."""
    import contextlib

    start = getattr(ck, "background", None)
    return start() if callable(start) else contextlib.nullcontext()


def prob_sizes(grem: GReMState) -> Any:
    """The domain (attribute sizes) a GReM state works on."""
    return grem.sizes


def _rest(total: float, ledger: Any) -> float:
    """What is left of ``total`` after the ledger's charges, such that the exact (not float-accumulated)
    sum of every charge plus this one is at most ``total``: the last round spends the rest, never more."""
    spent = [float(c["rho"]) for c in ledger.charges]
    rest = total - math.fsum(spent)
    for _ in range(8):  # the excess is below an ulp of ``total``: one or two corrections remove it
        over = math.fsum([*spent, rest, -total])  # exact excess, correctly rounded
        if rest <= 0 or over <= 0:
            break
        rest = math.nextafter(rest - over, 0.0)
    else:
        rest = 0.0  # pragma: no cover - not reached; never overspend
    return max(rest, 0.0)
