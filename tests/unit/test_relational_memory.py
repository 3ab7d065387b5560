"""The links stage's memory-lean pieces give the same values as the plain computations they replace."""
from __future__ import annotations

import numpy as np

from privcube.core.domain import Domain
from privcube.relational.stages.synthetic_degrees import bad_pairs
from privcube.relational.stages.link_learning import LinkState, restore_link_state
from privcube.relational.stages.type_assignment import _links_by_type
from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload, FixedLinkCounts, cross_workloads


def _tables(rng: np.random.Generator) -> CrossTables:
    d1, d2 = Domain(("a", "b", "c"), (2, 3, 4)), Domain(("x", "y"), (3, 2))
    c1 = np.stack([rng.integers(0, n, 300) for n in d1.shape], axis=1)
    c2 = np.stack([rng.integers(0, n, 200) for n in d2.shape], axis=1)
    return CrossTables(c1, d1, c2, d2)


def test_fixed_link_counts_equal_the_marginals_of_the_links() -> None:
    rng = np.random.default_rng(3)
    syn = _tables(rng)
    si, sj = rng.integers(0, 300, 5000), rng.integers(0, 200, 5000)
    ws = [*cross_workloads(syn.dom1, syn.dom2, 2), *cross_workloads(syn.dom1, syn.dom2, 3),
          CrossWorkload(("c", "a"), ("y", "x"))]  # not in domain order
    full, kept = FixedLinkCounts(syn, si, sj), FixedLinkCounts(syn, si, sj, max_cells=0)
    assert full.links is None and kept.full is None
    for w in ws:
        want = syn.marginal(w, si, sj)
        assert np.array_equal(full.marginal(syn, w), want)  # exact: sums of integer counts
        assert np.array_equal(kept.marginal(syn, w), want)


def test_checkpoint_keeps_the_prior_counts_and_reads_old_link_copies() -> None:
    rng = np.random.default_rng(4)
    syn = _tables(rng)
    si, sj = rng.integers(0, 300, 1000), rng.integers(0, 200, 1000)
    w = CrossWorkload(("a", "b"), ("x",))
    arrays = LinkState(si, sj, FixedLinkCounts(syn, si, sj)).checkpoint_arrays()
    assert "prior_counts" in arrays and "si0" not in arrays
    meta = {"selected": [], "history": [], "iteration": 0, "sigmas": [], "rho_links_spent": 0.0}
    new = restore_link_state({"meta": meta, "arrays": arrays}, {}, 1000, None)
    old = restore_link_state({"meta": meta, "arrays": {"si": si, "sj": sj, "si0": si, "sj0": sj}}, {}, 1000, None)
    for ls in (new, old):
        assert np.array_equal(ls.prior.marginal(syn, w), syn.marginal(w, si, sj))


def test_bad_pairs_match_a_direct_count() -> None:
    rng = np.random.default_rng(5)
    n2 = 40
    si, sj = rng.integers(0, 30, 3000), rng.integers(0, n2, 3000)
    for no_diag in (False, True):
        seen, want = set(), []
        for e, (i, j) in enumerate(zip(si.tolist(), sj.tolist())):
            if (i, j) in seen or (no_diag and i == j):
                want.append(e)
            seen.add((i, j))
        bad, keys = bad_pairs(si, sj, n2, no_diag, with_keys=True, chunk=257)
        assert bad.tolist() == want
        assert np.array_equal(keys, np.sort(si * n2 + sj))


def test_links_by_type_is_a_stable_sort() -> None:
    rng = np.random.default_rng(6)
    of, sj = rng.integers(0, 9, 500), rng.integers(0, 500, 20_000)
    order, start = _links_by_type(of, sj, 9, chunk=1000)
    assert np.array_equal(order, np.argsort(of[sj], kind="stable"))
    assert np.array_equal(start, np.concatenate([[0], np.cumsum(np.bincount(of[sj], minlength=9))]))
