"""Many-to-many degree distributions: the release's sensitivity, the shaping's invariants, and a run that
releases them (charged once, resumable, d_max kept, closer to the real distribution than balanced degrees)."""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from privcube.relational.stages.degree_histograms import (
    bin_counts,
    bin_edges,
    degree_distribution,
    degree_sensitivity,
    degree_sigma,
    group_shapes,
    group_targets,
    move_to_degrees,
    shape_degrees,
    tilt,
)
from privcube.relational.stages.run import run_relational
from privcube.relational.stages.selection import degree_release
from privcube.privacy.noise import NoiseSource


def _hists(i: list[int], j: list[int], n1: int, n2: int, edges: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Both sides' binned degree histograms, concatenated."""
    out = []
    for ends, n, e in ((i, n1, edges[0]), (j, n2, edges[1])):
        deg = np.bincount(np.asarray(ends, dtype=np.int64), minlength=n)
        out.append(np.histogram(deg, bins=e)[0])
    return np.concatenate(out).astype(float)


@pytest.mark.parametrize("bins", ["unit", "coarse"])
def test_sensitivity_bounds_every_neighbour(bins: str) -> None:
    """Exhaustive: in random bipartite graphs with degrees ≤ d_max, replace one record's links by every other
    set of ≤ d_max links that keeps all degrees ≤ d_max; the joint histograms never move by more than the
    stated L2 sensitivity, and the worst neighbour found reaches √6·d_max (so the bound is not loose)."""
    rng = np.random.default_rng(0)
    d = 2
    n1, n2 = 5, 5
    e = bin_edges(d + 1 if bins == "unit" else 2, d)
    worst, checked = 0.0, 0
    for _ in range(150):
        pairs = [(a, b) for a in range(n1) for b in range(n2) if rng.random() < 0.25]
        i = [a for a, _ in pairs]
        j = [b for _, b in pairs]
        if max(np.bincount(i, minlength=n1).max(), np.bincount(j, minlength=n2).max()) > d:
            continue
        h0 = _hists(i, j, n1, n2, (e, e))
        for side, r in itertools.chain(((0, a) for a in range(n1)), ((1, b) for b in range(n2))):
            keep = [(a, b) for a, b in pairs if (a if side == 0 else b) != r]
            others = range(n2) if side == 0 else range(n1)
            for k in range(d + 1):
                for new in itertools.combinations(others, k):
                    cand = keep + [((r, o) if side == 0 else (o, r)) for o in new]
                    ci = [a for a, _ in cand]
                    cj = [b for _, b in cand]
                    if max(np.bincount(ci, minlength=n1).max(initial=0), np.bincount(cj, minlength=n2).max(initial=0)) > d:
                        continue
                    worst = max(worst, float(np.linalg.norm(_hists(ci, cj, n1, n2, (e, e)) - h0)))
                    checked += 1
    assert checked > 3000
    assert worst <= degree_sensitivity(d, False) + 1e-12
    if bins == "unit":
        assert worst >= math.sqrt(6) * d - 1e-12


def test_sensitivity_bounds_self_referential_neighbours() -> None:
    """One table, directed links without self-loops: out- and in-degree histograms move by at most
    √(12·d_max² + 4) when one record changes with its out- and in-links."""
    rng = np.random.default_rng(1)
    d, n = 2, 5
    e = bin_edges(d + 1, d)
    worst, checked = 0.0, 0
    arcs = [(a, b) for a in range(n) for b in range(n) if a != b]
    for _ in range(25):
        pairs = [p for p in arcs if rng.random() < 0.3]
        i, j = [a for a, _ in pairs], [b for _, b in pairs]
        if max(np.bincount(i, minlength=n).max(initial=0), np.bincount(j, minlength=n).max(initial=0)) > d:
            continue
        h0 = _hists(i, j, n, n, (e, e))
        for r in range(n):
            keep = [(a, b) for a, b in pairs if r not in (a, b)]
            others = [o for o in range(n) if o != r]
            for ko in range(d + 1):
                for outs in itertools.combinations(others, ko):
                    for ki in range(d + 1):
                        for ins in itertools.combinations(others, ki):
                            cand = keep + [(r, o) for o in outs] + [(o, r) for o in ins]
                            ci, cj = [a for a, _ in cand], [b for _, b in cand]
                            if max(np.bincount(ci, minlength=n).max(initial=0),
                                   np.bincount(cj, minlength=n).max(initial=0)) > d:
                                continue
                            worst = max(worst, float(np.linalg.norm(_hists(ci, cj, n, n, (e, e)) - h0)))
                            checked += 1
    assert checked > 2000
    assert worst <= degree_sensitivity(d, True) + 1e-12
    assert degree_sensitivity(d, True) == pytest.approx(math.sqrt(12 * d * d + 4))


def test_bin_counts_follow_public_sizes_only() -> None:
    """More records or more budget: more bins, never more than d_max + 1; too few records: not released."""
    rho = 0.004
    sig = degree_sigma(10, rho, False)
    assert sig == pytest.approx(math.sqrt(6 * 100 + 2) / math.sqrt(2 * rho))
    assert bin_counts((600, 400), 10, rho, False) == (0, 0)
    b_small, b_big = bin_counts((6_000, 10**6), 10, rho, False)
    assert 2 <= b_small < b_big == 11
    assert bin_counts((6_000, 10**6), 10, 4 * rho, False)[0] > b_small
    e = bin_edges(4, 10)
    assert e[0] == 0 and e[-1] == 11 and np.all(np.diff(e) >= 2)


def test_tilt_and_group_shapes() -> None:
    """Tilted rows have the asked means; the group shapes keep each group's mean and mix back to p."""
    p = np.array([0.1, 0.2, 0.3, 0.2, 0.1, 0.05, 0.05])
    q = tilt(np.broadcast_to(p, (3, 7)), np.array([1.0, 2.5, 5.0]))
    assert np.allclose((q * np.arange(7)).sum(1), [1.0, 2.5, 5.0], atol=1e-6)
    assert np.allclose(q.sum(1), 1) and (q >= 0).all()
    assert np.allclose(tilt(p[None], np.array([0.0]))[0], np.eye(7)[0], atol=1e-9)
    means = np.array([1.5, 2.0, 2.4, 3.0, 3.6])
    w = np.array([10, 30, 40, 15, 5])
    pm = p.copy()
    pm = tilt(pm[None], np.array([(w * means).sum() / w.sum()]))[0]  # p with the groups' overall mean
    s = group_shapes(pm, means, w)
    assert np.allclose((s * np.arange(7)).sum(1), means, atol=1e-5)
    assert np.abs(w @ s / w.sum() - pm).sum() < 2e-3
    # tilting p itself to every mean would mix to something wider than p
    naive = tilt(np.broadcast_to(pm, (5, 7)), means)
    var = lambda r: float((r * np.arange(7) ** 2).sum() - (r * np.arange(7)).sum() ** 2)  # noqa: E731
    assert var(w @ naive / w.sum()) > var(pm) + 0.05


def test_group_targets_keep_the_drawn_share_of_records_without_links() -> None:
    """The unit adjustments that restore a group's total go to records with links first: with 75 % of the mass
    at degree 0 (one-to-many: childless parents) the number of targets above zero stays within sampling error
    of n·(1 − p0) on every seed (adding units at random records turned up to 373 zeros into ones here)."""
    K, n = 50, 10_000
    tail = np.exp(-np.arange(1, K + 1) / 6.0)
    p = np.concatenate([[0.75], 0.25 * tail / tail.sum()])
    mean = float((np.arange(K + 1) * p).sum())
    worst = 0.0
    for seed in range(20):
        cur = np.random.default_rng(seed).poisson(mean, n)
        t = group_targets(cur, np.zeros(n, np.int64), p, np.random.default_rng(seed))
        assert t.sum() == cur.sum() and t.min() >= 0 and t.max() <= K
        worst = max(worst, abs(np.count_nonzero(t) - 0.25 * n))
    assert worst <= 4.0 * math.sqrt(n * 0.75 * 0.25)  # 173 records: four binomial standard deviations


def test_shaping_changes_no_cross_count_and_reaches_the_targets() -> None:
    """Links move only between records with the same codes, so every cross-table count on the full codes is
    unchanged, the other side's degrees too; no pair repeats; degrees follow the target distribution."""
    from privcube.relational.stages.synthetic_degrees import balanced_degrees, links_with_degrees

    rng = np.random.default_rng(3)
    n1, n2, m = 12_000, 3_000, 48_000
    si, sj = links_with_degrees(balanced_degrees(n1, m, rng), balanced_degrees(n2, m, rng), rng)
    c1, c2 = rng.integers(0, 40, n1), rng.integers(0, 6, n2)
    real = np.bincount(np.minimum(rng.poisson(4, n1), 10), minlength=11) / n1
    a, b, rep = shape_degrees(si, sj, (n1, n2), (c1, c2), (real, None), np.random.default_rng(4))
    assert np.array_equal(np.bincount(c1[si] * 6 + c2[sj], minlength=240), np.bincount(c1[a] * 6 + c2[b], minlength=240))
    assert np.array_equal(b, sj)  # the right ends stay: right degrees unchanged
    assert np.unique(a * n2 + b).size == m  # no repeated pair
    got = np.bincount(np.bincount(a, minlength=n1), minlength=11) / n1
    before = np.bincount(np.bincount(si, minlength=n1), minlength=11) / n1
    assert 0.5 * np.abs(got - real).sum() < 0.03 < 0.5 * np.abs(before - real).sum()
    assert rep["left"]["links_moved"] > 0 and rep["left"]["unplaced_units"] < 20
    assert np.bincount(a).max() <= 10


def test_moves_never_create_self_loops_or_repeats() -> None:
    """Self-referential links: a move that would link a record to itself or repeat a pair is refused."""
    rng = np.random.default_rng(5)
    n, m = 300, 900
    si = np.repeat(np.arange(n), 3)
    sj = (si + 1 + rng.integers(0, n - 1, m)) % n
    key = np.unique(si * n + sj, return_index=True)[1]
    si, sj = si[key], sj[key]
    target = group_targets(np.bincount(si, minlength=n), np.zeros(n, np.int64),
                           np.array([0.2, 0.1, 0.1, 0.2, 0.2, 0.2]), rng)
    (a, b), moved, left = move_to_degrees(si, sj, 0, target, np.zeros(n, np.int64), n, rng, no_diagonal=True)
    assert not (a == b).any() and np.unique(a * n + b).size == a.size
    assert moved == int((a != si).sum()) > 0
    assert np.bincount(a, minlength=n).sum() == si.size
    assert np.abs(np.bincount(a, minlength=n) - target).sum() <= 2 * left + 1e-9


def _m2m(n1: int, n2: int, m: int, seed: int) -> tuple[dict, dict]:
    """Users × items with Poisson(4) user degrees (≤ 8) and item attributes tied to the user's."""
    rng = np.random.default_rng(seed)
    age = rng.integers(0, 3, n1)
    deg = np.minimum(rng.poisson(4, n1), 8)
    u = np.repeat(np.arange(n1), deg)
    kind = rng.integers(0, 2, n2)
    pick = np.where(rng.random(u.size) < np.where(age[u] == 2, 0.8, 0.3), 1, 0)
    pool = [np.flatnonzero(kind == 0), np.flatnonzero(kind == 1)]
    it = np.array([pool[k][rng.integers(0, pool[k].size)] for k in pick])
    flat = np.unique(u * n2 + it)[:m]
    users = pd.DataFrame({"id": np.arange(n1), "age": age, "sex": rng.integers(0, 2, n1)})
    items = pd.DataFrame({"id": np.arange(n2), "kind": kind, "size": rng.integers(0, 3, n2)})
    tables = {"users": (users, Domain(("age", "sex"), (3, 2))), "items": (items, Domain(("kind", "size"), (2, 3)))}
    links = {"pairs": pd.DataFrame({"u": flat // n2, "i": flat % n2}), "left": "users.id", "right": "items.id",
             "columns": ["u", "i"]}
    return tables, links


BUDGETS = {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "items": {"epsilon": 1.0, "delta": 1e-6}},
           "links": {"epsilon": 4.0, "delta": 1e-6}}
PARAMS: dict[str, Any] = {"d_max": 8, "truncate": True, "iterations": 2, "pgd_iters": 30, "evaluate_nonprivate": True}


class _MemoryCheckpoint:
    """An in-memory checkpoint that can fail once right after committing a given round."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.state: tuple[int, dict] | None = None
        self.fail_after = fail_after

    def save(self, round_: int, state: dict) -> None:
        self.state = (round_, {"meta": dict(state["meta"]), "arrays": {k: np.array(v) for k, v in state["arrays"].items()}})
        if self.fail_after is not None and round_ == self.fail_after:
            self.fail_after = None
            raise RuntimeError("stopped")

    def load(self) -> tuple[int, dict] | None:
        return self.state


@pytest.fixture(scope="module")
def released() -> tuple[dict, dict, Any, Any, Any]:
    from privcube.relational.stages.composition import compose_budgets
    from privcube.privacy.ledger import PrivacyLedger

    tables, links = _m2m(6_000, 1_500, 24_000, 0)
    ledger = PrivacyLedger(compose_budgets(BUDGETS, ["users", "items"]), noise=NoiseSource(11))
    with_deg = run_relational(tables, links, PARAMS, BUDGETS, noise=NoiseSource(11), ledger=ledger)
    without = run_relational(tables, links, {**PARAMS, "degree_share": 0.0}, BUDGETS, noise=NoiseSource(11))
    return tables, links, with_deg, without, ledger


def test_a_run_releases_degrees_once_within_budget(released: tuple) -> None:
    """The release is one charge of degree_share·ρ_links (label links:degrees) with the stated σ, the total
    stays within the budget, d_max holds on both sides, and the report names the bins."""
    from privcube.privacy.budget import PrivacyBudget

    _, _, res, _, ledger = released
    rho_links = PrivacyBudget.from_config(BUDGETS["links"]).rho
    rho, bins = degree_release({"degrees": "preserve", "degree_share": 0.05, "d_max": 8}, "many_to_many", False,
                               rho_links, (6_000, 1_500))
    assert rho == pytest.approx(0.05 * rho_links) and all(b >= 2 for b in bins)
    charges = [c for c in ledger.to_dict()["charges"] if c["label"] == "links:degrees"]
    assert len(charges) == 1 and charges[0]["rho"] == pytest.approx(rho)
    assert charges[0]["sigma"] == pytest.approx(degree_sigma(8, rho, False))
    assert ledger.spent_rho <= ledger.budget.rho * (1 + 1e-12)
    rep = res.report
    assert rep["degrees"]["rho"] == pytest.approx(rho)
    assert f"users ({bins[0]} bins)" in rep["degrees"]["source"] and f"items ({bins[1]} bins)" in rep["degrees"]["source"]
    assert rep["degrees"]["d_max_respected"] is True
    u, i = res.links.columns[:2]
    assert np.bincount(res.links[u].to_numpy()).max() <= 8 and np.bincount(res.links[i].to_numpy()).max() <= 8


def test_released_degrees_are_closer_to_the_real_ones_than_balanced(released: tuple) -> None:
    """NON-private evaluation: the users' links-per-record distribution is far closer to the real one with
    the release than with balanced degrees, and the cross-table error moves by the budget share only."""
    _, _, res, without, _ = released
    ev, ev0 = res.report["nonprivate_evaluation"], without.report["nonprivate_evaluation"]
    assert without.report["degrees"]["source"] == "d_max cap only"
    assert ev["degree_tv"]["left"] < 0.5 * ev0["degree_tv"]["left"]
    assert ev["degree_tv"]["left"] < 0.15
    # the shaping moves links only between records with equal codes: the cross-table error is the one
    # before the degree repair up to the right-side d_max cap (which may move links across codes)
    assert ev["average_cross_error_pct"] <= ev["before_degree_repair_pct"] + 0.5
    assert ev["average_cross_error_pct"] < ev["initial_random_links_error_pct"]


def test_small_tables_spend_nothing_on_degrees() -> None:
    """Public sizes too small for an informative histogram: no charge, balanced degrees, and the report says why."""
    tables, links = _m2m(300, 100, 1_000, 2)
    res = run_relational(tables, links, PARAMS, BUDGETS, noise=NoiseSource(1))
    assert res.report["privacy"]["rho_degrees"] == 0.0
    assert "cannot inform" in res.report["degrees"]["source"]


def test_stopped_run_resumes_to_the_same_links_without_recharging(released: tuple) -> None:
    """Stopped after the first link iteration, the run resumes from its checkpoint to the uninterrupted result;
    the degree release is replayed from the checkpoint, not drawn or charged again."""
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.relational.stages.composition import compose_budgets

    tables, links, _, _, _ = released
    ref_ledger = PrivacyLedger(compose_budgets(BUDGETS, ["users", "items"]), noise=NoiseSource(7))
    ref = run_relational(tables, links, PARAMS, BUDGETS, noise=NoiseSource(7), ledger=ref_ledger)
    ck = _MemoryCheckpoint(fail_after=2)  # rounds 0, 1: the tables; 2: link iteration 0
    with pytest.raises(RuntimeError, match="stopped"):
        run_relational(tables, links, PARAMS, BUDGETS, noise=NoiseSource(7), checkpoint=ck)
    ledger = PrivacyLedger(compose_budgets(BUDGETS, ["users", "items"]), noise=NoiseSource(7))
    got = run_relational(tables, links, PARAMS, BUDGETS, noise=NoiseSource(7), checkpoint=ck, resume=True, ledger=ledger)
    pd.testing.assert_frame_equal(ref.links, got.links)
    labels = [c["label"] for c in ledger.to_dict()["charges"]]
    assert labels.count("links:degrees") == 1
    assert ledger.spent_rho == pytest.approx(ref_ledger.spent_rho, rel=1e-12)


def test_self_referential_release_keeps_no_loops_no_repeats_and_d_max() -> None:
    """One table linked to itself, large enough for a release: the doubled sensitivity is charged, and the
    re-dealt links still have no self-loop, no repeated pair, and no record above d_max on either end."""
    from privcube.relational.example_data import self_referential_like

    sr = self_referential_like(5_000, seed=1)
    budgets = {"tables": {"people": {"epsilon": 1.0, "delta": 1e-6}}, "links": {"epsilon": 8.0, "delta": 1e-6}}
    params = {"d_max": 4, "iterations": 2, "pgd_iters": 30, "evaluate_nonprivate": True}
    res = run_relational(sr["tables"], sr["links"], params, budgets, noise=NoiseSource(2))
    rep = res.report
    assert rep["privacy"]["rho_degrees"] > 0 and "people out-links (" in rep["degrees"]["source"]
    assert "people in-links (" in rep["degrees"]["source"]
    c, p = res.links["child_id"].to_numpy(), res.links["parent_id"].to_numpy()
    assert not (c == p).any() and not res.links.duplicated().any()
    assert max(np.unique(c, return_counts=True)[1].max(), np.unique(p, return_counts=True)[1].max()) <= 4
    assert rep["degrees"]["d_max_respected"] is True
    ev = rep["nonprivate_evaluation"]["degree_tv"]
    assert ev["left"] < 0.2 and ev["right"] < 0.2


@pytest.mark.parametrize("bins", ["unit", "zero-first"])
def test_one_to_many_sensitivity_bounds_reassigned_children(bins: str) -> None:
    """One-to-many neighbours: a child changes its parent, or a parent changes its set of ≤ d_max children
    (its old children go to other parents, its new ones leave theirs). The children-per-parent histogram
    moves by at most √(6·d_max² + 6·d_max + 2), checked over every such neighbour of random assignments, in
    unit bins and in the released coarse form (childless parents alone, then wider bins)."""
    rng = np.random.default_rng(6)
    d, n_p, n_c = 2, 4, 6
    bound = degree_sensitivity(d, False, one_to_many=True)
    assert bound == pytest.approx(math.sqrt(6 * d * d + 6 * d + 2))
    e = bin_edges(d + 1, d) if bins == "unit" else bin_edges(2, d, zero_bin=True)
    assert bins == "unit" or e.tolist() == [0, 1, 3]

    def hist(par: np.ndarray) -> np.ndarray:
        return np.histogram(np.bincount(par, minlength=n_p), bins=e)[0].astype(float)

    worst, checked = 0.0, 0
    for _ in range(60):
        par = rng.integers(0, n_p, n_c)
        if np.bincount(par, minlength=n_p).max() > d:
            continue
        h0 = hist(par)
        for q in range(n_p):
            old = set(np.flatnonzero(par == q).tolist())
            for k in range(d + 1):
                for new in itertools.combinations(range(n_c), k):
                    gone = sorted(old - set(new))
                    for dest in itertools.product([r for r in range(n_p) if r != q], repeat=len(gone)):
                        cand = par.copy()
                        cand[list(new)] = q
                        cand[gone] = dest
                        if np.bincount(cand, minlength=n_p).max() > d:
                            continue
                        worst = max(worst, float(np.linalg.norm(hist(cand) - h0)))
                        checked += 1
    assert checked > 5000 and worst <= bound + 1e-12


O2M_BUDGETS = {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "sessions": {"epsilon": 1.0, "delta": 1e-6}},
               "links": {"epsilon": 1.0, "delta": 1e-6}}


@pytest.mark.parametrize("n_u", [3_000, 40_000])
def test_one_to_many_children_per_parent_follow_the_release(n_u: int) -> None:
    """Small tables: the two-value release (parents with / without children); large ones: a binned histogram
    with the one-to-many sensitivity. Either way one charge, d_max kept, the children-per-parent distribution
    close to the real one, and the cross-table error what the learned links had before the repair (the
    reshaping moves children between parents with identical codes first)."""
    from privcube.relational.stages.composition import compose_budgets
    from privcube.privacy.budget import PrivacyBudget
    from privcube.privacy.ledger import PrivacyLedger

    from privcube.relational.example_data import users_sessions_like

    ds = users_sessions_like(n_u, d_max=8, seed=0)
    tables, links, deg = ds["tables"], ds["links"], ds["degrees"]
    ledger = PrivacyLedger(compose_budgets(O2M_BUDGETS, ["users", "sessions"]), noise=NoiseSource(3))
    res = run_relational(tables, links, {"d_max": 8, "iterations": 3, "evaluate_nonprivate": True,
                                         "degree_share": 0.05}, O2M_BUDGETS, noise=NoiseSource(3), ledger=ledger)
    rep, ev = res.report, res.report["nonprivate_evaluation"]
    rho = 0.05 * PrivacyBudget.from_config(O2M_BUDGETS["links"]).rho
    (charge,) = [c for c in ledger.to_dict()["charges"] if c["label"] == "links:degrees"]
    assert charge["rho"] == pytest.approx(rho)
    if n_u == 3_000:
        assert rep["degrees"]["source"].startswith("noisy histogram (parents with and without children)")
        assert charge["sigma"] == pytest.approx(math.sqrt(2) * 8 / math.sqrt(2 * rho))
    else:
        b = bin_counts((0, n_u), 8, rho, False, one_to_many=True)[1]
        assert b >= 3 and f"children per parent ({b} bins)" in rep["degrees"]["source"]
        assert charge["sigma"] == pytest.approx(degree_sigma(8, rho, False, one_to_many=True))
    counts = res.links.iloc[:, 1].value_counts()
    assert counts.max() <= 8 and rep["degrees"]["d_max_respected"] is True
    assert ev["degree_tv"]["right"] < (0.15 if n_u == 3_000 else 0.08)
    with_children = (deg > 0).sum()  # within 4 noise std of the release (the count of childless parents)
    assert abs(ev["right_records_with_links"]["synthetic"] - with_children) < 4 * charge["sigma"] + 0.02 * n_u
    assert ev["average_cross_error_pct"] <= ev["before_degree_repair_pct"] + 0.5


@pytest.mark.parametrize("n_u", [600, 3_000, 40_000])
def test_auto_degree_share_reads_the_share_of_parents_with_children_to_its_target(n_u: int) -> None:
    """``degree_share: auto``: the release gets d²/(2·0.03²·N²) of ρ, within 0.05..0.25 of the links budget (0.25
    for 600 users, the rule itself for 3,000, 0.05 for 40,000), the binned form only when its zero bin reads
    the share as precisely; the report states the share and the reading's std, and the synthetic share of
    parents with children lands within 4 std of the real one."""
    from privcube.relational.stages.composition import compose_budgets
    from privcube.privacy.budget import PrivacyBudget
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.relational.example_data import users_sessions_like

    ds = users_sessions_like(n_u, d_max=8, seed=1)
    ledger = PrivacyLedger(compose_budgets(O2M_BUDGETS, ["users", "sessions"]), noise=NoiseSource(4))
    res = run_relational(ds["tables"], ds["links"], {"d_max": 8, "iterations": 2, "evaluate_nonprivate": True},
                         O2M_BUDGETS, noise=NoiseSource(4), ledger=ledger)
    rho_l = PrivacyBudget.from_config(O2M_BUDGETS["links"]).rho
    share = min(max(64 / (2 * 0.03 ** 2 * n_u ** 2) / rho_l, 0.05), 0.25)
    assert share == {600: 0.25, 40_000: 0.05}.get(n_u, share) and (n_u != 3_000 or 0.05 < share < 0.25)
    (charge,) = [c for c in ledger.to_dict()["charges"] if c["label"] == "links:degrees"]
    assert charge["rho"] == pytest.approx(share * rho_l, rel=1e-12)
    deg = res.report["degrees"]
    assert deg["degree_share"] == pytest.approx(share, rel=1e-12) and deg["degree_share_rule"] == "auto"
    binned = "bins)" in deg["source"]
    assert binned == (n_u == 40_000)
    std = (math.sqrt(6 * 64 + 48 + 2) if binned else 8) / (math.sqrt(2 * share * rho_l) * n_u)
    assert deg["share_with_children_error"]["std"] == pytest.approx(std, rel=1e-12)
    assert std <= 0.03 or share == 0.25
    ev = res.report["nonprivate_evaluation"]
    real = float((ds["degrees"] > 0).mean())
    assert abs(ev["right_records_with_links"]["synthetic"] / n_u - real) < 4 * std + 0.01


def test_childless_parents_keep_their_own_bin() -> None:
    """One-to-many parents are often mostly childless (Airbnb: 76 % of users have no session). In coarse
    equal-width bins the zeros share bin [0, w) with small degrees and the spreading inside the bin gives many
    of them children; the one-to-many release puts degree 0 in a bin of its own, so an exact release keeps it."""
    d, n = 50, 10_000
    tail = 0.9 ** np.arange(1, d + 1)
    p = np.concatenate([[0.76], 0.24 * tail / tail.sum()])
    mean = float((p * np.arange(d + 1)).sum())
    hist = p * n
    for zero_bin, lo, hi in ((True, 0.745, 0.775), (False, 0.0, 0.5)):
        e = bin_edges(12, d, zero_bin=zero_bin)
        assert e[0] == 0 and e[-1] == d + 1 and (e[1] == 1) == zero_bin and e.size == 13
        q = degree_distribution(np.add.reduceat(hist, e[:-1]), n, 1e-9, mean, d, zero_bin=zero_bin)
        assert lo <= q[0] <= hi, (zero_bin, q[0])
        assert abs(float((q * np.arange(d + 1)).sum()) - mean) < 1e-3  # the public mean, either way


def test_cap_moves_go_to_the_nearest_codes_when_no_twin_has_room() -> None:
    """With the records' codes, a link moved off a record above its cap goes to a record of its own code first,
    else to the one with the fewest differing codes (not to a random record with room)."""
    from privcube.relational.stages.synthetic_degrees import cap_degrees

    codes = np.array([[0, 0, 0], [0, 0, 1], [2, 2, 2], [2, 2, 1], [1, 2, 2]])  # record 0's nearest: 1 (one differs)
    keys = codes @ np.array([9, 3, 1])
    si, sj = np.arange(4), np.array([0, 0, 0, 2])  # record 0 holds 3 links, cap 1 each
    for seed in range(10):
        _, new = cap_degrees(si, sj, 5, 1, keys, np.random.default_rng(seed), codes2=codes)
        assert np.bincount(new, minlength=5).max() == 1
        assert 1 in new[:3].tolist()  # the nearest record took one of the moved links
        moved = sorted(new[:3].tolist())
        assert moved == [0, 1, 3] or moved == [0, 1, 4]  # then the next nearest (two codes differ from record 0)
    _, rand = zip(*(cap_degrees(si, sj, 5, 1, keys, np.random.default_rng(s)) for s in range(20)))
    assert any(1 not in r[:3].tolist() for r in rand)  # without the codes the receivers are random
