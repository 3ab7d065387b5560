"""AIM selection (App. F.1): weighted expected-improvement scores and the exponential mechanism.

Score_γ = w_γ · (‖μ_γ − μ̂_γ‖₁ − √(2/π)·σ_t·n_γ) with w_γ = Σ_{π∈W} weight_π·|γ ∩ π|; a record changes
the L1 term by at most 1, so the sensitivity is Δ = max_γ w_γ and γ is drawn with probability
∝ exp(ε_t·Score_γ/(2Δ)). Candidates are W↓ \\ {∅} (∅ has weight 0).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from privcube.core.errors import ConfigError
from privcube.privacy.primitives import exponential_mechanism
from privcube.core.residuals import Sizes, size_of

Clique = tuple[str, ...]


def downward_closure(cliques: Sequence[Clique], order: Sequence[str]) -> list[Clique]:
    """W↓ including ∅: every subset of every clique, attributes in ``order``, sorted by size then order."""
    pos = {a: i for i, a in enumerate(order)}
    out: set[Clique] = set()
    for c in cliques:
        c = tuple(sorted(c, key=pos.__getitem__))
        for mask in range(1 << len(c)):
            out.add(tuple(a for i, a in enumerate(c) if mask >> i & 1))
    return sorted(out, key=lambda t: (len(t), [pos[a] for a in t]))


def candidate_weights(candidates: Sequence[Clique], weights: Mapping[Clique, float]) -> np.ndarray:
    """w_γ = Σ_{π∈W} weight_π·|γ ∩ π| for each candidate."""
    wl = [(set(pi), float(w)) for pi, w in weights.items()]
    return np.array([sum(w * len(s.intersection(c)) for s, w in wl) for c in candidates], dtype=float)


def scores(errors: np.ndarray, weights: np.ndarray, cells: np.ndarray, sigma: float) -> np.ndarray:
    """Score_γ = w_γ(‖μ_γ − μ̂_γ‖₁ − √(2/π)·σ·n_γ)."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise ConfigError(f"selection: sigma must be positive and finite, got {sigma!r}")
    return np.asarray(weights) * (np.asarray(errors, dtype=float) - math.sqrt(2.0 / math.pi) * sigma * np.asarray(cells, dtype=float))


def cells(candidates: Sequence[Clique], sizes: Sizes) -> np.ndarray:
    """n_γ per candidate."""
    return np.array([math.prod(size_of(sizes, a) for a in c) for c in candidates], dtype=float)


def select(score: np.ndarray, epsilon: float, sensitivity: float,
           rng: np.random.Generator | Callable[[int], np.ndarray]) -> int:
    """Index of the exponential-mechanism choice, Pr ∝ exp(ε·score/(2Δ))."""
    return exponential_mechanism(score, epsilon, sensitivity, rng)


class ModelSize:
    """Which candidates keep the graphical model of the measured cliques within a cell budget (AIM's
    model-size filter, McKenna et al. 2022): the min-fill junction tree of every pair of attributes measured
    together, plus the candidate's. Public: it reads the selected cliques and the domain sizes only."""

    def __init__(self, order: Sequence[str], sizes: Sizes) -> None:
        self.index = {a: i for i, a in enumerate(order)}
        self.sizes = [size_of(sizes, a) for a in order]
        self.edges: set[tuple[int, int]] = set()
        self.covered: set[tuple[int, int]] = set()
        self._cache: dict[frozenset[tuple[int, int]], float] = {}

    def _pairs(self, clique: Sequence[str]) -> set[tuple[int, int]]:
        idx = sorted(self.index[a] for a in clique)
        return {(u, v) for k, u in enumerate(idx) for v in idx[k + 1:]}

    def cells_with(self, clique: Sequence[str]) -> float:
        """Cells of the junction tree once ``clique`` is measured too."""
        from privcube.synth.junction_tree import clique_cells, min_fill_cliques

        new = frozenset(self._pairs(clique) - self.covered)
        if new not in self._cache:
            self._cache[new] = clique_cells(min_fill_cliques(len(self.sizes), sorted(self.edges | new), self.sizes),
                                            self.sizes)
        return self._cache[new]

    def add(self, clique: Sequence[str]) -> None:
        """``clique`` was measured: its pairs join the graph."""
        from privcube.synth.junction_tree import min_fill_cliques

        new = self._pairs(clique) - self.covered
        if new:
            self.edges |= new
            tree = min_fill_cliques(len(self.sizes), sorted(self.edges), self.sizes)
            self.covered = {(u, v) for c in tree for u in c for v in c if u < v}
            self._cache.clear()

    def allowed(self, candidates: Sequence[Sequence[str]], limit: float) -> np.ndarray:
        """A mask of the candidates whose measurement keeps the tree within ``limit`` cells."""
        return np.array([self.cells_with(c) <= limit for c in candidates], dtype=bool)


__all__ = ["ModelSize", "candidate_weights", "cells", "downward_closure", "scores", "select"]
