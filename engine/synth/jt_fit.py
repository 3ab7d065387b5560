"""The junction-tree estimator: published marginals → graph under a cell budget → max-entropy model.

Input marginals should be the non-negative consistent (``published``) estimates; anything else is made
consistent first with ``consistency.make_consistent``. Post-processing only: spends no budget.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, DataError
from privcube.synth.consistency import make_consistent, project
from privcube.synth.factor_ops import project_idx
from privcube.synth.jt_model import JunctionTreeModel, usable_subsets
from privcube.synth.junction_tree import select_junction_tree
from privcube.synth.tree_model import mutual_information

Clique = tuple[str, ...]
Idx = tuple[int, ...]

DEFAULT_MAX_CELLS = 32_768


def canonical(marginals: Mapping[Clique, np.ndarray], domain: Domain) -> dict[Clique, np.ndarray]:
    """The marginals as clique-shaped float arrays with axes in domain order."""
    out: dict[Clique, np.ndarray] = {}
    for c, a in marginals.items():
        c, cc = tuple(c), domain.canonical(c)
        arr = np.asarray(a, dtype=float)
        if arr.size != domain.size(c):
            raise DataError(f"marginal on {list(c)} has {arr.size} cells; the domain needs {domain.size(c)}")
        arr = arr.reshape(domain.shape_of(c))
        out[cc] = np.transpose(arr, [c.index(x) for x in cc]) if c != cc else arr
    return out


def is_consistent(marginals: Mapping[Clique, np.ndarray], domain: Domain, rtol: float = 1e-6) -> bool:
    """Non-negative, one common total, and agreement on every shared attribute set (within ``rtol``·total)."""
    arrs = canonical(marginals, domain)
    if any((a < 0).any() for a in arrs.values()):
        return False
    totals = [float(a.sum()) for a in arrs.values()]
    tol = rtol * max(1.0, max(totals))
    if max(totals) - min(totals) > tol:
        return False
    shared = {tuple(v for v in a if v in b) for a, b in itertools.combinations(arrs, 2)} - {()}
    for s in shared:
        holders = [c for c in arrs if set(s) <= set(c)]
        ref = project(arrs[holders[0]], holders[0], s)
        if any(np.abs(project(arrs[c], c, s) - ref).max() > tol for c in holders[1:]):
            return False
    return True


def _normalised(marginals: Mapping[Clique, np.ndarray], domain: Domain) -> dict[Idx, np.ndarray]:
    """Probability tables keyed by ascending attribute indices (one common total divided out)."""
    out: dict[Idx, np.ndarray] = {}
    for c, a in marginals.items():
        cc = domain.canonical(c)
        arr = np.asarray(a, dtype=float).reshape(domain.shape_of(cc))
        s = float(arr.sum())
        out[tuple(domain.index(x) for x in cc)] = arr / s if s > 0 else np.full(arr.shape, 1.0 / arr.size)
    return out


def pair_weights(probs: Mapping[Idx, np.ndarray], noise_sd: Mapping[Idx, float] | None = None,
                 seed: int = 0) -> dict[tuple[int, int], float]:
    """Mutual information of every attribute pair inside a published clique (mean over its holders),
    less the MI that noise alone gives an independent table (``null_mi``) when ``noise_sd`` (per-cell
    noise s.d. relative to the total, per clique) is known: edges that noise explains score ≤ 0."""
    acc: dict[tuple[int, int], list[float]] = {}
    for c, p in probs.items():
        sd = (noise_sd or {}).get(c, 0.0)
        cells = p.size
        for u, v in itertools.combinations(c, 2):
            pair = project_idx(p, c, (u, v))
            # a projection sums cells/|pair| noisy cells: its noise s.d. grows by the square root
            psd = sd * np.sqrt(cells / pair.size)
            acc.setdefault((u, v), []).append(mutual_information(pair) - null_mi(pair, psd, seed))
    return {e: float(np.mean(w)) for e, w in acc.items()}


def null_mi(pair: np.ndarray, sd: float, seed: int = 0, reps: int = 3) -> float:
    """Mean MI of the independence table with ``pair``'s margins plus N(0, sd²) noise per cell, clipped
    at zero (the bias noise adds to a published pair's MI). Post-processing of public quantities."""
    if sd <= 0:
        return 0.0
    rng = np.random.default_rng(seed)
    ind = np.outer(pair.sum(axis=1), pair.sum(axis=0))
    return float(np.mean([mutual_information(np.maximum(ind + rng.normal(0.0, sd, ind.shape), 0.0))
                          for _ in range(reps)]))


def fit_targets(probs: Mapping[Idx, np.ndarray], cliques: list[tuple[int, ...]]) -> dict[Idx, np.ndarray]:
    """For each published clique, its largest sub-marginals the tree can hold (averaged where several
    cliques give the same one); targets contained in another target are left out (implied by it), except
    the one-way margins."""
    acc: dict[Idx, list[np.ndarray]] = {}
    for c, p in probs.items():
        for s in usable_subsets(c, cliques):
            acc.setdefault(s, []).append(project_idx(p, c, s))
    keys = [s for s in acc if not any(set(s) < set(o) for o in acc)]
    out = {s: np.mean(acc[s], axis=0) for s in keys}
    # one-way targets too, fitted last: inputs that are only nearly consistent then keep their 1-way margins
    ones: dict[Idx, list[np.ndarray]] = {}
    for c, p in probs.items():
        for a in c:
            ones.setdefault((a,), []).append(project_idx(p, c, (a,)))
    out.update({a: np.mean(v, axis=0) for a, v in ones.items() if a not in out})
    return out


def _relative_sd(marginals: Mapping[Clique, np.ndarray], domain: Domain,
                 variances: Mapping[Clique, float] | None) -> dict[Idx, float]:
    """Per-cell noise s.d. of each clique relative to its total (from the answers' public variances)."""
    out: dict[Idx, float] = {}
    for c, arr in marginals.items():
        v = (variances or {}).get(tuple(c), (variances or {}).get(domain.canonical(c)))
        tot = float(np.sum(arr))
        if v is not None and v > 0 and tot > 0:
            out[tuple(domain.index(x) for x in domain.canonical(c))] = float(np.sqrt(v)) / tot
    return out


class JunctionTreeEstimator:
    """Junction tree over the published cliques (min-fill, within ``max_cells``), fitted by IPF with exact
    belief propagation; the weakest edges (by published mutual information) are left out when it must."""

    def __init__(self, max_cells: int | float = DEFAULT_MAX_CELLS, max_sweeps: int = 100, tol: float = 1e-4,
                 rounds: int = 10) -> None:
        """``max_cells``: public bound on the sum of the tree's clique table sizes."""
        if isinstance(max_cells, bool) or not isinstance(max_cells, (int, float)) or max_cells < 1:
            raise ConfigError(f"synth: max_cells must be a positive number, got {max_cells!r}")
        self.max_cells, self.max_sweeps, self.tol, self.rounds = float(max_cells), int(max_sweeps), float(tol), rounds
        self.info: dict[str, Any] = {}

    def fit(self, marginals: Mapping[Clique, np.ndarray], domain: Domain, *, total: float | None = None,
            variances: Mapping[Clique, float] | None = None) -> JunctionTreeModel:
        """Published (or made consistent) marginals → junction tree → fitted model."""
        if not marginals:
            raise DataError("synth: no marginals to fit a model to")
        cons = canonical(marginals, domain)
        consistent = is_consistent(cons, domain)
        if not consistent:
            cons = make_consistent(marginals, domain, total=total, variances=variances, rounds=self.rounds)
        probs = _normalised(cons, domain)
        weights = pair_weights(probs, _relative_sd(cons, domain, variances))
        tree = select_junction_tree(len(domain), list(domain.shape), weights, self.max_cells)
        targets = fit_targets(probs, tree.cliques)
        model = JunctionTreeModel.fit(targets, domain, tree, max_sweeps=self.max_sweeps, tol=self.tol)
        names = domain.attributes
        self.info = {"estimator": "junction-tree", "input": "published" if consistent else "made consistent",
                     "max_cells": self.max_cells, "cells": tree.cells,
                     "cliques": [[names[i] for i in c] for c in tree.cliques],
                     "edges_kept": len(tree.kept), "edges_dropped": len(tree.dropped),
                     "edges_at_noise_level": len(tree.unsupported),
                     "dropped": [[names[u], names[v]] for u, v in tree.dropped],
                     "sweeps": model.sweeps, "residual_l1": model.residual}
        return model


__all__ = ["JunctionTreeEstimator", "is_consistent", "pair_weights", "fit_targets", "DEFAULT_MAX_CELLS"]
