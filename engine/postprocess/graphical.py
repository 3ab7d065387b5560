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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from privcube.postprocess.inference import TreeOrder, calibrate, entropy, marginal, min_sum
from privcube.postprocess.measurements import ResidualStats
from privcube.postprocess.model_loss import ModelLoss
from privcube.synth.junction_tree import JunctionTree, clique_cells, min_fill_cliques, tree_edges

Idx = tuple[int, ...]
Progress = Callable[[int, float, float], None]

#: public bound on the model's size (sum of its clique tables' cells)
DEFAULT_MODEL_CELLS = 4_000_000
#: a measured interaction enters the graph when its χ² statistic exceeds dof by this many s.d.
DEFAULT_SIGNIFICANCE = 3.0


@dataclass
class ModelChoice:
    """The junction tree chosen, which measured residuals entered its graph, which were left out."""

    tree: JunctionTree
    kept: list[Idx] = field(default_factory=list)
    too_big: list[Idx] = field(default_factory=list)
    noise_level: list[Idx] = field(default_factory=list)


def select_model(stats: ResidualStats, max_cells: float = DEFAULT_MODEL_CELLS,
                 significance: float = DEFAULT_SIGNIFICANCE, min_snr: float = 0.0) -> ModelChoice:
    """Graph of the measured interactions that stand out of their noise (χ² statistic above its
    degrees of freedom by ``significance`` standard deviations), added strongest first (estimated signal
    energy ‖ζ_τ‖²) while the min-fill junction tree fits ``max_cells``."""
    n = len(stats.domain)
    sizes = list(stats.domain.shape)
    scored, noise_level = [], []
    for tau in stats.value:
        if len(tau) < 2:
            continue
        dof = stats.dof(tau)
        excess = stats.energy(tau) - dof
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


def fit(stats: ResidualStats, tree: JunctionTree, *, total: float, max_iterations: int = 1000,
        tol: float = 1e-3, window: int = 25, entropy_weight: float = 0.0,
        progress: Progress | None = None) -> GraphicalModel:
    """Accelerated composite mirror descent on the residuals' log-potentials φ from the uniform
    distribution, minimising F = L − γ·N·H(p) (γ = ``entropy_weight``; the entropy term keeps cells the
    measurements cannot resolve near the maximum-entropy model and makes the minimum unique). Each step
    φ ← (φ̃ − η·∇L(μ(φ̃))) / (1 + ηγ) from the extrapolated point φ̃ = φ + β(φ − φ_prev) (Nesterov's
    momentum, restarted whenever F rises), η found by backtracking. It stops when F fell by less than
    ``tol`` standard deviations of the loss's noise (√(½Σ dof) for the residuals in the model) over the
    last ``window`` steps, or at ``max_iterations``. The Frank–Wolfe gap of L is reported beside it."""
    t0 = time.perf_counter()
    order = TreeOrder(tree)
    loss_fn = ModelLoss(stats, tree, total)
    noise_sd = math.sqrt(max(1.0, 0.5 * sum(float(np.size(r)) for _, _, r, _ in loss_fn.terms)))
    gamma = float(entropy_weight) * total

    def objective(beliefs: Sequence[np.ndarray]) -> tuple[float, float, dict, dict]:
        loss, grad, margs = loss_fn(beliefs)
        return loss - (gamma * entropy(beliefs, order) if gamma else 0.0), loss, grad, margs

    phi = loss_fn.zeros()  # the log-potentials: one table per residual, or a clique's coefficients
    prev = phi
    beliefs = calibrate(loss_fn.fold(phi), order)
    obj, loss, _, _ = objective(beliefs)
    eta = 1.0 / max(1e-12, total * max((lam for *_, lam in loss_fn.terms), default=1.0))
    info = FitInfo(tolerance=tol)
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
            shrink = 1.0 / (1.0 + eta * gamma / total) if gamma else 1.0
            cand = {t: (v - eta * grad[t]) * shrink for t, v in look.items()}
            new_beliefs = calibrate(loss_fn.fold(cand), order)
            new_obj, new_loss, _, new_margs = objective(new_beliefs)
            drop = sum(float(np.sum(g * (look_margs[t] - new_margs[t]))) for t, g in grad.items())
            if gamma:  # the entropy's part: γ/N·⟨log p_look, μ_look − μ_new⟩ (log-partition terms cancel)
                drop += gamma * sum(float(np.sum(th * (b - nb)))
                                    for th, b, nb in zip(look_theta, look_beliefs, new_beliefs))
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


__all__ = ["DEFAULT_MODEL_CELLS", "DEFAULT_SIGNIFICANCE", "FitInfo", "GraphicalModel", "ModelChoice", "fit",
           "select_model"]
