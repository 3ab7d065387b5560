"""Publish a run's marginal answers: one non-negative, consistent estimate per marginal group, summing
to one released total (``GroupAnswer.published``). Post-processing of released answers: it reads no
data and spends no budget; ``estimate`` and ``variance`` are left as they are."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.postprocess.consistency import Mapper, project_consistent, serial_map
from privcube.postprocess.dykstra import dykstra
from privcube.postprocess.graphical import GraphicalModel
from privcube.postprocess.feasibility import consistency_violation, lift_to_nonnegative, negativity, total_of
from privcube.postprocess.lnn import SolveInfo, lnn_admm
from privcube.postprocess.problem import Clique, MarginalProblem, build_problem
from privcube.postprocess.rounding import round_marginals
from privcube.postprocess.spec import PostprocessSpec


def marginal_answers(answers: Sequence[Any]) -> list[Any]:
    """The answers of marginal groups (every query type identity; the total, kway 0, included)."""
    return [a for a in answers if getattr(a.group, "is_marginal", False)]


def residual_weights(prob: MarginalProblem, residual_variances: Mapping[Clique, float] | None
                     ) -> dict[tuple[Clique, Clique], float] | None:
    """GReM-LNN's metric from the residual measurements: τ measured once as μ_τ + N(0, σ_τ²) (then Decomp)
    gives the τ-component of every clique c ⊇ τ the precision ∏_{c∖τ}n / σ_τ², shared by the k_τ cliques
    holding τ (so each residual counts once). None unless every τ of the closure has a positive σ_τ²."""
    if not residual_variances:
        return None
    var = {tuple(prob.domain.canonical(t)): float(v) for t, v in residual_variances.items()}
    if any(not (var.get(t, 0.0) > 0 and np.isfinite(var[t])) for t in prob.closure):
        return None
    holders: dict[Clique, int] = {}
    for c in prob.cliques:
        for t in prob.subs[c]:
            holders[t] = holders.get(t, 0) + 1
    q = {(c, t): prob.ratio[(c, t)] / (var[t] * holders[t]) for c in prob.cliques for t in prob.subs[c]}
    scale = float(np.median([q[k] / prob.weight[k[0]] for k in q]))  # comparable to the cell metric (ρ = 1)
    return {k: v / scale for k, v in q.items()}


def normsub_target(prob: MarginalProblem, total: float) -> dict[Clique, np.ndarray]:
    """The norm-sub pre-estimate (:func:`privcube.synth.consistency.make_consistent`: rounds of inverse-
    variance averaging of shared sub-marginals and clipping with the deficit taken off the positive cells):
    non-negative, nearly consistent, and closer to the truth than the noisy marginals; grem-lnn projects it
    onto the exactly consistent non-negative set (measured: benchmarks/postprocess_candidates.py)."""
    from privcube.synth.consistency import make_consistent

    out = make_consistent(prob.y, prob.domain, total=total, variances={c: 1.0 / w for c, w in prob.weight.items()})
    return {c: np.asarray(out[c], dtype=float) for c in prob.cliques}


def solve(prob: MarginalProblem, spec: PostprocessSpec, map: Mapper = serial_map,
          residual_variances: Mapping[Clique, float] | None = None) -> tuple[dict[Clique, np.ndarray], dict[str, Any]]:
    """Non-negative consistent marginals of ``prob`` by ``spec.method``, and the solver's report.
    grem-lnn projects the norm-sub pre-estimate (:func:`normsub_target`) in the cell metric (each cell
    weighted by its clique's precision); ``residual_variances`` (τ -> σ_τ², see :func:`residual_weights`)
    is accepted but no longer used: the residual metric on the raw measurements was measured less accurate
    (adult15 ε=1: 0.48 converged vs 0.37; nltcs ε=0.3: 0.0329 vs 0.0317)."""
    wls = project_consistent(prob, map=map)
    total = max(0.0, total_of(wls))  # the released total: least squares over every marginal's sum
    if total == 0.0:
        return {c: np.zeros_like(a) for c, a in wls.items()}, {"metric": "cell", "iterations": 0, "converged": True,
                                                               "note": "estimated total <= 0: all zeros"}
    if spec.method == "grem-lnn":
        target = normsub_target(prob, total)
        mu, info = lnn_admm(MarginalProblem(prob.domain, target, dict(prob.weight)), tol=spec.tol,
                            max_iterations=spec.iterations, map=map, total=total, warm=target)
    elif spec.method == "dykstra":
        mu, info = dykstra(prob, tol=spec.tol, max_iterations=spec.iterations, map=map, total=total)
    else:  # wls
        mu, info = project_consistent(prob, map=map, total=total), SolveInfo(1, True, 0.0, 0.0)
    lifted, t = lift_to_nonnegative(mu, prob.domain)
    return lifted, {"metric": "cell", "target": "norm-sub" if spec.method == "grem-lnn" else "measurements", "iterations": info.iterations, "converged": info.converged,
                    "primal_residual": info.primal_residual, "dual_residual": info.dual_residual,
                    "lift_weight": t}


def publish(answers: Sequence[Any], domain: Domain, spec: PostprocessSpec | None = None,
            map: Mapper = serial_map, residuals: Mapping[Clique, tuple[np.ndarray, float]] | None = None
            ) -> dict[str, Any]:
    """Set ``published`` on every marginal group answer (in place) and return the report: method,
    iterations, time and the final constraint violations (no data-derived value: the released total is
    in the published arrays, never in the report's text). ``residuals``: the mechanism's residual
    measurements (τ -> (z_τ, λ_τ)), which ``pgm`` fits when given (else it reads the marginal answers)."""
    return publish_model(answers, domain, spec, map, residuals)[0]


def publish_model(answers: Sequence[Any], domain: Domain, spec: PostprocessSpec | None = None,
                  map: Mapper = serial_map, residuals: Mapping[Clique, tuple[np.ndarray, float]] | None = None
                  ) -> tuple[dict[str, Any], GraphicalModel | None]:
    """:func:`publish`, and the fitted graphical model when the method is ``pgm`` (the synthesizer
    samples it), else None."""
    spec = spec or PostprocessSpec()
    t0 = time.perf_counter()
    groups = marginal_answers(answers)
    if not groups:
        return {"method": spec.method, "groups": 0, "note": "no marginal groups: nothing to publish"}, None
    model = None
    if spec.method == "pgm":
        mu, info, model = _solve_model(groups, domain, spec, map, residuals)
        n_cliques, cells = len(mu), int(sum(a.size for a in mu.values()))
    else:
        variances = _variances(groups)
        prob = build_problem(_fuse_duplicates(groups, domain, variances), domain,
                             _fused_variances(groups, domain, variances))
        mu, info = solve(prob, spec, map)
        n_cliques, cells = len(prob.cliques), prob.cells
    total = total_of(mu)
    if spec.integer:
        mu, total = round_marginals(mu, total)
    checks = {"consistency_violation": consistency_violation(mu), "negativity": negativity(mu)}
    seen: set[Clique] = set()
    for a in groups:  # each table handed over once, not copied (a 10^8-cell release holds it once)
        c = tuple(a.group.attributes)
        cc = domain.canonical(c)
        arr = mu[cc]
        if c != cc:
            arr = np.transpose(arr, [cc.index(x) for x in c])
        flat = np.ascontiguousarray(arr).reshape(-1)
        a.published = flat.copy() if cc in seen else flat
        seen.add(cc)
    report = {"method": spec.method, "integer": spec.integer, **info,
              "time_s": time.perf_counter() - t0, "groups": len(groups), "cliques": n_cliques, "cells": cells,
              **checks, "budget": "none: post-processing of released answers"}
    return report, model


def _solve_model(groups: Sequence[Any], domain: Domain, spec: PostprocessSpec, map: Mapper,
                 residuals: Mapping[Clique, tuple[np.ndarray, float]] | None
                 ) -> tuple[dict[Clique, np.ndarray], dict[str, Any], GraphicalModel | None]:
    """``pgm``: the residual statistics (the mechanism's measurements, else the marginal answers read as
    i.i.d. measurements), the model graph, the fit with a progress line, every group's marginal."""
    from privcube.postprocess.graphical import fit, select_model
    from privcube.postprocess.measurements import from_marginals, from_residuals

    if residuals:
        stats = from_residuals(domain, {t: z for t, (z, _) in residuals.items()},
                               {t: lam for t, (_, lam) in residuals.items()})
        source = "residual measurements"
    else:
        variances = _variances(groups)
        stats = from_marginals(domain, _fuse_duplicates(groups, domain, variances),
                               _fused_variances(groups, domain, variances))
        source = "marginal answers"
    cliques = list(dict.fromkeys(domain.canonical(tuple(a.group.attributes)) for a in groups))
    if not stats.total_precision:
        stats.total = float(np.mean([float(np.sum(a.estimate)) for a in groups]))
    if not stats.total > 0:
        zeros = {c: np.zeros(domain.shape_of(c)) for c in cliques}
        return zeros, {"source": source, "iterations": 0, "converged": True,
                       "note": "estimated total <= 0: all zeros"}, None
    choice = select_model(stats, spec.model_cells)
    bar = _FitProgress(spec.iterations)
    try:
        model = fit(stats, choice.tree, total=stats.total, max_iterations=spec.iterations, tol=spec.tol,
                    progress=bar)
    except BaseException:
        bar.close(None)
        raise
    bar.close(model.info)
    mu = answer_marginals(model, cliques, map)
    names = domain.attributes
    fi = model.info
    info = {"source": source, "iterations": fi.iterations, "converged": fi.converged, "stop": fi.stop,
            "loss": fi.loss, "frank_wolfe_gap": fi.gap, "fit_s": fi.seconds,
            "model": {"cells": int(choice.tree.cells), "cliques": [[names[i] for i in c] for c in choice.tree.cliques],
                      "residuals_in_graph": len(choice.kept), "left_out_at_noise_level": len(choice.noise_level),
                      "left_out_over_budget": len(choice.too_big), "model_cells": spec.model_cells}}
    return mu, info, model


class _LateBar:
    """A progress line drawn only once its step has run ``delay`` seconds (a step of a fraction of a second
    prints nothing)."""

    def __init__(self, label: str, total: int, delay: float = 1.0) -> None:
        from privcube.core.progress import ProgressBar

        self.bar = ProgressBar(label, total)
        self.delay, self.shown, self.start = delay, False, time.perf_counter()

    def advance(self, n: int) -> None:
        """``n`` more steps done; drawn once the delay has passed."""
        self.shown = self.shown or time.perf_counter() - self.start >= self.delay
        if self.shown:
            self.bar.update(n)
        else:
            self.bar.done += n

    def close(self) -> None:
        """End the line, if it was drawn."""
        if self.shown:
            self.bar.close()


class _FitProgress(_LateBar):
    """The fit's progress line: iterations against the cap, the loss and its fall over the last window; a
    line of its own saying so when the fit stops at the cap."""

    def __init__(self, cap: int) -> None:
        super().__init__("postprocess (pgm fit)", cap)

    def __call__(self, it: int, loss: float, change: float) -> None:
        self.bar.set_note(f"objective {loss:.6g}, fell {change:.3g} in the last steps")
        self.advance(it - self.bar.done)

    def close(self, info: Any = None) -> None:
        """End the line (at the iterations run when the fit stopped early on its tolerance)."""
        if info is not None and info.converged:
            self.bar.set_total(info.iterations)
        super().close()
        if info is not None and not info.converged:
            from privcube.core.progress import is_quiet

            if not is_quiet():
                import sys

                print(f"postprocess: the model fit stopped at the iteration cap ({info.iterations}) before its "
                      f"tolerance was met; report.json states it (postprocess.converged: false)", file=sys.stderr)


def answer_marginals(model: GraphicalModel, cliques: Sequence[Clique], map: Mapper = serial_map,
                     chunk_cells: int = 2_000_000, batch: int = 8) -> dict[Clique, np.ndarray]:
    """Every clique's marginal (counts) under the model, in chunks of about ``chunk_cells`` cells through
    ``map`` (cluster tasks when the run has a cluster), ``batch`` chunks a call, with a progress line."""
    parts: list[list[Clique]] = [[]]
    size = 0
    for c in cliques:
        n = int(np.prod(model.stats.domain.shape_of(c), dtype=np.int64))
        if parts[-1] and size + n > chunk_cells:
            parts.append([])
            size = 0
        parts[-1].append(c)
        size += n
    lean = model.lean()
    out: dict[Clique, np.ndarray] = {}
    bar = _LateBar("postprocess (answers from the model)", len(parts))
    for i in range(0, len(parts), batch):  # batches, so that a long answering step shows its progress
        for chunk in map(_answer_chunk, [(lean, part) for part in parts[i:i + batch]]):
            out.update(chunk)
        bar.advance(len(parts[i:i + batch]))
    bar.close()
    return out


def _answer_chunk(args: tuple) -> dict[Clique, np.ndarray]:
    model, cliques = args
    return {c: model.marginal(c) for c in cliques}


def _variances(groups: Sequence[Any]) -> list[float | None]:
    """Mean per-cell variance of each group (None when unknown); a zero variance (noiseless answers)
    becomes 1e-12 of the largest positive one, so exact answers dominate without dividing by zero."""
    out: list[float | None] = []
    for a in groups:
        v = None if a.variance is None else np.asarray(a.variance, dtype=float)
        ok = v is not None and v.size and np.all(np.isfinite(v)) and float(np.mean(v)) >= 0
        out.append(float(np.mean(v)) if ok else None)
    positive = [v for v in out if v is not None and v > 0]
    floor = 1e-12 * (max(positive) if positive else 1.0)
    return [None if v is None else max(v, floor) for v in out]


def _fuse_duplicates(groups: Sequence[Any], domain: Domain, variances: Sequence[float | None]) -> dict[Clique, np.ndarray]:
    """clique -> estimate; groups on the same attribute set are averaged by inverse variance."""
    acc: dict[Clique, list[tuple[np.ndarray, float]]] = {}
    for a, v in zip(groups, variances):
        c = tuple(a.group.attributes)
        cc = domain.canonical(c)
        arr = np.asarray(a.estimate, dtype=float).reshape(domain.shape_of(c))
        if c != cc:
            arr = np.transpose(arr, [c.index(x) for x in cc])
        acc.setdefault(cc, []).append((arr, 1.0 if v is None else 1.0 / v))
    return {c: sum(w * x for x, w in items) / sum(w for _, w in items) for c, items in acc.items()}


def _fused_variances(groups: Sequence[Any], domain: Domain, variances: Sequence[float | None]) -> dict[Clique, float]:
    """clique -> per-cell variance of the fused estimate (cliques with an unknown variance are left out)."""
    prec: dict[Clique, float] = {}
    unknown = set()
    for a, v in zip(groups, variances):
        cc = domain.canonical(tuple(a.group.attributes))
        if v is None:
            unknown.add(cc)
        else:
            prec[cc] = prec.get(cc, 0.0) + 1.0 / v
    return {c: 1.0 / p for c, p in prec.items() if c not in unknown}


__all__ = ["answer_marginals", "marginal_answers", "publish", "publish_model", "solve"]
