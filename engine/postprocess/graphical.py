"""The graphical-model estimate (Private-PGM; McKenna, Sheldon & Miklau 2019): the distribution of a
junction-tree model that best explains the residual measurements, found by entropic mirror descent.

    minimise  L(μ) = Σ_τ (λ_τ/2)·‖C_τ μ_τ − R_τ‖²   over μ = N·p, p a distribution of the model

(:mod:`privcube.postprocess.measurements` for R_τ, λ_τ). The model's graph holds the measured
interactions the data shows beyond their noise (a χ² test on each residual), as many as fit a public
cell budget, strongest first; every measured residual inside one of its cliques enters the loss. Its
marginals are non-negative and consistent by construction (they are one distribution's), so the
published answers need no projection; the same model samples the synthetic records. Cost per
iteration: a few passes over the junction tree's tables, whatever the size of the workload.

Each step is θ_C ← θ_C − η·∇_{μ_C}L with a backtracking line search; the stop is certified by the
Frank–Wolfe gap ⟨∇L, μ⟩ − min_{μ'} ⟨∇L, μ'⟩ ≥ L(μ) − min L, computed exactly by min-sum on the tree.
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.postprocess.inference import TreeOrder, calibrate, marginal, min_sum
from privcube.postprocess.inference import entropy as model_entropy
from privcube.postprocess.measurements import ResidualStats, center
from privcube.postprocess.model_loss import ModelLoss
from privcube.postprocess.problem import Clique
from privcube.postprocess.spec import DEFAULT_MODEL_CELLS
from privcube.synth.junction_tree import JunctionTree, clique_cells, min_fill_cliques, tree_edges

Idx = tuple[int, ...]
Progress = Callable[[int, float, float], None]

#: a measured interaction enters the graph when its χ² statistic exceeds dof by this many s.d.
DEFAULT_SIGNIFICANCE = 3.0
#: ... and its estimated signal energy is at least this many times its noise energy
DEFAULT_MIN_SNR = 4.0
#: entropy weight, in units of 1/σ̄ (the measurements' typical noise s.d., counts)
DEFAULT_ENTROPY = 0.25


@dataclass
class ModelChoice:
    """The junction tree chosen, which measured residuals entered its graph, which were left out."""

    tree: JunctionTree
    kept: list[Idx] = field(default_factory=list)
    too_big: list[Idx] = field(default_factory=list)
    noise_level: list[Idx] = field(default_factory=list)


def _dependence_energy(stats: ResidualStats, tau: Clique, ones: Mapping[str, np.ndarray]) -> float:
    """λ_τ‖R_τ − ζ‖² for a pair τ = (a, b), ζ the interaction residual of the product of the measured 1-ways
    (N·(p_a − 1/n_a)⊗(p_b − 1/n_b)): χ² with dof(τ) degrees of freedom, up to the 1-ways' own noise, when a
    and b are independent; 0 when a 1-way was not measured."""
    a, b = tau
    if a not in ones or b not in ones or not stats.total > 0:
        return 0.0
    pa, pb = ones[a] / stats.total, ones[b] / stats.total  # p − 1/n, as read
    return float(np.sum((stats.reading(tau) - stats.total * np.outer(pa, pb)) ** 2)) * stats.precision[tau]


def select_model(stats: ResidualStats, max_cells: float = DEFAULT_MODEL_CELLS,
                 significance: float = DEFAULT_SIGNIFICANCE, min_snr: float = DEFAULT_MIN_SNR) -> ModelChoice:
    """Graph of the measured interactions that stand out of their noise (χ² statistic above its
    degrees of freedom by ``significance`` standard deviations, and an estimated signal energy at least
    ``min_snr`` times the noise energy), added strongest first (estimated signal energy ‖ζ_τ‖²) while the
    min-fill junction tree fits ``max_cells``. Residuals left out are completed by maximum entropy."""
    n = len(stats.domain)
    sizes = list(stats.domain.shape)
    scored, noise_level = [], []
    ones = {tau[0]: stats.reading(tau) for tau in stats.taus if len(tau) == 1}
    for tau in stats.taus:
        if len(tau) < 2:
            continue
        dof = stats.dof(tau)
        excess = stats.energy(tau) - dof
        if len(tau) == 2:  # a log-linear model needs the edge when the pair is not independent, even with a
            # zero additive interaction (e.g. 12 13 / 8 9): the larger of the two statistics decides
            excess = max(excess, _dependence_energy(stats, tau, ones) - dof)
        if excess > significance * math.sqrt(2.0 * dof) and excess >= min_snr * dof:
            scored.append((excess / stats.precision[tau], stats.index(tau)))
        else:
            noise_level.append(stats.index(tau))
    scored.sort(key=lambda s: (-s[0], s[1]))
    edges: set[tuple[int, int]] = set()
    cliques = min_fill_cliques(n, [], sizes)
    covered: set[tuple[int, int]] = set()
    kept, too_big = [], []
    for _, idx in scored:
        new = {e for e in itertools.combinations(idx, 2) if e not in covered}
        if not new:
            kept.append(idx)
            continue
        trial = min_fill_cliques(n, sorted(edges | new), sizes)
        if clique_cells(trial, sizes) <= max_cells:
            edges |= new
            cliques = trial
            covered = {e for c in cliques for e in itertools.combinations(sorted(c), 2)}
            kept.append(idx)
        else:
            too_big.append(idx)
    cl = [tuple(sorted(c)) for c in cliques]
    tree = JunctionTree(cl, tree_edges([frozenset(c) for c in cl]), cells=clique_cells(cliques, sizes))
    return ModelChoice(tree, kept, too_big, noise_level)


@dataclass
class FitInfo:
    """How the fit went (no data-derived value: losses are of released measurements)."""

    entropy_weight: float = 0.0
    iterations: int = 0
    converged: bool = False
    loss: float = math.inf
    gap: float = math.inf
    tolerance: float = 0.0
    seconds: float = 0.0
    stop: str = ""


@dataclass
class GraphicalModel:
    """Calibrated clique marginals (probabilities) of a junction tree, and the total they are scaled by."""

    stats: ResidualStats
    tree: JunctionTree
    beliefs: list[np.ndarray]
    total: float
    info: FitInfo = field(default_factory=FitInfo)

    def lean(self) -> GraphicalModel:
        """The same model without its measurements (what answering queries needs; cheap to ship to tasks)."""
        stats = ResidualStats(self.stats.domain, total=self.stats.total)
        return GraphicalModel(stats, self.tree, self.beliefs, self.total, self.info)

    def marginal(self, attrs: Sequence[str]) -> np.ndarray:
        """Counts (probability × total) on ``attrs``, axes in the order given."""
        dom = self.stats.domain
        idx = [dom.index(a) for a in attrs]
        srt = tuple(sorted(idx))
        p = marginal(self.beliefs, self.tree, srt) if srt else np.asarray(1.0)
        if list(srt) != idx:
            p = np.transpose(p, [srt.index(i) for i in idx])
        return self.total * p


def reference_tables(loss_fn: ModelLoss, total: float) -> dict[Idx, np.ndarray]:
    """log q_a (centred) for every attribute whose 1-way residual is in the loss: q_a its direct reading
    (R_a + N/n_a) clipped at zero, plus half a record a level so that every level stays possible. The fit's
    regulariser pulls towards the product of these (not towards the uniform distribution, which would lift
    the empty tails of skewed attributes)."""
    out = {}
    for _, tau, r, _ in loss_fn.terms:
        if len(tau) == 1:
            q = np.maximum(r + total / r.size, 0.0) + 0.5
            out[tau] = center(np.log(q / q.sum()))
    return out


def _step(phi: Mapping[Any, np.ndarray], grad: Mapping[Any, np.ndarray], ref: Mapping[Any, np.ndarray], eta: float,
          step: float) -> dict[Any, np.ndarray]:
    """The composite mirror step from ``phi``: (φ − η·∇L + ηγ·log q) / (1 + ηγ), ``step`` = ηγ per count."""
    return {t: (v - eta * grad[t] + step * ref[t]) / (1.0 + step) if t in ref else (v - eta * grad[t]) / (1.0 + step)
            for t, v in phi.items()}


def _first_step(phi: Mapping[Any, np.ndarray], grad: Mapping[Any, np.ndarray], ref: Mapping[Any, np.ndarray],
                eta: float, weight: float, value: Callable[[dict], float], doublings: int = 16) -> float:
    """The first step size: ``eta`` (safe: 1/(N·max λ), as if every count sat in one cell) doubled while a
    step along the first gradient keeps lowering the objective (``value`` of the parameters), at most
    ``doublings`` times. The safe step is 10²–10³ times too short when the mass is spread over many
    cells; growing it by 1.1 a step took some 50 iterations (large-domain table) before the fit moved."""
    best = value(_step(phi, grad, ref, eta, eta * weight))
    for _ in range(doublings):
        trial = value(_step(phi, grad, ref, 2.0 * eta, 2.0 * eta * weight))
        if not trial < best:
            break
        eta, best = 2.0 * eta, trial
    return eta


def fit(stats: ResidualStats, tree: JunctionTree, *, total: float, max_iterations: int = 1000,
        tol: float = 1e-3, window: int = 25, entropy: float | None = None,
        progress: Progress | None = None) -> GraphicalModel:
    """Accelerated composite mirror descent on the residuals' log-potentials φ from the uniform
    distribution, minimising F = L − γ·N·H(p), γ = ``entropy`` (default :data:`DEFAULT_ENTROPY`)/σ̄ with σ̄² = Σ dof / Σ λ·dof the
    measurements' typical noise variance (counts). The entropy term keeps what the measurements cannot
    resolve near the maximum-entropy model, makes the minimum unique and the descent converge linearly;
    ``entropy`` 0 is the maximum-likelihood fit of Private-PGM. Each step
    φ ← (φ̃ − η·∇L(μ(φ̃)) + ηγ·log q) / (1 + ηγ) from the extrapolated point φ̃ = φ + β(φ − φ_prev) (Nesterov's
    momentum, restarted whenever F rises), η found by backtracking (the first η by doubling, see
    :func:`_first_step`). It stops when F fell by less than
    ``tol`` standard deviations of the loss's noise (√(½Σ dof) for the residuals in the model) over the
    last ``window`` steps, or at ``max_iterations``. The Frank–Wolfe gap of L is reported beside it."""
    t0 = time.perf_counter()
    order = TreeOrder(tree)
    loss_fn = ModelLoss(stats, tree, total)
    noise_sd = math.sqrt(max(1.0, 0.5 * sum(float(np.size(r)) for _, _, r, _ in loss_fn.terms)))
    dof = sum(float(np.size(r)) for _, _, r, _ in loss_fn.terms)
    precision = sum(float(np.size(r)) * lam for _, _, r, lam in loss_fn.terms)
    entropy = DEFAULT_ENTROPY if entropy is None else entropy
    weight = float(entropy) * math.sqrt(precision / dof) if dof and precision else 0.0  # γ, per count
    gamma = weight * total

    ref = loss_fn.parameters_of(reference_tables(loss_fn, total))  # the independence model of the 1-ways
    ref_theta = loss_fn.fold(ref)

    def objective(beliefs: Sequence[np.ndarray]) -> tuple[float, float, dict, dict]:
        loss, grad, margs = loss_fn(beliefs)
        if not gamma:
            return loss, loss, grad, margs
        kl = -model_entropy(beliefs, order) - sum(float(np.sum(t * b)) for t, b in zip(ref_theta, beliefs))
        return loss + gamma * kl, loss, grad, margs  # KL(p ‖ q) up to a constant

    phi = loss_fn.zeros()  # the log-potentials: one table per residual, or a clique's coefficients
    prev = phi
    beliefs = calibrate(loss_fn.fold(phi), order)
    obj, loss, grad, _ = objective(beliefs)
    eta = 1.0 / max(1e-12, total * max((lam for *_, lam in loss_fn.terms), default=1.0))
    eta = _first_step(phi, grad, ref, eta, gamma / total, lambda c: objective(calibrate(loss_fn.fold(c), order))[0])
    info = FitInfo(entropy_weight=weight, tolerance=tol)
    history = [obj]
    momentum = 1.0
    for it in range(1, max_iterations + 1):
        info.iterations = it
        nxt = (1.0 + math.sqrt(1.0 + 4.0 * momentum * momentum)) / 2.0
        beta = (momentum - 1.0) / nxt
        look = {t: v + beta * (v - prev[t]) for t, v in phi.items()} if beta > 0 else phi
        look_theta = loss_fn.fold(look)
        look_beliefs = calibrate(look_theta, order) if beta > 0 else beliefs
        look_obj, _, grad, look_margs = objective(look_beliefs)
        while True:  # backtracking: sufficient decrease of F along the step from the extrapolated point
            cand = _step(look, grad, ref, eta, eta * gamma / total)
            new_beliefs = calibrate(loss_fn.fold(cand), order)
            new_obj, new_loss, _, new_margs = objective(new_beliefs)
            drop = sum(float(np.sum(g * (look_margs[t] - new_margs[t]))) for t, g in grad.items())
            if gamma:  # the KL's part: γ·⟨log p_look − log q, p_look − p_new⟩ (log-partition terms cancel)
                drop += gamma * sum(float(np.sum((th - rt) * (b - nb)))
                                    for th, rt, b, nb in zip(look_theta, ref_theta, look_beliefs, new_beliefs))
            if look_obj - new_obj >= 0.5 * drop or eta < 1e-30:
                break
            eta *= 0.5
        momentum = 1.0 if new_obj > obj else nxt  # restart the momentum when F rose
        prev, phi, beliefs, obj, loss = phi, cand, new_beliefs, new_obj, new_loss
        eta *= 1.1
        history.append(obj)
        info.loss = loss
        if progress is not None:
            progress(it, obj, history[max(0, len(history) - 1 - window)] - obj)
        if len(history) > window and history[-1 - window] - obj <= tol * noise_sd:
            info.converged, info.stop = True, "objective change below tolerance"
            break
    else:
        info.stop = "max_iterations"
    _, grad, _ = loss_fn(beliefs)
    g = loss_fn.fold(grad)
    info.gap = total * (sum(float(np.sum(gc * b)) for gc, b in zip(g, beliefs)) - min_sum(g, order))
    info.seconds = time.perf_counter() - t0
    return GraphicalModel(stats, tree, beliefs, total, info)


__all__ = ["DEFAULT_ENTROPY", "DEFAULT_MIN_SNR", "DEFAULT_SIGNIFICANCE", "FitInfo", "GraphicalModel", "ModelChoice",
           "fit", "select_model"]
