"""Non-negativity and controlled rounding of census tables: the properties asserted on the arrays (issue 35)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from census_tables import ZEROS, check_consistent, simulate, tree
from privcube.census.hierarchy import Hierarchy
from privcube.census.nonnegative import nonnegative_tables, project_segments
from privcube.census.rounding import Problem, controlled_rounding, flow_round, largest_remainder
from privcube.core.errors import ConfigError


def test_segment_projection_meets_the_kkt_conditions() -> None:
    rng = np.random.default_rng(1)
    seg = np.sort(rng.integers(0, 30, 400))
    seg = np.searchsorted(np.unique(seg), seg)
    n = seg.max() + 1
    v = rng.normal(1.0, 3.0, len(seg))
    free = rng.random(len(seg)) > 0.1
    targets = rng.uniform(0, 20, n)
    targets[0] = 0.0
    x = project_segments(v, seg, targets, free)
    assert np.all(x >= 0) and np.all(x[~free] == 0)
    assert np.allclose(np.bincount(seg, x, n), targets, atol=1e-9)
    for g in range(n):
        pos = (seg == g) & (x > 0)
        if pos.any():                                   # x = v - θ on the support, v <= θ off it
            theta = (v[pos] - x[pos])[0]
            assert np.allclose(v[pos] - x[pos], theta)
            assert np.all(v[(seg == g) & free & (x == 0)] <= theta + 1e-12)


def test_nonnegative_tables_on_noisy_inconsistent_input() -> None:
    """Raw noisy tables (not even consistent within a unit) still come out non-negative and consistent."""
    h, truth, fit, _ = simulate(4)
    rng = np.random.default_rng(0)
    noisy = {lv: {s: t + rng.normal(0, 3.0, t.shape) for s, t in sets.items()} for lv, sets in truth.items()}
    out, diag = nonnegative_tables(h, noisy, zeros=ZEROS)
    check_consistent(h, out, integer=False, zeros=ZEROS)
    assert set(diag) >= {"stages", "converged", "max_residual", "b_margin_max_deviation",
                         "b_margin_max_abs_deviation", "lp_fallbacks"}
    assert diag["converged"] and diag["max_residual"] <= 1e-9
    assert {(s["level"], s["stage"]) for s in diag["stages"]} >= {("", "root_twoway"), ("state", "oneway"),
                                                                 ("county", "twoway_slices"), ("tract", "oneway")}


def test_zeros_that_contradict_the_root_margins_are_refused() -> None:
    h = Hierarchy.from_columns({"s": np.array([1, 2])}, ["s"])
    ab = np.array([[[7.0, 0.0], [0.0, 3.0]]])
    tables = {"": {(): np.array([10.0]), ("a",): np.array([[7.0, 3.0]]), ("b",): np.array([[3.0, 7.0]]),
                   ("a", "b"): ab},
              "s": {(): np.array([5.0, 5.0]), ("a", "b"): np.concatenate([ab, ab]) / 2}}
    zeros = {("a", "b"): np.array([[False, True], [True, False]])}
    with pytest.raises(ConfigError, match="structural zeros of table a,b"):
        nonnegative_tables(h, tables, zeros=zeros)


def test_contradicting_invariants_are_refused() -> None:
    h, truth, fit, _ = simulate(0)
    bad = {"": np.array([1.0]), "state": truth["state"][()]}
    with pytest.raises(ConfigError, match="contradict"):
        nonnegative_tables(h, fit, fixed_totals=bad)


def test_largest_remainder_keeps_segment_totals_with_floors_and_ceilings() -> None:
    rng = np.random.default_rng(2)
    seg = np.repeat(np.arange(50), 7)
    x = rng.gamma(1.0, 3.0, len(seg))
    x[::11] = 0.0
    targets = np.rint(np.bincount(seg, x) + rng.uniform(-0.49, 0.49, 50))
    r = largest_remainder(x, seg, targets)
    assert np.array_equal(np.bincount(seg, r, 50), targets)
    assert np.all((r == np.floor(x)) | (r == np.ceil(x))) and np.all(r[x == 0] == 0)


def test_flow_rounding_of_matrices_with_integer_margins() -> None:
    """x = integer base + 3 x (average of random permutation matrices): integer margins, fractional entries."""
    rng = np.random.default_rng(3)
    probs = []
    for _ in range(5):
        k = 9
        perm = np.mean([np.eye(k)[rng.permutation(k)] for _ in range(4)], axis=0)
        x = rng.integers(0, 5, (k, k)) * (rng.random((k, k)) > 0.3) + 3 * perm
        probs.append(Problem(x.ravel(), np.repeat(np.arange(k), k), np.tile(np.arange(k), k), x.sum(1), x.sum(0),
                             np.zeros(k, np.int64), np.zeros(k, np.int64)))
    for p, (r, ok) in zip(probs, flow_round(probs)):
        assert ok.all()
        m = r.reshape(9, 9)
        x = p.x.reshape(9, 9)
        assert np.array_equal(m.sum(1), np.rint(x.sum(1))) and np.array_equal(m.sum(0), np.rint(x.sum(0)))
        assert np.all((m == np.floor(x)) | (m == np.ceil(x)))


def test_floors_and_ceilings_cannot_always_meet_given_margins() -> None:
    """Why the rounding re-rakes a parent's block before rounding it: rows 2.7 and 0.4 rounded to 3 and 0,
    columns 1.2, 0.95, 0.95 rounded to 2, 1, 0: the first column needs 2 but only the first row may give."""
    x = np.array([0.9, 0.9, 0.9, 0.3, 0.05, 0.05])
    p = Problem(x, np.array([0, 0, 0, 1, 1, 1]), np.array([0, 1, 2, 0, 1, 2]), np.array([3, 0]),
                np.array([2, 1, 0]), np.zeros(2, np.int64), np.zeros(3, np.int64))
    (_, ok), = flow_round([p])
    assert not ok.any()


def test_a_thousand_unit_hierarchy_rounds_consistently_in_seconds() -> None:
    rng = np.random.default_rng(5)
    h = tree(rng, 10, 100, 1000)
    tables = {}
    for lv in ("", *h.levels):
        n = h.n_units(lv)
        tables[lv] = {(): rng.gamma(2, 50, n), ("a",): rng.gamma(2, 20, (n, 3)), ("b",): rng.gamma(2, 10, (n, 5))}
        if lv in ("", "state", "county"):
            tables[lv][("a", "b")] = rng.gamma(2, 4, (n, 3, 5))
    t0 = time.perf_counter()
    nn, _ = nonnegative_tables(h, tables, fixed_totals={"state": np.rint(rng.gamma(2, 500, h.n_units("state")))})
    ints, diag = controlled_rounding(h, nn, fixed_totals={"state": np.rint(nn["state"][()])})
    elapsed = time.perf_counter() - t0
    check_consistent(h, ints, integer=True, fixed={"state": np.rint(nn["state"][()])})
    assert diag["converged"] and elapsed < 30
    assert max(diag["max_change"].values()) < 2.0
