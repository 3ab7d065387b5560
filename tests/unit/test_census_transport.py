"""The exact finish of census transportation problems, and non-negative tables on degenerate input (issue 35):
units of a few persons under noise of sd 25 per cell must still come out exactly consistent after bounded work."""
from __future__ import annotations

import numpy as np

from census_tables import SIZES, ZEROS, check_consistent, joint_truth, margin, published_sets, tree
from privcube.census.nonnegative import nonnegative_tables
from privcube.census.transport import finish_matrix, finish_transport


def test_finish_meets_rows_and_columns_exactly_without_negatives_or_new_support() -> None:
    rng = np.random.default_rng(3)
    parent = np.sort(rng.integers(0, 40, 300))
    parent = np.searchsorted(np.unique(parent), parent)
    starts = np.searchsorted(parent, np.arange(parent.max() + 1))
    k, j = 3, 7
    allowed = rng.random((k, j)) > 0.3                          # the same zero pattern for every child
    truth = rng.gamma(0.3, 4.0, (len(parent), k, j)) * allowed
    rows = truth.sum(axis=2)
    cols = np.add.reduceat(truth, starts, axis=0)
    x = truth * rng.lognormal(0.0, 1.0, truth.shape) + (rng.random(truth.shape) < 0.2) * 5.0 * allowed
    out = finish_transport(x, rows, cols, starts, parent)
    assert out.min() >= 0.0 and np.all(out[:, ~allowed] == 0.0)
    np.testing.assert_allclose(out.sum(axis=2), rows, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.add.reduceat(out, starts, axis=0), cols, rtol=0, atol=1e-9)
    assert np.all(out[(x == 0) & (cols[parent] == 0)] == 0.0)    # no mass where neither the start nor the column had any


def test_finish_of_one_matrix_with_an_empty_row_and_column() -> None:
    x = np.array([[5.0, 0.0, 1.0], [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
    out = finish_matrix(x, np.array([3.0, 7.0, 0.0]), np.array([6.0, 0.0, 4.0]))
    np.testing.assert_allclose(out.sum(axis=1), [3.0, 7.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(out.sum(axis=0), [6.0, 0.0, 4.0], atol=1e-12)
    assert out.min() >= 0 and np.all(out[:, 1] == 0) and np.all(out[2] == 0)


def test_tiny_units_under_large_noise_come_out_exactly_consistent_after_bounded_sweeps() -> None:
    """Tracts of ~30 persons over 48 cells, noise sd 25 on every cell of every table (inconsistent input)."""
    rng = np.random.default_rng(11)
    h = tree(rng, n_states=3, n_counties=30, n_tracts=400)
    joint = joint_truth(rng, h, SIZES)
    attrs = sorted(SIZES)
    for lv in joint:
        joint[lv][:, 0, :, 0:2] = 0.0
    noisy = {lv: {s: margin(joint[lv], attrs, s) + rng.normal(0.0, 25.0, margin(joint[lv], attrs, s).shape)
                  for s in published_sets(lv)} for lv in joint}
    fixed = {"state": margin(joint["state"], attrs, ())}
    for kw in ({"floor": 1e-3}, {"floor": 20.0}, {"project": True, "prior": {"county": 25.0, "tract": 25.0}}):
        out, diag = nonnegative_tables(h, noisy, zeros=ZEROS, fixed_totals=fixed, sweeps=10, sweeps_3d=5, **kw)
        check_consistent(h, out, integer=False, zeros=ZEROS, fixed=fixed, rtol=1e-9)
        assert diag["converged"] and diag["max_residual"] <= 1e-9, diag["max_residual"]
        assert diag["max_input_gap"] <= 1e-12                        # each level exact before the next uses it
        assert all(s["iterations"] <= 10 for s in diag["stages"]), diag["stages"]
        assert set(diag["b_margin_max_deviation"]) == {"state", "county"}


def _positive_consistent(seed: int):
    rng = np.random.default_rng(seed)
    h = tree(rng, n_states=3, n_counties=12, n_tracts=60)
    joint = joint_truth(rng, h, SIZES)
    attrs = sorted(SIZES)
    joint = {"tract": joint["tract"] + 0.5}                         # no cell at 0: the fit is interior
    for lv, up in (("tract", "county"), ("county", "state"), ("state", "")):
        joint[up] = np.add.reduceat(joint[lv], h.segment_starts(lv), axis=0)
    return h, {lv: {s: margin(joint[lv], attrs, s) for s in published_sets(lv)} for lv in joint}


def test_an_estimate_already_consistent_and_positive_comes_back_unchanged_under_every_start() -> None:
    h, tables = _positive_consistent(5)
    for kw in ({}, {"project": True}, {"floor": {"tract": 0.2}, "project": {"": True}}):
        out, diag = nonnegative_tables(h, tables, **kw)
        assert diag["max_input_gap"] <= 1e-12
        for lv, sets in tables.items():
            for s, t in sets.items():
                np.testing.assert_allclose(out[lv][s], t, rtol=1e-9, atol=1e-9, err_msg=f"{lv} {s} {kw}")


def test_a_large_prior_gives_each_unit_its_parents_distribution() -> None:
    """With the prior dominating, a tract's 1-way table is its total times its county's shares (that start
    already meets both margins, so the fit keeps it)."""
    h, tables = _positive_consistent(6)
    rng = np.random.default_rng(0)
    noisy = {lv: {s: t + (rng.normal(0, 3.0, t.shape) if lv == "tract" and len(s) == 1 else 0.0)
                  for s, t in sets.items()} for lv, sets in tables.items()}
    out, _ = nonnegative_tables(h, noisy, prior={"tract": 1e7})
    p = h.parent_of("tract")
    for s in (("a",), ("b",), ("c",)):
        expected = out["tract"][()][:, None] * (out["county"][s] / out["county"][()][:, None])[p]
        np.testing.assert_allclose(out["tract"][s], expected, rtol=1e-4, atol=1e-6)
