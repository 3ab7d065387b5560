"""Selection of the cross workloads to measure: candidates, how many, and the exponential mechanism.

Each measuring iteration draws k_t workloads from a random pool of unmeasured candidates with the
exponential mechanism (TV score, sensitivity d_max/m; optionally AIM's noise penalty), then releases
their count tables with the Gaussian mechanism (L2 sensitivity √2·d_max). The schedule (how many
measurements, ε0, σ, the per-iteration k_t) depends on public quantities only.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.domain import Domain
from privcube.errors import ConfigError, WorkloadError
from privcube.mechanisms.relational.workloads import CrossTables, CrossWorkload, cross_workloads
from privcube.privacy.primitives import exponential_mechanism, exponential_rho, gaussian_sigma


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


@dataclass
class Schedule:
    """The links stage's privacy schedule (public): measurements per iteration, ε0, σ, the EM's ε."""

    T: int
    K: int
    alpha: float
    rho_links: float
    n_sel: int
    ks: list[int]
    eps0: float
    sigma: float  # std of the noise on a released marginal (count-table noise σ·m, divided by m)
    eps_em: float
    sens_tv: float
    shrinkage: Any  # True | False | 'per_release'

    def report(self, candidates: int, rho_tables: Mapping[str, float]) -> dict[str, Any]:
        """The report's ``privacy`` section."""
        return {"rho_links": self.rho_links, "epsilon0": self.eps0, "em_epsilon": self.eps_em,
                "noise_std": self.sigma, "selections": self.n_sel, "shrinkage": self.shrinkage,
                "measuring_iterations": sum(1 for k_ in self.ks if k_), "candidates": candidates,
                "alpha": self.alpha, "rho_tables": dict(rho_tables)}


def privacy_schedule(p: Mapping[str, Any], cand_w: Sequence[CrossWorkload], dom1: Domain, dom2: Domain,
                     rho_links: float, m: int, d_sens: int) -> Schedule:
    """Split ``rho_links`` over the measurements (ρ_links = Σ_t k_t·ε0²/2; α selection, 1 − α measurement)."""
    T, K, alpha = int(p["iterations"]), int(p["workloads_per_iteration"]), float(p["alpha"])
    min_cells = min(int(np.prod(w.sizes(dom1, dom2))) for w in cand_w)
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
    l2 = math.sqrt(2.0) * d_sens / m
    sigma = gaussian_sigma((1 - alpha) * eps0 ** 2 / 2, l2) if n_sel else math.inf
    eps_em = 2.0 * math.sqrt(alpha) * eps0 if n_sel else 0.0
    return Schedule(T, K, alpha, rho_links, n_sel, ks, eps0, sigma, eps_em, d_sens / m, shrinkage)


def select_and_measure(t: int, kt: int, sched: Schedule, p: Mapping[str, Any], remaining: list[CrossWorkload],
                       real: CrossTables, ri: np.ndarray, rj: np.ndarray, syn: CrossTables, si: np.ndarray,
                       sj: np.ndarray, m: int, ledger: Any, noise: Any) -> tuple[list[CrossWorkload], list[np.ndarray]]:
    """Iteration t: pick ``kt`` workloads from a random pool of ``remaining`` (EM), then release each (Gaussian).

    Both steps are charged to the ledger before the private data is read. Returns (picked, releases), each
    release a noisy marginal (count table + N(0, (σ·m)²), divided by m).
    """
    rng = noise.generator("relational", "iteration", t)
    pool_idx = rng.choice(len(remaining), size=min(int(p["candidates"]), len(remaining)), replace=False)
    pool = [remaining[q] for q in sorted(pool_idx)]
    # selection: charge first, then read the private scores
    ledger.charge("links:select", rho=kt * exponential_rho(sched.eps_em), iteration=t, draws=kt)
    scores = np.array([0.5 * np.abs(real.marginal(w, ri, rj) - syn.marginal(w, si, sj)).sum() for w in pool])
    if p["noise_penalty"]:
        # AIM's penalty (data-independent): the expected TV noise of measuring w, ½·√(2/π)·σ·|cells|
        scores = scores - np.array([0.5 * math.sqrt(2 / math.pi) * sched.sigma * np.prod(w.sizes(syn.dom1, syn.dom2))
                                    for w in pool])
    picked: list[CrossWorkload] = []
    for d in range(kt):
        # Gumbel-max draws from the noise source (keyed; CSPRNG when unseeded), like every release
        q = exponential_mechanism(scores, sched.eps_em, sched.sens_tv,
                                  lambda n, d=d: noise.gumbel(("relational", "select", t, d), n))
        picked.append(pool[q])
        scores[q] = -np.inf
    ledger.charge("links:measure", rho=kt * (1 - sched.alpha) * sched.eps0 ** 2 / 2, iteration=t,
                  workloads=[w.label() for w in picked], sigma=sched.sigma)
    releases = []
    for w in picked:
        # the release is of the integer count table (L2 sensitivity √2·d_sens, noise σ·m), read as a
        # distribution after the noise: P_w + N(0, σ²) exactly, and a discrete sampler gets integers
        c = real.counts(w, ri, rj)
        releases.append(noise.add_gaussian(("relational", "measure", t, w.label()), c, sched.sigma * m) / m)
    return picked, releases


__all__ = ["candidate_workloads", "selection_count", "Schedule", "privacy_schedule", "select_and_measure"]
