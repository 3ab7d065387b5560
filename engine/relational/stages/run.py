"""Relational synthesis (Alimohammadi et al., Alg. 4): two synthetic tables plus a synthetic link table.

Stage 1: each table is synthesized on its own budget (ResidualPlanner on all 2-way marginals, then the
single-table synthesizer), unless DP synthetic tables are supplied. Stage 2 learns the links: each of T
iterations draws K cross-table k-way workloads with the exponential mechanism (TV score, sensitivity
d_max/m), releases their marginals with the Gaussian mechanism (L2 sensitivity √2·d_max/m), then
solves the relaxed least-squares problem by PGD and rounds with UBS (many-to-many: exactly m_syn links) or
per-child draws (one-to-many: one parent per child): over record types, the whole problem each iteration
(``optimiser: auto``, ``type_iteration``), or on random disjoint slices beyond ``type_cells`` type pairs.
One table linked to itself (self-referential link table: directed, no self-loops by default, doubled
sensitivity) and checkpoint/resume are described at ``run_relational``.

Privacy (zCDP, Thm 1): ρ_total = Σ_tables ρ_table + ρ_links; ρ_links = Σ_t k_t·ε0²/2 with
ε0 = √(2ρ_links / Σ_t k_t), split α (selection) / 1 − α (measurement). Bounded DP (the paper's Def. 1:
a neighbour changes one row's values and all its links): n1, n2 and m are public, and each table's
ResidualPlanner is accounted for substitution neighbours (``neighbours: substitution``, 2–4× the
add/remove cost), not for adding or removing a row. ``report['dp_cross_error']`` compares the synthetic links with the noisy releases (DP,
post-processing). ``report['nonprivate_evaluation']`` compares with the real data and is NOT
differentially private: it is computed only with ``evaluate_nonprivate: true`` (off by default; the old
name ``evaluate`` is accepted); without it, data-dependent degree statistics are withheld as well.
Defaults that differ from the paper (each a documented, data-independent choice; the paper's
schedule is ``candidate_orders: k, max_noise: null, noise_penalty: false, shrinkage: false``):
- ``candidate_orders: closure``: candidates are the cross workloads of every order 2..k (AIM's
  downward closure), not only order k; the error is still evaluated on order k. Low-order marginals
  have fewer cells, hence far less total noise for the same ρ.
- ``noise_penalty: true``, ``score: auto``: the exponential mechanism's score is ``aim`` (AIM's: TV error e
  minus the expected TV of the measurement noise n = ½·√(2/π)·σ_w·cells, public) or ``gain``
  (e²/(e + n)·ρ_min/ρ_w, what a shrunk release is expected to remove from the error per unit of the ρ it
  costs); both keep the sensitivity d_max/m. ``auto`` takes ``gain`` when the public m / d_sens is at least
  ``selection.GAIN_MIN_LINKS_PER_DEGREE`` (200), else ``aim``. Measured (NON-private, learned ÷ floor):
  MovieLens-like (m / d_sens 305) seeds 0–2 / held-out 3–7 at ε_rel 0.5 / 1 / 2, gain 2.45 / 2.11 / 1.98 and
  2.21 / 2.04 / 1.98, below random links on all 24 (seed, ε_rel), aim 2.46 / 2.26 / 1.97 and 2.21 / 2.15 /
  1.94 with one tie; Airbnb (944) ε_rel 2 gain 0.83 / 0.96 / 0.99, aim 0.85 / 1.11 / 1.02. On the small
  parent/child (600 links, d_max 10: 60) and self-referential (~680 links, d_sens 8: 85) generators, seeds
  0–2 at ε_rel 0.5 / 1 / 2, gain is not below random links in 11 of 18 cases against aim's 6: where n is
  large its scores are compressed towards 0, so the draw is nearly uniform and large noisy tables are no
  longer avoided. The report's ``privacy.score`` says which one ran.
- ``max_noise: 0.2`` (τ; 0.1 before issue 17's quality pass): each chosen workload is measured with the ρ
  its cell count needs for an expected noise norm σ·√cells ≤ τ (at least an equal-split share; the split
  is planned for the median
  candidate), so the number of measurements follows the workloads actually chosen (``selection``);
  draws stop when the links budget left cannot pay for one more (the last release takes the rest).
  A data-independent check (public m, d_max, ρ and domain sizes) asks first whether one measurement of
  the smallest candidate can meet τ; if not, ``uninformative: warn`` (default) makes one measurement
  with the whole budget, shrunk, and warns; ``random`` releases the random links and spends nothing.
  Stopping on the budget left is adaptive composition with a fixed total (a zCDP privacy filter, as in
  AIM). Iterations beyond the measured ones only re-optimise slices against the releases.
  Why 0.2 (NON-private benchmarks, ε_rel 2, learned ÷ floor; load 7–13 on 2 shared cores): Airbnb
  0.826 / 0.868 (seeds 0 / 1; 7 measurements) against 1.050 / 1.195 with τ 0.1 (1 measurement: the
  whole budget on one large workload). Planning at least 3 draws at τ 0.1 (so the count, not the
  size cap, changes) gave 1.202 (seed 1): it is the larger workloads that τ 0.2 lets in that help.
  MovieLens-like (many-to-many, m 3053, d_max 10) pays for it: ε_rel 2 learned 40.5 / 45.8 / 47.3 vs
  39.0 / 40.0 / 47.6 with τ 0.1 (seeds 0–2), still below random links at ε_rel 1 and 2 for every seed.
- ``shrinkage: auto``: with ``max_noise`` every release is shrunk (Wiener, ``shrink``, margin
  ``shrinkage_margin: 1``) before fitting; without it, none (the paper). ``true`` / ``false`` shrink
  all / none. Shrinkage is post-processing.
- ``shrink_by: pooled`` (``link_learning.pooled_targets``): the releases are made consistent before fitting:
  each release's difference from its prior is read as estimates of the ANOVA components of its attribute
  subsets (summed over the other axes), the estimates of one subset from all overlapping releases are
  averaged with weights 1/(σ²·cells summed) and Wiener-shrunk once on the pooled variance, and every
  target is rebuilt from the same components (then put on the simplex). Measured (MovieLens-like, τ 0.2,
  learned % L1, seeds 0–2): ε_rel 2 39.4 / 44.4 / 45.3 vs 40.5 / 45.8 / 47.3 per release (``auto``);
  ε_rel 1 46.6 / 45.5 / 52.1 vs 46.2 / 47.2 / 53.9. Post-processing.
- ``shrink_by: auto`` (the per-release alternative; ``shrinkage.shrink``, ``by_components``): a release
  whose expected noise norm σ·√cells is ≤ 0.1 has its difference from the prior split into orthogonal
  ANOVA components (one per attribute subset), each shrunk on its own noise power (dim·σ²): a strong
  low-order signal (age × genre) is kept while the noise of the many high-order cells is dropped;
  noisier releases are shrunk as a whole (the earlier rule; ``components`` / ``whole`` force one).
  Measured on the MovieLens-like candidates (3 seeds × 5 noise draws, % L1 of the target against the
  true marginal, components vs whole): 2-way 10.3 vs 11.7 (σ 0.01), 16.0 vs 17.9 (σ 0.02), 24.5 vs 25.4
  (σ 0.05); 3-way 22.4 vs 23.8 (σ 0.01), 31.4 vs 32.0 (σ 0.02), but 37.3 vs 36.4 (σ 0.03) and 46.2 vs 41.4 (σ 0.05, worse than the prior's 42.8: small components let
  noise through), hence the noise-norm switch. Post-processing.
- ``strategy: auto`` (``selection.measure_all_plan``; AIM+GReM's measure-all test on public sizes only):
  when every lowest-order (2-way) cross candidate can be measured within ``max_noise`` for at most half of
  the links budget, they are all released in iteration 0 without selection, and the rest of the budget
  goes to adaptive selection; ``measure-all`` always does so (scaled to the budget), ``adaptive`` never.
  It does not trigger at ε_rel ≤ 2 on the benchmarks (at τ 0.2 the 2-way marginals would need ρ 0.097 of
  0.080 on the MovieLens-like data, 0.050 of 0.064 on Airbnb): there, measuring them all at an equal
  split is noisier than the adaptive schedule (diagnostic (d) of benchmarks/relational_diagnose.py:
  42.0 % vs 37.8 %, MovieLens-like, seed 0, ε_rel 2).
- ``degrees: preserve`` (``synthetic_degrees``): many-to-many rows keep their (balanced, data-independent) degrees
  (``left_degrees: kept``; ``learned``: on record types each left type's link total is learned up to
  n_a·d_max — closer with exact releases, a wash under the noise of the benchmarks' budgets, see the README)
  and right records are capped at d_max; when the public table sizes make it informative, each side's
  links-per-record histogram is released (``degree_share`` of the links budget) and the links are re-dealt
  between records with identical codes to follow it (``degree_histograms``: no cross-table count changes).
  One-to-many: the children per parent are released (binned when the parents are many enough, else the
  count of childless parents), re-dealt the same way, then matched by rank (children moving to parents with
  the same codes first). ``free`` is the earlier behaviour.
- ``shrink_towards: initial``: the shrinkage prior is the marginal of the data-independent random start
  (fixed), not the current synthetic marginal (``current``, the earlier default): re-shrinking towards
  the current state every iteration let the targets creep towards the noisy releases until the noise
  was fitted after all (measured on the MovieLens-like data: worse than random links at ε_rel 0.5/1).
- ``refit: true``: iterations after the last measurement re-optimise other slices against the
  releases; ``false`` stops at the last measuring iteration.
- ``slices_per_iteration: 8`` (the paper's MovieLens setting; at most as many disjoint slices as fit;
  ``all`` covers every parent / every left record each iteration; ``report.iterations[].relinked_share``):
  with one slice per iteration a large one-to-many job re-links only ~2 % of the children per iteration
  (Airbnb: 1082 of 47217), and the learned links stay far from the error floor.
Measured effect before the per-release budgets and degrees (average % L1 over all cross 3-way marginals,
table ε 1 each, seed 0, NON-private evaluation; benchmarks/relational_airbnb.py; figures since: the
branch report / README). Airbnb users → sessions with the shipped schemas
(benchmarks/configs/airbnb; 9 user and 3 session attributes, 10000 users, 47217 sessions, d_max 50),
random links 67.55, real links transplanted onto the same synthetic tables (the tables' error floor)
28.90: ε_rel 0.1/0.5/1/2/10 → 59.69/59.60/56.50/34.79/29.48 with the defaults (42–74 s each on 2 shared
cores); with one slice per iteration (the former default) 60.05 / 54.68 at ε_rel 1 / 10 (12 s each);
with 43 slices (every parent, every iteration) 56.17 at ε_rel 1, at 6× the time of 8 slices.
MovieLens-like data (600 × 400, m = 3053, d_max 10, many-to-many; one slice holds everything) is too
small to beat random links at ε_rel ≤ 1: d_max/m = 1/305 makes even ONE measurement with the whole
links budget noisier (σ 0.040 at ε_rel 0.5, 0.021 at 1) than the random-links error on 78 % (0.5) /
44 % (1) of the 2-way cross marginals; the shrinkage keeps the links near random there.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.core.context import RunContext
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.relational.stages.composition import restore_ledger
from privcube.relational.stages.cross_workloads import (
    CrossTables,
    FixedLinkCounts,
    RealCross,
    average_error,
    cross_workloads,
)
from privcube.relational.stages.degree_histograms import (
    childless_distribution,
    degree_distribution,
    degree_sigma,
    group_targets,
    release_degrees,
    shape_degrees,
)
from privcube.relational.stages.link_learning import (
    LinkRun,
    LinkState,
    dp_fit_report,
    initial_links,
    learn_links,
    restore_link_state,
)
from privcube.relational.stages.parameters import check_params
from privcube.relational.stages.problem import Problem, prepare
from privcube.relational.stages.selection import links_schedule, one_measurement
from privcube.relational.stages.siblings import Sibling, align_siblings, both_target, release_both, sibling_rho
from privcube.relational.stages.synthetic_degrees import cap_degrees, release_degree_histogram, two_value_sigma
from privcube.relational.stages.table_synthesis import restore_tables, synthesize_tables
from privcube.storage.frame_tasks import task


@dataclass
class RelationalResult:
    """Synthetic tables (codes + key column; child also carries the FK), the link table and a report."""

    tables: dict[str, pd.DataFrame]
    links: pd.DataFrame
    report: dict[str, Any]


def _base_report(pr: Problem, n_cross: int) -> dict[str, Any]:
    """The report's public header; data-dependent degree statistics only with ``evaluate_nonprivate``."""
    lk, d_max = pr.lk, int(pr.p["d_max"])
    report: dict[str, Any] = {
        "mechanism": "relational", "kind": lk.kind, "tables": list(pr.unique), "m": pr.m, "m_syn": pr.m_syn,
        "rows_real": list(pr.n_real), "rows_synthetic": list(pr.n_syn_pair), "degree": pr.deg_report,
        "links_input": lk.report, "cross_workloads": n_cross, "k": int(pr.p["k"]),
    }
    if pr.self_ref:
        report["self_referential"] = {"directed": True, "self_loops": bool(pr.p["self_loops"]),
                                      "sensitivity_degree": 2 * d_max}
    # max degrees, dropped-link and repeated-pair counts are read off the private links: never in the report's
    # public part; with evaluate_nonprivate they go to the NON-private section (``input``), else are withheld
    dr = pr.deg_report
    nonpriv_degree = {k: v for k, v in dr.items() if k not in ("d_max", "truncated", "links_kept")}
    report["degree"] = {"d_max": dr["d_max"], "truncated": dr["truncated"], "links_kept": pr.m}
    report["links_input"] = {}
    if _evaluating(pr.p):
        report["_nonprivate_input"] = {"degree": nonpriv_degree, "links_input": dict(lk.report)}
    else:
        report["nonprivate_withheld"] = sorted([*nonpriv_degree, *lk.report])
    return report


def _evaluating(p: Mapping[str, Any]) -> bool:
    return bool(p["evaluate_nonprivate"]) or bool(p["evaluate"])


def _outputs(pr: Problem, syn_codes: list[np.ndarray], si: np.ndarray, sj: np.ndarray) -> tuple[dict, pd.DataFrame]:
    """The synthetic tables (key column first; a one-to-many child also gets its FK) and the link table (links
    sorted by the caller; the frame holds these arrays without copying them)."""
    lk, names, doms = pr.lk, pr.names, pr.doms
    n1s, n2s = pr.n_syn_pair
    key1, key2 = lk.left_key or "id", lk.right_key or "id"
    t1 = pd.DataFrame(syn_codes[0], columns=list(doms[0].attributes))
    t1.insert(0, key1, np.arange(n1s, dtype=np.int64))
    t2 = pd.DataFrame(syn_codes[1], columns=list(doms[1].attributes))
    t2.insert(0, key2, np.arange(n2s, dtype=np.int64))
    if pr.no_diag and np.any(si == sj):
        raise DataError("internal: a self-loop was drawn although self_loops is false")
    if lk.kind == "one_to_many":
        fk = np.empty(n1s, dtype=np.int64)
        fk[si] = sj
        t1[lk.fk or f"{names[1]}_{key2}"] = fk
    if pr.self_ref:
        c1, c2 = lk.columns or ("source", "target")
        return {names[0]: t1}, pd.DataFrame({c1: si, c2: sj}, copy=False)
    return {names[0]: t1, names[1]: t2}, pd.DataFrame({f"{names[0]}.{key1}": si, f"{names[1]}.{key2}": sj}, copy=False)


def _stage1(pr: Problem, state: Mapping[str, Any] | None, tables: Mapping[str, tuple[Any, Domain]], ledger: Any,
            noise: NoiseSource, context: RunContext | None, save: Callable[..., None], done: dict[str, np.ndarray],
            progress: Any) -> list[np.ndarray]:
    """Synthetic codes of (left, right): checkpointed, synthesized here (each table measured through the run's
    marginal engine where its codes are), or supplied."""
    done.update(restore_tables(state, pr.need, tables, pr.n_syn))
    real = {n: ((lambda n=n: pr.real.table_oracle(n)), pr.n_real[pr.names.index(n)], pr.doms[pr.names.index(n)])
            for n in pr.need}
    synthesize_tables(pr.need, done, real, pr.n_syn, pr.tbud, ledger, noise, pr.p, context, save, progress)
    by_name = {**done, **pr.given}
    return [by_name[pr.names[0]], by_name[pr.names[1]]]


def run_relational(tables: Mapping[str, tuple[Any, Domain]], links: Any, params: Mapping[str, Any] | None,
                   budgets: Mapping[str, Any], ledger: PrivacyLedger | None = None, noise: NoiseSource | None = None,
                   *, synthetic_tables: Mapping[str, Any] | None = None,
                   progress: Any = None, checkpoint: Any = None, resume: bool = False,
                   context: RunContext | None = None, sibling: Sibling | None = None) -> RelationalResult:
    """Synthesize two linked tables (or one table linked to itself) and the links (see the module docstring).

    ``tables``: name -> (codes ndarray, or pandas / dask DataFrame with the domain columns [+ key / FK
    columns], Domain). ``links``: ``{from: child.fk, to: parent.key}``, ``{pairs, left: t.key, right: t.key}``
    (pairs: a pandas / dask DataFrame or an (m, 2) array) or ``Links``; ``left`` and ``right`` may name the
    same table (self-referential links, see below). Every input is handled as a dask collection: the real
    codes and links are checked, joined and counted as tasks (on the cluster with a cluster context), and
    this process receives only public sizes, degree histograms and count tables.
    ``budgets``: ``{tables: {name: {epsilon, delta}|PrivacyBudget}, links: ...}``; ``ledger`` defaults
    to one over their composition. ``synthetic_tables``: name -> already-DP synthetic codes (that table
    then spends nothing here). ``context``: the run's execution (its ``compute``/``persist`` run the real
    side's tasks, ``data_oracle`` counts, ``map`` runs the record chunks and the slice tasks, on the cluster
    when there is one); without it everything runs in this process (same results).

    Self-referential links (one table T, a link table of (source, target) pairs of T's keys): the links
    are DIRECTED: the cross workload (S1, S2) reads S1 on the source and S2 on the target, so (S1, S2)
    and (S2, S1) are different workloads and both are candidates. T is synthesized once (one table
    budget). d_max bounds both the out-degree and the in-degree of every record. A record sits on both
    sides, so changing it changes up to 2·d_max linked pairs: the sensitivities are doubled (TV
    2·d_max/m, L2 2√2·d_max/m). Self-loops (i → i) are excluded unless ``self_loops: true``: the
    synthetic diagonal is fixed at 0 (PGD box upper bound 0, never sampled by UBS, never in the initial
    links), and a real self-loop is then a DataError naming the table (nothing is released).

    ``checkpoint`` (optional, an object with ``save(round, {"meta", "arrays"})`` and ``load()``): the state
    is committed after each synthetic table (rounds 0, 1) and after each link iteration t (round
    n_tables + t) with the ledger's charges; with ``resume`` the run continues from the last committed
    round: finished tables are reused, the ledger is replayed (nothing is charged twice) and the loop
    restarts at the next iteration. With a seeded noise source the result equals the uninterrupted run.
    All input checks run before the first charge and the first save.

    ``sibling`` (a schema graph's later foreign key into a parent that an earlier one links to already,
    ``siblings.Sibling``): which synthetic parents have the earlier link's children. Declared ``within``, the
    caller passes only those parents as this link's synthetic parent table (its degree release is still read
    over all of them); otherwise this link's parents are made to overlap them as released (``siblings``), by
    moving whole child sets after the degree repair.
    """
    import time

    p = check_params(params or {})
    noise = noise if noise is not None else NoiseSource()
    t0 = time.perf_counter()
    pr = prepare(tables, links, p, budgets, dict(synthetic_tables or {}), context)
    pr.sibling = sibling
    t1 = time.perf_counter()
    if ledger is None:
        ledger = PrivacyLedger(pr.total, noise=noise)

    # ---- resume: the last committed state (identity is checked by the checkpoint itself)
    state: dict[str, Any] | None = None
    if resume and checkpoint is not None:
        loaded = checkpoint.load()
        if loaded is not None:
            state = loaded[1]
            restore_ledger(ledger, state["meta"].get("ledger"))
    done: dict[str, np.ndarray] = {}

    def save(round_: int, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if checkpoint is not None:
            kept = {n: c for n, c in done.items() if n in pr.need}  # supplied tables are not state
            meta = {**meta, "ledger": ledger.to_dict(), "tables_done": sorted(kept)}
            checkpoint.save(round_, {"meta": meta, "arrays": {**arrays, **{f"syn.{n}": c for n, c in kept.items()}}})

    # ---- stage 1: synthetic tables (a self-referential table once)
    syn_codes = _stage1(pr, state, tables, ledger, noise, context, save, done, progress)
    t2 = time.perf_counter()
    result = _stage2(pr, syn_codes, state, ledger, noise, context, save, progress)
    result.report["ledger_rho_spent"] = ledger.spent_rho
    result.report["stage_timings"] = {"checks_s": t1 - t0, "tables_s": t2 - t1, "links_s": time.perf_counter() - t2}
    return result


@dataclass
class _LinkStage:
    """What stage 2 carries from one step to the next: the real and synthetic cross tables, the workloads, the
    links being learned, the schedule (public), the sibling (if any) and the report."""

    real: RealCross
    syn: CrossTables
    all_w: list
    evaluate: bool
    ls: LinkState
    report: dict[str, Any]
    sib: Sibling | None = None
    rho_sib: float = 0.0
    sib_reading: tuple[float, float] | None = None
    cand_w: list = field(default_factory=list)
    sched: Any = None
    rho_deg: float = 0.0
    deg_bins: Any = None  # the degree release's bins, as first scheduled (one_measurement keeps none)


def _stage2(pr: Problem, syn_codes: list[np.ndarray], state: Mapping[str, Any] | None, ledger: Any,
            noise: NoiseSource, context: RunContext | None, save: Callable[..., None], progress: Any) -> RelationalResult:
    """Learn the links on the synthetic tables, then assemble the outputs and the report."""
    st = _start_links(pr, syn_codes, noise)
    _schedule_links(pr, st)
    _release_shapes(pr, st, state, ledger, noise, context)
    _when_uninformative(pr, st)
    run = LinkRun(pr.p, pr.kind, st.real, st.syn, pr.m, pr.m_syn, pr.no_diag, st.sched, st.cand_w, ledger, noise,
                  context.map if context is not None else None, save, len(pr.need), progress)
    st.ls = learn_links(run, st.ls)
    return _finish_links(pr, syn_codes, st, noise)


def _start_links(pr: Problem, syn_codes: list[np.ndarray], noise: NoiseSource) -> _LinkStage:
    """The real side's cross tables, the synthetic tables', every k-way cross workload, the data-independent
    random start (its marginals are the shrinkage prior) and the report's public header."""
    p, doms = pr.p, pr.doms
    real = pr.real.cross()
    syn = CrossTables(syn_codes[0], doms[0], syn_codes[1], doms[1])
    all_w = cross_workloads(doms[0], doms[1], int(p["k"]))
    n1s, n2s = pr.n_syn_pair
    si, sj = initial_links(pr.kind, noise, n1s, n2s, pr.m_syn, pr.no_diag, p["degrees"])
    ls = LinkState(si, sj, FixedLinkCounts(syn, si, sj))  # the data-independent start's marginals (the shrinkage prior)
    del si, sj  # only ls holds the links: each iteration's old links are freed when it replaces them
    return _LinkStage(real, syn, all_w, _evaluating(p), ls, _base_report(pr, len(all_w)))


def _schedule_links(pr: Problem, st: _LinkStage) -> None:
    """The sibling's share, the candidates and the schedule (public sizes only); the counts the run will read
    registered for one pass over the joined links."""
    p, doms = pr.p, pr.doms
    st.sib = pr.sibling if pr.kind == "one_to_many" else None
    sib = st.sib
    st.rho_sib = (sibling_rho(p["sibling_share"], sib.d_anchor, int(p["d_max"]), pr.b_links.rho, int(pr.n_real[1]))
                  if sib is not None and not sib.within else 0.0)
    st.cand_w, st.sched, st.rho_deg = links_schedule(p, pr.kind, pr.self_ref, doms[0], doms[1], pr.b_links.rho, pr.m,
                                                     tuple(pr.n_real), reserved=st.rho_sib)
    st.deg_bins = st.sched.degree_bins
    st.real.want([*st.cand_w, *(st.all_w if st.evaluate else [])])  # one pass over the joined links counts them all
    if st.evaluate:
        st.ls.init_err = average_error(st.real, st.syn, st.ls.si, st.ls.sj, st.all_w)
    st.report["privacy"] = st.sched.report(len(st.cand_w), {n: pr.tbud[n].rho for n in pr.need})
    st.report["privacy"]["rho_degrees"] = st.rho_deg


def _release_shapes(pr: Problem, st: _LinkStage, state: Mapping[str, Any] | None, ledger: Any, noise: NoiseSource,
                    context: RunContext | None) -> None:
    """The degree release (or, on resume, the link state committed with it) and the sibling's count of parents
    with children in both, each charged before its private count is read."""
    p, deg_bins = pr.p, st.deg_bins
    if state is not None and state["meta"].get("stage") == "links":
        st.ls = restore_link_state(state, {w.label(): w for w in st.cand_w}, pr.m_syn, st.ls.init_err)
    elif st.rho_deg > 0 and any(deg_bins):  # binned histograms (2, d_max + 1): many-to-many, or large one-to-many
        st.ls.degree_hist = release_degrees((pr.real.degree_histogram(0), pr.real.degree_histogram(1)), deg_bins,
                                            int(p["d_max"]), st.rho_deg, pr.self_ref, ledger, noise,
                                            one_to_many=pr.kind == "one_to_many")
    elif st.rho_deg > 0:  # one-to-many, smaller tables: parents with and without children (two values)
        st.ls.degree_hist = release_degree_histogram(pr.real.degree_histogram(1), int(p["d_max"]), st.rho_deg, ledger,
                                                     noise)
    if st.rho_sib > 0:  # an earlier sibling's children: the parents with children in both, released (charged first)
        sib = st.sib
        st.sib_reading = release_both(lambda: _count_both(pr, sib, context), sib.d_anchor, int(p["d_max"]),
                                      st.rho_sib, ledger, noise)
    st.report["privacy"]["rho_siblings"] = st.rho_sib


def _when_uninformative(pr: Problem, st: _LinkStage) -> None:
    """Public sizes and the budget say no measurement can meet max_noise (expected gain ≤ 0): release the random
    links (``uninformative: random``) or make one measurement with the whole budget, and warn."""
    if st.sched.informative:
        return
    msg = ("links budget too small for these table sizes and d_max: even one measurement of the smallest "
           "cross workload would be noisier than max_noise")
    if pr.p["uninformative"] == "random":
        st.sched.T = 0
        st.report["warnings"] = [msg + "; the data-independent random links are released (nothing is measured; "
                                       "only the degree release, if any, is charged to the links budget)"]
    else:
        st.sched = one_measurement(st.sched, pr.p["shrinkage"])
        st.report["privacy"].update(st.sched.report(len(st.cand_w), st.report["privacy"]["rho_tables"]))
        st.report["warnings"] = [msg + "; one selection and one measurement take the links budget anyway (less the "
                                 "degree release, if any; set mechanism parameter 'uninformative: random' to "
                                 "release random links without measuring)"]


def _finish_links(pr: Problem, syn_codes: list[np.ndarray], st: _LinkStage, noise: NoiseSource) -> RelationalResult:
    """Post-processing of the learned links (degree repair, sibling alignment), the report and the outputs."""
    p, ls, report = pr.p, st.ls, st.report
    n1s, n2s = pr.n_syn_pair
    before_repair = average_error(st.real, st.syn, ls.si, ls.sj, st.all_w) if st.evaluate else None
    si, sj, shaped = _degree_repair(pr, syn_codes, ls, noise, st.rho_deg)  # may change ls's arrays in place
    if st.sib is not None and p["degrees"] == "preserve":
        sj, report["siblings"] = _align(pr, syn_codes, sj, st.sib, st.sib_reading, st.rho_sib, noise)
    ls.si = ls.sj = np.empty(0, dtype=np.int64)  # the learned links are not needed after the repair
    report["iterations"] = ls.history
    report["dp_cross_error"] = dp_fit_report(st.syn, si, sj, ls.selected, ls.released, ls.sigmas)
    report["privacy"]["selections"] = len(ls.selected)
    report["privacy"]["rho_links_spent"] = ls.rho_spent
    if p["degrees"] == "preserve":
        d_ok = max(np.bincount(sj, minlength=n2s).max(initial=0), np.bincount(si, minlength=n1s).max(initial=0)
                   if pr.kind == "many_to_many" else 0) <= int(p["d_max"])
        report["degrees"] = {"d_max_respected": bool(d_ok),
                             "source": _degree_source(pr, ls), "rho": st.rho_deg,
                             **_degree_error(pr, st.rho_deg, st.deg_bins),
                             "note": "the release is charged to the links budget (links:degrees); the repair is "
                                     "post-processing of DP outputs", **({"shaped": shaped} if shaped else {})}
    private_input = report.pop("_nonprivate_input", None)
    if st.evaluate:
        report["nonprivate_evaluation"] = _nonprivate_evaluation(pr, st.real, st.syn, syn_codes, ls, si, sj, st.all_w,
                                                                 before_repair)
        if private_input is not None:
            report["nonprivate_evaluation"]["input"] = private_input
    order = np.lexsort((sj, si))  # the output's row order; each unsorted array is freed once sorted
    si = si[order]
    sj = sj[order]
    del order
    out_tables, links_df = _outputs(pr, syn_codes, si, sj)
    return RelationalResult(out_tables, links_df, report)


def _nonprivate_evaluation(pr: Problem, real: RealCross, syn: CrossTables, syn_codes: list[np.ndarray], ls: LinkState,
                           si: np.ndarray, sj: np.ndarray, all_w: list, before_repair: float | None) -> dict[str, Any]:
    """Errors and degree figures against the real data (NOT differentially private; opt-in only), counted where
    the real data is: the learned links' error, the initial random links', the floor (the real links moved
    onto the synthetic tables), per-workload errors and children-per-parent (right-side degree) histograms."""
    n1s, n2s = pr.n_syn_pair
    floor_side = pr.real.transplanted(syn_codes[0], syn_codes[1])
    floor_side.want(all_w)
    per_w = {w.label(): 100.0 * float(np.abs(real.marginal(w) - syn.marginal(w, si, sj)).sum()) for w in all_w}
    floor_w = {w.label(): 100.0 * float(np.abs(real.marginal(w) - floor_side.marginal(w)).sum()) for w in all_w}
    hist_real = pr.real.degree_histogram(1)
    hist_syn = np.bincount(np.bincount(sj, minlength=n2s))
    if _all_parents(pr) > n2s:  # within a sibling: the parents left out are childless
        hist_syn[0] += _all_parents(pr) - n2s
    left_real, left_syn = pr.real.degree_histogram(0), np.bincount(np.bincount(si, minlength=n1s))
    return {
        "note": "computed from the real data; NOT differentially private",
        "average_cross_error_pct": average_error(real, syn, si, sj, all_w),
        "before_degree_repair_pct": before_repair,
        "initial_random_links_error_pct": ls.init_err,
        "floor_pct": float(np.mean(list(floor_w.values()))) if floor_w else float("nan"),
        "floor_note": "the real links moved onto the synthetic tables (each real record to a synthetic record "
                      "with the same codes when there is one, else a random one): the error the tables alone cause",
        "per_workload_pct": {w: {"learned": per_w[w], "floor": floor_w[w]} for w in per_w},
        "right_records_with_links": {"real": int(pr.n_real[1] - hist_real[0]) if hist_real.size else 0,
                                     "synthetic": int(n2s - hist_syn[0]) if hist_syn.size else 0},
        "right_max_degree": {"real": int(hist_real.size - 1), "synthetic": int(hist_syn.size - 1)},
        "degree_distribution": {"side": f"{pr.names[1]} (links per record; one-to-many: children per parent)",
                                "real": hist_real.tolist(), "synthetic": hist_syn.tolist()},
        "left_degree_distribution": {"real": left_real.tolist(), "synthetic": left_syn.tolist()},
        "degree_tv": {"left": _tv(left_real, left_syn),
                      "right": _tv(hist_real, hist_syn),
                      "note": "total variation distance between the real and synthetic links-per-record "
                              "distributions (0: same, 1: disjoint)"},
    }


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    """Total variation distance between two histograms read as distributions."""
    k = max(a.size, b.size)
    pa = np.pad(np.asarray(a, float), (0, k - a.size))
    pb = np.pad(np.asarray(b, float), (0, k - b.size))
    return 0.5 * float(np.abs(pa / max(pa.sum(), 1) - pb / max(pb.sum(), 1)).sum())


def _degree_source(pr: Problem, ls: LinkState) -> str:
    """What the synthetic degrees follow (for the report)."""
    if ls.degree_hist is None:
        if pr.kind == "one_to_many" or (pr.p["degree_share"] != "auto" and float(pr.p["degree_share"]) <= 0):
            return "d_max cap only"
        return "d_max cap only (degree_share of the links budget cannot inform a degree histogram at these table sizes)"
    how = ("; children re-dealt between parents with identical codes, then matched by rank to a degree sequence "
           "drawn from it (moves to parents with the same codes first; shaped.right.moved_to_other_codes counts the rest)")
    if ls.degree_hist.ndim == 1:
        return "noisy histogram (parents with and without children)" + how
    if pr.kind == "one_to_many":
        return f"noisy histogram of children per parent ({int(np.isfinite(ls.degree_hist[1]).sum())} bins)" + how
    label = ((f"{pr.names[0]} out-links", f"{pr.names[1]} in-links") if pr.self_ref else pr.names)
    sides = [f"{label[s]} ({int(np.isfinite(ls.degree_hist[s]).sum())} bins)" for s in (0, 1)
             if np.isfinite(ls.degree_hist[s]).any()]
    return "noisy histograms of links per record: " + ", ".join(sides) + "; links moved only within same-code groups"


def _count_both(pr: Problem, sib: Sibling, context: RunContext | None) -> int:
    """How many real parents have children in both this link and its sibling (a task where the links are)."""
    from privcube.relational.stages import real_kernels as F

    ctx = context if context is not None else RunContext()
    (count,) = ctx.compute(task(F.count_both, sib.anchor_flags, pr.real.parent_flags()))
    return int(count)


def _align(pr: Problem, syn_codes: list[np.ndarray], sj: np.ndarray, sib: Sibling,
           reading: tuple[float, float] | None, rho: float, noise: NoiseSource) -> tuple[np.ndarray, dict[str, Any]]:
    """Post-processing: the parents with this link's children made to overlap the sibling's as declared
    (``within``: all of them) or as released (``siblings.both_target``), by moving whole child sets
    (``siblings.align_siblings``); returns the new parent per child and the report's ``siblings``."""
    n2s = pr.n_syn_pair[1]
    has = np.bincount(sj, minlength=n2s) > 0
    k_link, k_anchor = int(has.sum()), int(np.count_nonzero(sib.anchor_has))
    out: dict[str, Any] = {"anchor": sib.anchor, "mode": "within" if sib.within else "released", "rho": rho}
    if sib.within and n2s < np.asarray(sib.anchor_has).size:  # learned on the anchor's parents alone: no move
        out.update({"parents": n2s, "note": f"declared within {sib.anchor}: learned on the {n2s} synthetic parents "
                                            f"with children there (no budget)"})
        return sj, out
    if sib.within:  # the anchor's parents cannot hold these children under d_max: learned on all, then moved in
        target = min(k_link, k_anchor)
    elif reading is not None:
        target = both_target(reading[0], reading[1], int(pr.n_real[1]), n2s, k_link, k_anchor)
        out.update({"reading": reading[0], "sigma": reading[1]})
    else:  # sibling_share 0: learned independently
        out["mode"] = "independent"
        return sj, out
    sj, rep = align_siblings(sj, n2s, np.asarray(sib.anchor_has, dtype=bool), target, syn_codes[1],
                             noise.generator("relational", "siblings"),
                             within_cap=int(pr.p["d_max"]) if sib.within else None)
    out.update(rep)
    out["note"] = ("whole child sets moved between parents (degrees kept), each to the parent with the nearest "
                   "codes: post-processing of DP outputs" + ("" if sib.within else "; the count of parents with "
                   "children in both is charged to this link's budget (links:siblings)"))
    return sj, out


def _degree_error(pr: Problem, rho_deg: float, bins: tuple[int, int]) -> dict[str, Any]:
    """The degree release's share of the links budget and (one-to-many) the expected error of the share of
    parents with children it reads: std and mean absolute error (√(2/π)·std) of the Gaussian reading, before
    the public range and the posterior mean narrow it. Public (sizes, d_max, ρ)."""
    from privcube.relational.stages.selection import share_std

    out: dict[str, Any] = {"degree_share": rho_deg / pr.b_links.rho if pr.b_links.rho > 0 else 0.0,
                           "degree_share_rule": "auto" if pr.p["degree_share"] == "auto" else "fixed"}
    if pr.kind == "one_to_many" and rho_deg > 0:
        std = share_std(int(pr.p["d_max"]), rho_deg, int(pr.n_real[1]), bins[1])
        out["share_with_children_error"] = {"std": std, "mean_abs": math.sqrt(2.0 / math.pi) * std,
                                            "note": "of the released share of parents with children (noise only)"}
    return out


def _full_keys(codes: np.ndarray, dom: Any, n: int) -> np.ndarray:
    """One key per record: its codes on every attribute (records with equal keys are interchangeable)."""
    return np.ravel_multi_index(tuple(codes.T), dom.shape) if len(dom) else np.zeros(n, np.int64)


def _degree_repair(pr: Problem, syn_codes: list[np.ndarray], ls: LinkState, noise: NoiseSource,
                   rho_deg: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``degrees: preserve``: right records capped at d_max (surplus links to records with the same codes
    first), then, with a degree release, each released side's degrees made to follow it (``degree_histograms``):
    first by re-dealing links between records with identical codes (no cross-table count changes); one-to-many
    then also matches the children per parent to a degree sequence drawn from the released distribution, by
    rank, moving children to parents with the same codes first (parents whose codes are rare cannot be reshaped
    inside their group; before, this step alone, from a uniform shape, moved many children across codes).
    Post-processing of DP outputs."""
    p = pr.p
    if p["degrees"] != "preserve":
        return ls.si, ls.sj, {}
    n1s, n2s = pr.n_syn_pair
    d_max = int(p["d_max"])
    rng = noise.generator("relational", "degree-repair")
    keys2 = _full_keys(syn_codes[1], pr.doms[1], n2s)
    si, sj = cap_degrees(ls.si, ls.sj, n2s, d_max, keys2, rng, no_diagonal=pr.no_diag)
    if ls.degree_hist is None:
        return si, sj, {}
    ls.si = ls.sj = np.empty(0, dtype=np.int64)  # only si, sj hold the links now (shaped in place below)
    keys = (_full_keys(syn_codes[0], pr.doms[0], n1s), keys2)
    one = pr.kind == "one_to_many"
    sigma = degree_sigma(d_max, rho_deg, pr.self_ref, one_to_many=one)
    # ``within`` a sibling: the synthetic parents here are the sibling's parents only (``run_graph`` restricts
    # them); the release counts all real parents, so its distribution is read over all n_all synthetic parents
    # and then restricted (the parents outside are the childless ones)
    n_all = _all_parents(pr)
    if one and ls.degree_hist.ndim == 1:  # the two-value release: parents without / with children
        probs: tuple[np.ndarray | None, ...] = (None, childless_distribution(
            ls.degree_hist, n_all, n1s, d_max, int(pr.n_real[1]), two_value_sigma(d_max, rho_deg),
            max_parents=n2s if n_all != n2s else None))
    else:
        sides = (n1s, n_all if one else n2s)
        probs = tuple(degree_distribution(ls.degree_hist[s], pr.n_real[s], sigma, pr.m_syn / sides[s], d_max,
                                          np.bincount(np.bincount(sj if s else si, minlength=sides[s])),
                                          zero_bin=one)
                      if np.isfinite(ls.degree_hist[s]).any() else None for s in (0, 1))
    if n_all != n2s and probs[1] is not None:
        probs = (probs[0], restrict_distribution(probs[1], n_all, n2s))
    si, sj, rep = shape_degrees(si, sj, (n1s, n2s), keys, probs, rng, no_diagonal=pr.no_diag, in_place=True)
    if one:
        target = group_targets(np.bincount(sj, minlength=n2s), np.zeros(n2s, np.int64), probs[1], rng)
        sj_in = sj
        si, sj = cap_degrees(si, sj, n2s, target, keys2, rng, no_diagonal=pr.no_diag,  # copies sj if it moves any
                             codes2=np.asarray(syn_codes[1]))
        rep["right"]["moved_to_other_codes"] = int(np.count_nonzero(keys2[sj_in] != keys2[sj]))
    return si, sj, rep


def _all_parents(pr: Problem) -> int:
    """The synthetic parents of a one-to-many link: all of them, also when only a sibling's parents take part
    (``within``: the parent table passed in is restricted to those)."""
    sib = pr.sibling
    if pr.kind == "one_to_many" and sib is not None and sib.within:
        return int(np.asarray(sib.anchor_has).size)
    return pr.n_syn_pair[1]


def restrict_distribution(p: np.ndarray, n_all: int, n_sub: int) -> np.ndarray:
    """A children-per-parent distribution over ``n_all`` parents read over the ``n_sub`` of them that may have
    children (the others are childless): the childless count less the parents left out, renormalised."""
    counts = np.asarray(p, dtype=float) * n_all
    counts[0] = max(counts[0] - (n_all - n_sub), 0.0)
    return counts / max(counts.sum(), 1e-300)


__all__ = ["RelationalResult", "restrict_distribution", "run_relational"]
