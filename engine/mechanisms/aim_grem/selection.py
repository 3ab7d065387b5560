"""AIM selection (App. F.1): weighted expected-improvement scores and the exponential mechanism.

Score_γ = w_γ · (‖μ_γ − μ̂_γ‖₁ − √(2/π)·σ_t·n_γ) with w_γ = Σ_{π∈W} weight_π·|γ ∩ π|; a record changes
the L1 term by at most 1, so the sensitivity is Δ = max_γ w_γ and γ is drawn with probability
∝ exp(ε_t·Score_γ/(2Δ)). Candidates are W↓ \\ {∅} (∅ has weight 0).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from privcube.errors import ConfigError
from privcube.privacy.primitives import exponential_mechanism
from privcube.residuals import Sizes, size_of

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


__all__ = ["candidate_weights", "cells", "downward_closure", "scores", "select"]
