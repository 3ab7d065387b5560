"""Selection of the cross workloads to measure: candidates, how many, and the exponential mechanism.

Each measuring iteration draws k_t workloads from a random pool of unmeasured candidates with the
exponential mechanism (TV score, sensitivity d_max/m; optionally AIM's noise penalty), then releases
their count tables with the Gaussian mechanism (L2 sensitivity √2·d_max). The schedule (how many
measurements, ε0, σ, the per-iteration k_t) depends on public quantities only.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, WorkloadError
from privcube.privacy.primitives import exponential_mechanism, exponential_rho, gaussian_sigma
from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload, RealCross, cross_workloads
from privcube.relational.stages.degree_histograms import bin_counts


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
    l2: float = 0.0  # L2 sensitivity of a released marginal (count table / m)
    tau: float | None = None  # max_noise: each measurement gets the ρ its cells need (None: the paper's equal split)
    informative: bool = True  # the data-independent check: can one measurement beat max_noise at all?
    first: list[CrossWorkload] = field(default_factory=list)  # measure-all: released in iteration 0, no selection
    first_rho: list[float] = field(default_factory=list)  # their ρ each (public)
    score: str = "aim"  # the EM's score, resolved from ``score`` (``auto``: ``score_for``, public sizes)
    degree_bins: tuple[int, int] = (0, 0)  # the degree release's bins per side (``degree_release``)

    @property
    def rho_select(self) -> float:
        """ρ of one exponential-mechanism draw (α of a unit)."""
        return exponential_rho(self.eps_em) if self.n_sel else 0.0

    def rho_measure(self, cells: int) -> float:
        """ρ of measuring a workload of ``cells`` cells: (1 − α) of a unit, raised (``max_noise`` τ) to what
        keeps its expected noise norm σ·√cells ≤ τ: ρ = l2²·cells/(2τ²). Public (cells, m, d_max, τ)."""
        base = (1 - self.alpha) * self.eps0 ** 2 / 2
        if self.tau is None:
            return base
        return max(base, self.l2 * self.l2 * cells / (2.0 * self.tau * self.tau))

    def sigma_of(self, rho: float) -> float:
        """Noise std on a released marginal measured with ρ."""
        return gaussian_sigma(rho, self.l2) if rho > 0 else math.inf

    def report(self, candidates: int, rho_tables: Mapping[str, float]) -> dict[str, Any]:
        """The report's ``privacy`` section."""
        return {"rho_links": self.rho_links, "epsilon0": self.eps0, "em_epsilon": self.eps_em,
                "noise_std": self.sigma, "selections": self.n_sel, "shrinkage": self.shrinkage,
                "measuring_iterations": sum(1 for k_ in self.ks if k_), "candidates": candidates,
                "alpha": self.alpha, "rho_tables": dict(rho_tables), "max_noise": self.tau,
                "informative": self.informative, "measure_all": len(self.first),
                "rho_measure_all": float(sum(self.first_rho)), "score": self.score}


#: ``score: auto`` uses ``gain`` when the public link count per changed link (m / d_sens) is at least this,
#: else ``aim``. Measured (benchmarks/relational-quality.md): gain won where m / d_sens was 305 (MovieLens-
#: shaped) and 944 (Airbnb) and lost where it was 60 and 85 (the small parent/child and self-referential
#: generators), whose measurement noise n is large enough that e²/(e + n) compresses every score.
GAIN_MIN_LINKS_PER_DEGREE = 200.0


def score_for(p: Mapping[str, Any], m: int, d_sens: int) -> str:
    """The selection score a run uses: ``score`` as given, or for ``auto`` a choice from public m and d_sens."""
    if p["score"] != "auto":
        return str(p["score"])
    return "gain" if m >= GAIN_MIN_LINKS_PER_DEGREE * d_sens else "aim"


def privacy_schedule(p: Mapping[str, Any], cand_w: Sequence[CrossWorkload], dom1: Domain, dom2: Domain,
                     rho_links: float, m: int, d_sens: int) -> Schedule:
    """Split ``rho_links`` over the measurements (ρ_links = Σ_t k_t·ε0²/2; α selection, 1 − α measurement)."""
    T, K, alpha = int(p["iterations"]), int(p["workloads_per_iteration"]), float(p["alpha"])
    tau = None if p["max_noise"] is None else float(p["max_noise"])
    # the unit: the paper's equal split over min(T·K, candidates) measurements; with max_noise a measurement
    # of a large workload costs several units, so the count follows the workloads actually chosen
    n_sel = min(T * K, len(cand_w))
    l2 = math.sqrt(2.0) * d_sens / m
    if tau is not None and n_sel:
        # plan for what a typical (median-sized) candidate needs: n·ρ_med = (1 − α)·ρ_links, so the
        # selection budget per draw is not spread over measurements that cannot be paid for
        med = float(np.median([np.prod(w.sizes(dom1, dom2)) for w in cand_w]))
        rho_med = l2 * l2 * med / (2.0 * tau * tau)
        n_sel = max(1, min(n_sel, int((1 - alpha) * rho_links / rho_med)))
    eps0 = math.sqrt(2.0 * rho_links / n_sel) if n_sel else 0.0
    sigma = gaussian_sigma((1 - alpha) * eps0 ** 2 / 2, l2) if n_sel else math.inf
    eps_em = 2.0 * math.sqrt(alpha) * eps0 if n_sel else 0.0
    sched = Schedule(T, K, alpha, rho_links, n_sel, [min(K, max(n_sel - K * t, 0)) for t in range(T)], eps0, sigma,
                     eps_em, d_sens / m, False, l2, tau, score=score_for(p, m, d_sens))
    if n_sel and tau is not None:
        # data-independent check: one measurement of the smallest candidate with the whole budget
        # (less the draw) must keep its expected noise norm within max_noise, or no release can help
        min_cells = min(int(np.prod(w.sizes(dom1, dom2))) for w in cand_w)
        sched.informative = sched.rho_select + sched.rho_measure(min_cells) <= rho_links * (1 + 1e-9)
    if p["shrinkage"] == "auto":
        sched.shrinkage = True if tau is not None else False
    else:
        sched.shrinkage = bool(p["shrinkage"])
    return sched


#: ``degree_share: auto`` (one-to-many): the degree release gets the ρ that makes the standard deviation of the
#: released share of parents with children ``DEGREE_ERROR`` (d_max/(√(2ρ)·N) for the two-value release), within
#: ``DEGREE_SHARE_RANGE`` of the links budget. A compromise measured on Airbnb users ← sessions (d_max 50, 10,000
#: users; benchmarks/relational-quality.md, issue 36): a share of 0.3 leaves the cross-table error of ε_rel 0.5 / 1
#: where 0.05 has it (their one or two measurements are shrunk heavily either way) while the share's std falls
#: from 0.19 / 0.10 to 0.08 / 0.04, but at ε_rel 2 it costs measurements (seeds 0 / 1: 24.8 → 26.0 %, 25.3 →
#: 28.2 %); the target 0.03 asks 0.16 there.
DEGREE_ERROR = 0.03
DEGREE_SHARE_RANGE = (0.05, 0.25)
#: ``degree_share`` for many-to-many under ``auto``: the fixed share its links-per-record histograms were measured with
M2M_DEGREE_SHARE = 0.05


def degree_share_auto(d_max: int, rho_links: float, n_parents: int) -> float:
    """``degree_share: auto`` for a one-to-many link: the share of ``rho_links`` whose two-value release reads
    the share of the ``n_parents`` with children with std ``DEGREE_ERROR``, clipped to ``DEGREE_SHARE_RANGE``.
    Public inputs only (d_max, the budget, the public number of parents)."""
    lo, hi = DEGREE_SHARE_RANGE
    if rho_links <= 0 or n_parents <= 0:
        return lo
    need = d_max * d_max / (2.0 * DEGREE_ERROR ** 2 * n_parents * n_parents)
    return float(min(max(need / rho_links, lo), hi))


def share_std(d_max: int, rho: float, n_parents: int, bins: int = 0) -> float:
    """Std of the released share of parents with children (one-to-many, public): the two-value release reads
    it as (N + with − without)/2N, std d_max/(√(2ρ)·N); the binned one from its zero bin, std Δ/(√(2ρ)·N)."""
    from privcube.relational.stages.degree_histograms import degree_sigma

    if rho <= 0 or n_parents <= 0:
        return math.inf
    if bins:
        return degree_sigma(d_max, rho, False, one_to_many=True) / n_parents
    return d_max / (math.sqrt(2.0 * rho) * n_parents)


def degree_release(p: Mapping[str, Any], kind: str, self_ref: bool, rho_links: float,
                   sizes: tuple[int, int] | None) -> tuple[float, tuple[int, int]]:
    """``(ρ, bins per side)`` of the degree release, from public inputs only (``degrees: preserve``).
    ``degree_share`` is a share of the links budget, or ``auto``: one-to-many by ``degree_share_auto`` (the
    expected error of the share of parents with children; without sizes, a data-free plan, its upper end),
    many-to-many ``M2M_DEGREE_SHARE``.
    Many-to-many: each side's links-per-record histogram in as many equal-width bins as that ρ can inform at
    the public table ``sizes`` (``degree_histograms.bin_counts``; 0: that side is not released); no sizes (a
    data-free plan) or no side informative: nothing is released or spent.
    One-to-many: always ρ; the parents' children-per-parent histogram in ≥ 3 bins (degree 0 alone, then equal
    widths) when the sizes allow it and (under ``auto``) its zero bin reads the share of parents with children
    within ``DEGREE_ERROR`` too (bins ``(0, B)``), else the two-bin count of parents with and without children
    (bins ``(0, 0)``, ``synthetic_degrees.release_degree_histogram``: half the std on that share)."""
    share = p["degree_share"]
    if p["degrees"] != "preserve" or (share != "auto" and float(share) <= 0):
        return 0.0, (0, 0)
    d_max = int(p["d_max"])
    if kind == "one_to_many":
        if share == "auto":
            share = degree_share_auto(d_max, rho_links, sizes[1]) if sizes is not None else DEGREE_SHARE_RANGE[1]
        rho = float(share) * rho_links
        b = bin_counts(sizes, d_max, rho, False, one_to_many=True)[1] if sizes is not None else 0
        if p["degree_share"] == "auto" and b and share_std(d_max, rho, sizes[1], b) > DEGREE_ERROR:
            b = 0  # its zero bin would read the share of parents with children worse than the target
        return rho, (0, b if b >= 3 else 0)
    rho = (M2M_DEGREE_SHARE if share == "auto" else float(share)) * rho_links
    if sizes is None:
        return 0.0, (0, 0)
    bins = bin_counts(sizes, d_max, rho, self_ref)
    return (rho, bins) if any(bins) else (0.0, (0, 0))


#: share of the links budget left unplanned so that rounding in the sum of its charges never exceeds it
ROUNDING_MARGIN = 1e-12


def links_schedule(p: Mapping[str, Any], kind: str, self_ref: bool, dom1: Domain, dom2: Domain, rho_links: float,
                   m: int, sizes: tuple[int, int] | None = None,
                   reserved: float = 0.0) -> tuple[list[CrossWorkload], Schedule, float]:
    """``(candidates, schedule, ρ of the degree release)`` of the links stage from public inputs only (the
    domains, the parameters, the links budget, the public link count ``m`` and, for the degree release,
    the public table ``sizes``): what a run measures and what ``privcube plan`` previews. A
    self-referential record is on both ends: 2·d_max pairs change. ``reserved``: ρ of the budget spent
    elsewhere (a sibling release), not planned for measurements."""
    cand_w = candidate_workloads(dom1, dom2, int(p["k"]), p["candidate_orders"])
    d_sens = 2 * int(p["d_max"]) if self_ref else int(p["d_max"])
    rho_deg, deg_bins = degree_release(p, kind, self_ref, rho_links, sizes)
    rho_links -= reserved
    # the charges add up in floating point: plan to spend a hair less than the budget (1e-12 relative), so
    # their sum is never above it, whatever the order of the additions (rounding is ~1e-16 per charge)
    rho_links = rho_deg + (rho_links - rho_deg) * (1.0 - ROUNDING_MARGIN)
    first, first_rho = measure_all_plan(p, cand_w, dom1, dom2, rho_links - rho_deg, m, d_sens)
    measured_first = set(first)
    later = [w for w in cand_w if w not in measured_first]  # what the adaptive draws can still choose from
    if first and not later:  # measure-all covers every candidate: it takes the whole budget (nothing left idle)
        first_rho = [r * (rho_links - rho_deg) / float(sum(first_rho)) for r in first_rho]
    rest = rho_links - rho_deg - float(sum(first_rho))
    spent_all = bool(first) and (rest <= 1e-12 * max(rho_links, 1e-300) or not later)
    sched = privacy_schedule(p, later if first and later else cand_w, dom1, dom2,
                             rho_links - rho_deg if spent_all else rest, m, d_sens)
    if spent_all:  # measure-all took the whole budget: no adaptive draws
        sched.ks, sched.n_sel = [0] * sched.T, 0
    if first:
        # the adaptive part is planned on what is left; the loop's budget check runs on the whole links budget
        sched.rho_links, sched.first, sched.first_rho, sched.informative = rho_links - rho_deg, first, first_rho, True
    sched.degree_bins = deg_bins
    return cand_w, sched, rho_deg


#: ``strategy: auto`` measures all lowest-order candidates first when their max_noise cost is at most this
#: share of the links budget (the rest goes to adaptive selection).
MEASURE_ALL_SHARE = 0.5
#: ... and only when they could each be measured with an expected noise norm of at most this (4× below the
#: default max_noise, 16× the ρ) within that share: measuring every 2-way table at max_noise itself is no
#: cheap sweep but as noisy as the adaptive draws, and it fits the uninformative tables' noise too. Measured on
#: the second Airbnb encoding's devices link (issue 36: 2,934 links, d_max 3, where the old test triggered at
#: ε_rel 1): seeds 0 / 1 learned 38.6 / 35.0 % with the sweep against 31.8 / 33.9 % adaptive, 211 / 265 s
#: against 9 / 5 s. Where it triggers now (10^7 links) the sweep is made at max_noise as before.
MEASURE_ALL_NOISE = 0.05


def measure_all_plan(p: Mapping[str, Any], cand_w: Sequence[CrossWorkload], dom1: Domain, dom2: Domain,
                     rho_links: float, m: int, d_sens: int) -> tuple[list[CrossWorkload], list[float]]:
    """The lowest-order candidates measured up front without selection (AIM+GReM's measure-all test, on
    public inputs only: domain sizes, m, d_max, τ and the budget) and their ρ each (what meets max_noise,
    ρ_w = l2²·cells_w/(2τ²)). ``auto``: only when they would cost ≤ ``MEASURE_ALL_SHARE`` of ρ_links even at
    noise norm ``MEASURE_ALL_NOISE``; ``measure-all``: always, scaled down to the whole budget if they cost more;
    ``adaptive``: never."""
    strategy = p["strategy"]
    if strategy == "adaptive" or not cand_w or rho_links <= 0 or int(p["iterations"]) < 1:
        return [], []
    low = min(len(w.left) + len(w.right) for w in cand_w)
    first = [w for w in cand_w if len(w.left) + len(w.right) == low]
    cells = np.array([float(np.prod(w.sizes(dom1, dom2))) for w in first])
    l2 = math.sqrt(2.0) * d_sens / m
    if p["max_noise"] is None:  # no noise target: the L1-optimal split ρ_w ∝ cells^(2/3) of half the budget
        share = cells ** (2.0 / 3.0)
        rho = MEASURE_ALL_SHARE * rho_links * share / share.sum()
        return (first, rho.tolist()) if strategy == "measure-all" else ([], [])
    rho = l2 * l2 * cells / (2.0 * float(p["max_noise"]) ** 2)
    cheap = l2 * l2 * cells / (2.0 * min(MEASURE_ALL_NOISE, float(p["max_noise"])) ** 2)
    if strategy == "auto" and cheap.sum() > MEASURE_ALL_SHARE * rho_links:
        return [], []
    if rho.sum() > rho_links:
        rho = rho * (rho_links / rho.sum())
    return first, rho.tolist()


def one_measurement(sched: Schedule, shrinkage: Any) -> Schedule:
    """The schedule when no measurement can meet max_noise: one draw and one release with the whole links
    budget (the least noisy release possible), shrunk unless ``shrinkage`` is false."""
    eps0 = math.sqrt(2.0 * sched.rho_links)
    sigma = gaussian_sigma((1 - sched.alpha) * eps0 ** 2 / 2, sched.l2)
    ks = [1 if t == 0 else 0 for t in range(sched.T)]
    return Schedule(sched.T, sched.K, sched.alpha, sched.rho_links, 1 if sched.T else 0, ks, eps0, sigma,
                    2.0 * math.sqrt(sched.alpha) * eps0, sched.sens_tv, shrinkage is not False, sched.l2, None,
                    informative=False, score=sched.score)


def select_and_measure(t: int, kt: int, sched: Schedule, p: Mapping[str, Any], remaining: list[CrossWorkload],
                       real: RealCross, syn: CrossTables, si: np.ndarray,
                       sj: np.ndarray, m: int, ledger: Any, noise: Any,
                       spent: float) -> tuple[list[CrossWorkload], list[np.ndarray], list[float], float]:
    """Iteration t: up to ``kt`` draws from a random pool of ``remaining`` (EM), each then released (Gaussian).

    A draw is made only while the links budget left (``rho_links − spent``) pays for it and for measuring
    some pool member; only such members can be drawn. Each step is charged before the private data is read.
    Returns (picked, releases, their σ, ρ spent so far); a release is a noisy marginal (count table +
    N(0, (σ·m)²), divided by m).
    """
    rng = noise.generator("relational", "iteration", t)
    pool_idx = rng.choice(len(remaining), size=min(int(p["candidates"]), len(remaining)), replace=False)
    pool = [remaining[q] for q in sorted(pool_idx)]
    cost = np.array([sched.rho_measure(int(np.prod(w.sizes(syn.dom1, syn.dom2)))) for w in pool])
    picked: list[CrossWorkload] = []
    releases: list[np.ndarray] = []
    sigmas: list[float] = []
    scores: np.ndarray | None = None
    for d in range(kt):
        left = sched.rho_links - spent
        ok = sched.rho_select + cost <= left * (1 + 1e-9)
        if scores is not None:
            ok &= np.isfinite(scores)
        if not ok.any():
            break
        ledger.charge("links:select", rho=sched.rho_select, iteration=t, draws=1)
        spent += sched.rho_select
        if scores is None:  # the private scores, read once per iteration after the first charge
            scores = _scores(pool, sched, p, real, syn, si, sj, cost)
        draw = np.where(ok, scores, -np.inf)
        # Gumbel-max draws from the noise source (keyed; CSPRNG when unseeded), like every release
        q = exponential_mechanism(draw, sched.eps_em, sched.sens_tv,
                                  lambda n, d=d: noise.gumbel(("relational", "select", t, d), n))
        w = pool[q]
        rho_m = float(cost[q])
        rest = sched.rho_links - spent - rho_m
        # no other undrawn candidate fits into what is left (when the pool is all of them; a smaller pool
        # leaves later iterations other candidates), or none is left: this one takes the rest, nothing idles
        others = np.isfinite(scores)
        others[q] = False
        cheapest = float(cost.min()) if len(pool) < len(remaining) else float(cost[others].min(initial=math.inf))
        if rest < (sched.rho_select + cheapest) * (1 - 1e-9):
            rho_m = max(sched.rho_links - spent, rho_m) if rest > 0 else rho_m
        sigma = sched.sigma_of(rho_m)
        ledger.charge("links:measure", rho=rho_m, iteration=t, workloads=[w.label()], sigma=sigma)
        spent += rho_m
        # the release is of the integer count table (L2 sensitivity √2·d_sens, noise σ·m), read as a
        # distribution after the noise: P_w + N(0, σ²) exactly, and a discrete sampler gets integers
        releases.append(noise.add_gaussian(("relational", "measure", t, w.label()), real.counts(w), sigma * m) / m)
        picked.append(w)
        sigmas.append(sigma)
        scores[q] = -np.inf
    return picked, releases, sigmas, spent


def _scores(pool: list[CrossWorkload], sched: Schedule, p: Mapping[str, Any], real: RealCross, syn: CrossTables,
            si: np.ndarray, sj: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """EM scores from each pool member's TV error e_w of the current links (sensitivity d_max/m) and the
    expected TV of its measurement noise n_w = ½·√(2/π)·σ_w·|cells| (public). ``noise_penalty: false``: e_w
    (the paper). ``score: aim``: e_w − n_w (AIM's penalty). ``score: gain``: e_w²/(e_w + n_w)·ρ_min/ρ_w,
    what a shrunk release is expected to remove from the error (a Wiener-shrunk estimate keeps e²/(e + n) of
    an error e against noise n) per unit of ρ (ρ_w: the measurement's cost, ρ_min: the cheapest in the pool).
    Its derivative in e_w lies in [0, ρ_min/ρ_w] ⊆ [0, 1], so the sensitivity stays d_max/m. ``score: auto``
    (default): one of the two, chosen in the schedule from public sizes (``score_for``)."""
    err = np.array([0.5 * np.abs(real.marginal(w) - syn.marginal(w, si, sj)).sum() for w in pool])
    if not p["noise_penalty"]:
        return err
    pen = np.array([0.5 * math.sqrt(2 / math.pi) * sched.sigma_of(float(c)) * np.prod(w.sizes(syn.dom1, syn.dom2))
                    for w, c in zip(pool, cost)])
    if sched.score == "aim":
        return err - pen
    gain = np.divide(err * err, err + pen, out=np.zeros_like(err), where=err + pen > 0)
    return gain * (float(cost.min()) / cost)


def measure_first(sched: Schedule, real: RealCross, m: int, ledger: Any,
                  noise: Any) -> tuple[list[CrossWorkload], list[np.ndarray], list[float], float]:
    """Iteration 0 of measure-all: release every planned workload (charged before reading, no selection)."""
    releases, sigmas, spent = [], [], 0.0
    for w, rho in zip(sched.first, sched.first_rho):
        sigma = sched.sigma_of(rho)
        ledger.charge("links:measure", rho=rho, iteration=0, workloads=[w.label()], sigma=sigma, measure_all=True)
        spent += rho
        releases.append(noise.add_gaussian(("relational", "measure-all", w.label()), real.counts(w), sigma * m) / m)
        sigmas.append(sigma)
    return list(sched.first), releases, sigmas, spent


__all__ = ["candidate_workloads", "selection_count", "Schedule", "privacy_schedule", "one_measurement",
           "select_and_measure", "measure_all_plan", "measure_first", "MEASURE_ALL_SHARE", "MEASURE_ALL_NOISE",
           "GAIN_MIN_LINKS_PER_DEGREE", "score_for", "degree_release", "links_schedule", "DEGREE_ERROR",
           "DEGREE_SHARE_RANGE", "M2M_DEGREE_SHARE", "degree_share_auto", "share_std"]
